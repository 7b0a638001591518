"""One writer per family build, and who holds a lock when one is refused.

Two runs of one family in one build directory would write the same stages (the same `.tmp`
folders, the same reports): `build_lock` makes the second refuse at once, naming the first. The
lock is an flock on `build/<FAMILY>/.lock`; the kernel releases it when its process ends, however
it ends (SIGKILL included), so no lock is ever left stale. Sampling shards (`rs sample --shard`)
hold it shared: they write disjoint folders, and only a whole run of the family excludes them.
Families lock separate files, so different families build side by side.

`publish_lock` is the same lock on a local publish target (`--out`): two builds publishing one
family into one folder (from two build directories, so their build locks do not meet) would mix
their files; the second is refused naming the first.

`clean_lock` is waited for rather than refused: shards that each find the clean store missing
clean it once, one after the other finding it done.

`holders` reads /proc/locks (Linux), so a refusal can name the processes holding a file locked:
the build lock, or the generation cache's SQLite locks.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from rs.errors import RsError

LOCK_NAME = ".lock"
CLEAN_LOCK_NAME = ".clean.lock"


class BuildBusy(RsError):
    """Another process is writing this family's build."""


class PublishBusy(RsError):
    """Another process is publishing this family into the same local folder."""


@dataclass
class _Held:
    fd: int
    shared: bool
    depth: int = 1


_held: dict[tuple[Path, int], _Held] = {}
"""Locks this process holds, by (lock file, thread): a stage inside a command re-enters its command's lock."""


@contextmanager
def build_lock(root: Path, *, shared: bool = False) -> Iterator[None]:
    """Hold the build lock of the family built in `root` (exclusive, or `shared` for a shard) or raise `BuildBusy`."""
    root.mkdir(parents=True, exist_ok=True)
    with _flock(root / LOCK_NAME, shared=shared, busy=lambda path: _busy(root, path)):
        yield


@contextmanager
def publish_lock(root: Path, family: str, control: str) -> Iterator[None]:
    """Hold the lock on `family`'s repos in the local folder `root` (`root/<control>/<family>.lock`) or raise `PublishBusy`."""
    folder = root / control
    folder.mkdir(parents=True, exist_ok=True)
    with _flock(folder / f"{family}.lock", shared=False, busy=lambda path: _publish_busy(root, family, path)):
        yield


@contextmanager
def clean_lock(root: Path) -> Iterator[None]:
    """Wait for, then hold, the lock on cleaning the family built in `root` (`root/.clean.lock`).

    Sampling shards hold the build lock shared and may all find the clean store missing: one cleans
    while the others wait here, then find its report and reuse the store.
    """
    root.mkdir(parents=True, exist_ok=True)
    with _flock(root / CLEAN_LOCK_NAME, shared=False, busy=None):
        yield


@contextmanager
def _flock(lock_file: Path, *, shared: bool, busy: Callable[[Path], RsError] | None) -> Iterator[None]:
    """Hold an flock on `lock_file`, re-entered by the thread that holds it; refused with `busy(path)`, or waited for
    when `busy` is None."""
    path = lock_file.resolve()
    key = (path, threading.get_ident())
    if (held := _held.get(key)) is not None:
        if held.shared and not shared:
            raise RuntimeError(f"{path}: a shared lock cannot become exclusive")
        held.depth += 1
        try:
            yield
        finally:
            held.depth -= 1
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (fcntl.LOCK_NB if busy else 0))
    except BaseException as err:  # refused (non-blocking), or the wait interrupted
        os.close(fd)
        if busy is not None and isinstance(err, BlockingIOError):
            raise busy(path) from None
        raise
    if not shared:
        _say_who(fd)
    _held[key] = _Held(fd, shared)
    try:
        yield
    finally:
        del _held[key]
        os.close(fd)  # releases the lock


def _say_who(fd: int) -> None:
    """Write this process into the lock file, for a refused run on a system without /proc/locks (best effort)."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{describe(os.getpid())}\n{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0)
    except OSError:
        pass  # a full disk must not stop the run here: the stage that writes will say so


def _holder(path: Path) -> tuple[str, str]:
    """Who holds the lock file `path`, and the command that stops them."""
    pids = holders([path])
    if pids:
        return "; ".join(f"process {pid} ({describe(pid)})" for pid in pids), f"kill {' '.join(map(str, pids))}"
    # no /proc/locks: what the holder wrote, if it is exclusive
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    who = f"process {lines[0]} ({lines[1]}, since {lines[2]})" if len(lines) >= 3 else "another process"
    return who, (f"kill {lines[0]}" if lines else "stop it")


def _publish_busy(root: Path, family: str, path: Path) -> PublishBusy:
    who, stop = _holder(path)
    return PublishBusy(
        f"{family}'s repos in {root} are being published by {who}: two publishes into one folder would mix their files",
        hint=f"wait for it to finish, or stop it ({stop}), then run this command again (it finishes or undoes what a "
        "stopped publish left); or publish to another --out",
    )


def _busy(root: Path, path: Path) -> BuildBusy:
    who, stop = _holder(path)
    return BuildBusy(
        f"{root} is being built by {who}: two runs of one family would write the same stages",
        hint=f"wait for it to finish, or stop it ({stop}), then run this command again; other families, "
        "or another --build-dir, can be built meanwhile",
    )


def holders(paths: Iterable[Path], *, writers_only: bool = False) -> list[int]:
    """Processes other than this one holding a lock on any of `paths` (from /proc/locks; [] where there is none)."""
    wanted = set()
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        wanted.add(f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}")
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    found: list[int] = []
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] == "->":  # a process waiting for the lock, not holding it
            continue
        mode, pid, ident = parts[3], parts[4], parts[5]
        if ident in wanted and (mode == "WRITE" or not writers_only) and pid.isdigit() and int(pid) != os.getpid():
            if int(pid) not in found:
                found.append(int(pid))
    return found


def describe(pid: int) -> str:
    """A process's command line, shortened; its number when it cannot be read."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return f"pid {pid}"
    text = " ".join(word.decode(errors="replace") for word in words)
    return text if len(text) <= 160 else text[:157] + "..."
