"""One engine per model per run: the greedy pass, the judge and the recovery pass share the engine the run loads.

The demo family (TinyCLEVR, `recovery:` on) on a few images through the real vLLM engine, in both of vLLM's
process modes: the run's log says `Loading ... with vLLM` once, and in the multiprocessing mode (a GPU's default)
one engine core process lives during the run, never two. A replay run (no vLLM) checks the same sharing of the
run's engine objects, and that the run closes what it made.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from checkout import ROOT
from faults import descendants, write_families

import rs.context
from rs.families import load_families
from rs.pipeline.publish.stage import publish

LIMIT = 4


def _is_engine_core(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().startswith("VLLM::EngineCor")
    except OSError:
        return False


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def engine_cores(pids: list[int]) -> set[int]:
    """The engine core processes among `pids`; a child an engine core forks (a compiler or `lscpu` call, named after its
    parent until it execs) is the same engine's, not another."""
    return {pid for pid in pids if _is_engine_core(pid) and not _is_engine_core(_parent(pid))}


def sampled(tmp_path: Path, multiprocessing: str) -> tuple[int, str, set[int], int]:
    """`rs.sample TinyCLEVR --limit LIMIT` in `tmp_path` in a process mode of vLLM: its exit status, its output, the engine
    core processes seen below it, and the most seen at once."""
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": multiprocessing, "HF_HUB_OFFLINE": "1"}
    command = [
        sys.executable,
        "-m",
        "rs.sample",
        "TinyCLEVR",
        "--limit",
        str(LIMIT),
        "--build-dir",
        str(tmp_path / "build"),
        "--cache",
        str(tmp_path / "cache.sqlite"),
    ]
    run = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen: set[int] = set()
    most = 0
    deadline = time.monotonic() + 420
    while run.poll() is None and time.monotonic() < deadline:
        alive = engine_cores(descendants(run.pid))
        seen |= alive
        most = max(most, len(alive))
        time.sleep(0.1)
    if run.poll() is None:
        run.kill()
    return run.returncode, run.communicate()[0].decode(), seen, most


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, tuple[int, str, set[int], int]]]:
    """Both process modes' runs, side by side (each in a folder of its own, each watching only its own processes)."""
    pytest.importorskip("vllm")
    folders = {mode: tmp_path_factory.mktemp(f"mode{mode}") for mode in ("0", "1")}
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = {mode: pool.submit(sampled, folder, mode) for mode, folder in folders.items()}
        return {mode: (folders[mode], future.result()) for mode, future in done.items()}


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.parametrize("multiprocessing", ["0", "1"])
def test_a_run_loads_the_model_once_in_both_process_modes(runs, multiprocessing: str) -> None:
    tmp_path, (returncode, output, seen, most) = runs[multiprocessing]
    assert returncode == 0, output[-3000:]
    logs = "".join(path.read_text() for path in (tmp_path / "build" / "TinyCLEVR").glob("logs/*"))
    assert len(re.findall(r"Loading \S+ with vLLM", logs)) == 1, logs[-3000:]
    assert (tmp_path / "build" / "TinyCLEVR" / f"limit-{LIMIT}" / "recovery.json").exists()  # the recovery pass ran
    if multiprocessing == "1":
        assert len(seen) == most == 1, f"engine core processes: {sorted(seen)}, at most {most} at once"
    else:
        assert not seen


class Counted:
    """What a run asks of `rs.engines.factory.engines_for` during a run: the engines it makes and which it closes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.made: list[object] = []
        self.closed: list[object] = []
        real = rs.context.engines_for

        def counted(family):
            sampler, judge = real(family)
            for engine in {id(e): e for e in (sampler, judge)}.values():
                close = engine.close

                def closing(engine=engine, close=close) -> None:
                    self.closed.append(engine)
                    close()

                engine.close = closing
                self.made.append(engine)
            return sampler, judge

        monkeypatch.setattr(rs.context, "engines_for", counted)


def test_the_greedy_pass_judge_and_recovery_share_one_engine_closed_after_the_run(tmp_path: Path, monkeypatch) -> None:
    families = write_families(tmp_path, images=4, names=("Alpha",))
    text = families.read_text()
    families.write_text(text.replace("    publish:", "    recovery: {samples: 2, temperature: 0.7}\n    publish:"))
    counted = Counted(monkeypatch)
    publish(
        load_families(families)["Alpha"],
        out=tmp_path / "out",
        build_root=tmp_path / "build",
        cache_path=tmp_path / "c.sqlite",
        progress=False,
    )
    assert (tmp_path / "build" / "Alpha" / "recovery.json").exists()
    assert len(counted.made) == 1 and counted.closed == counted.made
