"""How many answers were committed to a generation cache, kept in a file beside it: a lost write-ahead log is noticed.

SQLite in WAL mode commits an answer into `<cache>-wal`; only a checkpoint moves it into the database
file. A log deleted (or a cache copied without it) takes every answer since the last checkpoint with it,
and SQLite cannot tell. `GenerationCache` checkpoints every `CHECKPOINT_ANSWERS` answers (which bounds the
loss), and counts what it commits here, `<cache>.committed`, so that opening a cache that holds fewer
answers than were committed to it says how many were lost (they are asked again). The count is updated
under a file lock while the commit happens, so that several processes sharing one cache agree on it.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

SUFFIX = ".committed"


class CommittedCount:
    """The count file of the cache at `cache`; use `held()` around reading the database and writing the count."""

    def __init__(self, cache: Path):
        self.path = cache.with_name(cache.name + SUFFIX)
        self._fh: IO[str] | None = None

    @contextmanager
    def held(self) -> Iterator[CommittedCount]:
        """The count file locked (other processes' commits wait) for the duration."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        with os.fdopen(fd, "r+", encoding="ascii") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            self._fh = fh
            try:
                yield self
            finally:
                self._fh = None
                fcntl.flock(fh, fcntl.LOCK_UN)

    def read(self) -> int | None:
        """The committed count; None when unknown (a new file, or one a crash tore)."""
        assert self._fh is not None, "read the count under held()"
        self._fh.seek(0)
        text = self._fh.read().strip()
        return int(text) if text.isdigit() else None

    def write(self, count: int) -> None:
        assert self._fh is not None, "write the count under held()"
        self._fh.seek(0)
        self._fh.write(f"{max(0, count)}\n")
        self._fh.truncate()
        self._fh.flush()
