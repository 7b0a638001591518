"""Prototypes of the families validator's type checks with pydantic v2 and with msgspec (issue 45), for `bench/validate.py`.

Each replaces the hand-written walk of `rs.families.loader._Validator` (`value` and the methods it calls) and keeps
what the loader adds around it (file and line, did-you-mean, the value checks of the schema's `__post_init__`):

- `PydanticValidator`: one `TypeAdapter` per top-level class; the plug-in blocks dispatch through
  `Registry.__get_pydantic_core_schema__` (set below; adopted, it would be a method of `rs.registry.Registry`);
  each pydantic error's `loc` is walked back to its YAML node and its type to the message the loader gives.
  Strict types (`true` is no int, "128" no int) exist for stdlib dataclasses only in JSON mode (in Python mode a
  strict dataclass takes only an instance), so the plain YAML value goes through `json.dumps` first.
- `MsgspecValidator`: msgspec ignores unknown keys of a dataclass and has no hook to pick a plug-in's `Config` by
  `kind`, so the walk over mappings stays hand-written; `msgspec.convert` checks the values below it (scalars,
  literals, lists and dicts of them) and its message (a string) is parsed back for the path.

Not part of `rs`: the measured figures are in the issue's closing note; `bench/validate.py` prints them again.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import typing
from typing import Annotated, Any, Literal, Union

import msgspec
import pydantic
from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic_core import core_schema
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from rs.families import schema
from rs.families.loader import _did_you_mean, _kind, _node_at, _Validator, field_types, plugin_registry, type_name
from rs.registry import CLEANING, ENGINES, SOURCES, Registry
from rs.util.config_checks import ConfigValueError

# --- pydantic -------------------------------------------------------------------------------------------------------


def _registry_schema(self: Registry, source: Any, handler: pydantic.GetCoreSchemaHandler) -> core_schema.CoreSchema:
    """A plug-in block: the `Config` of the kind it names (`kind` blocks), or the keyed steps beside `dedup` (`cleaning:`)."""
    if self.by == "kind":
        choices = {name: handler.generate_schema(entry.Config) for name, entry in self.items()}
        return core_schema.tagged_union_schema(
            choices,
            discriminator=lambda v: v.get("kind", self.default) if isinstance(v, dict) else None,
            custom_error_type="plugin_kind",
            custom_error_message="kind",
            strict=False,
        )
    fields = {
        name: core_schema.typed_dict_field(handler.generate_schema(entry.Config), required=False)
        for name, entry in self.items()
    }
    fields["dedup"] = core_schema.typed_dict_field(core_schema.bool_schema(), required=False)
    return core_schema.no_info_after_validator_function(
        lambda d: schema.CleaningConfig(
            steps={k: v for k, v in d.items() if k != "dedup"}, dedup=d.get("dedup", True)
        ),
        core_schema.typed_dict_schema(fields, extra_behavior="forbid"),
    )


Registry.__get_pydantic_core_schema__ = _registry_schema  # type: ignore[attr-defined]


def _config_classes() -> list[type]:
    """Every dataclass a families file reaches: the schema's and every plug-in's `Config` (and what they hold)."""
    found: list[type] = []

    def visit(tp: Any) -> None:
        for arg in typing.get_args(tp):
            visit(arg)
        if dataclasses.is_dataclass(tp) and tp not in found:
            found.append(tp)
            for hint in field_types(tp).values():
                visit(hint)

    for tp in (schema.FamilyConfig, schema.EvaluationSetConfig):
        visit(tp)
    for registry in (SOURCES, ENGINES, CLEANING):
        for _, entry in registry.items():
            visit(entry.Config)
    return found


@functools.cache
def _adapter(cls: type) -> TypeAdapter[Any]:
    for config_class in _config_classes():
        config_class.__pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[attr-defined]
    return TypeAdapter(cls)


def _type_at(tp: Any, plain: Any, loc: tuple[Any, ...]) -> tuple[Any, list[Any]]:
    """The config type at a pydantic `loc` below `tp`, and the loc's parts that are keys (not union branch tags)."""
    keys: list[Any] = []
    for part in loc:
        if (registry := plugin_registry(tp)) is not None:
            if registry.by == "kind":
                if part in registry:  # the tag pydantic adds: the kind the block names
                    tp = registry.get(part).Config
                    continue
            else:
                tp = CLEANING.get(part).Config if part in CLEANING else bool
                keys.append(part)
                plain = plain.get(part) if isinstance(plain, dict) else None
                continue
        if typing.get_origin(tp) is Annotated:
            tp = typing.get_args(tp)[0]
        if typing.get_origin(tp) in (Union, typing.get_origin(int | str)):
            options = [o for o in typing.get_args(tp) if o is not type(None)]
            branch = next((o for o in options if part in (getattr(o, "__name__", None), _literal_tag(o))), None)
            if branch is not None:
                tp = branch
                continue
            tp = options[0]
        keys.append(part)
        plain = plain[part] if isinstance(plain, (dict, list)) and _has(plain, part) else None
        if dataclasses.is_dataclass(tp):
            tp = field_types(tp).get(part, Any)
        elif typing.get_origin(tp) in (list, dict):
            tp = typing.get_args(tp)[-1]
    return tp, keys


