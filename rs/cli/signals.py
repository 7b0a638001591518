"""Stopping on SIGTERM or Ctrl-C: an orderly stop on the first signal, at once on the second.

SIGTERM is what Slurm, Kubernetes and spot instances send before they kill a job; SIGINT is
Ctrl-C. The first of either raises `Interrupted` where the command is, so that the stages unwind
as they do on any error: answers already finished are committed to the generation cache (the
sampling stage's `finally`), half-written stores are removed (`rs.pipeline.stage.scratch`), and the
command says how to resume (`rs.cli.run`). Unwinding can wait (a cache another process holds, an
engine slow to shut down): a second signal then ends the process at once, losing only what a
SIGKILL would (at most the answers in flight, and never a committed one).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from types import FrameType

from rs.util import progress

HANDLED = (signal.SIGINT, signal.SIGTERM)
_received: int | None = None
_during: str | None = None


class Interrupted(KeyboardInterrupt):
    """The command was asked to stop by a signal (a KeyboardInterrupt, so `except Exception` lets it through)."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + self.signum


def install() -> None:
    """Handle SIGTERM and SIGINT in this process (call from the main thread, before the command runs)."""
    global _received, _during
    _received = _during = None
    progress.reset()
    for signum in HANDLED:
        signal.signal(signum, _handle)


def received() -> int | None:
    """The first signal this process was asked to stop by, if any."""
    return _received


def during() -> str | None:
    """Where the run was when the first signal came, in words: `during sampling` (its innermost progress bar, else its
    phase: `during the sample stage`), `after cleaning` (between phases), if known."""
    return _during


def _handle(signum: int, frame: FrameType | None) -> None:
    global _received, _during
    name = signal.Signals(signum).name
    if _received is not None:
        _say(
            f"second {name}: stopping at once; answers not yet committed to the cache are lost (never a committed "
            "one): run the same command again to resume"
        )
        os._exit(128 + signum)
    _received, _during = signum, progress.where()
    raise Interrupted(signum)


def leave(code: int) -> None:
    """End a stopped run now when threads it abandoned would hold the process: the interpreter's exit waits for every
    thread-pool worker, and a worker uploading to a slow Hub (`rs.hub.publish`) answers when the Hub does. What they
    were doing is never committed; the same command redoes it. Returns when no such thread is left."""
    if not abandoned_threads():
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def abandoned_threads() -> bool:
    """Whether threads other than the main one still run that the interpreter's exit would wait for."""
    return any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread())


def _say(line: str) -> None:
    stream = progress.terminal or sys.__stderr__
    try:
        if stream is not None:
            stream.write(f"\n{line}\n")
            stream.flush()
    except (OSError, ValueError):  # a closed terminal: exit anyway
        pass
