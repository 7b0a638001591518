"""A run as a process meets: preemption by SIGTERM (Slurm, Kubernetes, spot instances) or Ctrl-C, a second signal, a second run.

Every run is `python -m rs.publish` in a subprocess of its own, its engine (`slow_replay`) taking
0.1 s a question so that the run is still sampling when the test acts on it: real signals to the
real process, the generation cache held locked by this test's process, a second real run of the
same family. Each test then runs the same command again and compares what it publishes, byte for
byte, with an uninterrupted run.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import sqlite3
import subprocess
import time
from contextlib import closing
from pathlib import Path

import pytest
from checkout import ROOT
from faults import (
    assert_same_published,
    cache_keys,
    engine_kinds_installed,
    plugin_env,
    publish_command,
    write_families,
)

from rs.families import load_families
from rs.pipeline.publish.stage import publish
from rs.util import invocation

pytestmark = pytest.mark.slow

ENGINE = "{kind: slow_replay, replay_path: replay.jsonl, batch_size: 4, delay: 0.1}"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], dict[str, Path]]:
    """The families file, the subprocesses' environment, and Alpha and Beta published without a fault (side by side)."""
    folder = tmp_path_factory.mktemp("families")
    families, env = write_families(folder, engine=ENGINE), plugin_env(folder / "site")
    with engine_kinds_installed():
        for name, family in load_families(families).items():
            work = folder / name
            publish(
                family, out=work / "out", build_root=work / "build", cache_path=work / "cache.sqlite", progress=False
            )
    return families, env, {name: folder / name / "out" / "tester" for name in ("Alpha", "Beta")}


