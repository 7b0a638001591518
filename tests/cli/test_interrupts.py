"""A Ctrl-C or SIGTERM while the real vLLM engine starts, samples, judges or recovers, in both of vLLM's process modes.

vLLM's engine start with its core in another process (VLLM_ENABLE_V1_MULTIPROCESSING=1, vLLM's
default and the README's GPU commands) swallowed a KeyboardInterrupt and waited up to 600 s for a
handshake that never came (`rs.engines.lifeline.interrupts_reach_the_caller`). One work folder and
cache of a family of the demo model (rs:demo-vlm, which gets answers right, so that the judge's
calibration has positives and near misses to judge and recovery has samples to draw) are
interrupted in turn: at the engine start with the core in its own process (SIGINT, hit when that
process exists), at the engine start in-process (SIGTERM, hit when the `Loading` line is printed),
while sampling with the core in its own process (SIGTERM, hit when the first answer is committed),
then in the judge's calibration and in the recovery pass in each process mode, each with the
engine loaded (hit when the run says the phase started and the engine is loaded), by SIGTERM to
the process (a scheduler) or SIGINT to its process group (a terminal's Ctrl-C, which reaches vLLM's
engine core too). Each stops within seconds with the shell's exit code, says where it stopped and how to
resume, leaves no engine process, and its log says it was stopped in that phase; the command it
prints then publishes the bytes of an uninterrupted run. tests/cli/test_run_faults.py and
tests/cli/test_phase_interrupts.py do the same for the other phases with the replay engine.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("vllm")

from checkout import PLUGINS, ROOT  # noqa: E402
from family_yaml import DEMO, family_yaml  # noqa: E402
from faults import VLLM_ENV, assert_same_published, cache_rows, engine_core, group_left  # noqa: E402

RESUME = "to resume, run the same command again: "
ENV = {**VLLM_ENV, "PYTHONPATH": os.pathsep.join([str(PLUGINS), os.environ.get("PYTHONPATH", "")])}
"""vLLM's environment, with tests/plugins on the path, where vLLM finds the engine's logits processor (`slow_steps`)."""
FAMILY = family_yaml(
    "Demo",
    DEMO,
    # a batch of 4 at a time, each engine step 50 ms longer (tests/plugins/slow_steps.py): each phase commits answers in
    # several steps over seconds, and a signal sent once it started lands mid-phase however busy the machine
    engine={
        "args": {"dtype": "float32", "logits_processors": ["slow_steps:SlowSteps"]},
        "batch_size": 4,
        "in_flight": 4,
    },
    judge={"calibration_samples": 16, "min_calibration_cases": 4},
    recovery={"samples": 2, "temperature": 0.7},
)


def command(families: Path, work: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rs.publish",
        "Demo",
        "--config",
        str(families),
        "--out",
        str(work / "out"),
        "--build-dir",
        str(work / "build"),
        "--cache",
        str(work / "cache.sqlite"),
    ]


def interrupt(
    cmd: list[str],
    env: dict[str, str],
    signum: int,
    ready: Callable[[subprocess.Popen[str], list[str]], bool],
    group: bool = False,
) -> tuple[int, float, str, list[int], int]:
    """Start `cmd`, send `signum` once `ready(run, stderr lines so far)`, to its process group with `group`; its exit code,
    seconds to exit, stderr, engine processes left, and its pid."""
    run = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    lines: list[str] = []
    os.set_blocking(run.stderr.fileno(), False)
    try:
        deadline = time.monotonic() + 400
        while not ready(run, lines):
            assert run.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
            lines += run.stderr.readlines()
            time.sleep(0.05)
        if group:
            os.killpg(run.pid, signum)
        else:
            os.kill(run.pid, signum)
        sent = time.monotonic()
        os.set_blocking(run.stderr.fileno(), True)
        _, rest = run.communicate(timeout=120)
        took = time.monotonic() - sent
        gone = (
            time.monotonic() + 10
        )  # vLLM's processes and Python's resource tracker go within moments of their parent
        while (left := group_left(run.pid)) and time.monotonic() < gone:
            time.sleep(0.2)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    return run.returncode, took, "".join(lines) + rest, left, run.pid


def loading(run: subprocess.Popen[str], lines: list[str]) -> bool:
    return any("Loading rs:demo-vlm with vLLM" in line for line in lines)


def loaded_and(phase: str) -> Callable[[subprocess.Popen[str], list[str]], bool]:
    """Ready once the run says `phase` started and the engine is loaded (in either order): the engine works on that phase."""
    return lambda run, lines: (
        any(line.startswith(f"{phase}: started") for line in lines)
        and any(line.startswith("Loaded rs:demo-vlm in ") for line in lines)
    )


def core_started(run: subprocess.Popen[str], lines: list[str]) -> bool:
    return engine_core(run.pid) is not None


def test_a_signal_while_the_engine_starts_samples_judges_or_recovers_stops_within_seconds_in_both_process_modes(
    tmp_path: Path,
) -> None:
    families = tmp_path / "families.yaml"
    families.write_text(FAMILY)
    work, cache = tmp_path / "run", tmp_path / "run" / "cache.sqlite"
    reference = subprocess.Popen(
        command(families, tmp_path / "ref"),
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,  # meanwhile
        stderr=subprocess.PIPE,
        text=True,
    )
    cases = [  # phase, process mode, signal, to the process group, ready, where the log says it stopped
        ("engine start, own process", "1", signal.SIGINT, False, core_started, None),
        ("engine start, in-process", "0", signal.SIGTERM, False, loading, None),
        ("sampling, own process", "1", signal.SIGTERM, False, lambda run, lines: cache_rows(cache) >= 1, None),
        (
            "judge calibration",
            "0",
            signal.SIGINT,
            True,
            loaded_and("judge calibration"),
            r'rs/pipeline/sample/calibration\.py", line \d+, in calibrate',
        ),
        (
            "judge calibration",
            "1",
            signal.SIGTERM,
            False,
            loaded_and("judge calibration"),
            r'rs/pipeline/sample/calibration\.py", line \d+, in calibrate',
        ),
        (
            "recovering",
            "0",
            signal.SIGTERM,
            False,
            loaded_and("recovering"),
            r'rs/pipeline/recover\.py", line \d+, in run',
        ),
        (
            "recovering",
            "1",
            signal.SIGINT,
            True,
            loaded_and("recovering"),
            r'rs/pipeline/recover\.py", line \d+, in run',
        ),
    ]
    try:
        took = []
        for phase, mode, signum, group, ready, where in cases:
            code, seconds, err, left, pid = interrupt(
                command(families, work), {**ENV, "VLLM_ENABLE_V1_MULTIPROCESSING": mode}, signum, ready, group
            )
            context = (phase, mode, err[-3000:])
            took.append((phase, mode, signal.Signals(signum).name, round(seconds, 1)))
            assert code == 128 + signum, context
            assert seconds < 30, context
            assert left == [], context
            assert f"stopped by {signal.Signals(signum).name}" in err and err.strip().splitlines()[-1].startswith(
                RESUME
            ), context
            if where is not None:
                assert f"stopped by {signal.Signals(signum).name} during {phase}" in err, context
                log = next((work / "build" / "Demo" / "logs").glob(f"*-{pid}.log")).read_text()
                assert re.search(where, log), (phase, mode, log[-3000:])
        print("seconds to stop:", took)
        resume = shlex.split(err.strip().splitlines()[-1].removeprefix(RESUME))
        while "=" in resume[0] and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", resume[0]):  # the environment it ran in
            resume.pop(0)
        assert resume[1:] == command(families, work)[1:]
        rerun = subprocess.run(
            [sys.executable, *resume[1:]], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600
        )
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        _, said = reference.communicate(timeout=600)
    finally:
        if reference.poll() is None:
            reference.kill()
            reference.wait()
    assert reference.returncode == 0, said[-3000:]
    assert_same_published(tmp_path / "ref" / "out", work / "out")
