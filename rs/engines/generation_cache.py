"""The generation cache: content-addressed, committed per batch, safe for several processes.

A key (`rs.engines.cached_engine.CachedEngine.key`) covers the engine kind, model id and revision, chat template,
exact prompt bytes, image hash and the sampling settings except `max_tokens`, so the same question
is answered once and changing the verifier never re-runs the model. `max_tokens` is stored beside
each answer instead, because a budget only cuts an output short: an answer that stopped within a
budget is the same answer under any larger one, and an output is cut at a smaller budget without
asking the model again (`_REUSABLE`). Raising `max_tokens` therefore re-sends only the answers the
old budget cut off. Results are committed per batch in SQLite's WAL mode: a process killed with
SIGKILL loses at most the batch in flight, and several worker processes on one machine can write to
the same file (SQLite serialises writers; readers never block). SQLite over a network filesystem
is not safe: for several machines see `rs.distributed`.
A damaged, locked or full cache stops the run with what to do (`rs.engines.cache_guard`); it is never
replaced by a new one in silence. SQLite notices a damaged file but not changed bytes inside a stored
answer, which would be published as if the model had written them: so every answer is stored with a
checksum (`answer_checksum`) and checked when read, and a mismatch is `CacheAnswerDamaged`, naming
the items; `rs cache forget` removes those answers so that they are asked again.
A committed answer is never lost in silence: the cache checkpoints its log every `CHECKPOINT_ANSWERS` answers and
when closed (a lost `-wal` file takes at most those), and counts what it commits beside the file
(`rs.engines.cache_commit_count`); opening a cache that holds fewer says how many were lost, and they are asked again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Iterator

from rs.engines.base import Generation, SamplingSettings, loop_would_end
from rs.engines.cache_commit_count import CommittedCount
from rs.engines.cache_guard import STEP_S, check_file, create_file, guarded
from rs.errors import RsError
from rs.util import ledger

_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    max_tokens INTEGER,
    finish TEXT NOT NULL,
    tokens INTEGER,
    created REAL NOT NULL,
    loop TEXT,
    budget INTEGER,
    think INTEGER,
    cut INTEGER,
    repeats TEXT,
    checksum TEXT,
    made_on TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS machines (
    id TEXT PRIMARY KEY,
    record TEXT NOT NULL
) WITHOUT ROWID;
"""
"""`answers` (keys without `max_tokens`) replaced `generations` (keys with it); a file of the old
layout keeps its old table, which nothing reads."""

_LIMIT_COLUMNS = {"loop": "TEXT", "budget": "INTEGER", "think": "INTEGER", "cut": "INTEGER", "repeats": "TEXT"}
"""In `answers` (added on opening a cache written before them: NULL there reads as made with neither limit, counts
unknown): the loop detection and thinking budget an answer was made with, its reasoning tokens, whether the budget cut
it, and its repeat profile (`Generation.repeats`): which answers another loop or budget setting would end (`_fits`)."""

_MACHINE_COLUMN = "made_on"
"""In `answers`: the id of the machine and engine that made the answer (`rs.engines.machine.record`), whose record is in
`machines`. Kept beside the answer, not in its stored JSON: the same answer made on two machines is the same bytes and
checksum. Added on opening a cache written before it: NULL there reads as `rs.engines.machine.UNKNOWN`, never as the
machine that reads it."""

_REUSABLE = """ AND (
    (finish IN ('stop', 'repetition') AND (tokens IS NOT NULL OR max_tokens <= ?))
    OR (finish = 'length' AND max_tokens >= ?)
    OR (finish = 'error' AND max_tokens = ?)
)"""
"""The stored answers that answer a request with the budget bound to the three `?`.

Outputs at temperature 0 (or with a fixed seed) do not depend on the budget, which only cuts them
short: an answer that stopped at n tokens (by itself or by loop detection) is the same under any budget of n or more and is cut off
under a smaller one (unknown n: only a budget at least the one it was made with); an output cut off
at a budget is the same under any smaller one; a failure is reused under its own budget only."""


_BUSY_TIMEOUT_S = 60.0