def start(command: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def committed(cache: Path) -> set[str]:
    try:
        return cache_keys(cache)
    except sqlite3.Error:  # not created yet
        return set()


def sampling(run: subprocess.Popen[str], cache: Path, rows: int = 4) -> set[str]:
    """Wait until `run` has committed `rows` answers; the keys committed so far."""
    deadline = time.monotonic() + 120
    while len(keys := committed(cache)) < rows:
        assert run.poll() is None, f"the run ended before it was sampling: {run.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, "no answer committed in 120 s"
        time.sleep(0.05)
    return keys


def resumed(stderr: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the command the last line of a stopped run says resumes it."""
    last = stderr.strip().splitlines()[-1]
    prefix = "to resume, run the same command again: "
    assert last.startswith(prefix), stderr[-3000:]
    # as a person pastes it, in a shell without the variables the run had for itself alone: the line carries them
    alone = {k: v for k, v in env.items() if k not in invocation.ENV}
    return subprocess.run(
        ["bash", "-c", last[len(prefix) :]], cwd=ROOT, env=alone, capture_output=True, text=True, timeout=300
    )


def carried(env: dict[str, str]) -> str:
    """The variables of `env` a resume line carries before the command (`rs.util.invocation.ENV`): HF_HUB_OFFLINE=1 here."""
    return "".join(f"{k}={shlex.quote(env[k])} " for k in invocation.ENV if k in env)


def intact(cache: Path) -> bool:
    with closing(sqlite3.connect(f"file:{cache}?mode=ro", uri=True)) as db:
        return db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_run_in_order_and_the_command_it_prints_resumes_it(
    signum: int, setup, tmp_path: Path
) -> None:
    families, env, published = setup
    command, cache, build = (
        publish_command(families, tmp_path),
        tmp_path / "cache.sqlite",
        tmp_path / "build" / "Alpha",
    )
    run = start(command, env)
    before = sampling(run, cache)
    sent = time.monotonic()
    run.send_signal(signum)
    _, err = run.communicate(timeout=60)
    took = time.monotonic() - sent

    assert run.returncode == 128 + signum, err[-3000:]  # 143 for SIGTERM, 130 for SIGINT
    assert took < 5, took  # promptly: the answers in flight are not waited for
    name = signal.Signals(signum).name
    lines = err.strip().splitlines()
    after = committed(cache)
    assert lines[-4:] == [
        f"stopped by {name} during sampling; kept (the same command goes on from there):",
        f"  Alpha's clean store (8 rows, {build / 'clean'})",
        f"  {len(after)} new answers (the judge's verdicts included) in the generation cache {cache}",
        f"to resume, run the same command again: {carried(env)}{shlex.join(command)}",
    ], err[-3000:]
    assert "Traceback" not in err
    assert before <= after and intact(
        cache
    )  # nothing committed is lost; the commit in progress finished or rolled back
    # the stopped progress line counts what the cache keeps, not the records written in order (0: they go with items.tmp)
    shown = re.search(
        r"^sampling: (\d+)/\d+ items \(.*stopped after [^)]*\) \[committed=(\d+), answers=(\d+), verdicts=(\d+)\]$",
        err,
        re.M,
    )
    assert shown is not None, err[-3000:]
    count, kept, answers, verdicts = map(int, shown.groups())
    assert kept == len(after) == answers + verdicts and count == answers > 0
    assert (build / "clean.json").exists() and not (build / "sample.json").exists()
    assert not (build / "items.tmp").exists() and not (build / "items").exists()  # no half-written items store

    rerun = resumed(err, env)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_same_published(published["Alpha"], tmp_path / "out" / "tester")


def test_a_second_signal_stops_at_once_while_the_first_waits_for_the_cache(setup, tmp_path: Path) -> None:
    """The first SIGTERM's orderly stop waits to commit the last answers (this test's process holds the cache's write lock); a second one ends it now."""
    families, env, published = setup
    command, cache = publish_command(families, tmp_path), tmp_path / "cache.sqlite"
    run = start(command, env)
    sampling(run, cache)
    holder = sqlite3.connect(cache, isolation_level=None, timeout=30)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock: the run's commits wait
    try:
        time.sleep(1.0)  # the run answers its next batch and waits to commit it
        before = committed(cache)
        run.send_signal(signal.SIGTERM)
        time.sleep(1.5)
        assert run.poll() is None, "the first signal should wait to commit the answers it holds"
        sent = time.monotonic()
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=30)
        assert time.monotonic() - sent < 2
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert run.returncode == 143, err[-3000:]
    assert err.strip().splitlines()[-1] == (
        "second SIGTERM: stopping at once; answers not yet committed to the cache are lost "
        "(never a committed one): run the same command again to resume"
    )
    assert committed(cache) == before and intact(cache)

    rerun = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_same_published(published["Alpha"], tmp_path / "out" / "tester")


def test_a_second_run_of_a_family_refuses_naming_the_first_while_another_family_builds(setup, tmp_path: Path) -> None:
    families, env, published = setup
    first = start(publish_command(families, tmp_path / "alpha", "Alpha"), env)
    sampling(first, tmp_path / "alpha" / "cache.sqlite", rows=2)
    alpha = tmp_path / "alpha" / "build" / "Alpha"

    os.kill(first.pid, signal.SIGSTOP)  # held where it is (its lock with it) however long the second takes to start
    try:
        second = subprocess.run(
            publish_command(families, tmp_path / "alpha", "Alpha"),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.kill(first.pid, signal.SIGCONT)
    beta = start(
        publish_command(families, tmp_path / "alpha", "Beta", "--out", str(tmp_path / "beta")), env
    )  # same build folder and cache
    assert second.returncode == 1, second.stderr[-3000:]
    assert f"error: {alpha} is being built by process {first.pid} (" in second.stderr
    assert "rs.publish Alpha" in second.stderr  # the other process's command
    assert f"hint: wait for it to finish, or stop it (kill {first.pid}), then run this command again" in second.stderr
    assert first.poll() is None  # it refused at once, while the first was still writing
    _, err = beta.communicate(timeout=300)
    assert beta.returncode == 0, err[-3000:]
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-3000:]  # the refused run wrote nothing of Alpha's

    again = subprocess.run(
        publish_command(families, tmp_path / "alpha", "Alpha"),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert_same_published(published["Alpha"], tmp_path / "alpha" / "out" / "tester")
    assert_same_published(published["Beta"], tmp_path / "beta" / "tester")
