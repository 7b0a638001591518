"""Read families.yaml into validated `Family` objects, with file and line in every error.

YAML is composed to nodes (not loaded to plain dicts) so that each value keeps its position;
`defaults` are deep-merged into each family node by node, then every merged node is checked
against the dataclasses in `schema.py`. The walk is hand-written (`bench/validate.py` measured the libraries):
with pydantic it took as many lines once errors were led back to their line and did-you-mean, msgspec can
neither refuse an unknown key of a dataclass nor pick a plug-in's block, and both worded some errors worse.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from rs.errors import UsageError
from rs.registry import ENGINES, Registry
from rs.util.config_checks import ConfigValueError
from rs.verifiers import VerifierError, resolve_params

from .bounds import check_expansion, check_file_size
from .schema import EvaluationSetConfig, FamilyConfig

TOP_LEVEL_KEYS = ("defaults", "evaluation", "families")
REPO_SUFFIX = {
    "think": "_RS_think",
    "nothink": "_RS_nothink",
    "rejected": "_rejected",
    "pairs": "_RS_pairs",
    "samples": "_RS_samples",
    "rl": "_RS_rl",
}
"""The Hub repo of each published split is the family's name with this suffix."""
_HUB_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_HUB_REPO_NAME_MAX = 96
SHIPPED = Path(__file__).resolve().parent / "families.yaml"
"""The project's families.yaml: in a checkout `rs/families/families.yaml` links to the top-level file, a wheel carries a copy."""


class FamilyConfigError(UsageError, ValueError):
    """A families file that cannot be used; the message names file, line, key and what is valid."""


