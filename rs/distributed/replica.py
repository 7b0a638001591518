"""What runs inside a Ray replica: the engine it builds from the family's configuration, and the rows it reads and writes."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import asdict
from typing import Any

import numpy as np
import pyarrow as pa

from rs.engines.base import Engine, Generation, Request, SamplingSettings
from rs.engines.cached import cache_key, identity_key
from rs.families.schema import ModelConfig
from rs.prompt import sampling_request
from rs.registry import ENGINES
from rs.store import qa_item

from .report import RayPlanError

from rs.stages import BuildContext

logger = logging.getLogger(__name__)


MAX_CONSECUTIVE_FAILURES = 3
REQUEST = pa.struct([("key", pa.string()), ("prompt", pa.string()), ("item_key", pa.string())])
REQUESTS = pa.schema([("image", pa.binary()), ("image_sha256", pa.string()), ("requests", pa.list_(REQUEST))])
"""What a replica answers: one image (None for the judge) and the requests about it, with their cache keys.

Grouped by image so that an image asked about ten times travels once, not ten times."""

ANSWERS = pa.schema([
    ("key", pa.string()), ("generation", pa.string()), ("batch_error", pa.string()), ("batch", pa.string()), ("replica", pa.string()),
    ("load_seconds", pa.float64()), ("engine_seconds", pa.float64()),
])
"""What a replica returns: the `Generation` as JSON; `batch_error` when its whole batch failed."""


def sampling_requests(batch: pa.Table, *, identity: str, settings: SamplingSettings, instruction: str, missing: np.ndarray) -> pa.Table:
    """Clean-store rows -> the sampling requests of their QA items that are still missing, by image (a Ray Data map).

    Builds each request as `SampleStage` does and keys it with the driver's `cache_key`; `missing`
    is the sorted array of the missing keys' 64-bit prefixes.
    """
    out: dict[str, list[Any]] = {name: [] for name in REQUESTS.names}
    seen: set[str] = set()
    for image, sha, qa in zip(batch["image"].to_pylist(), batch["image_sha256"].to_pylist(), batch["qa"].to_pylist()):
        requests = []
        for item in qa:
            request = sampling_request(qa_item(item), instruction, sha)
            key = cache_key(identity, settings, sha, request.prompt)
            if key not in seen and _is_missing(key, missing):
                seen.add(key)
                requests.append({"key": key, "prompt": request.prompt, "item_key": request.item_key})
        if requests:
            for name, value in zip(REQUESTS.names, (image, sha, requests)):
                out[name].append(value)
    return pa.table(out, schema=REQUESTS)


def key_prefix(key: str) -> int:
    return int(key[:16], 16)


def _is_missing(key: str, missing: np.ndarray) -> bool:
    prefix = np.uint64(key_prefix(key))
    i = int(np.searchsorted(missing, prefix))
    return i < len(missing) and missing[i] == prefix


class EngineReplica:
    """One engine replica: the Ray Data actor class that answers batches of requests.

    Builds the family's engine from its configuration (`spec`, see `engine_specs`), refuses to start if
    its identity differs from the driver's (its answers would land under keys no run asks for), and
    loads the model before the first batch.
    """

    def __init__(self, spec: dict[str, Any], identity: str, settings: SamplingSettings):
        self.spec, self.settings = spec, settings
        self.engine = build_replica_engine(spec)
        if (mine := identity_key(self.engine)) != identity:
            raise RuntimeError(
                f"this replica computes another engine identity than the driver, so its answers would be cached under keys no "
                f"run asks for: driver {identity}, replica {mine}. Run the driver and the replicas with the same versions of rs, "
                "vLLM and transformers, and the same model files."
            )
        start = time.perf_counter()
        self.engine.load()  # now, not in the first batch
        self.load_seconds = time.perf_counter() - start
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.failures = 0
        self.batches = 0

    def __call__(self, batch: pa.Table) -> pa.Table:
        keys, requests = [], []
        for row in batch.to_pylist():
            for r in row["requests"]:
                keys.append(r["key"])
                requests.append(Request(prompt=r["prompt"], image=row["image"], image_sha256=row["image_sha256"], item_key=r["item_key"]))
        start = time.perf_counter()
        error = None
        try:
            generations = self.engine.generate(requests, self.settings)
            if len(generations) != len(requests):
                raise RuntimeError(f"the engine returned {len(generations)} generations for {len(requests)} requests")
            self.failures = 0
        except Exception as err:
            self.failures += 1
            if self.failures >= MAX_CONSECUTIVE_FAILURES:
                raise RuntimeError(f"replica {self.name} failed {self.failures} batches in a row; stopping the run "
                                   "(the cache keeps everything answered so far)") from err
            error = first_line(err)
            logger.error("replica %s: a batch of %d requests failed, its answers are not cached: %s", self.name, len(requests), error)
            self._replace_engine()  # per-request failures never raise: an engine that did is suspect
            generations = [Generation.failed(f"batch failed: {error}", cacheable=False) for _ in requests]
        seconds = time.perf_counter() - start
        self.batches += 1
        n = len(requests)
        return pa.table({
            "key": keys, "generation": [json.dumps(g.to_dict(), ensure_ascii=False) for g in generations],
            "batch_error": [error] * n, "batch": [f"{self.name}/{self.batches}"] * n, "replica": [self.name] * n, "load_seconds": [self.load_seconds] * n,
            "engine_seconds": [seconds / n] * n,
        }, schema=ANSWERS)

    def _replace_engine(self) -> None:
        try:
            self.engine.close()
        except Exception:
            logger.warning("closing a failed engine failed", exc_info=True)
        self.engine = build_replica_engine(self.spec)


def build_replica_engine(spec: dict[str, Any]) -> Engine:
    """The engine a replica runs, from its spec (see `engine_specs`), set up to run inside an actor."""
    plugin = ENGINES.get(spec["engine"]["kind"])
    config = plugin.Config(**spec["engine"]).for_replica()
    return plugin.from_config(config, ModelConfig(**spec["model"]))


def first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[-1] if text else ''}"


# --- on the driver --------------------------------------------------------------------------------


def engine_specs(ctx: BuildContext) -> dict[str, dict[str, Any]]:
    """What a replica needs to build the family's engines: the configuration, not the driver's objects."""
    c = ctx.family.config
    if not ENGINES.get(c.engine.kind).runs_in_replica:
        able = [name for name, plugin in ENGINES.items() if plugin.runs_in_replica]
        raise RayPlanError(f"families.{ctx.family.name}.engine.kind is {c.engine.kind!r}; the Ray path runs engine kinds that run "
                           f"in a replica ({', '.join(able)}); an openai server is already shared by every process that points at it")
    judge_model = c.judge.model or c.model
    engine = asdict(c.engine)
    return {"sampler": {"model": asdict(c.model), "engine": engine},
            "judge": {"model": asdict(judge_model), "engine": engine}}


def gpus_per_replica(ctx: BuildContext) -> int:
    """GPUs one replica of the family's engine holds (for vllm: tensor x pipeline parallel size)."""
    return ctx.family.config.engine.devices_per_replica()


