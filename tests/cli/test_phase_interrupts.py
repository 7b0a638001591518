"""Ctrl-C or SIGTERM in every phase of a run that is not the model's: reading the source, cleaning, writing, publishing.

One family, one work folder and one cache, stopped again and again by real signals to a real `rs.pipeline.publish` process
(SIGTERM to the process, as a scheduler sends it; SIGINT to its process group, as a terminal's Ctrl-C does), each
run taking up where the one before stopped, until the last one publishes to a Hub double (the Hub's HTTP API,
tests/hub_server.py) exactly the bytes an uninterrupted publish gave another Hub double. Each phase is made to last
by the project's plug-ins (tests/plugins/rs_faults.py: a source whose first record comes slowly, a cleaning step that
takes its time over its first question, each creating a marker file when it starts) or by what a run really waits on
(another process holding the `datasets` builder's lock on a split; a Hub slow to take the uploads, as the Hub's own
.gitattributes stores the images with LFS, so several go at once from huggingface_hub's thread pool: a first signal
there waited for every upload in flight). Each stop is checked: the exit code, within seconds, no process of the run
left, the line saying where it stopped and what it keeps, the command that resumes it, nothing half-written, and in
the run's log the place it was stopped (the phase really hit). Engine start, sampling, the judge and recovery are
tests/cli/test_interrupts.py's (the real vLLM engine, both process modes) and tests/cli/test_run_faults.py's (replay).
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest
from checkout import ROOT
from faults import FAMILY, engine_kinds_installed, group_left, plugin_env, publish_command, write_families
from hub_clients import TOKEN, point_clients_at
from hub_server import HubServer, running_hub

from rs.families import load_families
from rs.pipeline.publish.stage import publish
from rs.util import invocation

pytestmark = pytest.mark.slow

RESUME = "to resume, run the same command again: "
ENGINE = "{kind: replay, replay_path: replay.jsonl, batch_size: 4}"
STEER = (
    (
        FAMILY.replace("files, path", "slow_files, delay: 0.02, first_delay: 1.5, marker: READING, path").replace(
            "publish: {namespace: tester, target: local}", "publish: {namespace: tester, target: hub}"
        )
    )
    + """\
    cleaning: {slow_check: {enabled: true, delay: 0.05, first_delay: 1.5, marker: CLEANING}}
    recovery: {samples: 2}
"""
)
LFS = ("*.parquet", "*.png")  # as the Hub's own .gitattributes: the shards and the example images
REPOS = [f"tester/Steer_{split}" for split in ("RS_think", "RS_nothink", "rejected")]


class Stopped:
    """A run stopped by a signal: its exit code, the seconds it took to exit, its stderr lines, what is left of it, its log."""

    def __init__(self, code: int, took: float, lines: list[str], left: list[int], log: str):
        self.code, self.took, self.lines, self.left, self.log = code, took, lines, left, log


def stop(
    command: list[str], env: dict[str, str], signum: int, ready: Callable[[list[str]], bool], build: Path
) -> Stopped:
    """Start `command`, send `signum` once `ready(stderr lines so far)`: SIGINT to its process group, as a terminal's
    Ctrl-C does, SIGTERM to the process, as a scheduler does."""
    run = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(run.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while not ready(lines):
            assert run.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
            time.sleep(0.02)
        if signum == signal.SIGINT:
            os.killpg(run.pid, signum)
        else:
            os.kill(run.pid, signum)
        sent = time.monotonic()
        try:
            run.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(run.pid, signal.SIGABRT)  # its threads' stacks, to stderr (PYTHONFAULTHANDLER)
            run.wait(timeout=30)
            reader.join(timeout=10)
            raise AssertionError("still running 60 s after the signal:\n" + "".join(lines)[-20000:]) from None
        took = time.monotonic() - sent
        reader.join(timeout=10)
        left = group_left(run.pid)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    log = next(build.glob(f"logs/*-{run.pid}.log")).read_text()
    return Stopped(run.returncode, took, [line.rstrip("\n") for line in lines], left, log)


def said(pattern: str) -> Callable[[list[str]], bool]:
    return lambda lines: any(re.search(pattern, line) for line in lines)


@contextmanager
def held(lock: Path) -> Iterator[None]:
    """Hold `lock` as another process preparing the same split would: `datasets`' file lock (an flock)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class HeldUploads:
    """The Hub double takes no upload until released: a run waits for a slow Hub in the middle of publishing."""

    def __init__(self, hub: HubServer):
        self.reached, self.release = threading.Event(), threading.Event()
        hub.before_request = self

    def __call__(self, endpoint: str) -> None:
        if endpoint == "lfs_upload":
            self.reached.set()
            self.release.wait(120)

    def ready(self, lines: list[str]) -> bool:
        return self.reached.is_set()


def hub_env(env: dict[str, str], hub: HubServer, home: Path) -> dict[str, str]:
    env = {k: v for k, v in env.items() if not k.startswith(("HF_", "HUGGING"))}
    return {
        **env,
        "HF_ENDPOINT": hub.url,
        "HF_TOKEN": TOKEN,
        "HF_HOME": str(home),
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "PYTHONFAULTHANDLER": "1",
    }


