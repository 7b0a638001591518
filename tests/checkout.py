"""Where the checkout's own files are, for a test in any folder under tests/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The checkout: families.yaml, README.md, bench/, scripts/, demo/."""

PLUGINS = ROOT / "tests" / "plugins"
"""The tests' plug-in modules (rs_faults, rs_parrots), installed into a subprocess by an entry point."""
