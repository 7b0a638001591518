"""A source stream that survives a dropped connection: retried with backoff, resumed where it stopped.

Streaming millions of records from the Hub, a connection gets reset now and then. `datasets`
retries single reads, but a reset it cannot absorb ends the iteration with an error, hours into a
clean stage. `resumable` then waits (exponential backoff) and resumes the same `IterableDataset`
from the state of the last record it yielded (`state_dict` / `load_state_dict`), so no record is
read twice or skipped, record positions go on where they were, and the cleaning's accounting
closes exactly as on an uninterrupted stream. After `RETRIES` failures in a row with no record in
between it gives up with `SourceUnavailable`; an error that is not a dropped connection passes
unchanged.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Iterator

from rs.errors import RsError, causes

logger = logging.getLogger(__name__)

RETRIES = 6
"""Failures in a row (no record read in between) before the stream is given up."""
BACKOFF_S = 2.0
"""The first wait; each failure in a row doubles it, up to `MAX_BACKOFF_S`."""
MAX_BACKOFF_S = 60.0

_NETWORK_MODULES = ("requests", "urllib3", "httpx", "httpcore", "aiohttp", "fsspec", "http", "huggingface_hub")
_NETWORK_WORDS = (
    "connect",
    "timeout",
    "protocol",
    "readerror",
    "disconnect",
    "chunkedencoding",
    "incompleteread",
    "payload",
)


class SourceUnavailable(RsError):
    """The source kept dropping the connection; nothing of the clean stage is kept as complete."""

    def __init__(self, label: str, position: int, tries: int, error: BaseException):
        super().__init__(
            f"the source {label} kept dropping the connection: {tries} tries in a row failed after record {position:,} "
            f"({type(error).__name__}: {error})",
            hint="check the network (or the Hub's status page) and run the same command again: the clean stage reads "
            "the source again from its start; the stages of other families are not affected",
        )


def resumable(dataset: Any, label: str) -> Iterator[dict[str, Any]]:
    """The records of `dataset`; a dropped connection is retried and, for an `IterableDataset`, resumed after the last record."""
    if not (hasattr(dataset, "state_dict") and hasattr(dataset, "load_state_dict")):
        yield from dataset  # a map-style dataset is local: nothing to resume
        return
    state: dict[str, Any] | None = None  # None: from the start
    position = failures = 0
    while True:
        try:
            for record in dataset:
                yield record
                position += 1
                failures = 0
                state = dataset.state_dict()  # the state after the latest record yielded
            return
        except Exception as err:
            if not is_dropped_connection(err):
                raise
            failures += 1
            if failures > RETRIES:
                raise SourceUnavailable(label, position, failures, err) from err
            delay = min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (failures - 1))
            logger.warning(
                "%s: the stream dropped after record %d (%s: %s); resuming there in %.3g s (retry %d of %d)",
                label,
                position,
                type(err).__name__,
                err,
                delay,
                failures,
                RETRIES,
            )
            time.sleep(delay)
            dataset.load_state_dict(state)


def is_dropped_connection(error: BaseException) -> bool:
    """Whether `error` (or one it was raised from) is a network failure worth retrying rather than a fault of the data."""
    for current in causes(error):
        if isinstance(current, (ConnectionError, TimeoutError)):
            return True
        kind = type(current)
        if kind.__module__.split(".")[0] in _NETWORK_MODULES and any(
            word in kind.__name__.lower() for word in _NETWORK_WORDS
        ):
            return True
        status = getattr(getattr(current, "response", None), "status_code", None)
        if (
            kind.__module__.startswith("huggingface_hub")
            and isinstance(status, int)
            and (status == 429 or status >= 500)
        ):
            return True  # the Hub busy or failing for a while
    return False
