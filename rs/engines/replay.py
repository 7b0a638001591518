"""The `replay` engine: outputs produced earlier or elsewhere, read from a JSON Lines file.

Use it to re-verify or re-judge without a GPU, or to import generations made by another system.
Each line is one output: `{"key": QA item key, "text": raw output, ...}`, optionally with
`sample` (which sample of the item it is, 0 when absent: the recovery pass asks for samples 0 to k - 1) and
`temperature` (what it was drawn at; a record without one answers at any temperature: a recovery pass above 0
finds its samples apart from the greedy answers by it), `prompt` (the exact prompt: a record of it answers that prompt
before its item's record does, so that a judge's verdicts replay, whose requests carry the key of the item they judge),
`reasoning` (when the producer separated it), `prompt_tail` (the end of the rendered prompt, where a
chat template may have opened the reasoning: `rs.engines.reasoning`), `finish_reason`, `prompt_tokens`,
`completion_tokens`, `model` and `model_revision`.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Sequence

from rs.engines.base import EngineConfig, Generation, Request, SamplingSettings
from rs.errors import UsageError
from rs.registry import ENGINES

if TYPE_CHECKING:
    from rs.families.schema import ModelConfig


class ReplayError(UsageError, ValueError):
    """A replay file that cannot be read; names the file and line."""


@dataclass(kw_only=True)
class ReplayEngineConfig(EngineConfig):
    kind: Literal["replay"]
    """`replay`: outputs produced earlier or elsewhere, read from a file."""
    replay_path: str
    """JSON Lines file with one output record per QA item key (relative paths are relative to the families file)."""

    def computes_here(self) -> bool:
        return False


@ENGINES.register("replay")
class ReplayEngine:
    kind = "replay"
    Config = ReplayEngineConfig
    runs_in_replica = False
    computes_here = False  # its answers' machine is not this one (`rs.engines.machine.ELSEWHERE`)

    @classmethod
    def from_config(
        cls, config: ReplayEngineConfig, model: ModelConfig, *, base_dir: Path | None = None
    ) -> ReplayEngine:
        path = Path(config.replay_path).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        return cls(path, model=model.id, revision=model.revision)

    def __init__(self, path: str | Path, *, model: str, revision: str | None = None):
        self.path = Path(path)
        self.model = model
        self.revision = revision
        try:
            self._fh = self.path.open("rb")
        except OSError as err:
            raise ReplayError(f"{self.path}: cannot read the replay file: {err.strerror}") from err
        # an index of line offsets on disk, not the records: a replay file can be larger than memory
        self._index = _OffsetIndex()
        try:
            self._file_sha256 = self._read_index()
        except BaseException:
            self.close()
            raise

    def _read_index(self) -> str:
        """Check every line and index its offset by item key and by prompt; returns the file's sha256."""
        digest = hashlib.sha256()
        offset = 0
        for number, line in enumerate(self._fh, 1):
            digest.update(line)
            start, offset = offset, offset + len(line)
            if not line.strip():
                continue
            record, sample, at = _checked_line(line, f"{self.path}:{number}")
            if "key" in record:
                self._index.add(_KEY, _entry(str(record["key"]), sample, at), start)
            if "prompt" in record:
                self._index.add(_PROMPT, _entry(_prompt_id(record["prompt"]), sample, at), start)
        self._index.done()
        return digest.hexdigest()

    def identity(self) -> dict[str, Any]:
        return {"model": self.model, "revision": self.revision, "replay_sha256": self._file_sha256}

    def generate(self, requests: Sequence[Request], settings: SamplingSettings) -> list[Generation]:
        return [self._one(r, settings.temperature) for r in requests]

    def _lookup(self, kind: int, id: str, sample: int, temperature: float) -> int | None:
        """The record drawn at `temperature`, else one that states none."""
        found = self._index.get(kind, _entry(id, sample, float(temperature)))
        return found if found is not None else self._index.get(kind, _entry(id, sample, None))

    def _one(self, request: Request, temperature: float = 0.0) -> Generation:
        # a record of the exact prompt first: a judge's request carries its item's key, and the item's own record answers
        # the question, not the judge
        offset = self._lookup(_PROMPT, _prompt_id(request.prompt), request.sample, temperature)
        if offset is None and request.item_key:
            offset = self._lookup(_KEY, request.item_key, request.sample, temperature)
        meta = {"model": self.model, "model_revision": self.revision}
        if offset is None:
            which = f" sample {request.sample}" if request.sample else ""
            return Generation.failed(
                f"no output in {self.path.name} for item {request.item_key!r}{which}", cacheable=False, **meta
            )
        self._fh.seek(offset)
        record = json.loads(self._fh.readline())
        meta = {
            "model": record.get("model", self.model),
            "model_revision": record.get("model_revision", self.revision),
        }
        return Generation.from_text(
            record["text"],
            reasoning=record.get("reasoning"),
            finish_reason=record.get("finish_reason", "stop"),
            prompt_tokens=record.get("prompt_tokens"),
            completion_tokens=record.get("completion_tokens"),
            prompt_tail=record.get("prompt_tail"),
            **meta,
        )

    def load(self) -> None:
        """Nothing to load: the file was indexed when the engine was built."""

    def close(self) -> None:
        self._fh.close()
        self._index.close()