def _has(container: dict[Any, Any] | list[Any], part: Any) -> bool:
    return part in container if isinstance(container, dict) else isinstance(part, int) and part < len(container)


def _literal_tag(tp: Any) -> str | None:
    if typing.get_origin(tp) is not Literal:
        return None
    return "literal[" + ",".join(repr(a) for a in typing.get_args(tp)) + "]"


class PydanticValidator(_Validator):
    def dataclass(self, cls: type, node: Node, key: str) -> Any:
        if not isinstance(node, MappingNode):
            self.fail(node, key, f"expected a mapping ({cls.__name__}), got {_kind(node)}")
        plain = self.plain(node)
        try:
            text = json.dumps(plain, allow_nan=True)
        except TypeError as err:  # a YAML date or a non-string key: no JSON, so no strict check
            self.fail(node, key, str(err))
        try:
            return _adapter(cls).validate_json(text, strict=True)
        except ValidationError as err:
            self.explain(cls, plain, node, key, err.errors())

    def explain(self, cls: type, plain: Any, node: Node, key: str, errors: list[Any]) -> typing.NoReturn:
        # a misspelt key is both an unknown key and a missing one: name the unknown one, as the hand-written walk does
        error = next((e for e in errors if e["type"] in ("extra_forbidden", "unexpected_keyword_argument")), errors[0])
        loc = error["loc"]
        kind = error["type"]
        if kind == "unexpected_keyword_argument":
            kind = "extra_forbidden"
        parent_tp, keys = _type_at(cls, plain, loc[:-1])
        tp, keys = (
            _type_at(cls, plain, loc) if kind not in ("extra_forbidden", "missing") else (parent_tp, keys + [loc[-1]])
        )
        at = _node_at_keys(node, keys)
        path = ".".join([key, *(f"[{k}]" if isinstance(k, int) else str(k) for k in keys)]).replace(".[", "[")
        value = error.get("input")
        if kind == "extra_forbidden":
            valid = list(_fields_of(parent_tp))
            self.fail(at, path, f"unknown key{_did_you_mean(loc[-1], valid)}; valid keys: {', '.join(valid)}")
        if kind == "missing":
            owner = parent_tp if dataclasses.is_dataclass(parent_tp) else cls
            f = next(f for f in dataclasses.fields(owner) if f.name == loc[-1])
            self.fail(_node_at_keys(node, keys[:-1]), path, self.missing(owner, f, field_types(owner)[f.name]))
        if kind == "value_error" and isinstance(cause := error.get("ctx", {}).get("error"), ConfigValueError):
            self.fail(_node_at(at, cause.key.split(".")), f"{path}.{cause.key}", cause.problem)
        if kind == "value_error":
            self.fail(at, path, str(error["ctx"]["error"]))
        if kind == "plugin_kind" or kind == "union_tag_invalid":
            registry = plugin_registry(tp)
            names = ", ".join(registry.names()) if registry else ""
            self.fail(
                _node_at(at, ["kind"]), f"{path}.kind", f"{value.get('kind')!r} is not valid; expected one of {names}"
            )
        if kind == "literal_error":
            self.fail(
                at, path, f"{value!r} is not valid; expected one of {error['ctx']['expected'].replace(' or ', ', ')}"
            )
        if (
            len(errors) > 1
            and all(e["loc"][: len(loc) - 1] == loc[:-1] for e in errors[1:])
            and dataclasses.is_dataclass(tp) is False
        ):
            self.fail(at, path, f"expected {type_name(tp)}, got {value!r}")
        if kind in ("dict_type", "dataclass_type", "model_type"):
            self.fail(at, path, f"expected a mapping, got {_kind(at)}")
        if kind == "list_type":
            self.fail(at, path, f"expected a list, got {_kind(at)}")
        if kind.endswith("_type") or kind.endswith("_parsing"):
            name = kind.split("_")[0].replace("string", "str")
            got = f"{value!r} ({type(value).__name__})" if isinstance(at, ScalarNode) else _kind(at)
            self.fail(at, path, f"expected {name}, got {got}")
        self.fail(at, path, error["msg"])


