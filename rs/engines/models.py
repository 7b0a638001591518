"""The project's built-in models (`rs:tiny-vlm`, `rs:tiny-qwen3vl`, `rs:demo-vlm`): what a model id loads and its revision."""

from __future__ import annotations

import hashlib
from pathlib import Path

from rs.demo_model import DEMO_VLM, PACKAGE_DIR, demo_model_path
from rs.tiny_model import tiny_vlm_path
from rs.tiny_qwen3vl import tiny_qwen3vl_path

__all__ = ["DEMO_VLM", "TINY_QWEN3VL", "TINY_VLM", "builtin_revision", "resolve_model"]

TINY_VLM = "rs:tiny-vlm"
"""Model id of the project's own tiny random VLM (`rs.tiny_model`), built locally on first use."""
TINY_QWEN3VL = "rs:tiny-qwen3vl"
"""Model id of the tiny random Qwen3-VL (`rs.tiny_qwen3vl`): the default model's architecture, built locally on first use."""


def resolve_model(model_id: str) -> str:
    """The path or Hub id to load for a configured model id.

    `rs:tiny-vlm` is the tiny random test VLM (Idefics3) and `rs:tiny-qwen3vl` the tiny random Qwen3-VL,
    each built into the local cache on first use (no network); `rs:demo-vlm` is the trained demo model shipped with the package (its files are
    checked against their recorded hashes); every other id (a Hub id or a local folder) is passed
    through unchanged.
    """
    if model_id == TINY_VLM:
        return str(tiny_vlm_path())
    if model_id == TINY_QWEN3VL:
        return str(tiny_qwen3vl_path())
    if model_id == DEMO_VLM:
        return str(demo_model_path())
    if model_id.startswith("rs:"):
        raise ValueError(f"unknown built-in model {model_id!r}; the built-in ones are {TINY_VLM!r}, {TINY_QWEN3VL!r} and {DEMO_VLM!r} (or give a Hub id or a local path)")
    return model_id


def builtin_revision(model_id: str, path: str) -> str:
    """What identifies a built-in model's weights, recorded as its revision and part of every cache key.

    A tiny model's folder name is its content key; the demo model's folder name never changes,
    so its revision is the hash of its recorded file hashes (a retrained model gets new keys).
    """
    if model_id == DEMO_VLM:
        return hashlib.sha256((PACKAGE_DIR / "SHA256SUMS").read_bytes()).hexdigest()[:16]
    return Path(path).name