CHECKPOINT_ANSWERS = 64
"""Answers committed between two checkpoints of the write-ahead log into the database file: at most these (and the
batch that crossed the mark) are lost with the log."""

logger = logging.getLogger(__name__)


def answer_checksum(key: str, value: str) -> str:
    """The checksum stored with an answer: SHA-256 of its key and its stored JSON, so a value moved to another key fails too."""
    return hashlib.sha256(f"{key}\0{value}".encode()).hexdigest()


class CacheAnswerDamaged(RsError):
    """Stored answers whose bytes no longer match the checksum written with them (or that no longer parse)."""

    def __init__(self, path: Path, keys: list[str], items: dict[str, str | None] | None = None):
        self.path, self.keys, self.items = path, keys, items or {}
        named = ", ".join(
            f"{self.items[k]} (cache key {k})" if self.items.get(k) else f"cache key {k}" for k in keys[:5]
        )
        more = f" and {len(keys) - 5} more" if len(keys) > 5 else ""
        super().__init__(
            f"the generation cache {path} holds {len(keys)} damaged answer{'s' if len(keys) > 1 else ''}: the stored "
            f"bytes no longer match the checksum written with them: {named}{more}; nothing of them is used or published",
            hint=f"forget {'them' if len(keys) > 1 else 'it'} so that {'they are' if len(keys) > 1 else 'it is'} asked "
            f"again, the cache keeps every other answer: `rs cache forget --cache {path} {' '.join(keys)}`, then run "
            "the same command again",
        )

    def naming(self, items: dict[str, str | None]) -> CacheAnswerDamaged:
        """The same error, naming the QA item each damaged answer belongs to."""
        return CacheAnswerDamaged(self.path, self.keys, {**self.items, **items})


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


def _fits(
    loop: str | None,
    budget: int | None,
    finish: str,
    think: int | None,
    cut: int | None,
    repeats: str | None,
    settings: SamplingSettings,
) -> bool:
    """Whether an answer made with loop detection `loop` and thinking budget `budget` is the one `settings` would get.

    Like `max_tokens`, both only end an output early: an answer neither ended is the same under another setting that
    would not end it either. Loop detection: the answer's repeat profile says whether the new setting fires anywhere
    in it (`loop_would_end`); an answer a loop setting ended is reused under that setting only. Thinking budget: a
    reasoning of t tokens that closed by itself is the same under any budget above t; one the budget cut, under that
    budget only. Where the counts are unknown (an engine that has no tokens), only the same setting reuses it.
    """
    wanted = _loop_text(settings.repetition_detection)
    if (loop or "") != wanted:
        if finish == "repetition":
            return False
        if settings.repetition_detection is not None:
            ends = loop_would_end(json.loads(repeats) if repeats else None, settings.repetition_detection)
            if ends is None or ends:
                return False
    if budget != settings.thinking_token_budget:
        if cut:
            return False
        if settings.thinking_token_budget is not None and (think is None or think >= settings.thinking_token_budget):
            return False
    return True


def _loop_text(setting: tuple[int, int, int] | None) -> str:
    return "" if setting is None else ",".join(map(str, setting))


def _within(generation: Generation, max_tokens: int | None) -> Generation:
    """The answer as a request with the budget `max_tokens` gets it: cut off when it ran longer.

    The text stays the longer output's: its first `max_tokens` tokens are what this budget produces,
    and an output cut off has no final answer either way.
    """
    if max_tokens is None or generation.completion_tokens is None or generation.completion_tokens <= max_tokens:
        return generation
    cut = generation.budget_cut and generation.thinking_tokens is not None and generation.thinking_tokens < max_tokens
    return replace(
        generation,
        reasoning=None,
        answer=None,
        finish_reason="length",
        completion_tokens=max_tokens,
        max_tokens=max_tokens,
        budget_cut=cut,
    )


def _stored(generation: Generation) -> dict[str, Any]:
    """What is stored of an answer: all but its machine, which has a column of its own (`_MACHINE_COLUMN`)."""
    out = generation.to_dict()
    del out["made_on"]
    return out


