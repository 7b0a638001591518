"""Every key families.yaml accepts, walked from the schema's dataclasses: its type, default and docstring.

The dataclasses are the single documentation of the file (`rs.families.schema`); `rs families keys` prints this walk
a line a key, and the documentation's reference page (`rs.reference`) renders it as tables. Neither is typed by hand.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import typing
from dataclasses import dataclass

from rs.families.loader import field_types, plugin_registry, type_name


@dataclass(frozen=True)
class Key:
    """One key: its dotted path, and either a value's type and default or the section (dataclass) it opens."""

    path: str
    doc: str | None
    type: str | None = None
    """A value's type (`int`, `'flat' | 'conversational'`, ...); None for a section."""
    default: str | None = None
    """`required`, or `default <value>`; None for a section."""
    section: str | None = None
    """The dataclass a section key holds (one of several for a plug-in's settings or a union)."""

    def line(self) -> str:
        """How `rs families keys` prints it."""
        if self.section is not None:
            return f"{self.path}  ({self.section})" + (f"  {self.doc}" if self.doc is not None else "")
        return f"{self.path}: {self.type}, {self.default}" + (f"  # {self.doc}" if self.doc is not None else "")


def walk(cls: type, prefix: str) -> typing.Iterator[Key]:
    """The keys of the schema dataclass `cls` under `prefix`, descending into nested sections and plug-ins' settings."""
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        tp = field_types(cls)[f.name]
        key = f"{prefix}.{f.name}"
        doc = docs.get(f.name)
        registry = plugin_registry(tp)
        if registry is not None and registry.by == "key":
            yield from _walk_keyed(key, tp, registry, doc)
        elif options := _sections(tp, registry):
            for option in options:
                yield Key(key, doc, section=option.__name__)
                yield from walk(option, key)
        else:
            yield Key(key, doc, type=type_name(tp), default=_default(f))


def _walk_keyed(key: str, tp: typing.Any, registry: typing.Any, doc: str | None) -> typing.Iterator[Key]:
    """A section whose plug-ins are named by key (the cleaning steps): each plug-in's settings, then the section's own keys."""
    section = typing.get_args(tp)[0]
    yield Key(key, doc, section=section.__name__)
    for name, step in registry.items():
        yield Key(f"{key}.{name}", None, section=step.Config.__name__)
        yield from walk(step.Config, f"{key}.{name}")
    yield from (k for k in walk(section, key) if not k.path.startswith(f"{key}.steps"))


def _sections(tp: typing.Any, registry: typing.Any) -> list[type]:
    """The dataclasses a key may hold: each plug-in's settings, the dataclasses of a union, or the one dataclass; [] for a value."""
    if registry is not None:
        return [plugin.Config for _, plugin in registry.items()]
    return [o for o in typing.get_args(tp) if dataclasses.is_dataclass(o)] or (
        [tp] if dataclasses.is_dataclass(tp) else []
    )


def _default(f: dataclasses.Field[typing.Any]) -> str:
    """How a key's default reads: `required`, or its value."""
    if f.default is not dataclasses.MISSING:
        return f"default {f.default!r}"
    if f.default_factory is not dataclasses.MISSING:
        return f"default {f.default_factory()!r}"
    return "required"


def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings (the string literal under a field) of a schema dataclass."""
    docs = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for node, after in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
            ):
                docs[node.target.id] = " ".join(str(after.value.value).split())
    return docs
