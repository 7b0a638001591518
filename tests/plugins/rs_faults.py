"""An engine kind for the Ray tests: vLLM with faults injected on the batches holding given items.

Its answers are vLLM's, so it caches under the plain `vllm` kind and a run with it is comparable with
a run without. `tests/test_ray.py` installs it by an entry point, the way any engine kind reaches the
replicas on a cluster.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Sequence

from rs.engines.base import Generation, Request, SamplingSettings
from rs.engines.vllm import VLLMEngine, VLLMEngineConfig
from rs.registry import ENGINES


@dataclass(kw_only=True)
class FaultyVLLMConfig(VLLMEngineConfig):
    kind: Literal["faulty_vllm"] = "faulty_vllm"
    faults: list[dict[str, str]] = field(default_factory=list)
    """`{"item": KEY, "do": "raise"}` fails the batch holding that item; `{"item", "do": "exit", "marker": PATH}` kills
    the process on it, once (the marker file says it happened). Only batches with images (sampling) are hit."""


@ENGINES.register("faulty_vllm")
class FaultyVLLMEngine(VLLMEngine):
    kind = "vllm"
    Config = FaultyVLLMConfig
    runs_in_replica = True

    @classmethod
    def from_config(cls, config: FaultyVLLMConfig, model: Any, *, base_dir: Path | None = None) -> FaultyVLLMEngine:
        engine = cls(model.id, revision=model.revision, engine_args=config.args)
        engine.faults = list(config.faults)
        return engine

    def generate(self, requests: Sequence[Request], settings: SamplingSettings) -> list[Generation]:
        keys = {r.item_key for r in requests if r.image is not None}
        for fault in self.faults:
            if fault["item"] not in keys:
                continue
            if fault["do"] == "raise":
                raise RuntimeError(f"injected failure of the batch holding {fault['item']}")
            marker = Path(fault["marker"])
            if not marker.exists():
                marker.touch()
                os._exit(1)
        return super().generate(requests, settings)
