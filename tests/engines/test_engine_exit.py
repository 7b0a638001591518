"""A command's process (and a Ray replica's) leaves its in-process engines, closed or not, to the exit: the teardown (three
walks of the whole heap, 1.9 s of CPU for the tiny model) frees memory the exit frees anyway. Until another engine
starts: that one gets the memory, so a closed engine is torn down first, before it loads. An engine with processes of
its own is always shut down."""

from __future__ import annotations

import gc
import os
import weakref

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("vllm")

from rs.engines import vllm_core  # noqa: E402
from rs.engines.vllm import VLLMEngine  # noqa: E402
from rs.util import long_lived  # noqa: E402
from rs_demo.tiny_model import VLLM_ENGINE_KWARGS  # noqa: E402


def tiny() -> VLLMEngine:
    engine = VLLMEngine("rs:tiny-vlm", engine_args=dict(VLLM_ENGINE_KWARGS))
    engine.load()
    return engine


def model_of(engine: VLLMEngine) -> weakref.ref:
    return weakref.ref(
        engine.llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner.model
    )


def test_a_commands_engines_are_left_to_the_exit_a_closed_one_until_another_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm.v1.engine.core import EngineCore

    teardowns: list[object] = []
    shutdown = EngineCore.shutdown
    monkeypatch.setattr(
        EngineCore, "shutdown", lambda core, *a, **k: (teardowns.append(core), shutdown(core, *a, **k))
    )
    monkeypatch.setattr(long_lived, "_ENDS_WITH_THE_COMMAND", True)
    open_at_exit = None
    try:
        first = tiny()
        model, client = model_of(first), first.llm.llm_engine.engine_core
        first.close()
        assert teardowns == [] and model() is not None  # left: nothing walked, the weights still there

        second = tiny()  # the first is torn down before this one loads: its memory is the second's
        assert len(teardowns) == 1 and model() is None and not client._finalizer.alive
        open_at_exit = second.llm.llm_engine.engine_core
        assert open_at_exit._finalizer.alive

        vllm_core._let_the_exit_free_them()  # at exit, the open engine too: vLLM's finalizer would tear it down
        assert not open_at_exit._finalizer.alive and len(teardowns) == 1
    finally:
        vllm_core._LEFT_TO_THE_EXIT.clear()
        if open_at_exit is not None:
            open_at_exit.engine_core.shutdown()  # what the process's end stands for here: this process goes on
        gc.collect()


def test_outside_a_command_a_closed_engine_is_torn_down_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(long_lived, "_ENDS_WITH_THE_COMMAND", False)
    engine = tiny()
    model, client = model_of(engine), engine.llm.llm_engine.engine_core
    vllm_core._let_the_exit_free_them()  # a library user's process: vLLM's finalizer stays for the exit
    assert client._finalizer.alive
    engine.close()
    assert model() is None and not client._finalizer.alive and vllm_core._LEFT_TO_THE_EXIT == []
