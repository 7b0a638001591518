"""Prototypes of the hand-written retry loops with tenacity (issue 45), for `bench/retry.py`.

The same behaviour as `rs.hub.retry.through_rate_limit` / `retrying` and `rs.sources.resumable.resumable` (the waits,
the messages, the monkeypatched sleep), written with `tenacity.Retrying`. What tenacity does not have is kept in
closures: the count of failures that an attempt which committed something (`retrying`) or a record read
(`resumable`) starts again, and the wait the server asked for (`Retry-After`).

Not part of `rs`: `bench/retry.py` swaps these in, runs the retry tests and prints the figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Iterator, TypeVar

import tenacity

from rs.hub import retry as hub
from rs.sources import resumable as streams

T = TypeVar("T")


def through_rate_limit(call: Callable[[], T], *, repo_id: str, what: str, token: str | None) -> T:
    """`call()`, sent again after each 429 once the wait the Hub asked for is over; other errors go up unchanged."""

    def wait(state: tenacity.RetryCallState) -> float:
        asked = hub.retry_after(state.outcome.exception())
        return (
            asked
            if asked is not None
            else min(hub.RATE_LIMIT_BACKOFF_S * 2 ** (state.attempt_number - 1), hub.RATE_LIMIT_BACKOFF_MAX_S)
        )

    def log(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception()
        hub.logger.warning(
            "%s: the Hub is rate-limiting %s (%s); waiting %.0fs%s, then sending it again",
            repo_id,
            what,
            hub.first_line(exc, token),
            state.upcoming_sleep,
            " as it asked" if hub.retry_after(exc) is not None else "",
        )

    def give_up(state: tenacity.RetryCallState) -> T:
        exc = state.outcome.exception()
        raise hub.PublishError(
            f"The Hub kept refusing {what} for {repo_id} with 429 Too Many Requests ({hub.RATE_LIMIT_MAX_WAITS} "
            f"waits; last: {hub.first_line(exc, token)}). Run the command again later: what is already on the "
            "Hub (and on its open pull request) is kept and not uploaded again."
        ) from exc

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception(lambda exc: hub.retry_kind(exc) == "rate_limited"),
        stop=tenacity.stop_after_attempt(hub.RATE_LIMIT_MAX_WAITS + 1),
        wait=wait,
        sleep=hub.sleep,
        before_sleep=log,
        retry_error_callback=give_up,
    )(call)


def retrying(
    attempt: Callable[[int], T],
    *,
    repo_id: str,
    token: str | None,
    max_attempts: int,
    progress: Callable[[], int] = lambda: 0,
) -> T:
    """Run `attempt(n)` until it returns; re-plan and retry transient errors and conflicts with exponential backoff."""
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    count = {"failures": 0, "before": 0}

    def before(state: tenacity.RetryCallState) -> None:
        count["before"] = progress()

    def retry(state: tenacity.RetryCallState) -> bool:
        exc = state.outcome.exception()
        if exc is None or isinstance(exc, hub.PublishError) or hub.retry_kind(exc) is None:
            return False
        count["failures"] = 1 if progress() > count["before"] else count["failures"] + 1
        return True

    def stop(state: tenacity.RetryCallState) -> bool:
        return count["failures"] >= max_attempts

    def wait(state: tenacity.RetryCallState) -> float:
        delay = min(hub.BACKOFF_BASE_S * 2 ** (count["failures"] - 1), hub.BACKOFF_MAX_S)
        return max(delay, hub.retry_after(state.outcome.exception()) or 0.0)

    def log(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception()
        reason = {
            "conflict": "the repo changed since the plan",
            "transient": "a transient error",
            "rate_limited": "a rate limit",
        }[hub.retry_kind(exc)]
        hub.logger.warning(
            "%s: %s (%s); re-planning and retrying in %.1fs (attempt %d/%d)",
            repo_id,
            reason,
            hub.first_line(exc, token),
            state.upcoming_sleep,
            count["failures"] + 1,
            max_attempts,
        )

    def give_up(state: tenacity.RetryCallState) -> T:
        exc = state.outcome.exception()
        raise hub.PublishError(
            f"Gave up publishing {repo_id} after {max_attempts} attempts (last error: "
            f"{hub.first_line(exc, token)}). Re-running is safe: files already on the Hub are neither "
            "uploaded nor committed again."
        ) from exc

    try:
        for trying in tenacity.Retrying(
            retry=retry,
            stop=stop,
            wait=wait,
            sleep=hub.sleep,
            before=before,
            before_sleep=log,
            retry_error_callback=give_up,
        ):
            with trying:
                return attempt(trying.retry_state.attempt_number)
    except hub.PublishError:
        raise
    except Exception as exc:
        error = hub._fatal(exc, repo_id, token)
        if error is None:
            raise
        raise error from exc


def resumable(dataset: Any, label: str) -> Iterator[dict[str, Any]]:
    """The records of `dataset`; a dropped connection is retried and, for an `IterableDataset`, resumed after the last record."""
    if not (hasattr(dataset, "state_dict") and hasattr(dataset, "load_state_dict")):
        yield from dataset
        return
    state: dict[str, Any] | None = None
    count = {"position": 0, "failures": 0}

    def retry(retry_state: tenacity.RetryCallState) -> bool:
        exc = retry_state.outcome.exception()
        if exc is None or not streams.is_dropped_connection(exc):
            return False
        count["failures"] += 1
        return True

    def give_up(retry_state: tenacity.RetryCallState) -> None:
        err = retry_state.outcome.exception()
        raise streams.SourceUnavailable(label, count["position"], count["failures"], err) from err

    def log(retry_state: tenacity.RetryCallState) -> None:
        err = retry_state.outcome.exception()
        streams.logger.warning(
            "%s: the stream dropped after record %d (%s: %s); resuming there in %.3g s (retry %d of %d)",
            label,
            count["position"],
            type(err).__name__,
            err,
            retry_state.upcoming_sleep,
            count["failures"],
            streams.RETRIES,
        )

    for attempt in tenacity.Retrying(
        retry=retry,
        stop=lambda _: count["failures"] > streams.RETRIES,
        before_sleep=log,
        retry_error_callback=give_up,
        wait=lambda _: min(streams.MAX_BACKOFF_S, streams.BACKOFF_S * 2 ** (count["failures"] - 1)),
        sleep=lambda seconds: time.sleep(seconds),
    ):
        with attempt:
            if attempt.retry_state.attempt_number > 1:
                dataset.load_state_dict(state)
            for record in dataset:
                yield record
                count["position"] += 1
                count["failures"] = 0
                state = dataset.state_dict()
