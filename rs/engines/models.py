"""Built-in model ids (`rs:NAME`): what such an id loads and the revision recorded for it.

rs itself ships no model. A distribution registers its models in :data:`rs.registry.MODELS` (entry point
group `rs.models`): the `rs-demo` part of this repository (`demo/`) registers `rs:demo-vlm` (the trained demo
model `make demo` samples with), `rs:tiny-vlm` and `rs:tiny-qwen3vl` (tiny random models the tests serve for real).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rs.registry import MODELS, UnknownNameError

__all__ = ["PREFIX", "BuiltinModel", "builtin_revision", "resolve_model"]

PREFIX = "rs:"


def _folder_name(path: Path) -> str:
    return path.name


@dataclass(frozen=True)
class BuiltinModel:
    """A model an `rs:NAME` id names: where its files are, and what identifies them."""

    path: Callable[[], Path]
    """The model's folder: built, or checked against its recorded hashes, on first use."""
    revision: Callable[[Path], str] = _folder_name
    """What identifies the weights in that folder: recorded as the model's revision, part of every cache key (by
    default the folder's name, a content key for a model built into the cache)."""


def _builtin(model_id: str) -> BuiltinModel:
    try:
        return MODELS.get(model_id[len(PREFIX) :])
    except UnknownNameError:
        known = ", ".join(PREFIX + name for name in MODELS.names()) or "none installed"
        raise ValueError(
            f"unknown built-in model {model_id!r} (built-in: {known}); give a Hub id or a local path, or install "
            "the distribution that provides it (this repository's demo and test models: pip install -e ./demo)"
        ) from None


def resolve_model(model_id: str) -> str:
    """The path or Hub id to load for a configured model id: an `rs:NAME` id's folder (built or checked on first
    use, no network); every other id (a Hub id or a local folder) unchanged."""
    if not model_id.startswith(PREFIX):
        return model_id
    return str(_builtin(model_id).path())


def builtin_revision(model_id: str, path: str) -> str:
    """What identifies a built-in model's weights at `path`, recorded as its revision and part of every cache key."""
    return _builtin(model_id).revision(Path(path))
