"""The generation cache's file: created whole, checked when opened, and its failures said plainly.

A cache holds every answer a GPU has produced, so a damaged one is never replaced in silence:
SQLite takes an empty file for a new database, so a cache is created under a temporary name with
its schema and linked into place, and a file at the cache's path that is not a whole SQLite
database is reported as broken, with what to do. A cache that another process keeps locked is
waited for in short steps (so that a signal stops the run at once) up to the cache's timeout, then
reported with the processes that hold it. Every failure of an operation becomes one of
`CacheBroken`, `CacheLocked` or `rs.util.disk.DiskFull`, and the cache remembers it: the commit that a
failing stage still tries on its way out fails at once instead of waiting again.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

from rs.errors import RsError
from rs.util.disk import DiskFull, free_bytes, is_disk_full
from rs.util.locks import describe, holders

HEADER = b"SQLite format 3\x00"
_BUSY, _LOCKED, _IOERR, _CORRUPT, _NOTADB = 5, 6, 10, 11, 26
STEP_S = 0.05
"""How long one attempt waits for a lock inside SQLite (signals wait for it), between Python's retries."""


class CacheBroken(RsError):
    """The cache file is not a whole SQLite database: truncated, overwritten, or damaged inside."""

    def __init__(self, path: Path, detail: str):
        self.path = path
        super().__init__(
            f"the generation cache {path} is damaged: {detail}; rs will not start a new cache in its place, "
            "since it holds every answer generated so far",
            hint=f"move it aside (mv {path} {path}.broken) and run the same command again: a new cache starts there, "
            "and every sampling stage not finished yet (no sample.json for the current settings) generates all its "
            f"answers again, while finished stages are kept; `sqlite3 {path}.broken .recover` may save part of them",
        )


class CacheLocked(RsError):
    """Another process held the cache's write lock for longer than the cache waits."""

    def __init__(self, path: Path, seconds: float):
        self.path = path
        pids = holders(
            [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")], writers_only=True
        )
        by = "".join(f"; held by process {pid} ({describe(pid)})" for pid in pids)
        super().__init__(
            f"the generation cache {path} stayed locked by another process for {seconds:.0f} s{by}",
            hint="runs may share a cache, but none may hold it this long: wait for that process to finish or stop it, "
            "then run the same command again; the answers committed before are kept",
        )


def check_file(path: Path) -> None:
    """Raise `CacheBroken` when the file at `path` is not a whole SQLite database (a cheap look at its header)."""
    wal = path.with_name(path.name + "-wal")
    wal_bytes = wal.stat().st_size if wal.exists() else 0
    size = path.stat().st_size
    with open(path, "rb") as fh:
        header = fh.read(100)
    if not header:
        if wal_bytes:
            return  # written to its write-ahead log only so far: SQLite recovers it
        raise CacheBroken(path, "the file is empty (0 bytes)")
    if not header.startswith(HEADER) and not HEADER.startswith(header):
        raise CacheBroken(path, "it does not start with SQLite's header, so it is not an SQLite database")
    if len(header) < 100:
        raise CacheBroken(path, f"it is truncated to {size} bytes, less than SQLite's header")
    page = int.from_bytes(header[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(header[28:32], "big")
    recorded = header[24:28] == header[92:96]  # the page count is valid only when these two counters agree
    if recorded and not wal_bytes and size < pages * page:
        raise CacheBroken(path, f"it is truncated: {size:,} bytes where its header says {pages * page:,}")


def create_file(path: Path, schema: str) -> None:
    """Create an empty cache at `path` whole: schema written under a temporary name, then linked into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    try:
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(schema)
        finally:
            db.close()  # the last connection checkpoints the log into the file
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process created it first: use theirs
        except OSError:
            if not path.exists():  # a filesystem without hard links
                os.replace(tmp, path)
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{tmp}{suffix}").unlink(missing_ok=True)


def fault(path: Path, error: BaseException, waited: float) -> RsError | None:
    """The cache failure `error` means, or None for an error that is not one of the cache's faults."""
    code = getattr(error, "sqlite_errorcode", 0) & 0xFF
    if is_disk_full(error) or code == _IOERR and (free_bytes(path) or 0) < 2**20:
        return DiskFull(
            "the generation cache", path, "--cache"
        )  # on a full disk SQLite cannot even map its shared memory (an I/O error)
    if not isinstance(error, sqlite3.Error):
        return None
    if code in (_BUSY, _LOCKED):
        return CacheLocked(path, waited)
    if code in (_CORRUPT, _NOTADB):
        return CacheBroken(path, f"SQLite reports {error}")
    return None


T = TypeVar("T")


def guarded(method: Callable[..., T]) -> Callable[..., T]:
    """Run a cache operation: retried while another process holds the lock (up to `busy_timeout`), its failure said plainly.

    For methods of an object with `path`, `busy_timeout` and `failure` (`rs.engines.generation_cache.GenerationCache`).
    """

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> T:
        if self.failure is not None:
            raise self.failure
        start = time.monotonic()
        while True:
            try:
                return method(self, *args, **kwargs)
            except (sqlite3.Error, OSError) as err:
                waited = time.monotonic() - start
                code = getattr(err, "sqlite_errorcode", 0) & 0xFF
                if code in (_BUSY, _LOCKED) and waited < self.busy_timeout:
                    time.sleep(STEP_S)
                    continue
                failure = fault(self.path, err, waited)
                if failure is None:
                    raise
                self.failure = failure
                raise failure from err

    return run
