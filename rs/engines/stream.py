"""Requests in as a stream, results out as they complete: what keeps an engine's scheduler full.

A batch call (`Engine.generate`) waits for the longest answer of its batch before the next batch
starts; with a thinking model's long tail of output lengths the GPU then decodes a handful of
sequences for most of each batch's life. A `Stream` takes requests one by one (`submit`) and hands
back whatever has finished (`poll`), so the caller tops the engine up as answers complete and the
number in flight stays near `window`.

An engine kind that can stream has `open_stream(settings)`; every other engine streams through
`BatchStream`, which answers `batch_size` requests per `generate` call, as before.
"""

from __future__ import annotations

from typing import Hashable, Protocol

from rs.engines.base import Engine, Generation, Request, SamplingSettings

__all__ = ["BatchStream", "Stream", "open_stream"]


class Stream(Protocol):
    """Requests submitted one at a time, each tagged; finished results come back with their tags, in any order."""

    window: int
    """How many requests the caller keeps in flight: enough to keep the engine's scheduler full."""

    @property
    def in_flight(self) -> int:
        """Submitted and not yet returned by `poll`."""
        ...

    def submit(self, tag: Hashable, request: Request) -> None:
        """Add a request; one that asks for several samples (`Request.samples`) comes back as that many results with
        its tag, each `Generation.sample` naming its sample."""
        ...

    def poll(self, *, wait: bool = True) -> list[tuple[Hashable, Generation]]:
        """The requests that finished; with `wait`, advance the engine until at least one has (while any is in flight).

        Without `wait`, only what is already finished: the results that another stream's steps on
        the same engine completed. A request that fails alone comes back as a failed `Generation`;
        an engine that cannot go on raises.
        """
        ...


class BatchStream:
    """A stream over an engine's batch call: `poll` answers everything submitted since the last one."""

    def __init__(self, engine: Engine, settings: SamplingSettings, batch_size: int):
        self.engine, self.settings = engine, settings
        self.window = max(1, batch_size)
        self._pending: list[tuple[Hashable, Request]] = []

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def submit(self, tag: Hashable, request: Request) -> None:
        self._pending.extend((tag, request.one(request.sample + i)) for i in range(request.samples))

    def poll(self, *, wait: bool = True) -> list[tuple[Hashable, Generation]]:
        if not wait:
            return []
        pending, self._pending = self._pending, []
        if not pending:
            return []
        generations = self.engine.generate([r for _, r in pending], self.settings)
        if len(generations) != len(pending):
            raise RuntimeError(
                f"{self.engine.kind} engine returned {len(generations)} outputs for {len(pending)} requests"
            )
        for (_, request), generation in zip(pending, generations):
            generation.sample = request.sample
        return [(tag, g) for (tag, _), g in zip(pending, generations)]


def open_stream(engine: Engine, settings: SamplingSettings, *, batch_size: int) -> Stream:
    """The engine's own stream when its kind has one, else batches of `batch_size` through `generate`."""
    opener = getattr(engine, "open_stream", None)
    return opener(settings) if opener is not None else BatchStream(engine, settings, batch_size)
