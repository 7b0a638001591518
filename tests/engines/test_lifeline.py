"""Processes started while an engine starts die with the process that started them (rs.engines.lifeline), both ways vLLM starts them.

A parent process starts a child that would sleep for a minute, by `fork` and by `spawn`, inside
`engine_processes_die_with_this_one`; the test kills the parent with SIGKILL and the child must be
gone within seconds. Outside the block, the same child outlives its parent (the check can fail).
A child so tied ties the worker it starts itself (as vLLM's engine core does): killing the child
takes its worker along. tests/engines/test_engine_death.py does both with a real vLLM engine core.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from checkout import ROOT

pytestmark = pytest.mark.slow

PARENT = """
import multiprocessing, sys, time
from rs.engines.lifeline import engine_processes_die_with_this_one
from contextlib import nullcontext
method, tied = sys.argv[1], sys.argv[2] == "tied"
if __name__ == "__main__":
    with engine_processes_die_with_this_one() if tied else nullcontext():
        child = multiprocessing.get_context(method).Process(target=time.sleep, args=(60,))
        child.start()
    print(child.pid, flush=True)
    time.sleep(60)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def started(program: str, method: str, tied: bool, tmp_path: Path) -> tuple[subprocess.Popen[str], list[int]]:
    """`program` run with `method` and `tied`, and the pids it prints on its first line."""
    script = tmp_path / "program.py"
    script.write_text(program)
    run = subprocess.Popen(
        [sys.executable, str(script), method, "tied" if tied else "free"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,  # the resource tracker's report of what its killed users leave
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    said = run.stdout.readline()
    assert said, run.stderr.read()
    return run, [int(pid) for pid in said.split()]


UNTIED_WATCHED = 1.0
"""Seconds an untied child is watched for after its parent's kill: ten times what a tied one takes to go (0.02-0.1 s)."""


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_a_child_started_while_an_engine_starts_dies_with_its_parent(method: str, tied: bool, tmp_path: Path) -> None:
    parent, (child,) = started(PARENT, method, tied, tmp_path)
    try:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert gone_within(child, 5) if tied else not gone_within(child, UNTIED_WATCHED)
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


CORE = """
import multiprocessing, sys, time
from rs.engines.lifeline import engine_processes_die_with_this_one
from contextlib import nullcontext


def core(method, said):  # an engine core: it starts its worker after the engine's start, from its main thread
    worker = multiprocessing.get_context(method).Process(target=time.sleep, args=(60,))
    worker.start()
    said.put(worker.pid)
    time.sleep(60)


if __name__ == "__main__":
    method, tied = sys.argv[1], sys.argv[2] == "tied"
    context = multiprocessing.get_context(method)
    said = context.SimpleQueue()
    with engine_processes_die_with_this_one() if tied else nullcontext():
        child = context.Process(target=core, args=(method, said))
        child.start()
    print(child.pid, said.get(), flush=True)
    time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_the_worker_of_a_tied_child_dies_with_that_child(method: str, tied: bool, tmp_path: Path) -> None:
    """vLLM's engine core starts its worker itself, outside the run's engine start: killed, the core takes it along."""
    run, (core, worker) = started(CORE, method, tied, tmp_path)
    try:
        os.kill(core, signal.SIGKILL)
        assert gone_within(worker, 5) if tied else not gone_within(worker, UNTIED_WATCHED)
    finally:
        for pid in (worker, core, run.pid):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        run.wait()
