"""Every command a page of the documentation shows in a code block: run here, on the demo's publish, when the demo can
run it; otherwise it needs what this machine has not (the Hub, a GPU, a Ray cluster...), and the test says which."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from checkout import ROOT
from shared_builds import IN_PROCESS_ENV

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_COMMAND = re.compile(r"^\s*(?:[A-Z_][A-Z0-9_]*=\S+\s+)*(?:rs |python -m |\.venv/bin/python -m |make )")
ELSEWHERE = {
    "make": "CI itself (`make test`) or tests/e2e/test_readme_demo.py (`make demo`)",
    "hub": "the Hub: its family's source (or the repo it names) is there",
    "ray": "a Ray cluster (tests/distributed runs the same commands on a local Ray)",
    "engine": "the model asked again for every replayed question (tests/audit runs `--replay --engine` on a small build)",
    "training": "half an hour of training or evaluating the demo model",
    "samples": "the demo's samples repo, published by `make demo-samples` (tests/refilter reads one)",
}
"""Why a command shown is not run here: the one reason each has, checked against this closed list."""
HUB_FAMILIES = {"CLEVRMath", "FAMILY", "MyCharts"}


@dataclass(frozen=True)
class Shown:
    where: str
    words: list[str]

    @property
    def text(self) -> str:
        return " ".join(self.words)


def shown() -> list[Shown]:
    """The command lines of every fenced block of README.md and docs/, their comments left out."""
    found = []
    for page in PAGES:
        fenced = False
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                fenced = not fenced
                continue
            if fenced and _COMMAND.match(line):
                words = shlex.split(line.split(" # ", 1)[0].split("  #", 1)[0])
                found.append(Shown(f"{page.relative_to(ROOT)}:{number}", words))
    return found


def needs(command: Shown) -> str | None:
    """The key in ELSEWHERE of what `command` needs that the demo has not, or None: the demo runs it."""
    words = command.words
    if words[0] == "make":
        return "make"
    if "--ray" in words:
        return "ray"
    if "--engine" in words:
        return "engine"
    if any(word.startswith("rs_demo.") for word in words):
        return "training"
    if (
        any(word in HUB_FAMILIES for word in words)
        or any(re.fullmatch(r"[\w-]+/\w+_RS_\w+", word) for word in words)
        or "my-families.yaml" in words  # the README's example file: MyCharts, a source on the Hub
    ):
        return "hub"
    if any(word.endswith("_RS_samples") for word in words):
        return "samples"
    return None


def test_every_command_shown_is_run_here_or_says_what_it_needs() -> None:
    commands = shown()
    assert len(commands) > 25
    for command in commands:
        reason = needs(command)
        assert reason is None or reason in ELSEWHERE, command
    run_here = [c for c in commands if needs(c) is None]
    assert {c.words[2] if c.words[0] != "rs" else c.words[1] for c in run_here} >= {"rs.plan", "audit", "refilter"}


@pytest.mark.slow
@pytest.mark.vllm
def test_the_commands_the_demo_can_run_run(tinyclevr_published, tmp_path: Path) -> None:
    """Each command shown that the demo can run, run as shown from a copy of the demo's publish (its `build/` and `out/`
    where the commands look for them, its generation cache where `$RS_CACHE_DIR` says): exit 0."""
    work = tmp_path / "demo"
    shutil.copytree(tinyclevr_published.work, work)
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(work / "cache.sqlite", cache / "generations.sqlite")
    env = {**os.environ, **IN_PROCESS_ENV, "RS_CACHE_DIR": str(cache)}
    failed = []
    for command in shown():
        if needs(command) is not None:
            continue
        words = command.words
        console = [sys.executable, "-c", "from rs.cli.main import console; console()"]  # the `rs` script, this tree's
        argv = [*console, *words[1:]] if words[0] == "rs" else [sys.executable, *words[1:]]
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            failed.append((command.where, command.text, done.returncode, done.stderr[-1500:]))
    assert failed == []
