"""The `rs:` model ids of the demo and the tests, registered in `rs.registry.MODELS` (the `rs.models` entry point)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from rs.engines.models import BuiltinModel
from rs.registry import MODELS
from rs_demo.demo_model import PACKAGE_DIR, demo_model_path
from rs_demo.tiny_model import tiny_vlm_path
from rs_demo.tiny_qwen3vl import tiny_qwen3vl_path


def _demo_revision(path: Path) -> str:
    """The demo model's folder name never changes: its revision is the hash of its recorded file hashes (a retrained
    model gets new cache keys)."""
    return hashlib.sha256((PACKAGE_DIR / "SHA256SUMS").read_bytes()).hexdigest()[:16]


MODELS.register("demo-vlm")(BuiltinModel(demo_model_path, _demo_revision))
"""The trained demo VLM shipped in `rs_demo/demo_model/` (its files checked against their recorded hashes)."""
MODELS.register("tiny-vlm")(BuiltinModel(tiny_vlm_path))
"""The tiny random test VLM (Idefics3), built into the local cache on first use (no network)."""
MODELS.register("tiny-qwen3vl")(BuiltinModel(tiny_qwen3vl_path))
"""The tiny random Qwen3-VL: the default model's architecture, built into the local cache on first use."""
