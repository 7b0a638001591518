"""The engine arguments the installed vLLM takes, read from its own source without importing it.

`engine.args` are passed to `vllm.LLM`, which takes its named parameters and hands the rest to
`vllm.EngineArgs`. A misspelt key (`max_num_seq`) was only refused once the model was loading,
a dozen seconds in, without the file and line of the key. Importing vLLM to list its arguments
takes about 10 s on a CPU, too slow for every command; its two definitions are plain Python
(a dataclass's fields, a function's parameters), so they are read from the installed files with
`ast` in milliseconds, and the loader refuses an unknown key at validate time.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
import logging
from pathlib import Path
from typing import Any

from rs.engines.base import SamplingSettings

logger = logging.getLogger(__name__)

__all__ = [
    "batch_invariance_refusal",
    "refused_engine_arg_value",
    "engine_arg_type",
    "known_engine_args",
    "unknown_engine_arg",
    "vllm_fields",
    "wrong_engine_arg_value",
]


@functools.cache
def known_engine_args() -> frozenset[str] | None:
    """Every keyword `vllm.LLM` accepts in the installed vLLM (its own and `EngineArgs`' fields); None when vLLM is not installed
    or its files do not have the expected shape (then nothing is checked before the engine starts)."""
    spec = importlib.util.find_spec("vllm")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    try:
        llm = _parameters(root / "entrypoints" / "llm.py", "LLM", "__init__")
        engine_args = _fields(root / "engine" / "arg_utils.py", "EngineArgs")
    except (OSError, SyntaxError, LookupError) as err:
        logger.debug("cannot read vLLM's engine arguments from %s: %s", root, err)
        return None
    return frozenset((llm | engine_args) - {"self", "model"})


def unknown_engine_arg(keys: list[str]) -> tuple[str, str] | None:
    """The first key the installed vLLM does not take and a did-you-mean (empty when none is close), or None."""
    known = known_engine_args()
    if known is None:
        return None
    for key in keys:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
            return key, f" (did you mean {close[0]!r}?)" if close else ""
    return None


_SCALARS = {"int": int, "float": float, "bool": bool, "str": str}


@functools.cache
def _engine_arg_annotations() -> dict[str, str]:
    """`EngineArgs`' field annotations as written in the installed vLLM (`int | None`, `ModelDType`, ...); empty when unreadable."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(next(iter(spec.submodule_search_locations))) / "engine" / "arg_utils.py"
    try:
        body = _tree(path, "EngineArgs").body
    except (OSError, SyntaxError, LookupError):
        return {}
    return {
        n.target.id: ast.unparse(n.annotation)
        for n in body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }


def engine_arg_type(key: str) -> tuple[type, ...] | None:
    """The scalar types (int, float, bool, str) vLLM's `EngineArgs` annotates `key` with; None when it is anything else
    (a literal, a config class, a container) or unknown: such a value is left to vLLM."""
    members = [m.strip() for m in _engine_arg_annotations().get(key, "").split("|")]
    types = tuple(_SCALARS[m] for m in members if m in _SCALARS)
    return types if types and all(m in _SCALARS or m == "None" for m in members) else None


def wrong_engine_arg_value(key: str, value: object) -> str | None:
    """Why `value` cannot be vLLM's `key` (its field's scalar type, as pydantic's lax mode reads it), or None.

    null is always let through (vLLM's default, e.g. `gpu_memory_utilization: null` on a CPU)."""
    types = engine_arg_type(key)
    if types is None or value is None or _fits(value, types):
        return None
    wanted = " or ".join(t.__name__ for t in types)
    return f"vLLM's EngineArgs.{key} is {_engine_arg_annotations()[key]}: {value!r} ({type(value).__name__}) is not {'an' if wanted[0] in 'aeiou' else 'a'} {wanted}"


@functools.cache
def _constrained_fields() -> dict[str, list[tuple[str, Any]]]:
    """Engine argument name -> (config class, a validator) for each field of vLLM's configuration classes (`vllm.config`)
    that carries its own constraints (`max_num_seqs: int = Field(ge=1)`) or takes a closed set of words (a `Literal`).

    The same fields `vllm.EngineArgs` fills from the arguments of the same names; empty when vLLM cannot be imported."""
    import typing

    try:
        import vllm.config as configs
        from pydantic import TypeAdapter
    except ImportError:
        return {}
    out: dict[str, list[tuple[str, Any]]] = {}
    for name in sorted(dir(configs)):
        for key, info in getattr(getattr(configs, name), "__pydantic_fields__", {}).items():
            if any(type(m).__name__ == "SkipValidation" for m in info.metadata):
                continue
            members = typing.get_args(info.annotation) if typing.get_origin(info.annotation) else ()
            literal = typing.get_origin(info.annotation) is typing.Literal or (
                members and all(typing.get_origin(m) is typing.Literal or m is type(None) for m in members)
            )
            if not (info.metadata or literal):
                continue
            try:
                adapter = TypeAdapter(
                    typing.Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
                )
            except Exception as err:  # a field pydantic cannot check alone: left to vLLM
                logger.debug("cannot check vLLM's %s.%s alone: %s", name, key, err)
                continue
            out.setdefault(key, []).append((name, adapter))
    return out


def refused_engine_arg_value(args: dict[str, Any]) -> tuple[str, str] | None:
    """The first engine argument whose value a field of vLLM's configuration classes refuses by its own constraints
    (`max_num_seqs: 0`, `gpu_memory_utilization: 1.5`, a `dtype` that is no dtype): `(key, vLLM's words)`, or None.

    vLLM checks them only when it builds its configuration, once the engine starts; here each value is checked alone
    against its field, without a model (checks of several fields together are still vLLM's, at the start). Imports
    `vllm.config` (seconds): `rs families validate` only. null is always let through (vLLM's default)."""
    fields = _constrained_fields()
    for key, value in args.items():
        if value is None:
            continue
        for cls, adapter in fields.get(key, []):
            try:
                adapter.validate_python(value)
            except Exception as err:
                errors = getattr(err, "errors", None)
                words = "; ".join(str(e.get("msg", "")) for e in errors()) if callable(errors) else str(err)
                return key, f"vLLM's {cls}.{key} refuses {value!r}: {words}"
    return None


_BOOL_WORDS = frozenset({"0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes"})
"""The strings pydantic's lax mode reads as a bool."""


def _fits(value: object, types: tuple[type, ...]) -> bool:
    """Whether pydantic's lax (Python) mode, which vLLM's config classes validate with, takes `value` as one of `types`."""
    if str in types and isinstance(value, str):
        return True
    if bool in types and (
        isinstance(value, bool) or value in (0, 1) or (isinstance(value, str) and value.lower() in _BOOL_WORDS)
    ):
        return True
    if isinstance(value, (bool, int, float)):
        return float in types or (int in types and float(value).is_integer())
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return False
        return float in types or (int in types and number.is_integer())
    return False


def _tree(path: Path, name: str) -> ast.ClassDef:
    module = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in module.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise LookupError(f"no class {name} in {path}")


def _fields(path: Path, name: str) -> set[str]:
    """The annotated fields of a dataclass."""
    fields = {
        n.target.id for n in _tree(path, name).body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    if not fields:
        raise LookupError(f"{name} in {path} has no fields")
    return fields


def _parameters(path: Path, cls: str, method: str) -> set[str]:
    """The named parameters of a method (not *args / **kwargs)."""
    for node in _tree(path, cls).body:
        if isinstance(node, ast.FunctionDef) and node.name == method:
            a = node.args
            return {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
    raise LookupError(f"no {cls}.{method} in {path}")


BATCH_INVARIANT_MODULES = ("model_executor/determinism/batch_invariant.py", "model_executor/layers/batch_invariant.py")
"""Where vLLM keeps its batch-invariant kernels (`VLLM_BATCH_INVARIANT=1`): the newer place, then the older one."""


def batch_invariance_refusal() -> str | None:
    """Why the installed vLLM cannot take `engine.batch_invariant: true`, read from its files (None: it can, or vLLM is
    not installed here to ask, which the engine's start then checks)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    try:
        envs = (root / "envs.py").read_text(encoding="utf-8")
    except OSError:
        return None
    if "VLLM_BATCH_INVARIANT" not in envs or not any((root / m).is_file() for m in BATCH_INVARIANT_MODULES):
        return "the installed vLLM has no batch-invariant mode (no VLLM_BATCH_INVARIANT in vllm/envs.py): install a newer vLLM"
    return None


def vllm_fields(settings: SamplingSettings, *, n: int = 1) -> dict[str, Any]:
    """The `vllm.SamplingParams` fields rs sets for `settings`, as plain values (`rs.engines.vllm` builds its
    SamplingParams from this very dict, and a repo's provenance records it), and the chat template arguments `LLM.chat` gets beside them."""
    fields: dict[str, Any] = {
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "seed": settings.seed,
        "max_tokens": settings.max_tokens,
        "output_kind": "FINAL_ONLY",
    }
    if n > 1:
        fields["n"] = n
    if settings.choices:
        fields["structured_outputs"] = {"choice": list(settings.choices)}
    if settings.repetition_detection is not None:
        low, high, count = settings.repetition_detection
        fields["repetition_detection"] = {"max_pattern_size": high, "min_pattern_size": low, "min_count": count}
    if settings.thinking_token_budget is not None:
        fields["thinking_token_budget"] = settings.thinking_token_budget
    return fields
