"""The `replay` engine: outputs produced earlier or elsewhere, read from a JSON Lines file.

Use it to re-verify or re-judge without a GPU, or to import generations made by another system.
Each line is one output: `{"key": QA item key, "text": raw output, ...}`, optionally with
`sample` (which sample of the item it is, 0 when absent: the recovery pass asks for samples 0 to k - 1) and
`temperature` (what it was drawn at; a record without one answers at any temperature: a recovery pass above 0
finds its samples apart from the greedy answers by it), `prompt` (the exact prompt, to look up requests that have no item key, such as the judge's),
`reasoning` (when the producer separated it), `prompt_tail` (the end of the rendered prompt, where a
chat template may have opened the reasoning: `rs.reasoning`), `finish_reason`, `prompt_tokens`,
`completion_tokens`, `model` and `model_revision`.
"""

from __future__ import annotations

import hashlib
import json
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


@ENGINES.register("replay")
class ReplayEngine:
    kind = "replay"
    Config = ReplayEngineConfig
    runs_in_replica = False

    @classmethod
    def from_config(cls, config: ReplayEngineConfig, model: ModelConfig, *, base_dir: Path | None = None) -> ReplayEngine:
        path = Path(config.replay_path).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        return cls(path, model=model.id, revision=model.revision)

    def __init__(self, path: str | Path, *, model: str, revision: str | None = None):
        self.path = Path(path)
        self.model = model
        self.revision = revision
        # an index of line offsets, not the records: a replay file can be larger than memory
        self._by_key: dict[tuple[str, int, float | None], int] = {}
        self._by_prompt: dict[tuple[str, int, float | None], int] = {}
        digest = hashlib.sha256()
        try:
            self._fh = self.path.open("rb")
        except OSError as err:
            raise ReplayError(f"{self.path}: cannot read the replay file: {err.strerror}") from err
        offset = 0
        for number, line in enumerate(self._fh, 1):
            digest.update(line)
            start, offset = offset, offset + len(line)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ReplayError(f"{self.path}:{number}: not valid JSON: {err.msg}") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str) or not ("key" in record or "prompt" in record):
                raise ReplayError(f"{self.path}:{number}: each line needs a string `text` and a `key` or a `prompt`")
            sample = record.get("sample", 0)
            if not isinstance(sample, int) or isinstance(sample, bool) or sample < 0:
                raise ReplayError(f"{self.path}:{number}: `sample` must be a whole number from 0 (got {sample!r})")
            temperature = record.get("temperature")
            if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))):
                raise ReplayError(f"{self.path}:{number}: `temperature` must be a number (got {temperature!r})")
            at = None if temperature is None else float(temperature)
            if "key" in record:
                self._by_key[str(record["key"]), sample, at] = start
            if "prompt" in record:
                self._by_prompt[_prompt_id(record["prompt"]), sample, at] = start
        self._file_sha256 = digest.hexdigest()

    def identity(self) -> dict[str, Any]:
        return {"model": self.model, "revision": self.revision, "replay_sha256": self._file_sha256}

    def generate(self, requests: Sequence[Request], settings: SamplingSettings) -> list[Generation]:
        return [self._one(r, settings.temperature) for r in requests]

    def _lookup(self, index: dict[tuple[str, int, float | None], int], key: str, sample: int, temperature: float) -> int | None:
        found = index.get((key, sample, float(temperature)))
        return found if found is not None else index.get((key, sample, None))

    def _one(self, request: Request, temperature: float = 0.0) -> Generation:
        offset = self._lookup(self._by_key, request.item_key, request.sample, temperature) if request.item_key else None
        if offset is None:
            offset = self._lookup(self._by_prompt, _prompt_id(request.prompt), request.sample, temperature)
        meta = {"model": self.model, "model_revision": self.revision}
        if offset is None:
            which = f" sample {request.sample}" if request.sample else ""
            return Generation.failed(f"no output in {self.path.name} for item {request.item_key!r}{which}", cacheable=False, **meta)
        self._fh.seek(offset)
        record = json.loads(self._fh.readline())
        meta = {"model": record.get("model", self.model), "model_revision": record.get("model_revision", self.revision)}
        return Generation.from_text(
            record["text"], reasoning=record.get("reasoning"), finish_reason=record.get("finish_reason", "stop"),
            prompt_tokens=record.get("prompt_tokens"), completion_tokens=record.get("completion_tokens"),
            prompt_tail=record.get("prompt_tail"), **meta,
        )

    def load(self) -> None:
        """Nothing to load: the file was indexed when the engine was built."""

    def close(self) -> None:
        self._fh.close()


def _prompt_id(prompt: str) -> str:
    return hashlib.sha256(prompt.encode()).hexdigest()