def _fields_of(tp: Any) -> list[str]:
    if (registry := plugin_registry(tp)) is not None and registry.by == "key":
        return [*registry.names(), "dedup"]
    return [f.name for f in dataclasses.fields(tp)] if dataclasses.is_dataclass(tp) else []


def _node_at_keys(node: Node, keys: list[Any]) -> Node:
    for part in keys:
        if isinstance(node, SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        elif (
            isinstance(node, MappingNode)
            and (found := next((v for k, v in node.value if k.value == part), None)) is not None
        ):
            node = found
        else:
            return node
    return node


# --- msgspec --------------------------------------------------------------------------------------------------------

_AT = re.compile(r"^(?P<problem>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)


def _is_leaf(tp: Any) -> bool:
    """A type msgspec checks alone: no dataclass and no plug-in block anywhere inside."""
    if plugin_registry(tp) is not None or dataclasses.is_dataclass(tp):
        return False
    return all(
        _is_leaf(arg) for arg in typing.get_args(tp) if not isinstance(arg, (str, int, bool)) and arg is not None
    )


class MsgspecValidator(_Validator):
    def value(self, tp: Any, node: Node, key: str) -> Any:
        if tp is Any or not _is_leaf(tp):
            return super().value(tp, node, key)
        if typing.get_origin(tp) is dict:  # msgspec would take non-string keys; the loader's own walk names them
            return self.mapping(tp, node, key)
        value = self.plain(node)
        try:
            return msgspec.convert(value, tp, strict=True)
        except msgspec.ValidationError as err:
            match = _AT.match(str(err))
            problem, sub = match["problem"], match["path"] or ""
            at = _node_at_keys(node, [int(i) for i in re.findall(r"\[(\d+)\]", sub)])
            self.fail(at, key + sub, _msgspec_problem(problem, tp, self.plain(at)))


def _msgspec_problem(problem: str, tp: Any, value: Any) -> str:
    """msgspec's message in the loader's words: it names the expected type but not the value, nor a literal's values."""
    if problem.startswith("Invalid enum value"):
        return f"{value!r} is not valid; expected one of {', '.join(repr(a) for a in typing.get_args(tp))}"
    if (found := re.match(r"Expected `(?P<want>[^`]*)`, got `(?P<got>[^`]*)`", problem)) is not None:
        want = found["want"].replace(" | ", " or ").replace("array", "list").replace("object", "mapping")
        return f"expected {want}, got {value!r} ({type(value).__name__})"
    return problem
