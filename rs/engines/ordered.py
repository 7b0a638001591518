"""The streaming core: units of work whose requests finish out of order, released in the order they came in.

A unit (one QA item with its answer; one rejected item with its k samples) asks any number of
requests of the first stream (the sampler); each answer may ask follow-up requests of the next
stream (the judge). The engine finishes them in any order; `InOrder` keeps every stream topped up,
and hands each unit back, in the order the units came in, as soon as none of its requests is out.
How many units may wait behind the oldest unfinished one is bounded, so memory stays flat in the
number of units, whatever the spread of answer lengths.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Callable, Generic, Hashable, Iterable, Iterator, Protocol, Sequence, TypeVar

from rs.engines.base import Generation, Request

U = TypeVar("U")

FollowUps = Iterable[tuple[Hashable, Request]]
"""Requests a unit asks next, each with the tag its answer comes back with."""


class RequestStream(Protocol):
    """What the core needs of a stream (`rs.engines.cached_engine.CachedStream`)."""

    @property
    def window(self) -> int: ...

    @property
    def queued(self) -> int: ...

    @property
    def pending(self) -> int: ...

    def submit(self, tag: Hashable, request: Request) -> None: ...

    def collect(self, *, wait: bool) -> list[tuple[Hashable, Generation]]: ...

    def close(self) -> None: ...


class _Entry(Generic[U]):
    __slots__ = ("unit", "out")

    def __init__(self, unit: U, streams: int):
        self.unit = unit
        self.out = [0] * streams
        """Requests of this unit each stream has not answered yet."""


Answered = Callable[[U, Hashable, Generation], FollowUps]
"""Called with each answer of a stream: records it in the unit; returns the unit's requests to the next stream."""


class InOrder(Generic[U]):
    """Units in, their requests through a chain of streams, units out in order.

    `answered[i]` is called with each answer of `streams[i]`; what it returns goes to `streams[i + 1]`
    (the last stream's handler returns nothing). Units are read `batch` at a time while the first
    stream has room, and while fewer than `hold` wait to be released.
    """

    def __init__(
        self, streams: Sequence[RequestStream], answered: Sequence[Answered[U]], *, batch: int, hold: int | None = None
    ):
        if len(streams) != len(answered):
            raise ValueError("one handler per stream")
        self.streams, self.answered = list(streams), list(answered)
        self.batch = max(1, batch)
        self.hold = hold

    def run(self, units: Iterable[tuple[U, FollowUps]]) -> Iterator[U]:
        """Yield each unit once all its requests are answered, in the order `units` gave them.

        `units` gives each unit with its first requests (to the first stream); a unit with none is
        released as soon as the units before it are."""
        order: deque[_Entry[U]] = deque()
        source: Iterator[tuple[U, FollowUps]] | None = iter(units)
        try:
            while source is not None or order:
                topped, source = self._top_up(source, order)
                got = self._collect(order[0] if order and not topped else None)
                while order and not any(order[0].out):
                    unit = order.popleft().unit
                    if not order and source is None:
                        self._close()  # before the last unit: a caller may stop reading at the last one it asked for
                    yield unit
                if not topped and not got and order and not any(s.pending for s in self.streams):
                    raise RuntimeError(f"the engine left {len(order)} units unanswered")
        finally:
            self._close()

    def _top_up(
        self, source: Iterator[tuple[U, FollowUps]] | None, order: deque[_Entry[U]]
    ) -> tuple[bool, Iterator[tuple[U, FollowUps]] | None]:
        """Read `batch` more units when the first stream has room and fewer than `hold` wait; whether it did, and the
        source (None once it is exhausted)."""
        first = self.streams[0]
        if (
            source is None
            or first.queued >= first.window
            or len(order) >= (self.hold or 8 * max(first.window, self.batch))
        ):
            return False, source
        group = list(islice(source, self.batch))
        for unit, requests in group:
            entry = _Entry(unit, len(self.streams))
            order.append(entry)
            self._submit(0, entry, requests)
        return True, source if len(group) == self.batch else None

    def _close(self) -> None:
        """Commit what is answered (closing twice is harmless)."""
        for stream in self.streams:
            stream.close()

    def _submit(self, index: int, entry: _Entry[U], requests: FollowUps) -> None:
        stream = self.streams[index]
        for tag, request in requests:
            entry.out[index] += 1
            stream.submit((entry, tag), request)

    def _collect(self, head: _Entry[U] | None) -> int:
        """Take what every stream has ready; wait on the first stream the oldest unit waits for, when nothing else came."""
        got = 0
        for index, stream in enumerate(self.streams):
            wait = head is not None and not got and head.out[index] > 0
            for (entry, tag), generation in stream.collect(wait=wait):  # type: ignore[misc]
                entry.out[index] -= 1
                got += 1
                follow = self.answered[index](entry.unit, tag, generation)
                if follow:
                    self._submit(index + 1, entry, follow)
        return got
