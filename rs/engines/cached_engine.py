"""Run requests through the generation cache and an engine's stream, committing answers as they finish."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Callable, Hashable, Iterable, Iterator

from rs.engines.base import Engine, Generation, Request, SamplingSettings
from rs.engines.generation_cache import CacheAnswerDamaged, GenerationCache
from rs.engines.machine import machine_record
from rs.engines.ordered import InOrder
from rs.engines.stream import Stream, open_stream
from rs.util.progress import progress

logger = logging.getLogger(__name__)


@dataclass
class RunStats:
    requests: int = 0
    cache_hits: int = 0
    engine_calls: int = 0
    """Requests sent to the engine (a request asked twice while the first is in flight is sent once)."""
    errors: int = 0
    committed: int = 0
    """Answers this run committed to the cache (what a stopped run keeps)."""


def identity_key(engine: Engine) -> str:
    """The engine part of every cache key: its kind, model id, revision and chat template."""
    return json.dumps({"engine": engine.kind, **engine.identity()}, sort_keys=True)


def cache_key(identity: str, settings: SamplingSettings, image_sha256: str, prompt: str, sample: int = 0) -> str:
    """A request's content address; `image_sha256` is "" for a text-only request; `max_tokens` is not part of it.
    Sample `i` is keyed as the request seeded `settings.seed + i`: each sample is its own entry.

    A plain function of plain values, so that a Ray worker computes the driver's keys without an engine.
    """
    return key_function(identity, sample_settings(settings, sample))(image_sha256, prompt)


def sample_settings(settings: SamplingSettings, sample: int) -> SamplingSettings:
    """The settings sample `sample` of a request is drawn with: its seed is `settings.seed + sample`."""
    return settings if sample == 0 else replace(settings, seed=settings.seed + sample)


def key_function(identity: str, settings: SamplingSettings) -> Callable[[str, str], str]:
    """`cache_key` for many requests of one engine and settings: those two parts are hashed once."""
    base = hashlib.sha256()
    for part in (identity, json.dumps(settings.keyed(), sort_keys=True)):
        base.update(part.encode())
        base.update(b"\x00")

    def key(image_sha256: str, prompt: str) -> str:
        h = base.copy()
        h.update(image_sha256.encode())
        h.update(b"\x00")
        h.update(prompt.encode())
        h.update(b"\x00")
        return h.hexdigest()

    return key


class _Committer:
    """Fresh results go to the cache in small groups, bounded by count and by time."""

    def __init__(self, cache: GenerationCache, rows: int, seconds: float, stats: RunStats | None = None):
        self.cache, self.rows, self.seconds, self.stats = cache, max(1, rows), seconds, stats
        self.buffer: dict[str, Generation] = {}
        """Answered, not yet committed: a request asked again meanwhile is answered from here."""
        self.since = 0.0

    def add(self, key: str, generation: Generation) -> None:
        if not self.buffer:
            self.since = time.monotonic()
        self.buffer[key] = generation

    def due(self) -> bool:
        return len(self.buffer) >= self.rows or bool(self.buffer) and time.monotonic() - self.since >= self.seconds

    def flush(self) -> None:
        if self.buffer:
            self.cache.put_many(self.buffer.items())
            if self.stats is not None:
                self.stats.committed += len(self.buffer)
            self.buffer = {}


@dataclass(frozen=True)
class _Samples:
    """Consecutive missing samples of one prompt, sent as one request: their keys, from sample `first` on."""

    first: int
    keys: tuple[str, ...]


class CachedStream:
    """Requests in with a tag, answers out as they are ready: from the cache at once, from the engine as they finish.

    The push side of the cache, for a caller that feeds requests as they appear (the judge, fed by
    the sampler's rejections). Submitted requests are looked up in groups of `lookup_rows`; the
    misses go to the engine's stream (`rs.engines.stream`) and are committed to the cache in small
    groups, bounded by count and by `commit_seconds`. New misses enter the engine only while
    in-flight plus answered-but-uncommitted requests stay within the stream's `window`, so a process
    killed at any moment loses at most `window` answers, and a re-run sends only what is missing.
    A request asked again while the first is in flight is sent once.
    """

    def __init__(
        self,
        engine: Engine,
        cache: GenerationCache,
        settings: SamplingSettings,
        *,
        stats: RunStats,
        identity: str,
        lookup_rows: int = 256,
        commit_seconds: float = 5.0,
    ):
        self.engine, self.cache, self.settings, self.stats, self.identity = engine, cache, settings, stats, identity
        self._keys: dict[int, Callable[[str, str], str]] = {}
        self.lookup_rows = max(1, lookup_rows)
        self._stream: Stream | None = None
        """Opened at the first miss: a fully cached run never loads the model."""
        self.committer = _Committer(cache, rows=self.lookup_rows, seconds=commit_seconds, stats=stats)
        self._lookup: list[tuple[Hashable, str, Request]] = []
        self._backlog: deque[tuple[str, Request]] = deque()
        self._waiting: dict[str, list[Hashable]] = {}
        self._ready: list[tuple[Hashable, Generation]] = []
        self._pending = 0
        self._made_on: dict[str, Any] | None = None

    @property
    def window(self) -> int:
        """Requests the engine's stream keeps in flight (before the first miss: one lookup group)."""
        return self._stream.window if self._stream is not None else self.lookup_rows

    @property
    def in_flight(self) -> int:
        return self._stream.in_flight if self._stream is not None else 0

    @property
    def pending(self) -> int:
        """Submitted and not yet collected."""
        return self._pending

    @property
    def queued(self) -> int:
        """Submitted and not yet in the engine: waiting to be looked up, or for room in the window."""
        return len(self._lookup) + len(self._backlog)

    def key(self, request: Request) -> str:
        """The request's cache key (of its sample `request.sample`)."""
        key = self._keys.get(request.sample)
        if key is None:
            key = self._keys[request.sample] = key_function(
                self.identity, sample_settings(self.settings, request.sample)
            )
        return key(request.image_hash(), request.prompt)

    def submit(self, tag: Hashable, request: Request) -> None:
        """Ask for one sample (`request.samples` must be 1): submit the samples of one prompt one after the other, and
        the ones the cache lacks go to the engine as one request (`Request.samples`)."""
        if request.samples != 1:
            raise ValueError("CachedStream.submit takes one sample per request: submit request.one(i) for each")
        self._lookup.append((tag, self.key(request), request))
        self._pending += 1
        self.stats.requests += 1
        if len(self._lookup) >= self.lookup_rows:
            self._resolve()

    def collect(self, *, wait: bool) -> list[tuple[Hashable, Generation]]:
        """What is ready now; with `wait`, advance the engine until something is (while anything is pending)."""
        self._resolve()
        self._feed()
        if self._stream is not None and self._stream.in_flight and (wait or not self._ready):
            self._take(self._stream.poll(wait=wait and not self._ready))
        ready, self._ready = self._ready, []
        self._pending -= len(ready)
        return ready

    def close(self) -> None:
        """Commit what is answered; a stream closed with requests in flight leaves them unanswered (and uncached)."""
        self.committer.flush()

    def _resolve(self) -> None:
        if not self._lookup:
            return
        lookup, self._lookup = self._lookup, []
        try:
            found = self.cache.get_many([key for _, key, _ in lookup], settings=self.settings)
        except CacheAnswerDamaged as err:
            raise err.naming({key: request.item_key for _, key, request in lookup}) from None
        for tag, key, request in lookup:
            generation = found.get(key) or self.committer.buffer.get(key)
            if generation is not None:
                self.stats.cache_hits += 1
                self._ready.append((tag, generation))
            elif key in self._waiting:
                self._waiting[key].append(tag)
            else:
                self._waiting[key] = [tag]
                self._backlog.append((key, request))

    def _feed(self) -> None:
        if not self._backlog:
            return
        if self._stream is None:
            self._stream = open_stream(self.engine, self.settings, batch_size=self.lookup_rows)
            self.committer.rows = max(1, min(self.lookup_rows, self._stream.window // 4))
        stream, committer = self._stream, self.committer
        while self._backlog and stream.in_flight + len(committer.buffer) < self.window:
            key, request = self._backlog.popleft()
            keys = [key]
            while self._backlog and _next_sample(request, len(keys), self._backlog[0][1]):
                keys.append(self._backlog.popleft()[0])
            if len(keys) == 1:
                stream.submit(key, request)
            else:
                stream.submit(_Samples(request.sample, tuple(keys)), replace(request, samples=len(keys)))
            self.stats.engine_calls += len(keys)

    def _machine(self) -> dict[str, Any]:
        """This process's record of its engine's answers (`rs.engines.machine`), made at the first fresh answer."""
        if self._made_on is None:
            self._made_on = machine_record(self.engine, json.loads(self.identity))
        return self._made_on

    def _take(self, finished: list[tuple[Hashable, Generation]]) -> None:
        for tag, generation in finished:
            key = tag.keys[generation.sample - tag.first] if isinstance(tag, _Samples) else tag
            self._ready.extend((waiting, generation) for waiting in self._waiting.pop(key))  # type: ignore[call-overload]
            self.stats.errors += generation.error is not None
            generation.max_tokens = self.settings.max_tokens
            generation.repetition_detection = self.settings.repetition_detection
            generation.thinking_token_budget = self.settings.thinking_token_budget
            if generation.made_on is None:  # made here (a replica's answers come stamped with its own machine)
                generation.made_on = self._machine()
            self.committer.add(key, generation)  # type: ignore[arg-type]
        if self.committer.due() or not self.in_flight:
            self.committer.flush()
        self._feed()


def _next_sample(request: Request, offset: int, other: Request) -> bool:
    """Whether `other` is sample `request.sample + offset` of the same prompt and image."""
    return (
        other.sample == request.sample + offset
        and other.prompt == request.prompt
        and other.image_hash() == request.image_hash()
    )


class _Slot:
    """One request's place in `run`'s output order."""

    __slots__ = ("request", "generation")

    def __init__(self, request: Request):
        self.request, self.generation = request, None


class CachedEngine:
    """Answers from the cache where it can; streams only the misses through the engine; commits as they finish.

    `run` reads requests `batch_size` at a time into a `CachedStream` and yields the answers in
    request order, whatever order the engine finishes them in; answers held back behind a long one
    are bounded, so memory stays flat in the number of requests. A process killed mid-run loses at
    most the stream's window of answers, and a re-run sends only what is missing; a fully cached
    re-run makes zero engine calls.
    """

    def __init__(
        self,
        engine: Engine,
        cache: GenerationCache,
        *,
        batch_size: int = 256,
        progress: bool = True,
        commit_seconds: float = 5.0,
    ):
        self.engine = engine
        self.cache = cache
        self.batch_size = batch_size
        self.progress = progress
        self.commit_seconds = commit_seconds
        self.stats = RunStats()
        self.identity_key = identity_key(engine)
        self._keys: tuple[SamplingSettings, Callable[[str, str], str]] | None = None

    def key(self, request: Request, settings: SamplingSettings) -> str:
        """Content address: engine identity, exact prompt bytes, image hash, sampling settings (the sample's seed)."""
        settings = sample_settings(settings, request.sample)
        if self._keys is None or self._keys[0] != settings:
            self._keys = (settings, key_function(self.identity_key, settings))
        return self._keys[1](request.image_hash(), request.prompt)

    def stream(self, settings: SamplingSettings) -> CachedStream:
        """A push stream through this cache and engine (its figures count in `stats`)."""
        return CachedStream(
            self.engine,
            self.cache,
            settings,
            stats=self.stats,
            identity=self.identity_key,
            lookup_rows=self.batch_size,
            commit_seconds=self.commit_seconds,
        )

    def run(
        self,
        requests: Iterable[Request],
        settings: SamplingSettings,
        *,
        desc: str = "sampling",
        total: int | None = None,
    ) -> Iterator[tuple[Request, Generation]]:
        """Yield `(request, generation)` in request order (through `rs.engines.ordered.InOrder`)."""

        def answered(slot: _Slot, _: object, generation: Generation) -> list[Any]:
            slot.generation = generation
            return []

        core = InOrder([self.stream(settings)], [answered], batch=self.batch_size)
        with progress(total, desc, enabled=self.progress) as bar:
            for slot in core.run((_Slot(request), [(None, request)]) for request in requests):
                bar.update()
                bar.set_postfix(cached=self.stats.cache_hits, sent=self.stats.engine_calls, refresh=False)
                yield slot.request, slot.generation
