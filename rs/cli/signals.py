"""Stopping on SIGTERM or Ctrl-C: an orderly stop on the first signal, at once on the second.

SIGTERM is what Slurm, Kubernetes and spot instances send before they kill a job; SIGINT is
Ctrl-C. The first of either raises `Interrupted` where the command is, so that the stages unwind
as they do on any error: answers already finished are committed to the generation cache (the
sampling stage's `finally`), half-written stores are removed (`rs.stages.scratch`), and the
command says how to resume (`rs.cli.run`). Unwinding can wait (a cache another process holds, an
engine slow to shut down): a second signal then ends the process at once, losing only what a
SIGKILL would (at most the answers in flight, and never a committed one).
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

from rs import progress

HANDLED = (signal.SIGINT, signal.SIGTERM)
_received: int | None = None


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
    global _received
    _received = None
    for signum in HANDLED:
        signal.signal(signum, _handle)


def received() -> int | None:
    """The first signal this process was asked to stop by, if any."""
    return _received


def _handle(signum: int, frame: FrameType | None) -> None:
    global _received
    name = signal.Signals(signum).name
    if _received is not None:
        _say(f"second {name}: stopping at once; answers not yet committed to the cache are lost (never a committed "
             "one): run the same command again to resume")
        os._exit(128 + signum)
    _received = signum
    raise Interrupted(signum)


def _say(line: str) -> None:
    stream = progress.terminal or sys.__stderr__
    try:
        if stream is not None:
            stream.write(f"\n{line}\n")
            stream.flush()
    except (OSError, ValueError):  # a closed terminal: exit anyway
        pass