def _checked(key: str, value: str, checksum: str | None) -> Generation | None:
    """The stored answer, or None when it is damaged: its checksum fails (NULL: stored before checksums) or it does not parse."""
    if checksum is not None and checksum != answer_checksum(key, value):
        return None
    try:
        return Generation.from_dict(json.loads(value))
    except (ValueError, TypeError, KeyError):
        return None


class GenerationCache:
    """Maps cache keys to `Generation`s in one SQLite file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.busy_timeout = _BUSY_TIMEOUT_S
        self.failure: RsError | None = None
        """The fault that stopped an operation: every later one raises it at once."""
        self.counted = CommittedCount(self.path)
        self.lost = 0
        """Committed answers this cache no longer held when opened (its write-ahead log lost); they are asked again."""
        self._uncheckpointed = 0
        self._machines: dict[str, dict[str, Any]] = {}
        """The machine records read or written so far, by id."""
        self._open()
        self.lost = self._reconcile()

    @guarded
    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            check_file(self.path)
        else:
            self.counted.path.unlink(missing_ok=True)  # the count of a cache since deleted
            create_file(self.path, _SCHEMA)
        # a short wait inside SQLite, the rest in `guarded`'s retries: a signal is handled while another process holds the lock
        self._db = sqlite3.connect(self.path, timeout=STEP_S, isolation_level=None, check_same_thread=False)
        try:
            _use_wal(self._db, self.path)
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable against process crashes
            self._db.executescript(_SCHEMA)
            self._add_limit_columns()
            self._add_checksums()
            self._add_column(_MACHINE_COLUMN, "TEXT")
        except BaseException:
            self._db.close()
            raise

    def _add_limit_columns(self) -> None:
        have = {row[1] for row in self._db.execute("PRAGMA table_info(answers)")}
        for name, kind in _LIMIT_COLUMNS.items():
            if name not in have:
                try:
                    self._db.execute(f"ALTER TABLE answers ADD COLUMN {name} {kind}")
                except sqlite3.OperationalError as error:  # another process opening the same old cache added it first
                    if "duplicate column" not in str(error):
                        raise

    def _add_column(self, name: str, kind: str) -> None:
        """Add a column to `answers` of a cache written before it (NULL in its old rows)."""
        if name in {row[1] for row in self._db.execute("PRAGMA table_info(answers)")}:
            return
        try:
            self._db.execute(f"ALTER TABLE answers ADD COLUMN {name} {kind}")
        except sqlite3.OperationalError as error:
            if "duplicate column" not in str(error):  # another process added it first
                raise

    def _add_checksums(self) -> None:
        """A cache made before answers had checksums gets the column; its old answers are read unchecked (they may not parse: damaged)."""
        if "checksum" in {row[1] for row in self._db.execute("PRAGMA table_info(answers)")}:
            return
        try:
            self._db.execute("ALTER TABLE answers ADD COLUMN checksum TEXT")
        except sqlite3.OperationalError as error:
            if "duplicate column" not in str(error):  # another process added it first
                raise

    @guarded
    def _reconcile(self) -> int:
        """Compare what the file holds with the count of what was committed to it; say a loss; the count follows the file."""
        with self.counted.held() as count:
            committed = count.read()
            held = self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
            if committed != held:
                count.write(held)
        lost = committed - held if committed is not None and committed > held else 0
        if lost:
            logger.warning(
                "the generation cache %s holds %d answers, %d fewer than the %d committed to it: its write-ahead log "
                "(%s-wal) was lost (deleted, or the cache copied without it); those answers are asked again",
                self.path,
                held,
                lost,
                committed,
                self.path.name,
            )
        return lost

    def _checkpoint(self, answers: int) -> None:
        """Move the log into the database file every `CHECKPOINT_ANSWERS` answers (PASSIVE: no waiting on readers)."""
        self._uncheckpointed += answers
        if self._uncheckpointed >= CHECKPOINT_ANSWERS:
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self._uncheckpointed = 0

    def get_many(
        self, keys: Iterable[str], *, max_tokens: int | None = None, settings: SamplingSettings | None = None
    ) -> dict[str, Generation]:
        """The stored answers of `keys`; with `max_tokens`, those that answer a request with that budget, as it would.

        An output longer than the budget comes back cut off at it (`finish_reason` "length", no
        final answer), without the model being asked again. With `settings`, its `max_tokens`, and only answers its
        loop detection and thinking budget would leave as they are (`_fits`).
        """
        max_tokens = settings.max_tokens if settings is not None else max_tokens
        found, damaged = {}, []
        for key, value, checksum, made_on in self._select("key, value, checksum, made_on", keys, max_tokens, settings):
            generation = _checked(key, value, checksum)
            if generation is None:
                damaged.append(key)
            else:
                generation.made_on = self.machine(made_on)
                found[key] = _within(generation, max_tokens)
        if damaged:
            raise CacheAnswerDamaged(self.path, damaged)
        return found

    def present(
        self, keys: Iterable[str], *, max_tokens: int | None = None, settings: SamplingSettings | None = None
    ) -> set[str]:
        """Which of `keys` `get_many` would answer, without reading their values (a resume looks up millions)."""
        max_tokens = settings.max_tokens if settings is not None else max_tokens
        return {key for (key,) in self._select("key", keys, max_tokens, settings)}

    def _select(
        self, columns: str, keys: Iterable[str], max_tokens: int | None, settings: SamplingSettings | None = None
    ) -> list[tuple]:
        if settings is None:
            return self._query(columns, list(dict.fromkeys(keys)), max_tokens)
        rows = self._query(
            f"{columns}, loop, budget, finish, think, cut, repeats", list(dict.fromkeys(keys)), max_tokens
        )
        width = len(columns.split(","))
        return [row[:width] for row in rows if _fits(*row[width:], settings)]

    @guarded
    def _query(self, columns: str, keys: list[str], max_tokens: int | None) -> list[tuple]:
        condition, budget = (_REUSABLE, [max_tokens] * 3) if max_tokens is not None else ("", [])
        rows: list[tuple] = []
        for start in range(0, len(keys), 500):  # SQLite's limit on bound parameters
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows += self._db.execute(
                f"SELECT {columns} FROM answers WHERE key IN ({marks}){condition}", [*chunk, *budget]
            )
        return rows

    def get(self, key: str, *, max_tokens: int | None = None) -> Generation | None:
        return self.get_many([key], max_tokens=max_tokens).get(key)

    def put_many(self, items: Iterable[tuple[str, Generation]]) -> int:
        """Commit a batch atomically; transient failures are not stored. Returns how many were stored.

        An answer already stored is replaced only by one made with a larger budget (a truncated
        output asked again under a higher `max_tokens`).
        """
        rows, machines = [], {}
        for k, g in items:
            if g.cacheable:
                value = json.dumps(_stored(g), ensure_ascii=False)
                if g.made_on is not None:
                    machines[g.made_on["id"]] = g.made_on
                rows.append(
                    (
                        k,
                        value,
                        g.max_tokens,
                        g.finish_reason,
                        g.completion_tokens,
                        time.time(),
                        _loop_text(g.repetition_detection),
                        g.thinking_token_budget,
                        g.thinking_tokens,
                        int(g.budget_cut),
                        json.dumps(g.repeats) if g.repeats is not None else None,
                        answer_checksum(k, value),
                        g.made_on["id"] if g.made_on is not None else None,
                    )
                )
        return self._insert(rows, machines) if rows else 0

    @guarded
    def _insert(self, rows: list[tuple], machines: dict[str, dict] | None = None) -> int:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            keys = list(dict.fromkeys(row[0] for row in rows))
            stored = len(self._query("key", keys, None))
            new = [
                (i, json.dumps(r, sort_keys=True)) for i, r in (machines or {}).items() if self._machines.get(i) != r
            ]
            self._db.executemany("INSERT OR IGNORE INTO machines (id, record) VALUES (?, ?)", new)
            self._db.executemany(
                "INSERT INTO answers (key, value, max_tokens, finish, tokens, created, loop, budget, think, cut, repeats, checksum, made_on) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value, "
                "max_tokens = excluded.max_tokens, finish = excluded.finish, tokens = excluded.tokens, created = excluded.created, "
                "loop = excluded.loop, budget = excluded.budget, think = excluded.think, cut = excluded.cut, repeats = excluded.repeats, "
                "checksum = excluded.checksum, made_on = excluded.made_on "
                "WHERE excluded.max_tokens > answers.max_tokens OR excluded.loop IS NOT answers.loop "
                "OR excluded.budget IS NOT answers.budget",
                rows,
            )
            self._commit(len(keys) - stored)
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        self._machines.update(machines or {})
        ledger.committed(self.path, len(keys) - stored)
        self._checkpoint(len(rows))
        return len(rows)

    def _commit(self, added: int) -> None:
        """Commit, and count the answers it adds, under the count's lock (`rs.engines.cache_commit_count`)."""
        with self.counted.held() as count:
            self._db.execute("COMMIT")
            before = count.read()
            count.write(
                before + added
                if before is not None
                else self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
            )

    @guarded
    def forget(self, keys: Iterable[str]) -> int:
        """Remove the answers of `keys` (damaged ones), so that the next run asks for them again; returns how many there were."""
        keys = list(dict.fromkeys(keys))
        self._db.execute("BEGIN IMMEDIATE")
        try:
            removed = sum(self._db.execute("DELETE FROM answers WHERE key = ?", (key,)).rowcount for key in keys)
            self._commit(-removed)
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        return removed

    def machine(self, made_on: str | None) -> dict[str, Any] | None:
        """The record of the machine id `made_on` (None: an answer stored before rs recorded it)."""
        if made_on is None:
            return None
        if made_on not in self._machines:
            row = self._db.execute("SELECT record FROM machines WHERE id = ?", (made_on,)).fetchone()
            self._machines[made_on] = json.loads(row[0]) if row else {"id": made_on}
        return self._machines[made_on]

    @guarded
    def made_on(self, keys: Iterable[str]) -> dict[str, str | None]:
        """The machine id of each of `keys` the cache holds (None: stored before rs recorded it); `rs audit` counts them."""
        keys = list(dict.fromkeys(keys))
        out: dict[str, str | None] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            out.update(self._db.execute(f"SELECT key, made_on FROM answers WHERE key IN ({marks})", chunk))
        return out

    @guarded
    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]

    def items(self) -> Iterator[tuple[str, Generation]]:
        """Every stored answer with its machine, in key order (a damaged one raises `CacheAnswerDamaged`)."""
        rows = self._db.execute("SELECT key, value, checksum, made_on FROM answers ORDER BY key")
        for key, value, checksum, made_on in rows:
            if (generation := _checked(key, value, checksum)) is None:
                raise CacheAnswerDamaged(self.path, [key])
            generation.made_on = self.machine(made_on)
            yield key, generation

    def merge(self, other: GenerationCache, *, batch: int = 1024) -> int:
        """Add every answer of `other` (a cache made on another machine, or by another shard) with the machine that made
        it; an answer both hold is kept as `put_many` keeps it (replaced only by one made with a larger budget or other
        limits). Returns how many answers of `other` were offered; a damaged one raises `CacheAnswerDamaged`, naming it."""
        offered, block = 0, []
        for item in other.items():
            block.append(item)
            if len(block) >= batch:
                offered += self.put_many(block)
                block = []
        return offered + (self.put_many(block) if block else 0)

    def damaged(self) -> Iterator[str]:
        """The keys of every stored answer that fails its checksum or does not parse (`rs cache check`)."""
        for key, value, checksum in self._db.execute("SELECT key, value, checksum FROM answers ORDER BY key"):
            if _checked(key, value, checksum) is None:
                yield key

    def close(self) -> None:
        """Checkpoint what this connection committed (the last connection to close also removes the log), and close."""
        try:
            if self._uncheckpointed and self.failure is None:
                self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error:
            pass  # a busy or failing file: the answers stay in the log, counted
        finally:
            self._db.close()

    def __enter__(self) -> "GenerationCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
