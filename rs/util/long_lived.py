"""Modules a process keeps to its end (torch, vLLM, datasets, ...), imported with the cyclic collector paused and then
frozen out of its later collections.

A collection walks every tracked object, and a large library's import makes hundreds of thousands that live as long as
the process: the collections the import sets off walk them again and again and free nothing, and every full collection
after it walks them once more. vLLM's engine core freezes its heap the same way once started
(`vllm.utils.gc_utils.freeze_gc_heap`). Measured whole-process: `from vllm import LLM` 7.9 -> 6.3 s of CPU, a replay
family's build and publish 3.8 -> 3.4 s.
"""

from __future__ import annotations

import atexit
import functools
import gc
import importlib
import sys
from contextlib import contextmanager
from types import ModuleType
from typing import Iterator

__all__ = ["end_with_the_command", "ends_with_the_command", "import_for_good", "kept_to_the_end"]


def import_for_good(name: str) -> ModuleType:
    """`importlib.import_module(name)`; when it is not imported yet, inside `kept_to_the_end` (a process already holding
    it, a test worker, pays nothing more)."""
    if name in sys.modules:
        return sys.modules[name]
    with kept_to_the_end():
        return importlib.import_module(name)


@contextmanager
def kept_to_the_end() -> Iterator[None]:
    """The collector paused in the block; after it, one collection and everything the process holds frozen (unfrozen
    at exit), the collector left as it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        gc.collect()
        gc.freeze()
        _unfreeze_at_exit()
    finally:
        if enabled:
            gc.enable()


@functools.cache
def _unfreeze_at_exit() -> None:
    atexit.register(gc.unfreeze)  # freed at exit, or bindings such as triton's (nanobind) report them leaked


_ENDS_WITH_THE_COMMAND = False


def end_with_the_command() -> None:
    """Say that this process ends when its command returns (`rs.cli.run_as_program`; a Ray replica's process, whose
    command is its actor): what lives to the end is then left to the exit to free (`rs.engines.vllm_core`'s in-process
    engines, closed or not)."""
    global _ENDS_WITH_THE_COMMAND
    _ENDS_WITH_THE_COMMAND = True


def ends_with_the_command() -> bool:
    """Whether this process ends when its command returns (False in a library user's process, a test)."""
    return _ENDS_WITH_THE_COMMAND
