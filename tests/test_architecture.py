"""The import contracts in pyproject.toml hold: no cycles, the build runs one way, nothing in the library imports the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in done.stdout


def test_rs_console_script_dispatches_to_the_commands() -> None:
    from rs.cli.main import COMMANDS, main

    assert set(COMMANDS) == {"publish", "sample", "families"}
    assert main(["families", "validate"]) == 0
    assert main(["nope"]) == 2