@dataclass(frozen=True)
class Family:
    """A validated family: its name, its resolved configuration, and where it was defined."""

    name: str
    config: FamilyConfig
    path: Path
    line: int

    def repo_name(self, split: str) -> str:
        """Hub repo name of one of the published splits (`RS_think`, `RS_nothink`, `rejected`; `RS_pairs`)."""
        return f"{self.name}{REPO_SUFFIX[split]}"

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits this family publishes: the three, `pairs` when its recovery pass makes preference pairs, `samples`
        with `publish.samples`, `rl` with `recovery.difficulty.rl`."""
        recovery = self.config.recovery
        opted = {
            "pairs": recovery is not None and recovery.pairs,
            "samples": self.config.publish.samples,
            "rl": recovery is not None and recovery.difficulty.rl is not None,
        }
        return tuple(split for split in REPO_SUFFIX if opted.get(split, True))


def _flow_comma(mapping: MappingNode, k_node: Node, v_node: Node) -> str | None:
    """What happened when an unknown key with no value follows a plain value in a flow mapping (`{description: a, b}`):
    the comma ended the value, and the words after it became a key. None when that is not what happened."""
    if not mapping.flow_style or not isinstance(k_node, ScalarNode) or k_node.style is not None:
        return None
    if not isinstance(v_node, ScalarNode) or v_node.tag != "tag:yaml.org,2002:null" or v_node.value:
        return None
    at = next((i for i, (k, _) in enumerate(mapping.value) if k is k_node), 0)
    if at == 0:
        return None
    prev_key, prev_value = mapping.value[at - 1]
    if not isinstance(prev_value, ScalarNode) or prev_value.style is not None:
        return None
    joined = f"{prev_value.value}, {k_node.value}"
    return (
        f"not a key: inside {{...}} (a flow mapping) a comma ends a value, so `{prev_key.value}: {joined}` was read "
        f"as {prev_key.value}: {prev_value.value!r} and a key {k_node.value!r}; quote the value: "
        f'{prev_key.value}: "{joined}"'
    )


def _where(path: Path, node: Node) -> str:
    return f"{path}:{node.start_mark.line + 1}"


class _Validator:
    """Turns a YAML node into an instance of a schema type, or raises with the node's position."""

    def __init__(self, path: Path):
        self.path = path
        self.constructor = SafeConstructor()
        self.has_defaults = False
        """Whether the file has a `defaults:` block (a missing family key may be given there)."""

    def fail(self, node: Node, key: str, problem: str) -> typing.NoReturn:
        raise FamilyConfigError(f"{_where(self.path, node)}: {key}: {problem}")

    def plain(self, node: Node) -> Any:
        return self.constructor.construct_object(node, deep=True)

    def value(self, tp: Any, node: Node, key: str) -> Any:
        origin = typing.get_origin(tp)
        if tp is Any:
            return self.plain(node)
        if origin is Annotated:
            registry, base = plugin_registry(tp), typing.get_args(tp)[0]
            if registry is None:
                return self.value(base, node, key)
            return self.plugin(registry, node, key) if registry.by == "kind" else self.keyed(registry, base, node, key)
        if origin in (Union, types.UnionType):
            return self.union(tp, node, key)
        if origin is Literal:
            return self.literal(tp, node, key)
        if dataclasses.is_dataclass(tp):
            return self.dataclass(tp, node, key)
        if origin is list:
            return self.sequence(tp, node, key)
        if origin is dict:
            return self.mapping(tp, node, key)
        return self.scalar(tp, node, key)

    def literal(self, tp: Any, node: Node, key: str) -> Any:
        """One of a `Literal`'s values, or an error listing them."""
        value = self.plain(node)
        if value not in typing.get_args(tp):
            valid = ", ".join(repr(a) for a in typing.get_args(tp))
            self.fail(node, key, f"{value!r} is not valid; expected one of {valid}")
        return value

    def sequence(self, tp: Any, node: Node, key: str) -> list[Any]:
        """A `list[T]`: each item checked as T, its key indexed (`key[i]`) in errors."""
        if not isinstance(node, SequenceNode):
            self.fail(node, key, f"expected a list, got {_kind(node)}")
        (item_tp,) = typing.get_args(tp)
        return [self.value(item_tp, n, f"{key}[{i}]") for i, n in enumerate(node.value)]

    def mapping(self, tp: Any, node: Node, key: str) -> dict[str, Any]:
        """A `dict[str, T]`: string keys, each value checked as T."""
        if not isinstance(node, MappingNode):
            self.fail(node, key, f"expected a mapping, got {_kind(node)}")
        _, value_tp = typing.get_args(tp)
        out = {}
        for k_node, v_node in node.value:
            k = self.plain(k_node)
            if not isinstance(k, str):
                self.fail(k_node, key, f"keys must be strings, got {k!r}")
            out[k] = self.value(value_tp, v_node, f"{key}.{k}")
        return out

    def scalar(self, tp: type, node: Node, key: str) -> Any:
        if not isinstance(node, ScalarNode):
            self.fail(node, key, f"expected {tp.__name__}, got {_kind(node)}")
        value = self.plain(node)
        ok = (
            isinstance(value, tp)
            and not (tp is int and isinstance(value, bool))
            or (tp is float and isinstance(value, int) and not isinstance(value, bool))
        )
        if not ok:
            self.fail(node, key, f"expected {tp.__name__}, got {value!r} ({type(value).__name__})")
        return float(value) if tp is float else value

    def union(self, tp: Any, node: Node, key: str) -> Any:
        options = typing.get_args(tp)
        if type(None) in options and isinstance(node, ScalarNode) and self.plain(node) is None:
            return None
        options = [o for o in options if o is not type(None)]
        errors = []
        for option in options:
            try:
                return self.value(option, node, key)
            except FamilyConfigError as err:
                errors.append(err)
        if len(errors) == 1:
            raise errors[0]
        shaped = [e for o, e in zip(options, errors) if dataclasses.is_dataclass(o)]
        if isinstance(node, MappingNode) and len(shaped) == 1:  # a mapping for the one mapping option: its own error
            raise shaped[0]
        names = " or ".join(type_name(o) for o in options)
        self.fail(node, key, f"expected {names}, got {self.plain(node)!r}")

    def plugin(self, registry: Registry, node: Node, key: str) -> Any:
        """A block whose `kind` names a registered plug-in, checked against that plug-in's `Config`."""
        kinds = registry.names()
        if not isinstance(node, MappingNode):
            self.fail(node, key, f"expected a mapping with `kind` ({', '.join(kinds)}), got {_kind(node)}")
        kind_node = next((v for k, v in node.value if self.plain(k) == "kind"), None)
        if kind_node is None:
            if registry.default is None:
                self.fail(node, f"{key}.kind", f"missing; expected one of {', '.join(kinds)}")
            kind = registry.default
        else:
            kind = self.plain(kind_node)
            if not isinstance(kind, str) or kind not in registry:
                self.fail(kind_node, f"{key}.kind", f"{kind!r} is not valid; expected one of {', '.join(kinds)}")
        return self.dataclass(registry.get(kind).Config, node, key)

    def keyed(self, registry: Registry, cls: type, node: Node, key: str) -> Any:
        """A mapping of `cls`'s own fields plus blocks keyed by registered plug-ins (`cleaning:`): `cls(steps=...)`."""
        if not isinstance(node, MappingNode):
            self.fail(node, key, f"expected a mapping ({cls.__name__}), got {_kind(node)}")
        fields = [f for f in _fields(cls) if f != "steps"]
        own, steps = [], {}
        for k_node, v_node in node.value:
            name = self.plain(k_node)
            if name in fields:
                own.append((k_node, v_node))
            elif isinstance(name, str) and name in registry:
                steps[name] = self.dataclass(registry.get(name).Config, v_node, f"{key}.{name}")
            else:
                valid = [*registry.names(), *fields]
                self.fail(
                    k_node,
                    f"{key}.{name}",
                    _flow_comma(node, k_node, v_node)
                    or f"unknown {registry.what}{_did_you_mean(name, valid)}; valid keys: {', '.join(valid)}",
                )
        config = self.dataclass(cls, MappingNode(node.tag, own, node.start_mark, node.end_mark), key)
        config.steps = steps
        return config

    def dataclass(self, cls: type, node: Node, key: str) -> Any:
        if not isinstance(node, MappingNode):
            self.fail(node, key, f"expected a mapping ({cls.__name__}), got {_kind(node)}")
        hints = field_types(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for k_node, v_node in node.value:
            name = self.plain(k_node)
            sub = f"{key}.{name}" if key else str(name)
            if name not in fields:
                self.fail(
                    k_node,
                    sub,
                    _flow_comma(node, k_node, v_node)
                    or f"unknown key{_did_you_mean(name, fields)}; valid keys: {', '.join(fields)}",
                )
            if name in kwargs:
                self.fail(k_node, sub, "given twice")
            kwargs[name] = self.value(hints[name], v_node, sub)
        for name, f in fields.items():
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if required and name not in kwargs:
                self.fail(node, f"{key}.{name}" if key else name, self.missing(cls, f, hints[name]))
        try:
            return cls(**kwargs)
        except ConfigValueError as err:  # a field's value check in the schema's __post_init__: point at that field
            at = _node_at(node, err.key.split("."))
            self.fail(at, f"{key}.{err.key}" if key else err.key, err.problem)
        except ValueError as err:  # a check of several fields together
            self.fail(node, key, str(err))

    def missing(self, cls: type, f: dataclasses.Field[Any], tp: Any) -> str:
        """What to write for a required key that is not there: an example, and where else it may come from."""
        problem = f"required key is missing; add e.g. `{f.name}: {f.metadata.get('example') or _example(tp)}`"
        if cls is FamilyConfig:
            where = "under `defaults:`" if self.has_defaults else "in a `defaults:` block (this file has none)"
            problem += f" to the family, or once for every family {where}"
            if f.name in _shipped_default_keys():
                problem += f"; the shipped families.yaml sets `{f.name}` under its `defaults:`"
        return problem


@functools.cache
def field_types(cls: type) -> typing.Mapping[str, Any]:
    """The resolved annotations of a config dataclass (`Annotated` kept: it carries the plug-in registries).

    Resolved once per class: `typing.get_type_hints` evaluates every annotation string again, and was most of the
    time the type checks of the shipped families.yaml took (`bench/validate.py`)."""
    return types.MappingProxyType(typing.get_type_hints(cls, include_extras=True))


def _fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def plugin_registry(tp: Any) -> Registry | None:
    """The registry of an `Annotated[KindConfig, REGISTRY]` field (a plug-in block), else None."""
    if typing.get_origin(tp) is not Annotated:
        return None
    return next((m for m in tp.__metadata__ if isinstance(m, Registry)), None)


def _kind(node: Node) -> str:
    return {ScalarNode: "a scalar", SequenceNode: "a list", MappingNode: "a mapping"}[type(node)]


def type_name(tp: Any) -> str:
    """How an error message or `rs families schema` names a config type."""
    if (registry := plugin_registry(tp)) is not None:
        if registry.by == "key":
            return f"a mapping of {registry.what}s: {' | '.join(registry.names())}"
        return f"a mapping with kind: {' | '.join(registry.names())}"
    if typing.get_origin(tp) in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _did_you_mean(name: Any, valid: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(str(name), list(valid), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _merge(base: Node | None, override: Node) -> Node:
    """Deep-merge two YAML nodes: mappings merge key by key, anything else is replaced.

    A plug-in block that names another `kind` than the default one replaces it whole: the default's keys
    belong to its own kind (`engine.args` of vllm mean nothing to a replay engine).
    """
    if not (isinstance(base, MappingNode) and isinstance(override, MappingNode)):
        return override
    kinds = {_scalar_at(base, "kind"), _scalar_at(override, "kind")} - {None}
    if len(kinds) > 1:
        return override
    merged: dict[Any, tuple[Node, Node]] = {k.value: (k, v) for k, v in base.value}
    for k, v in override.value:
        old = merged.get(k.value)
        merged[k.value] = (k, _merge(old[1] if old else None, v))
    return MappingNode(override.tag, list(merged.values()), override.start_mark, override.end_mark)


def _check_unique_keys(validator: _Validator, node: Node, key: str) -> None:
    """Refuse a key given twice in one mapping, at any depth: merging `defaults` in would otherwise keep the last one silently."""
    if isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            _check_unique_keys(validator, item, f"{key}[{i}]")
    if not isinstance(node, MappingNode):
        return
    seen: dict[Any, Node] = {}
    for k_node, v_node in node.value:
        name = k_node.value if isinstance(k_node, ScalarNode) else None
        if name is not None and name in seen:
            validator.fail(
                k_node, f"{key}.{name}", f"given twice (first at line {seen[name].start_mark.line + 1}); keep one"
            )
        seen[name] = k_node
        _check_unique_keys(validator, v_node, f"{key}.{name}")


def _scalar_at(node: MappingNode, key: str) -> Any:
    return next((v.value for k, v in node.value if k.value == key and isinstance(v, ScalarNode)), None)


def _node_at(node: Node, path: list[str]) -> Node:
    """The value node at `path` (keys) below a mapping node; as deep as the path is found (a key whose value is missing: its mapping)."""
    for name in path:
        found = next((v for k, v in node.value if k.value == name), None) if isinstance(node, MappingNode) else None
        if found is None:
            return node
        node = found
    return node


def _example(tp: Any) -> str:
    """A placeholder value of a config type for an error message: `<str>`, or a mapping of its required keys."""
    if (registry := plugin_registry(tp)) is not None and registry.by == "kind":
        return f"{{kind: {' | '.join(registry.names())}, ...}}"
    if typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    if dataclasses.is_dataclass(tp):
        hints = field_types(tp)
        required = [
            f
            for f in dataclasses.fields(tp)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        return (
            "{"
            + ", ".join(f"{f.name}: {f.metadata.get('example') or _example(hints[f.name])}" for f in required)
            + "}"
        )
    return f"<{type_name(tp)}>"


@functools.cache
def _shipped_default_keys() -> frozenset[str]:
    """The keys under `defaults:` in the project's own families.yaml (none when it cannot be read)."""
    try:
        root = yaml.compose(SHIPPED.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, yaml.YAMLError):
        return frozenset()
    defaults = (
        next((v for k, v in root.value if k.value == "defaults"), None) if isinstance(root, MappingNode) else None
    )
    if not isinstance(defaults, MappingNode):
        return frozenset()
    return frozenset(str(k.value) for k, _ in defaults.value)


def unstated_shipped_defaults(family: Family) -> list[str]:
    """What a family of a file without `defaults:` takes from the built-in defaults where the shipped families.yaml's
    `defaults:` say otherwise: `key: <its value> (shipped <value>)`, one a key; empty for a file with `defaults:`.

    A families file is whole in itself: the shipped `defaults:` belong to the shipped file, and a file of one's own
    gets the built-in defaults (`rs families keys`) for what it does not state, so that what it says, and the rs
    version's schema, is all that a run of it depends on. The keys where the two differ (loop detection, the thinking
    budget, the engine's GPU arguments, the model's reasoning parser ...) are said by `rs families validate` and
    `rs plan` rather than left to be found in a run."""
    try:
        root = _compose(family.path)
    except FamilyConfigError:
        return []
    if family.path.resolve() == SHIPPED.resolve() or _node_at(root, ["defaults"]) is not root:
        return []
    shipped = _shipped_defaults_node()
    body = _node_at(root, ["families", family.name])
    if shipped is None or body is root:
        return []
    constructor = SafeConstructor()
    out: list[str] = []

    def walk(node: MappingNode, path: list[str]) -> None:
        for k_node, v_node in node.value:
            key = [*path, str(k_node.value)]
            if key == ["engine"] and _scalar_at(v_node, "kind") not in (None, family.config.engine.kind):
                continue  # another engine kind's block: none of it would apply
            mine, found = _config_at(family.config, key)
            if isinstance(v_node, MappingNode) and found and isinstance(mine, dict):
                walk(v_node, key)  # a block: key by key, the family's own keys among them
                continue
            if _stated(body, key):
                continue
            theirs = constructor.construct_object(v_node, deep=True)
            if found and mine == theirs:
                continue
            yours = "unset (the engine's own default)" if not found else _yaml_text(mine)
            out.append(f"{'.'.join(key)}: {yours} (shipped {_yaml_text(theirs)})")

    walk(shipped, [])
    return out


def defaults_note(family: Family) -> str | None:
    """What `rs families validate` and `rs plan` say of a family taking built-in defaults the shipped file overrides."""
    differing = unstated_shipped_defaults(family)
    if not differing:
        return None
    return (
        f"{family.name}: {family.path.name} has no `defaults:` block, so {family.name} takes the built-in defaults "
        f"where the shipped families.yaml's `defaults:` say otherwise: {'; '.join(differing)}; write the ones you want "
        "in the family (or in a `defaults:` block of the file)"
    )


def _stated(body: Node, path: list[str]) -> bool:
    """Whether a family's own block writes the key at `path`."""
    node = body
    for name in path:
        if not isinstance(node, MappingNode):
            return False
        node = next((v for k, v in node.value if k.value == name), None)
        if node is None:
            return False
    return True


def _config_at(config: Any, path: list[str]) -> tuple[Any, bool]:
    """The value of a resolved configuration at a YAML key path, and whether it has one (an engine argument not given:
    none)."""
    value = config
    for name in path:
        if value is None:
            return None, True
        if isinstance(value, dict):
            if name not in value:
                return None, False
            value = value[name]
        elif hasattr(value, name):
            value = getattr(value, name)
        else:
            return None, False
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return value, True


def _yaml_text(value: Any) -> str:
    """A value as families.yaml writes it, on one line."""
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()


@functools.cache
def _shipped_defaults_node() -> MappingNode | None:
    """The `defaults:` block of the project's own families.yaml (None when it cannot be read)."""
    try:
        root = yaml.compose(SHIPPED.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, yaml.YAMLError):
        return None
    defaults = (
        next((v for k, v in root.value if k.value == "defaults"), None) if isinstance(root, MappingNode) else None
    )
    return defaults if isinstance(defaults, MappingNode) else None


def _check_name(path: Path, node: Node, name: Any, seen: dict[str, Node]) -> None:
    where = _where(path, node)
    if not isinstance(name, str) or not _HUB_NAME.match(name) or "--" in name or ".." in name:
        raise FamilyConfigError(
            f"{where}: families.{name}: not usable as a Hub repo name; use letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit, without '--' or '..'"
        )
    longest = max(map(len, REPO_SUFFIX.values()))
    if len(name) + longest > _HUB_REPO_NAME_MAX:
        raise FamilyConfigError(
            f"{where}: families.{name}: too long; the repo {name}_RS_nothink must fit in "
            f"{_HUB_REPO_NAME_MAX} characters, so at most {_HUB_REPO_NAME_MAX - longest}"
        )
    folded = name.casefold()
    for other, other_node in seen.items():
        if other == name:
            raise FamilyConfigError(
                f"{where}: families.{name}: duplicate family (first defined at {_where(path, other_node)})"
            )
        if other.casefold() == folded:
            raise FamilyConfigError(
                f"{where}: families.{name}: differs from {other!r} ({_where(path, other_node)}) only by case; "
                "Hub repo names are case-insensitive, so both would publish to the same repos"
            )


def _compose(path: Path) -> MappingNode:
    if (problem := check_file_size(path)) is not None:  # before PyYAML reads it, at about a megabyte a second
        raise FamilyConfigError(problem)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise FamilyConfigError(f"{path}: cannot read families file: {err.strerror}") from err
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise FamilyConfigError(f"{path}{line}: not valid YAML: {getattr(err, 'problem', err)}") from err
    except RecursionError:  # PyYAML composes recursively: thousands of nested brackets exhaust the stack
        raise FamilyConfigError(
            f"{path}: nested too deeply to read (lists or mappings within one another, hundreds of levels); "
            "no setting of a family needs more than a few"
        ) from None
    if not isinstance(root, MappingNode):
        raise FamilyConfigError(f"{path}: expected a mapping with keys {', '.join(TOP_LEVEL_KEYS)}")
    if (problem := check_expansion(path, root)) is not None:  # before any walk: an alias bomb would never end
        raise FamilyConfigError(problem)
    _merge_keys(path, root, set())
    return root


def _merge_keys(path: Path, node: Node, seen: set[int]) -> None:
    """YAML merge keys (`<<: *anchor`) expanded in place, as a YAML loader would, keeping each value's own line."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, MappingNode):
        own = [(k, v) for k, v in node.value if k.tag != "tag:yaml.org,2002:merge"]
        try:
            SafeConstructor().flatten_mapping(node)
        except yaml.MarkedYAMLError as err:
            mark = err.problem_mark or node.start_mark
            raise FamilyConfigError(
                f"{path}:{mark.line + 1}: {err.problem}; `<<:` merges a mapping or a list of mappings"
            ) from err
        merged = {
            k.value: (k, v) for k, v in node.value[: len(node.value) - len(own)]
        }  # the last merged wins, as in YAML
        node.value = [kv for key, kv in merged.items() if key not in {k.value for k, _ in own}] + own
        for _, value in node.value:
            _merge_keys(path, value, seen)
    elif isinstance(node, SequenceNode):
        for value in node.value:
            _merge_keys(path, value, seen)


def load_families(path: str | Path, *, engine_checks: bool = False) -> dict[str, Family]:
    """Load and validate every family of a families file; raises `FamilyConfigError` on the first problem.

    With `engine_checks` (`rs families validate`), also what each family's engine kind checks itself against the
    installed libraries (the `vllm` engine: its loop and budget settings against vLLM's own classes; slow: it
    imports vLLM)."""
    path = Path(path)
    root = _compose(path)
    validator = _Validator(path)
    sections: dict[str, Node] = {}
    for k_node, v_node in root.value:
        key = validator.plain(k_node)
        if isinstance(key, str) and key.startswith("x-"):
            continue  # free space for YAML anchors
        if key not in TOP_LEVEL_KEYS:
            validator.fail(
                k_node,
                str(key),
                f"unknown top-level key{_did_you_mean(key, TOP_LEVEL_KEYS)}; valid keys: {', '.join(TOP_LEVEL_KEYS)} (and x-* for YAML anchors)",
            )
        sections[key] = v_node
    defaults = sections.get("defaults")
    if defaults is not None and not isinstance(defaults, MappingNode):
        validator.fail(defaults, "defaults", f"expected a mapping, got {_kind(defaults)}")
    if defaults is not None:
        _check_unique_keys(validator, defaults, "defaults")
    validator.has_defaults = defaults is not None
    families_node = sections.get("families")
    if families_node is None:
        raise FamilyConfigError(f"{path}: families: required key is missing")
    if not isinstance(families_node, MappingNode):
        validator.fail(
            families_node, "families", f"expected a mapping of family name to settings, got {_kind(families_node)}"
        )

    evaluation = _evaluation_sets(validator, sections.get("evaluation"))
    seen: dict[str, Node] = {}
    families: dict[str, Family] = {}
    for name_node, body in families_node.value:
        name = validator.plain(name_node)
        _check_name(path, name_node, name, seen)
        seen[name] = name_node
        if not isinstance(body, MappingNode):
            validator.fail(body, f"families.{name}", f"expected a mapping, got {_kind(body)}")
        _check_unique_keys(validator, body, f"families.{name}")
        config = validator.dataclass(FamilyConfig, _merge(defaults, body), f"families.{name}")
        _check_verifier(path, body, name, config)
        _check_judge(path, body, name, config)
        _check_sampling(path, body, name, config, engine_checks=engine_checks)
        _check_engine_args(validator, _merge(defaults, body), name, config, engine_checks=engine_checks)
        _options_in_prompt(validator, _merge(defaults, body), name, config)
        _check_decontamination(validator, _merge(defaults, body), name, config, evaluation)
        families[name] = Family(name=name, config=config, path=path, line=name_node.start_mark.line + 1)
    return families


def _evaluation_sets(validator: _Validator, node: Node | None) -> dict[str, EvaluationSetConfig]:
    """The top-level `evaluation:` block: each benchmark evaluation split by name, its source checked like a family's."""
    if node is None:
        return {}
    if not isinstance(node, MappingNode):
        validator.fail(
            node, "evaluation", f"expected a mapping of evaluation set name to its source, got {_kind(node)}"
        )
    _check_unique_keys(validator, node, "evaluation")
    sets = {}
    for k_node, v_node in node.value:
        name = validator.plain(k_node)
        _check_set_name(validator, k_node, name)
        sets[name] = validator.dataclass(EvaluationSetConfig, v_node, f"evaluation.{name}")
    return sets


def _check_set_name(validator: _Validator, node: Node, name: Any) -> None:
    """An evaluation set's name names its index's folder in the cache too: a family name's characters, nothing that
    leaves the folder (`..`, `/`)."""
    if not isinstance(name, str) or not _HUB_NAME.match(name) or ".." in name or len(name) > _HUB_REPO_NAME_MAX:
        validator.fail(
            node,
            f"evaluation.{name}",
            f"a set's name must be letters, digits, '-', '_' or '.', starting and ending with a letter or digit, "
            f"without '..', at most {_HUB_REPO_NAME_MAX} characters (e.g. CLEVR-val), got {name!r}",
        )


def _check_decontamination(
    validator: _Validator, body: Node, name: str, config: FamilyConfig, evaluation: dict[str, EvaluationSetConfig]
) -> None:
    """Every set a family is checked against is defined under `evaluation:`; the family gets their configurations."""
    decontamination = config.decontamination
    if decontamination is None:
        return
    against = _node_at(_node_at(body, ["decontamination"]), ["against"])
    if not decontamination.against:
        validator.fail(
            against,
            f"families.{name}.decontamination.against",
            "empty; name at least one evaluation set "
            f"({', '.join(evaluation) or 'define them under the top-level evaluation: key'}), or remove the block",
        )
    for i, set_name in enumerate(decontamination.against):
        if set_name not in evaluation:
            at = against.value[i] if isinstance(against, SequenceNode) and i < len(against.value) else against
            valid = ", ".join(evaluation) or "none: this file has no top-level evaluation: block"
            validator.fail(
                at,
                f"families.{name}.decontamination.against[{i}]",
                f"unknown evaluation set {set_name!r}{_did_you_mean(set_name, evaluation)}; defined sets: {valid}",
            )
    decontamination.sets = {set_name: evaluation[set_name] for set_name in decontamination.against}


def mapped_options(config: FamilyConfig) -> str | None:
    """The column a family's source maps its multiple-choice options from (`source.columns.options`), else None."""
    columns = getattr(config.source, "columns", None)
    if getattr(config.source, "shape", "flat") != "flat":
        return None
    return getattr(columns, "options", None)


def _options_in_prompt(validator: _Validator, body: Node, name: str, config: FamilyConfig) -> None:
    """Options a source maps are rendered into the question, or the family is refused.

    A question with options is asked for "the option's letter"; only the multiple-choice step puts the options into the
    question (a lettered block) and turns the reference into their letter. With `source.columns.options` mapped, the
    step is on unless the family switches it off, which is refused: the model would be asked for a letter of options
    it is never shown, against a letter reference.
    """
    column = mapped_options(config)
    if column is None:
        return
    step = config.cleaning.step("multiple_choice")
    written = _node_at(body, ["cleaning", "multiple_choice", "enabled"])
    if isinstance(written, ScalarNode) and written.tag.endswith(":bool") and not step.enabled:
        options_node = _node_at(body, ["source", "columns", "options"])
        validator.fail(
            written,
            f"families.{name}.cleaning.multiple_choice.enabled",
            f"false, but source.columns.options maps the column {column!r} "
            f"(line {options_node.start_mark.line + 1}): the options would be left out of the prompt while the model "
            "is asked for an option's letter; remove `enabled: false` (mapped options switch the step on), or remove "
            "source.columns.options",
        )
    if not step.enabled:
        config.cleaning.steps["multiple_choice"] = dataclasses.replace(step, enabled=True)


def _check_judge(path: Path, body: MappingNode, name: str, config: FamilyConfig) -> None:
    """A think-then-label judge on the vllm engine needs vLLM to know where its reasoning ends."""
    judge = config.judge
    if not judge.enabled or judge.mode != "think_then_label" or config.engine.kind != "vllm":
        return
    model = judge.model or config.model
    if model.reasoning.uses_vllm_parser or getattr(config.engine, "args", {}).get("reasoning_parser"):
        return
    node = next((v for k, v in body.value if k.value == "judge"), body)
    raise FamilyConfigError(
        f"{_where(path, node)}: families.{name}.judge.mode: think_then_label on the vllm engine needs a vLLM reasoning "
        f"parser to find where the judge's reasoning ends (model.reasoning.parser is {model.reasoning.parser!r}); "
        "set it to the model's parser (qwen3, deepseek_r1, ...), or use judge.mode label_only"
    )


def _check_sampling(path: Path, body: MappingNode, name: str, config: FamilyConfig, *, engine_checks: bool) -> None:
    """A thinking budget needs reasoning markers; the engine kind checks the loop and budget settings it takes."""
    sampling = config.sampling
    if sampling.repetition_detection is None and sampling.thinking_token_budget is None:
        return
    node = next((v for k, v in body.value if k.value == "sampling"), body)
    if sampling.thinking_token_budget is not None and config.model.reasoning.parser == "none":
        raise FamilyConfigError(
            f"{_where(path, node)}: families.{name}.sampling.thinking_token_budget: the model does not reason "
            "(model.reasoning.parser: none), so there is no reasoning to budget; set thinking_token_budget: null"
        )
    check = getattr(ENGINES.get(config.engine.kind), "check_sampling", None)
    if not engine_checks or check is None:
        return
    problem = check(sampling)
    if problem is not None:
        key, text = problem
        at = next((v for k, v in node.value if k.value == key), node) if isinstance(node, MappingNode) else node
        raise FamilyConfigError(f"{_where(path, at)}: families.{name}.sampling.{key}: {text}")


def _check_engine_args(
    validator: _Validator, body: Node, name: str, config: FamilyConfig, *, engine_checks: bool
) -> None:
    """With `engine_checks`, the values of `engine.args` the engine kind's own configuration refuses (vLLM's config
    classes: `max_num_seqs: 0`), at the key's file and line (the family's, or `defaults:`'), before any engine starts."""
    check = getattr(ENGINES.get(config.engine.kind), "check_args", None)
    if not engine_checks or check is None:
        return
    problem = check(dict(getattr(config.engine, "args", {}) or {}))
    if problem is not None:
        key, text = problem
        validator.fail(_node_at(body, ["engine", "args", key]), f"families.{name}.engine.args.{key}", text)


def _check_verifier(path: Path, body: MappingNode, name: str, config: FamilyConfig) -> None:
    try:
        resolve_params(config.verifier.name, config.verifier.params)
    except VerifierError as err:
        node = next((v for k, v in body.value if k.value == "verifier"), body)
        raise FamilyConfigError(f"{_where(path, node)}: families.{name}.verifier: {err}") from None


def locate(family: Family, key: str) -> str:
    """`file:line` of a family's key (`source.path`): where the family writes it, else where `defaults:` does, else the family."""
    try:
        root = _compose(family.path)
    except FamilyConfigError:
        return f"{family.path}:{family.line}"
    path = key.split(".")
    for section in (["families", family.name], ["defaults"]):
        node = _node_at(root, section)
        if node is root:
            continue
        found = _node_at(node, path)
        if found is not node or not path:
            return _where(family.path, found)
    return f"{family.path}:{family.line}"