def test_a_signal_in_every_phase_stops_the_run_within_seconds_and_the_command_it_prints_resumes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reading, cleaning = tmp_path / "reading.started", tmp_path / "cleaning.started"
    families = write_families(
        tmp_path,
        images=4,
        engine=ENGINE,
        names=("Steer",),
        samples=2,
        family=STEER.replace("READING", str(reading)).replace("CLEANING", str(cleaning)),
    )
    with running_hub(lfs_patterns=LFS) as reference_hub:  # an uninterrupted publish, in this process
        with monkeypatch.context() as patch:
            point_clients_at(patch, reference_hub.url, tmp_path / "hf_reference")
            with engine_kinds_installed():
                family = load_families(families)["Steer"]
                publish(
                    family,
                    build_root=tmp_path / "ref" / "build",
                    cache_path=tmp_path / "ref" / "cache.sqlite",
                    progress=False,
                )
        expected = {repo: reference_hub.files(repo) for repo in REPOS}

    with running_hub(lfs_patterns=LFS) as hub:
        env = hub_env(plugin_env(tmp_path / "site"), hub, tmp_path / "hf_home")
        work, build = tmp_path / "run", tmp_path / "run" / "build" / "Steer"
        command = [arg for arg in publish_command(families, work, "Steer") if arg not in ("--out", str(work / "out"))]
        clean, answers = "Steer's clean store (4 rows,", "Steer's answers, verified and judged (8 in"
        recovered, splits = "Steer's recovery pass (", "Steer's splits, ready to publish (Steer_RS_think "
        commits = HeldUploads(hub)  # only the publishing phase uploads
        lock = build / "splits" / "think.tmp.incomplete_info.lock"  # datasets' lock on the think split's info
        phases = {  # phase: (what says it is on, what the run says it was doing, where its log says it stopped, what it keeps)
            "source": (lambda lines: reading.exists(), "cleaning", r'rs_faults\.py", line \d+, in __iter__', []),
            "cleaning": (lambda lines: cleaning.exists(), "cleaning", r'rs_faults\.py", line \d+, in check', []),
            "writing": (
                said(r"^writing Steer_RS_think: \d+ rows \("),
                "the write stage",  # waiting for a lock: no bar open, the stage named
                r'rs/pipeline/write/splits\.py", line \d+, in write_split',
                [clean, answers, recovered],
            ),
            "publishing": (
                commits.ready,
                "uploading tester/Steer_RS_",
                r'rs/hub/publish\.py", line \d+, in publish_folder',
                [clean, answers, recovered, splits],
            ),
        }
        took = []
        for phase, (ready, during, where, kept) in phases.items():
            for signum in (signal.SIGTERM, signal.SIGINT):
                reading.unlink(missing_ok=True)
                cleaning.unlink(missing_ok=True)
                with held(lock) if phase == "writing" else _nothing():
                    stopped = stop(command, env, signum, ready, build)
                if phase == "publishing":
                    commits.release.set()  # the Hub double answers the held commit (to a run that is gone)
                name = signal.Signals(signum).name
                took.append((phase, name, round(stopped.took, 1)))
                context = f"{phase} ({name}):\n" + "\n".join(stopped.lines[-30:])
                assert stopped.code == 128 + signum, context
                assert stopped.took < 10, context
                assert stopped.left == [], context
                assert re.search(where, stopped.log), context + stopped.log[-3000:]
                carried = " ".join(f"{k}={shlex.quote(env[k])}" for k in invocation.ENV if k in env)
                assert stopped.lines[-1] == RESUME + carried + " " + shlex.join(command), context
                assert "Traceback" not in "\n".join(stopped.lines), context
                at = next(i for i, line in enumerate(stopped.lines) if line.startswith("stopped by "))
                assert stopped.lines[at].startswith(f"stopped by {name}" + (f" during {during}" if during else ";")), (
                    context
                )
                if kept:
                    assert stopped.lines[at].endswith("; kept (the same command goes on from there):"), context
                    shown = [line.strip() for line in stopped.lines[at + 1 : -1]]
                    assert [line.startswith(what) for line, what in zip(shown, kept)] == [True] * len(kept), context
                else:
                    assert stopped.lines[at].endswith(
                        "; nothing was finished yet (the same command starts again from the beginning)"
                    ), context
                assert not [p.name for p in build.glob("*.tmp")], context  # nothing half-written left
                if phase == "publishing":
                    commits.reached.clear()
                    commits.release.clear()
        print("seconds to stop:", took)

        hub.before_request = None
        last = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert last.returncode == 0, last.stderr[-3000:]
        assert {repo: hub.files(repo) for repo in REPOS} == expected
        assert [c.title for c in hub.commits("tester/Steer_RS_think")][1:] == [
            "rs: publish Steer_RS_think"
        ]  # committed once


@contextmanager
def _nothing() -> Iterator[None]:
    yield
