"""The generation cache: content-addressed, committed per batch, safe for several processes.

A key (`rs.engines.cached.CachedEngine.key`) covers the engine kind, model id and revision, chat template,
exact prompt bytes, image hash and sampling settings, so the same question is answered once and
changing the verifier never re-runs the model. Results are committed per batch in SQLite's WAL
mode: a process killed with SIGKILL loses at most the batch in flight, and several worker
processes on one machine can write to the same file (SQLite serialises writers; readers never
block). SQLite over a network filesystem is not safe: for several machines see `rs.distributed`.
A damaged, locked or full cache stops the run with what to do (`rs.engines.cache_file`); it is never
replaced by a new one in silence.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Iterable, Iterator

from rs.engines.base import Generation
from rs.engines.cache_file import STEP_S, check_file, create_file, guarded
from rs.errors import RsError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS generations (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    created REAL NOT NULL
) WITHOUT ROWID;
"""


_BUSY_TIMEOUT_S = 60.0


def _use_wal(db: sqlite3.Connection, path: Path) -> None:
    """Switch the file to WAL mode, waiting out other processes doing the same.

    SQLite's busy handler does not cover the switch itself: when several workers open a new cache
    at once, all but one get "database is locked" straight away, so the switch is retried here.
    """
    deadline = time.monotonic() + _BUSY_TIMEOUT_S
    while True:
        try:
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            break
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    if mode.lower() != "wal":
        raise RuntimeError(
            f"{path}: SQLite could not use WAL mode here (it kept {mode!r}); put the cache on a local "
            "filesystem (--cache PATH), not a network mount"
        )


class GenerationCache:
    """Maps cache keys to `Generation`s in one SQLite file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.busy_timeout = _BUSY_TIMEOUT_S
        self.failure: RsError | None = None
        """The fault that stopped an operation: every later one raises it at once."""
        self._open()

    @guarded
    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            check_file(self.path)
        else:
            create_file(self.path, _SCHEMA)
        # a short wait inside SQLite, the rest in `guarded`'s retries: a signal is handled while another process holds the lock
        self._db = sqlite3.connect(self.path, timeout=STEP_S, isolation_level=None, check_same_thread=False)
        try:
            _use_wal(self._db, self.path)
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable against process crashes
            self._db.executescript(_SCHEMA)
        except BaseException:
            self._db.close()
            raise

    def get_many(self, keys: Iterable[str]) -> dict[str, Generation]:
        return {key: Generation.from_dict(json.loads(value)) for key, value in self._select("key, value", keys)}

    def present(self, keys: Iterable[str]) -> set[str]:
        """Which of `keys` are cached, without reading their values (a resume looks up millions)."""
        return {key for (key,) in self._select("key", keys)}

    def _select(self, columns: str, keys: Iterable[str]) -> list[tuple]:
        return self._query(columns, list(dict.fromkeys(keys)))

    @guarded
    def _query(self, columns: str, keys: list[str]) -> list[tuple]:
        rows: list[tuple] = []
        for start in range(0, len(keys), 500):  # SQLite's limit on bound parameters
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows += self._db.execute(f"SELECT {columns} FROM generations WHERE key IN ({marks})", chunk)
        return rows

    def get(self, key: str) -> Generation | None:
        return self.get_many([key]).get(key)

    def put_many(self, items: Iterable[tuple[str, Generation]]) -> int:
        """Commit a batch atomically; transient failures are not stored. Returns how many were stored."""
        rows = [(k, json.dumps(g.to_dict(), ensure_ascii=False), time.time()) for k, g in items if g.cacheable]
        return self._insert(rows) if rows else 0

    @guarded
    def _insert(self, rows: list[tuple[str, str, float]]) -> int:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany("INSERT OR IGNORE INTO generations VALUES (?, ?, ?)", rows)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return len(rows)

    @guarded
    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM generations").fetchone()[0]

    def items(self) -> Iterator[tuple[str, Generation]]:
        for key, value in self._db.execute("SELECT key, value FROM generations ORDER BY key"):
            yield key, Generation.from_dict(json.loads(value))

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "GenerationCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
