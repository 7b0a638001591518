"""Engine kinds, a source kind and a cleaning step for the fault tests, installed by entry points the way any plug-in is.

`faulty_vllm` (tests/distributed/test_ray.py): vLLM with faults injected when given items' requests go in. Its
answers are vLLM's, so it caches under the plain `vllm` kind and a run with it is comparable with a
run without; it reaches the Ray replicas as any engine kind does on a cluster.
`slow_replay` (tests/faults.py): the replay engine, slow enough for a run to be stopped part-way.
`blind_replay` (tests/pipeline/write/test_answer_too_large.py, tests/audit/test_audit_made_on.py): the replay engine for
the questions asked with their image, and for those asked without it (`blind:`, which the replay engine alone would
answer as they were answered with it) a second file, or one fixed answer.
`slow_files` and the `slow_check` step (tests/cli/test_phase_interrupts.py): a files source whose records come slowly, and a
cleaning step that takes its time over each question, so that a run can be stopped while it reads or cleans.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Hashable, Iterator, Literal, Sequence

from rs.engines.base import Generation, Request, SamplingSettings
from rs.engines.replay import ReplayEngine, ReplayEngineConfig
from rs.engines.vllm import VLLMEngine, VLLMEngineConfig, VLLMStream
from rs.pipeline.clean.base import ItemFilter, StepCard
from rs.records import QAItem
from rs.registry import CLEANING, ENGINES, SOURCES
from rs.sources.base import SourceRecord
from rs.sources.files import FilesSource, FilesSourceConfig


@dataclass(kw_only=True)
class FaultyVLLMConfig(VLLMEngineConfig):
    kind: Literal["faulty_vllm"] = "faulty_vllm"
    faults: list[dict[str, str]] = field(default_factory=list)
    """`{"item": KEY, "do": "raise"}` fails the engine when that item's request goes in (every request in it fails), each
    time (a line in the file `log`, when given, each time); `{"item", "do": "exit", "marker": PATH}` kills the process on
    it, once (the marker file says it happened). Only batches with images (sampling) are hit."""


@ENGINES.register("faulty_vllm")
class FaultyVLLMEngine(VLLMEngine):
    kind = "vllm"
    Config = FaultyVLLMConfig
    runs_in_replica = True

    @classmethod
    def from_config(cls, config: FaultyVLLMConfig, model: Any, *, base_dir: Path | None = None) -> FaultyVLLMEngine:
        engine = super().from_config(
            config, model, base_dir=base_dir
        )  # as the vllm kind builds it (reasoning markers included)
        engine.faults = list(config.faults)
        return engine

    def open_stream(self, settings: SamplingSettings, *, window: int | None = None) -> FaultyStream:
        return FaultyStream(super().open_stream(settings, window=window), self.faults)


class FaultyStream:
    """vLLM's stream, failing when a request about a fault's item goes in: the whole engine (`raise`) or the process (`exit`)."""

    def __init__(self, stream: VLLMStream, faults: list[dict[str, str]]):
        self.stream, self.faults, self.window = stream, faults, stream.window
        self.broken: str | None = None

    @property
    def in_flight(self) -> int:
        return self.stream.in_flight

    def submit(self, tag: Hashable, request: Request) -> None:
        for fault in self.faults:
            if request.image is None or fault["item"] != request.item_key:
                continue
            if fault["do"] == "raise":
                self.broken = f"injected failure of the engine holding {fault['item']}"
                if fault.get("log"):
                    with open(fault["log"], "a") as log:
                        log.write(f"{os.getpid()}\n")
            elif not (marker := Path(fault["marker"])).exists():
                marker.touch()
                os._exit(1)
        self.stream.submit(tag, request)

    def poll(self, *, wait: bool = True) -> list[tuple[Hashable, Generation]]:
        if self.broken:
            raise RuntimeError(self.broken)
        return self.stream.poll(wait=wait)


@dataclass(kw_only=True)
class SlowReplayConfig(ReplayEngineConfig):
    kind: Literal["slow_replay"] = "slow_replay"  # type: ignore[assignment]
    delay: float = 0.1
    """Seconds each question about an image takes: a run long enough to be stopped while it samples."""


@ENGINES.register("slow_replay")
class SlowReplayEngine(ReplayEngine):
    """The replay engine, `delay` seconds a request: what the fault tests stop with signals and lock against."""

    kind = "slow_replay"
    Config = SlowReplayConfig
    delay = 0.1

    @classmethod
    def from_config(cls, config: SlowReplayConfig, model: Any, *, base_dir: Path | None = None) -> SlowReplayEngine:
        engine = super().from_config(config, model, base_dir=base_dir)
        engine.delay = config.delay
        return engine

    def generate(self, requests: Sequence[Request], settings: SamplingSettings) -> list[Generation]:
        time.sleep(
            self.delay * sum(r.image is not None for r in requests)
        )  # the answers; the judge's verdicts come at once
        return super().generate(requests, settings)


@dataclass(kw_only=True)
class BlindReplayConfig(ReplayEngineConfig):
    kind: Literal["blind_replay"] = "blind_replay"  # type: ignore[assignment]
    blind_path: str | None = None
    """JSON Lines answering the requests without an image (the no-image pass's; a text-only judge's too), as
    `replay_path` answers the rest; None: each gets `unseen`."""
    unseen: str = "<think>\nThere is no image to look at.\n</think>\n\nnone"
    """The answer to every request without an image, where there is no `blind_path`."""


@ENGINES.register("blind_replay")
class BlindReplayEngine(ReplayEngine):
    """The replay engine where a request has an image; without one, the answers of `blind_path`, or `unseen` as a model
    with nothing to look at would answer. The replay engine itself is refused with `blind:` (it answers by the question's
    key, image or not). A judge's requests without the image get the same: use it with the judge off, or seeing the
    image (`judge.sees_image`)."""

    kind = "blind_replay"
    Config = BlindReplayConfig
    blind: ReplayEngine | None
    unseen: str

    @classmethod
    def from_config(cls, config: BlindReplayConfig, model: Any, *, base_dir: Path | None = None) -> BlindReplayEngine:
        engine = super().from_config(config, model, base_dir=base_dir)
        engine.blind = (
            ReplayEngine.from_config(replace(config, replay_path=config.blind_path), model, base_dir=base_dir)
            if config.blind_path
            else None
        )
        engine.unseen = config.unseen
        return engine

    def identity(self) -> dict[str, Any]:
        unseen = {"blind_sha256": self.blind.identity()["replay_sha256"]} if self.blind else {"unseen": self.unseen}
        return {**super().identity(), **unseen}

    def _without_image(self, request: Request, temperature: float) -> Generation:
        if self.blind is not None:
            return self.blind._one(request, temperature)
        return Generation.from_text(self.unseen, finish_reason="stop", model=self.model, model_revision=self.revision)

    def generate(self, requests: Sequence[Request], settings: SamplingSettings) -> list[Generation]:
        return [
            self._one(r, settings.temperature) if r.image_hash() else self._without_image(r, settings.temperature)
            for r in requests
        ]

    def close(self) -> None:
        if self.blind is not None:
            self.blind.close()
        super().close()


@dataclass(kw_only=True)
class SlowFilesConfig(FilesSourceConfig):
    kind: Literal["slow_files"]  # type: ignore[assignment]
    delay: float = 0.2
    """Seconds before each record comes, as from a slow connection."""
    first_delay: float = 0.0
    """Seconds before the first record comes (a stream is slowest to start)."""
    marker: str | None = None
    """A file created when the first record is waited for: the run is reading the source."""


@SOURCES.register("slow_files")
class SlowFilesSource(FilesSource):
    """The files source, each record `delay` seconds after the one before, the first after `first_delay`."""

    Config = SlowFilesConfig

    def __iter__(self) -> Iterator[SourceRecord]:
        c = self.config
        for number, record in enumerate(super().__iter__()):
            if number == 0 and c.marker is not None:
                Path(c.marker).touch()
            time.sleep(c.first_delay if number == 0 else c.delay)
            yield record


@dataclass
class SlowCheckConfig:
    enabled: bool = False
    delay: float = 0.2
    """Seconds the step takes over each question."""
    first_delay: float = 0.0
    """Seconds it takes over the first one."""
    marker: str | None = None
    """A file created when the step starts on its first question: the run is cleaning."""


@CLEANING.register("slow_check")
class SlowCheck(ItemFilter):
    """A cleaning step that keeps every question, taking `delay` seconds over each."""

    name = "slow_check"
    Config = SlowCheckConfig
    order = 90
    card = StepCard("Slow check", "Every question is looked at slowly, and kept.")

    def __init__(self, config: SlowCheckConfig) -> None:
        super().__init__()
        self.config = config

    def check(self, item: QAItem, image_sha256: str, image_id: str | None) -> str | None:
        first = self.stats.seen == 1  # counted before the check
        if first and self.config.marker is not None:
            Path(self.config.marker).touch()
        time.sleep(self.config.first_delay if first else self.config.delay)
        return None
