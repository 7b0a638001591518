"""The long-tail workload of the benchmarks: vLLM with every request's output length forced from a lognormal.

A thinking model's answers are mostly short and a few run to `max_tokens`; a batch barrier then
leaves the GPU decoding a handful of sequences for most of each batch's life. The tiny model's
own lengths do not have that shape, so this engine kind (`longtail_vllm`) forces it: a request's
length is drawn from a lognormal (median `MEDIAN` tokens, sigma `SIGMA`, capped at `CAP`:
median : max = 1 : 10) by a hash of its item key (or prompt), and decoded with `ignore_eos`, so
every path and every run decodes exactly the same tokens.

It is the project's `vllm` engine with one change, the per-request sampling parameters, and it caches
under its own kind. `bench/engine.py` uses it directly; `bench/scale.py` names it in a family's
`engine.kind`, and the replicas find it by the entry point `install_for_replicas` writes.
"""

from __future__ import annotations

import hashlib
import math
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rs.engines.base import Request, SamplingSettings
from rs.engines.vllm import VLLMEngine, VLLMEngineConfig, VLLMStream
from rs.registry import ENGINES

MEDIAN, SIGMA, CAP = 24, 1.0, 240


def long_tail_length(request: Request) -> int:
    """The request's output length: the same on every path and in every run."""
    name = request.item_key or request.prompt
    u = (int(hashlib.sha256(name.encode()).hexdigest()[:12], 16) + 0.5) / 16**12
    z = statistics.NormalDist().inv_cdf(u)
    return max(1, min(CAP, round(MEDIAN * math.exp(SIGMA * z))))


def long_tail_params(request: Request, settings: SamplingSettings) -> Any:
    from vllm import SamplingParams

    if settings.choices:  # the judge keeps its own settings
        return None
    return SamplingParams(temperature=0.0, seed=settings.seed, max_tokens=long_tail_length(request), ignore_eos=True)


@dataclass(kw_only=True)
class LongTailConfig(VLLMEngineConfig):
    kind: Literal["longtail_vllm"] = "longtail_vllm"  # type: ignore[assignment]


class LongTailStream(VLLMStream):
    def params(self, request: Request) -> Any:
        return long_tail_params(request, self.settings) or super().params(request)


@ENGINES.register("longtail_vllm")
class LongTailEngine(VLLMEngine):
    kind = "longtail_vllm"
    Config = LongTailConfig
    runs_in_replica = True

    def open_stream(self, settings: SamplingSettings, *, window: int | None = None) -> LongTailStream:
        return LongTailStream(self, settings, window=window or self.in_flight)


def install_for_replicas(directory: Path) -> str:
    """A PYTHONPATH on which Ray replicas find this engine kind by its entry point, as they would an installed plug-in."""
    info = directory / "rs_bench_longtail-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rs-bench-longtail\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rs.engines]\nlongtail_vllm = longtail\n")
    here = str(Path(__file__).resolve().parent)
    return os.pathsep.join(p for p in (str(directory), here, os.environ.get("PYTHONPATH", "")) if p)
