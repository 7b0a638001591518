"""Engine kinds for the fault tests, installed by an entry point the way any engine kind is.

`faulty_vllm` (tests/test_ray.py): vLLM with faults injected when given items' requests go in. Its
answers are vLLM's, so it caches under the plain `vllm` kind and a run with it is comparable with a
run without; it reaches the Ray replicas as any engine kind does on a cluster.
`slow_replay` (tests/faults.py): the replay engine, slow enough for a run to be stopped part-way.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Hashable, Literal, Sequence

from rs.engines.base import Generation, Request, SamplingSettings
from rs.engines.replay import ReplayEngine, ReplayEngineConfig
from rs.engines.vllm import VLLMEngine, VLLMEngineConfig, VLLMStream
from rs.registry import ENGINES


@dataclass(kw_only=True)
class FaultyVLLMConfig(VLLMEngineConfig):
    kind: Literal["faulty_vllm"] = "faulty_vllm"
    faults: list[dict[str, str]] = field(default_factory=list)
    """`{"item": KEY, "do": "raise"}` fails the engine when that item's request goes in (every request in it fails); `{"item", "do": "exit", "marker": PATH}` kills
    the process on it, once (the marker file says it happened). Only batches with images (sampling) are hit."""


@ENGINES.register("faulty_vllm")
class FaultyVLLMEngine(VLLMEngine):
    kind = "vllm"
    Config = FaultyVLLMConfig
    runs_in_replica = True

    @classmethod
    def from_config(cls, config: FaultyVLLMConfig, model: Any, *, base_dir: Path | None = None) -> FaultyVLLMEngine:
        engine = super().from_config(config, model, base_dir=base_dir)  # as the vllm kind builds it (reasoning markers included)
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
        time.sleep(self.delay * sum(r.image is not None for r in requests))  # the answers; the judge's verdicts come at once
        return super().generate(requests, settings)
