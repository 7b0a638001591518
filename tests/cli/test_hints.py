"""Every command a hint suggests runs when pasted as printed, for a family of one's own (`rs.util.invocation`).

Each test works in a folder of its own holding `mine.yaml` (not the project's families.yaml), runs a command there as
a person would, takes the command the hint prints, and runs it through a shell from the same folder, in an
environment without the variables the first command had for itself alone (`make demo` sets them): what it must not
say is "unknown family", the error of a command that lost `--config`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import ROOT
from faults import FAMILY, write_families

from rs.util import invocation

pytestmark = pytest.mark.slow

ENV = {
    **{k: v for k, v in os.environ.items() if k not in invocation.ENV},
    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
}
"""A shell's environment: none of the variables a command line may set for one command."""
RUN_ENV = {**ENV, "HF_HUB_OFFLINE": "1", "RS_CACHE_DIR": "caches"}
"""What the first command runs in: variables set for it alone, as `make demo` sets them."""


def own_family(folder: Path, family: str = FAMILY) -> Path:
    """`folder/mine.yaml` defining MyShapes (eight images, answered from a replay file); the project's file knows none."""
    write_families(folder, names=("MyShapes",), family=family).rename(folder / "mine.yaml")
    return folder / "mine.yaml"


def rs(folder: Path, *args: str, env: dict[str, str] = RUN_ENV) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )


def pasted(folder: Path, line: str) -> subprocess.CompletedProcess[str]:
    """`line` pasted into a shell in `folder`."""
    return subprocess.run(["bash", "-c", line], cwd=folder, env=ENV, capture_output=True, text=True, timeout=300)


def hinted(stderr: str) -> str:
    """The command in backticks of the `hint:` or `error:` lines that starts with a program."""
    for line in stderr.splitlines():
        for quoted in re.findall(r"`([^`]+)`", line):
            words = [w for w in quoted.split() if not re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", w)]
            if words and (words[0] == "rs" or words[0] == sys.executable):
                return quoted
    raise AssertionError(f"no command in:\n{stderr[-3000:]}")


def works(result: subprocess.CompletedProcess[str], line: str) -> None:
    assert "unknown family" not in result.stderr, f"{line}\n{result.stderr[-3000:]}"
    assert result.returncode == 0, f"{line}\n{result.stderr[-3000:]}"


def test_an_unknown_family_names_the_families_file_that_defines_it_and_the_flag(tmp_path: Path) -> None:
    own_family(tmp_path)
    said = rs(tmp_path, "rs.families", "preview", "MyShapes")
    assert said.returncode == 2 and "unknown family 'MyShapes'" in said.stderr
    assert "hint: MyShapes is defined in mine.yaml: add `--config mine.yaml` to the command" in said.stderr
    works(rs(tmp_path, "rs.families", "preview", "MyShapes", "--config", "mine.yaml"), "with --config")
    (tmp_path / "mine.yaml").rename(tmp_path / "elsewhere.txt")  # no families file here: the flag, named
    said = rs(tmp_path, "rs.families", "preview", "MyShapes")
    assert "add `--config PATH` to the command" in said.stderr.split("hint:")[1]
    near = rs(tmp_path, "rs.families", "show", "TinyClevr")
    assert "Did you mean 'TinyCLEVR'" in near.stderr


def test_the_cards_only_hint_and_the_cards_reproducing_command_run_as_printed(tmp_path: Path) -> None:
    """`--cards-only` with nothing built says to run the build: that command, pasted, builds; the card it publishes
    then says how it was made, and that command, pasted, runs too."""
    own_family(tmp_path)
    first = rs(tmp_path, "rs.publish", "MyShapes", "--config", "mine.yaml", "--out", "out", "--cards-only")
    assert first.returncode != 0 and "without --cards-only" in first.stderr, first.stderr[-3000:]
    line = hinted(first.stderr)
    assert line.startswith("RS_CACHE_DIR=caches HF_HUB_OFFLINE=1 ") and "--config mine.yaml --out out" in line, line
    works(built := pasted(tmp_path, line), line)
    card = (tmp_path / "out" / "tester" / "MyShapes_RS_think" / "README.md").read_text()
    reproduce = card.split("The command, from rs's checkout with this families file:\n\n```\n")[1].split("\n```")[0]
    assert reproduce == "python -m rs.publish MyShapes --config mine.yaml", reproduce  # the same on every machine
    venv = {**ENV, "PATH": os.pathsep.join([str(Path(sys.executable).parent), ENV["PATH"]])}  # rs's environment
    again = subprocess.run(
        ["bash", "-c", reproduce], cwd=tmp_path, env=venv, capture_output=True, text=True, timeout=300
    )
    works(again, reproduce)
    assert "MyShapes" in built.stdout


def test_the_preview_hint_of_a_column_that_holds_no_images_runs_as_printed(tmp_path: Path) -> None:
    own_family(tmp_path, FAMILY.replace("columns: {id: id}", "columns: {id: id, image: question}"))
    said = rs(tmp_path, "rs.families", "--config", "mine.yaml", "validate", "--source", "4")
    assert said.returncode == 2 and "source.columns.image" in said.stderr, said.stderr[-3000:]
    line = hinted(said.stderr)
    assert "preview MyShapes --config mine.yaml" in line, line
    works(pasted(tmp_path, line), line)


def test_a_command_is_rendered_with_the_flags_and_environment_the_run_had(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rendering alone: the path flags in the order of a command line, the variables first, shell-quoted."""
    monkeypatch.setattr(sys, "argv", ["/x/bin/rs", "publish"])
    for (
        name
    ) in invocation.ENV:  # what an earlier test of this worker left set (a bench's VLLM_LOGGING_LEVEL) is no flag
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    invocation.begin()
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")  # set by rs itself later: not typed, not carried
    try:
        invocation.record({"--out": "my out", "--config": "mine.yaml", "--build-dir": None})
        assert invocation.command("publish", "MyShapes", extra=("--limit", "3")) == (
            "HF_HUB_OFFLINE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 rs publish MyShapes --config mine.yaml --out 'my out' "
            "--limit 3"
        )
        assert invocation.command("families", "preview", "MyShapes", carry=("--config",)) == (
            "HF_HUB_OFFLINE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 rs families preview MyShapes --config mine.yaml"
        )
    finally:
        invocation.reset()
    assert invocation.command("publish", "X", config=ROOT / "families.yaml") == "python -m rs.publish X"


def test_the_dry_runs_plan_hint_runs_as_printed(tmp_path: Path) -> None:
    """A dry run of a family not built says how to measure it: `rs plan FAMILY --limit N`, with the families file."""
    own_family(tmp_path)
    said = rs(tmp_path, "rs.publish", "MyShapes", "--config", "mine.yaml", "--out", "out", "--dry-run")
    assert said.returncode == 0, said.stderr[-3000:]
    line = hinted(said.stdout)
    assert line.endswith("-m rs.plan MyShapes --config mine.yaml --limit N"), line
    works(pasted(tmp_path, line.replace("--limit N", "--limit 2")), line)
