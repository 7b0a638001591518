"""What a publish does when the Hub says no: wait out a rate limit, re-plan after a conflict or a lost answer, stop on the rest.

Two loops, because the two kinds of failure need different things:
- a 429 (the Hub's commit quota, the API rate limit) changed nothing on the server, so the same
  request is sent again once the wait the server asked for is over (`Retry-After`, else the `RateLimit`
  header's reset, else a backoff); the plan is kept and the wait does not count as a failed attempt
  (`through_rate_limit`);
- a 5xx, a dropped connection or a 409/412 may or may not have been applied, so the publish re-plans
  from what the Hub holds before trying again (`retrying`); an attempt that committed something
  before failing gives the next one a fresh budget, so a long upload is not ended by a few
  unrelated hiccups spread over hours.
`huggingface_hub` itself retries preupload, LFS transfers and listings (with the same headers) but
never the commit POST, the merge or a status change: those are ours. They are plain loops: with tenacity
(`bench/retry.py`) the same behaviour took more lines, the restarted count and the asked-for wait in closures.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from typing import Literal, TypeVar

from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError
from huggingface_hub.utils import parse_ratelimit_headers

try:  # huggingface_hub 2.x speaks httpx2, 1.x httpx: only their transport errors are needed here
    import httpx2 as _http
except ImportError:  # pragma: no cover
    import httpx as _http  # type: ignore[no-redef]

from rs.errors import RsError, causes
from rs.hub.tokens import redact

logger = logging.getLogger("rs.hub")

BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 30.0
RATE_LIMIT_BACKOFF_S = 60.0  # a 429 that says nothing about when: the Hub's commit quota is hourly
RATE_LIMIT_BACKOFF_MAX_S = 900.0
RATE_LIMIT_MAX_WAITS = 24  # consecutive 429s on one request before giving up (re-running resumes)
_TRANSIENT_TRANSPORT_ERRORS = (_http.TimeoutException, _http.NetworkError, _http.RemoteProtocolError)

# Patched by tests so that waits do not really wait (and can drive the emulator's clock).
_sleep: Callable[[float], None] = time.sleep

Kind = Literal["conflict", "transient", "rate_limited"]
T = TypeVar("T")


class PublishError(RsError, RuntimeError):
    """Publishing failed; the message says why and what to do. Re-running is always safe."""

    exit_code = 2


class MainMoved(RuntimeError):
    """Someone committed to main while the pull request was being filled: its base is stale, re-plan."""


def sleep(seconds: float) -> None:
    _sleep(seconds)


def retry_kind(exc: BaseException) -> Kind | None:
    """How a failure is retried: re-plan (conflict, transient), wait and resend (rate_limited), or not at all (None)."""
    for cause in causes(exc):
        if isinstance(cause, OfflineModeIsEnabled):
            return None
        if isinstance(cause, MainMoved):
            return "conflict"
        if isinstance(cause, HfHubHTTPError) and cause.response is not None:
            status = cause.response.status_code
            if status in (409, 412):  # someone committed since we planned: re-plan against the new head
                return "conflict"
            if status == 429:
                return "rate_limited"
            if status == 408 or status >= 500:
                return "transient"
            return None
        if isinstance(cause, _TRANSIENT_TRANSPORT_ERRORS):
            return "transient"
    return None


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked to wait: `Retry-After`, else the reset of an exhausted `RateLimit` (as the client reads it)."""
    for cause in causes(exc):
        if isinstance(cause, HfHubHTTPError) and cause.response is not None:
            headers = cause.response.headers
            value = headers.get("Retry-After", "").strip()
            if value.isdigit():
                return float(value)
            info = parse_ratelimit_headers(headers)
            if info is not None and info.remaining == 0:
                return float(info.reset_in_seconds)
            return None
    return None


def first_line(exc: BaseException, token: str | None) -> str:
    text = str(exc).strip().splitlines()
    return redact(f"{type(exc).__name__}: {text[0] if text else ''}", token)