def _checked_line(line: bytes, where: str) -> tuple[dict[str, Any], int, float | None]:
    """A replay line's record, with the sample it answers and the temperature it states (None: any); `where` is its
    file and line, for the error."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise ReplayError(f"{where}: not valid JSON: {err.msg}") from None
    if (
        not isinstance(record, dict)
        or not isinstance(record.get("text"), str)
        or not ("key" in record or "prompt" in record)
    ):
        raise ReplayError(f"{where}: each line needs a string `text` and a `key` or a `prompt`")
    sample = record.get("sample", 0)
    if not isinstance(sample, int) or isinstance(sample, bool) or sample < 0:
        raise ReplayError(f"{where}: `sample` must be a whole number from 0 (got {sample!r})")
    temperature = record.get("temperature")
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))):
        raise ReplayError(f"{where}: `temperature` must be a number (got {temperature!r})")
    return record, sample, None if temperature is None else float(temperature)


def _entry(id: str, sample: int, temperature: float | None) -> str:
    """An index entry: a key or prompt id, with the sample and the temperature a record states (none: "")."""
    return f"{id}\x00{sample}\x00{'' if temperature is None else repr(temperature)}"


def _prompt_id(prompt: str) -> str:
    return hashlib.sha256(prompt.encode()).hexdigest()


_KEY, _PROMPT = 0, 1


class _OffsetIndex:
    """Line offsets by item key and by prompt, in a temporary SQLite file: a dictionary of every key held 50 MB at
    400,000 answers and grew with the family (bench/build.py); this keeps a few MB of page cache whatever the size.

    SQLite's private temporary database (an empty file name) is a file it removes as soon as it opens it, so a
    process killed mid-run leaves nothing behind (a named temporary folder was left in the temporary directory).
    A key given twice keeps its last line, as the dictionary did.
    """

    _BATCH = 10_000

    def __init__(self) -> None:
        self._db = sqlite3.connect("", isolation_level=None, check_same_thread=False)
        self._db.executescript("""
            PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-8000;
            CREATE TABLE offsets (kind INTEGER NOT NULL, id TEXT NOT NULL, offset INTEGER NOT NULL, PRIMARY KEY (kind, id)) WITHOUT ROWID;
            BEGIN;
        """)
        self._pending: list[tuple[int, str, int]] = []

    def add(self, kind: int, id: str, offset: int) -> None:
        self._pending.append((kind, id, offset))
        if len(self._pending) >= self._BATCH:
            self._flush()

    def _flush(self) -> None:
        self._db.executemany("INSERT OR REPLACE INTO offsets VALUES (?, ?, ?)", self._pending)
        self._pending = []

    def done(self) -> None:
        self._flush()
        self._db.execute("COMMIT")

    def get(self, kind: int, id: str) -> int | None:
        row = self._db.execute("SELECT offset FROM offsets WHERE kind = ? AND id = ?", (kind, id)).fetchone()
        return None if row is None else row[0]

    def close(self) -> None:
        self._db.close()
