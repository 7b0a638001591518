"""Run requests through an engine and the generation cache, one committed batch at a time."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from itertools import islice
from typing import Iterable, Iterator

from tqdm.auto import tqdm

from rs.engines.cache import GenerationCache
from rs.engines.base import Engine, Generation, Request, SamplingSettings

logger = logging.getLogger(__name__)


@dataclass
class RunStats:
    requests: int = 0
    cache_hits: int = 0
    engine_calls: int = 0
    """Requests sent to the engine (a request asked twice in one batch is sent once)."""
    errors: int = 0


def identity_key(engine: Engine) -> str:
    """The engine part of every cache key: its kind, model id, revision and chat template."""
    return json.dumps({"engine": engine.kind, **engine.identity()}, sort_keys=True)


def cache_key(identity: str, settings: SamplingSettings, image_sha256: str, prompt: str) -> str:
    """A request's content address; `image_sha256` is "" for a text-only request.

    A plain function of plain values, so that a Ray worker computes the driver's keys without an engine.
    """
    h = hashlib.sha256()
    for part in (identity, json.dumps(settings.to_dict(), sort_keys=True), image_sha256, prompt):
        h.update(part.encode())
        h.update(b"\x00")
    return h.hexdigest()


class CachedEngine:
    """Answers from the cache where it can; sends only the misses to the engine; commits per batch.

    A process killed mid-run loses at most the batch in flight, and a re-run sends only what is
    missing; a fully cached re-run makes zero engine calls.
    """

    def __init__(self, engine: Engine, cache: GenerationCache, *, batch_size: int = 256, progress: bool = True):
        self.engine = engine
        self.cache = cache
        self.batch_size = batch_size
        self.progress = progress
        self.stats = RunStats()
        self.identity_key = identity_key(engine)

    def key(self, request: Request, settings: SamplingSettings) -> str:
        """Content address: engine identity, exact prompt bytes, image hash, sampling settings."""
        image = request.image_sha256 or (hashlib.sha256(request.image).hexdigest() if request.image else "")
        return cache_key(self.identity_key, settings, image, request.prompt)

    def run(self, requests: Iterable[Request], settings: SamplingSettings, *, desc: str = "sampling", total: int | None = None) -> Iterator[tuple[Request, Generation]]:
        """Yield `(request, generation)` in request order."""
        iterator = iter(requests)
        with tqdm(total=total, desc=desc, unit="item", disable=not self.progress, dynamic_ncols=True) as bar:
            while batch := list(islice(iterator, self.batch_size)):
                yield from self._batch(batch, settings)
                bar.update(len(batch))
                bar.set_postfix(cached=self.stats.cache_hits, sent=self.stats.engine_calls, refresh=False)

    def _batch(self, batch: list[Request], settings: SamplingSettings) -> list[tuple[Request, Generation]]:
        keys = [self.key(r, settings) for r in batch]
        found = self.cache.get_many(keys)
        missing: dict[str, Request] = {}
        for key, request in zip(keys, batch):
            if key not in found:
                missing.setdefault(key, request)
        self.stats.requests += len(batch)
        self.stats.cache_hits += len(batch) - sum(1 for k in keys if k not in found)
        if missing:
            generations = self.engine.generate(list(missing.values()), settings)
            if len(generations) != len(missing):
                raise RuntimeError(f"{self.engine.kind} engine returned {len(generations)} outputs for {len(missing)} requests")
            self.stats.engine_calls += len(missing)
            fresh = dict(zip(missing, generations))
            self.stats.errors += sum(1 for g in generations if g.error)
            self.cache.put_many(fresh.items())
            found.update(fresh)
        return [(request, found[key]) for key, request in zip(keys, batch)]
