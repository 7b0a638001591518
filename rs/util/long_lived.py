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
from types import ModuleType

__all__ = ["import_for_good"]


def import_for_good(name: str) -> ModuleType:
    """`importlib.import_module(name)`; when it is not imported yet, with the collector paused, then one collection and
    everything the process holds frozen (a process already holding it, a test worker, pays nothing more)."""
    if name in sys.modules:
        return sys.modules[name]
    enabled = gc.isenabled()
    gc.disable()
    try:
        module = importlib.import_module(name)
        gc.collect()
        gc.freeze()
        _unfreeze_at_exit()
    finally:
        if enabled:
            gc.enable()
    return module


@functools.cache
def _unfreeze_at_exit() -> None:
    atexit.register(gc.unfreeze)  # freed at exit, or bindings such as triton's (nanobind) report them leaked
