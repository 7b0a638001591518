"""Progress a person can follow: a `tqdm` bar on a terminal, a periodic log line anywhere else.

Every stage reports through `progress(...)`: the same calls (`update`, `set_postfix`) drive a bar
when the output is a terminal and, when it is a file or a pipe (a batch job's log, CI), one line
every `LOG_EVERY_S` seconds and one at the end, with count, rate and time left, instead of a bar
redrawn into a file. The command line points `terminal` at the real terminal when it sends the
engines' own output to a log file (`rs.cli.output`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from typing import Any, Iterator, TextIO

from tqdm.auto import tqdm

logger = logging.getLogger("rs.util.progress")

LOG_EVERY_S = 30.0
terminal: TextIO | None = None
"""Where bars are drawn; None: the current `sys.stderr`."""
_open: list[str] = []
"""What the bars open now count, outermost first: what the run is doing (a stopped run says it)."""
_phases: list[str] = []
"""The phases the run is in (`the sample stage`), outermost first: what it is doing where no bar counts (the model's
load, a store's seal)."""
_last: str | None = None
"""The last bar closed: where a run between phases was."""


def current() -> str | None:
    """The innermost bar open now (`sampling`, `writing Alpha_RS_think`), else the innermost phase, or None."""
    return _open[-1] if _open else _phases[-1] if _phases else None


def where() -> str | None:
    """Where the run is, in words for "stopped by SIGINT ...": `during sampling`, `after cleaning` (between phases), or
    None (before anything was counted)."""
    if (now := current()) is not None:
        return f"during {now}"
    return f"after {_last}" if _last is not None else None


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """The run is in phase `name` for the duration (a stopped run names it when no bar is open)."""
    _phases.append(name)
    try:
        yield
    finally:
        if name in _phases:
            del _phases[len(_phases) - 1 - _phases[::-1].index(name)]


def reset() -> None:
    """Forget the bars and phases of a command that ended (a process that runs several)."""
    global _last
    _open.clear()
    _phases.clear()
    _last = None


def _opened(desc: str) -> None:
    _open.append(desc)


def _closed(desc: str) -> None:
    global _last
    if desc in _open:
        del _open[len(_open) - 1 - _open[::-1].index(desc)]
        _last = desc


def stream() -> TextIO:
    return terminal if terminal is not None else sys.stderr


def progress(
    total: int | None, desc: str, *, unit: str = "item", enabled: bool = True, unit_scale: bool = False
) -> Any:
    """A bar on a terminal, periodic log lines otherwise; nothing when `enabled` is False. Use as a context manager.

    `unit_scale`: counts shown as kB, MB, GB (for `unit="B"`: bytes).
    """
    out = stream()
    if not enabled:
        return tqdm(total=total, disable=True)
    if out.isatty():
        sized = _columns(out) > 0  # a terminal that reports no size (a bare pseudo-terminal) gets 80 columns
        return Bar(
            total=total,
            desc=desc,
            unit=unit,
            unit_scale=unit_scale,
            file=out,
            dynamic_ncols=sized,
            ncols=None if sized else 80,
        )
    return LogProgress(total, desc, unit=unit, unit_scale=unit_scale)


def _columns(out: TextIO) -> int:
    try:
        return os.get_terminal_size(out.fileno()).columns
    except (OSError, ValueError):
        return 0


class Bar(tqdm):
    """`tqdm`'s bar, its rate and time left counted from the first update: a stage's bar opens before the model loads,
    and the load is no answer's time (tqdm's own rate would say `0:49:59 left` for a one-second job)."""

    _first: tuple[float, float] | None = None
    _counted: str | None = None

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._counted = self.desc
        _opened(self.desc)

    def close(self) -> None:
        if self._counted is not None:
            _closed(self._counted)
            self._counted = None
        super().close()

    def update(self, n: float | None = 1) -> bool | None:
        shown = super().update(n)
        if self._first is None and n:
            self._first = (self._time(), self.n)
        return shown

    @property
    def format_dict(self) -> dict[str, Any]:
        values = super().format_dict
        now, first = self._time(), self._first
        if first and now > first[0] and self.n > first[1]:
            values["rate"] = (self.n - first[1]) / (now - first[0])
        elif self.total:  # no second item yet: no rate, rather than one that counts the load (and hours left)
            values["rate"] = 0
        return values


class LogProgress:
    """The `tqdm` calls the stages make, written as a log line when it starts, every `LOG_EVERY_S` seconds and at the end."""

    def __init__(self, total: int | None, desc: str, *, unit: str = "item", unit_scale: bool = False):
        self.total, self.desc, self.unit, self.unit_scale = total, desc, unit, unit_scale
        self.n = 0
        self.postfix = ""
        self.start = self.last = time.monotonic()
        self.first: tuple[float, int] | None = None
        """(when, count) at the first update: the rate and time left count from there, not the model's load before it."""
        self.closed = False
        _opened(desc)
        logger.info("%s: started", desc)

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        self._finish(failed=kind is not None)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.first is None:
            self.first = (time.monotonic(), self.n)
        if time.monotonic() - self.last >= LOG_EVERY_S:
            self._log()

    def set_postfix(self, refresh: bool = True, **values: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def close(self) -> None:
        self._finish(failed=False)

    def _finish(self, *, failed: bool) -> None:
        if not self.closed:
            self.closed = True
            _closed(self.desc)
            self._log(done=True, failed=failed)

    def _log(self, *, done: bool = False, failed: bool = False) -> None:
        self.last = now = time.monotonic()
        elapsed = now - self.start
        rate = self.n / elapsed if elapsed > 0 else 0.0
        left = ""
        if (
            self.first is not None and now > self.first[0] and self.n > self.first[1]
        ):  # since the first answer: not the load
            rate = (self.n - self.first[1]) / (now - self.first[0])
            if self.total and not done:
                left = f", {_clock((self.total - self.n) / rate)} left"
        state = (
            (f"stopped after {_clock(elapsed)}" if failed else f"done in {_clock(elapsed)}")
            if done
            else f"{_clock(elapsed)} so far"
        )
        postfix = f" [{self.postfix}]" if self.postfix else ""
        if self.unit_scale:
            count = f"{_scaled(self.n)}{self.unit}" + (f"/{_scaled(self.total)}{self.unit}" if self.total else "")
            logger.info("%s: %s (%s%s/s, %s%s)%s", self.desc, count, _scaled(rate), self.unit, state, left, postfix)
            return
        count = f"{self.n:,}/{self.total:,}" if self.total else f"{self.n:,}"
        logger.info("%s: %s %ss (%.1f/s, %s%s)%s", self.desc, count, self.unit, rate, state, left, postfix)


def _scaled(value: float) -> str:
    """1234567 -> '1.23M', as tqdm's unit_scale writes it."""
    for prefix in ("", "k", "M", "G", "T"):
        if abs(value) < 1000 or prefix == "T":
            return f"{value:.0f}{prefix}" if prefix == "" else f"{value:.2f}{prefix}"
        value /= 1000
    raise AssertionError("unreachable")  # pragma: no cover


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
