"""A Ctrl-C or SIGTERM while the real vLLM engine starts or samples, in both of vLLM's process modes.

vLLM's engine start with its core in another process (VLLM_ENABLE_V1_MULTIPROCESSING=1, vLLM's
default and the README's GPU commands) swallowed a KeyboardInterrupt and waited up to 600 s for a
handshake that never came (`rs.engines.lifeline.interrupts_reach_the_caller`). One work folder and
cache are interrupted in turn: at the engine start with the core in its own process (SIGINT, hit
when that process exists), at the engine start in-process (SIGTERM, hit when the `Loading` line is
printed), and while sampling with the core in its own process (SIGTERM, hit when the first answer
is committed). Each stops within seconds with the shell's exit code, says how to resume, and leaves
no engine process; the command it prints then publishes the bytes of an uninterrupted run.
tests/test_run_faults.py does the same for the other phases with the replay engine.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

pytest.importorskip("vllm")

from faults import ROOT, assert_same_published, cache_rows  # noqa: E402
from test_engine_death import ENV, command, engine_core  # noqa: E402
from test_sample import family_file  # noqa: E402

RESUME = "to resume, run the same command again: "


def engine_processes(group: int) -> list[int]:
    """Live processes of the run's process group (the run started a session of its own): its engine's, once it has exited."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError):
            continue
        if fields[0] != "Z" and int(fields[2]) == group:
            found.append(int(entry.name))
    return found


def interrupt(cmd: list[str], env: dict[str, str], signum: int, ready: Callable[[subprocess.Popen[str], list[str]], bool]
              ) -> tuple[int, float, str, list[int]]:
    """Start `cmd`, send `signum` once `ready(run, stderr lines so far)`; its exit code, seconds to exit, stderr, engine processes left."""
    run = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines: list[str] = []
    os.set_blocking(run.stderr.fileno(), False)
    try:
        deadline = time.monotonic() + 400
        while not ready(run, lines):
            assert run.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
            lines += run.stderr.readlines()
            time.sleep(0.05)
        os.kill(run.pid, signum)
        sent = time.monotonic()
        os.set_blocking(run.stderr.fileno(), True)
        _, rest = run.communicate(timeout=120)
        took = time.monotonic() - sent
        time.sleep(1)  # vLLM's processes get a moment to go after their parent
        left = engine_processes(run.pid)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    return run.returncode, took, "".join(lines) + rest, left


def loading(run: subprocess.Popen[str], lines: list[str]) -> bool:
    return any("Loading rs:tiny-vlm with vLLM" in line for line in lines)


def core_started(run: subprocess.Popen[str], lines: list[str]) -> bool:
    return engine_core(run.pid) is not None


def test_a_signal_while_the_engine_starts_or_samples_stops_within_seconds_in_both_process_modes(tmp_path: Path) -> None:
    families = family_file(tmp_path, num_images=4, batch=4, max_tokens=16)
    work, cache = tmp_path / "run", tmp_path / "run" / "cache.sqlite"
    cases = [("engine start, own process", "1", signal.SIGINT, core_started),
             ("engine start, in-process", "0", signal.SIGTERM, loading),
             ("sampling, own process", "1", signal.SIGTERM, lambda run, lines: cache_rows(cache) >= 1)]
    for phase, mode, signum, ready in cases:
        code, took, err, left = interrupt(command(families, work), {**ENV, "VLLM_ENABLE_V1_MULTIPROCESSING": mode}, signum, ready)
        assert code == 128 + signum, (phase, err[-3000:])
        assert took < 30, (phase, took)
        assert left == [], (phase, left)
        assert f"stopped by {signal.Signals(signum).name}" in err and err.strip().splitlines()[-1].startswith(RESUME), (phase, err[-3000:])
    resume = shlex.split(err.strip().splitlines()[-1].removeprefix(RESUME))
    assert resume[1:] == command(families, work)[1:]
    rerun = subprocess.run([sys.executable, *resume[1:]], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    reference = subprocess.run(command(families, tmp_path / "ref"), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert_same_published(tmp_path / "ref" / "out", work / "out")