def _fatal(exc: Exception, repo_id: str, token: str | None) -> PublishError | None:
    """A PublishError that says what to do for errors a retry cannot fix; None for unexpected errors."""
    for cause in causes(exc):
        if isinstance(cause, OfflineModeIsEnabled):
            return PublishError(f"Cannot publish {repo_id}: HF_HUB_OFFLINE is set. Unset it and run again.")
        if isinstance(cause, ValueError) and "Invalid metadata in README.md" in str(cause):
            return PublishError(
                redact(
                    f"The Hub rejected the metadata of {repo_id}'s README.md: {cause} "
                    "Fix the YAML header of README.md and publish again.",
                    token,
                )
            )
        if isinstance(cause, HfHubHTTPError):
            status = cause.response.status_code if cause.response is not None else None
            if status in (401, 403) or isinstance(cause, RepositoryNotFoundError):
                hint = (
                    f"Check that your token has write access to '{repo_id.split('/')[0]}' "
                    "(`hf auth whoami`; create a write token at https://huggingface.co/settings/tokens)."
                )
            else:
                hint = "Re-running is safe: files already on the Hub are neither uploaded nor committed again."
            return PublishError(f"Publishing {repo_id} failed ({first_line(cause, token)}). {hint}")
    return None


def through_rate_limit(call: Callable[[], T], *, repo_id: str, what: str, token: str | None) -> T:
    """`call()`, sent again after each 429 once the wait the Hub asked for is over; other errors go up unchanged.

    A 429 is answered before anything is applied, so resending the same request is safe and keeps the plan.
    """
    for waits in range(RATE_LIMIT_MAX_WAITS + 1):
        try:
            return call()
        except Exception as exc:
            if retry_kind(exc) != "rate_limited":
                raise
            if waits == RATE_LIMIT_MAX_WAITS:
                raise PublishError(
                    f"The Hub kept refusing {what} for {repo_id} with 429 Too Many Requests ({RATE_LIMIT_MAX_WAITS} "
                    f"waits; last: {first_line(exc, token)}). Run the command again later: what is already on the "
                    "Hub (and on its open pull request) is kept and not uploaded again."
                ) from exc
            asked = retry_after(exc)
            delay = asked if asked is not None else min(RATE_LIMIT_BACKOFF_S * 2**waits, RATE_LIMIT_BACKOFF_MAX_S)
            logger.warning(
                "%s: the Hub is rate-limiting %s (%s); waiting %.0fs%s, then sending it again",
                repo_id,
                what,
                first_line(exc, token),
                delay,
                " as it asked" if asked is not None else "",
            )
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


def retrying(
    attempt: Callable[[int], T],
    *,
    repo_id: str,
    token: str | None,
    max_attempts: int,
    progress: Callable[[], int] = lambda: 0,
) -> T:
    """Run `attempt(n)` until it returns; re-plan and retry transient errors and conflicts with exponential backoff.

    `progress()` counts what the attempts have committed so far: an attempt that moved it before
    failing restarts the count of attempts.
    """
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    failures = 0
    for n in itertools.count(1):
        before = progress()
        try:
            return attempt(n)
        except PublishError:  # already says what happened and what to do (the rate-limit loop gave up)
            raise
        except Exception as exc:
            kind = retry_kind(exc)
            if kind is None:
                error = _fatal(exc, repo_id, token)
                if error is None:
                    raise
                raise error from exc
            failures = 1 if progress() > before else failures + 1
            if failures >= max_attempts:
                raise PublishError(
                    f"Gave up publishing {repo_id} after {max_attempts} attempts (last error: "
                    f"{first_line(exc, token)}). Re-running is safe: files already on the Hub are neither "
                    "uploaded nor committed again."
                ) from exc
            delay = min(BACKOFF_BASE_S * 2 ** (failures - 1), BACKOFF_MAX_S)
            delay = max(delay, retry_after(exc) or 0.0)
            reason = {
                "conflict": "the repo changed since the plan",
                "transient": "a transient error",
                "rate_limited": "a rate limit",
            }[kind]
            logger.warning(
                "%s: %s (%s); re-planning and retrying in %.1fs (attempt %d/%d)",
                repo_id,
                reason,
                first_line(exc, token),
                delay,
                failures + 1,
                max_attempts,
            )
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
