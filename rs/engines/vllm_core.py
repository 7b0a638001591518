"""vLLM behind one wall: the engine loop of a `vllm.LLM`, and every vLLM internal rs relies on.

The `vllm` engine (`rs.engines.vllm`) streams requests into a running `vllm.LLM` and steps it
itself, so that new requests join as others finish; that loop is `LLM.chat`'s own, without its
barrier, and vLLM's public API stops short of it in a few places. Each place is here, in one
module, with a test in `tests/engines/test_vllm_internals.py` that names it and fails on a vLLM that
changed it:

- the loop: `LLM.enqueue` / `LLM.enqueue_chat` add a request and return its id, `LLM.llm_engine`'s
  `step()` returns what finished and `has_unfinished_requests()` says whether anything is left;
- request ids: `enqueue_chat` takes no id of ours (`LLMEngine.add_request` does, but only for a
  conversation already rendered, which is `LLM`'s private `_preprocess_chat`), and the id it
  returns is the engine's internal one, `"<external>-<8 random characters>"`
  (`InputProcessor.assign_request_id`), while outputs carry the external one: `external_id`;
- the configuration vLLM resolved: `vllm_config.scheduler_config.max_num_seqs`,
  `structured_outputs_config.reasoning_parser` and `reasoning_config`'s token ids (a `tags`
  reasoning format is passed as a `vllm.config.reasoning.ReasoningConfig`);
- a dead engine core: the offline client's `engine_core.resources.engine_dead`, its
  `outputs_queue` (a step waiting there is woken with `EngineDeadError`) and
  `resources.engine_manager.finished_procs()` (how the process ended);
- closing: `engine_core.shutdown()` (an in-process core's own calls `EngineCore.shutdown`, which unfreezes the heap and
  calls `vllm.distributed.parallel_state.cleanup_dist_env_and_memory`; called here only when that shutdown fails); a
  dead core's client context (`engine_core.resources.ctx`) kept from termination;
- the chat template as `LLM.chat` resolves it, without the weights (`EngineArgs.create_model_config`,
  `vllm.tokenizers.registry.cached_tokenizer_from_config`, `vllm.renderers.hf.resolve_chat_template`),
  and images decoded as the OpenAI-compatible server decodes a data URL
  (`vllm.multimodal.media.image.ImageMediaIO`).

`VLLMCore` owns one `LLM` and its loop: streams open a `Channel` each, add requests for a tag, and
take back the outputs that finished for them, whichever stream's wait stepped the engine. Nothing
else in rs reaches past vLLM's public classes (`LLM`, `SamplingParams`, `RequestOutput`).
vLLM itself is imported only when a function here needs it (its import takes seconds).
"""

from __future__ import annotations

import atexit
import functools
import gc
import logging
import signal
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Hashable

from rs.engines import temp_files
from rs.engines.lifeline import engine_processes_die_with_this_one, interrupts_reach_the_caller
from rs.util.long_lived import ends_with_the_command, import_for_good

if TYPE_CHECKING:
    from PIL.Image import Image
    from vllm import LLM, RequestOutput, SamplingParams

logger = logging.getLogger(__name__)

__all__ = [
    "Channel",
    "Finished",
    "ReasoningTokens",
    "VLLMCore",
    "decode_image",
    "external_id",
    "import_vllm",
    "is_engine_error",
    "is_input_error",
    "tokenizer_and_chat_template",
]

MODEL_CONFIG_ARGS = frozenset(
    {
        "tokenizer",
        "tokenizer_mode",
        "tokenizer_revision",
        "revision",
        "code_revision",
        "trust_remote_code",
        "hf_token",
        "hf_overrides",
        "hf_config_path",
        "config_format",
        "runner",
        "convert",
        "skip_tokenizer_init",
    }
)
"""The `vllm.LLM` arguments that decide which tokenizer, processor and chat template are used."""


def external_id(request_id: str) -> str:
    """The id a request's outputs carry, from the internal id `LLM.enqueue`/`enqueue_chat` returned for it.

    vLLM appends `-` and 8 random characters to the id `LLM` chose (a decimal counter), unless
    `VLLM_DISABLE_REQUEST_ID_RANDOMIZATION` keeps it as it is.
    """
    head, dash, _ = request_id.rpartition("-")
    return head if dash else request_id


@dataclass(frozen=True)
class Finished:
    """A request that finished: the tag it was added with, its first sample's number, and vLLM's output."""

    tag: Hashable
    first: int
    output: RequestOutput


@dataclass
class Channel:
    """One stream's share of the engine: its samples still running, and the outputs finished for it, not yet taken."""

    waiting: int = 0
    """Samples added and not finished yet (a request of `n` samples counts `n`)."""
    finished: list[Finished] = field(default_factory=list)
    ready: int = 0
    """Samples in `finished`."""

    @property
    def in_flight(self) -> int:
        return self.waiting + self.ready

    def take(self) -> list[Finished]:
        """The outputs finished since the last `take`."""
        done, self.finished, self.ready = self.finished, [], 0
        return done


@dataclass(frozen=True)
class ReasoningTokens:
    """The token ids vLLM counts a reasoning block between (`thinking_token_budget`): its start, and the ends it knows."""

    start: list[int]
    ends: list[list[int]]


class VLLMCore:
    """The engine loop of one `vllm.LLM`, shared by any number of streams (sampling and the judge on one model).

    `add_chat` / `add_prompt` put a request in the engine for a channel and a tag; `step` runs one
    scheduler step and hands each finished output to the channel that added it; `death` says
    whether an error means the engine is gone, and why.
    """

    def __init__(self, llm: LLM, files: temp_files.Start | None = None):
        self.llm = llm
        """The `vllm.LLM`: its public API (`chat`, `reset_prefix_cache`, `get_tokenizer`) is free to use."""
        self._owners: dict[str, tuple[Channel, Hashable, int]] = {}
        """External request id -> the channel that added it, its tag and its first sample."""
        self.files = files
        """The `vllm_dist_*` files its start made (`rs.engines.temp_files`), removed when it is torn down."""

    @classmethod
    def start(cls, model: str, args: dict[str, Any], *, reasoning_markers: tuple[str, str] | None = None) -> VLLMCore:
        """A new `vllm.LLM(model, **args)`, its processes tied to this one and watched for death.

        `reasoning_markers`: `(start, end)` strings of a reasoning format vLLM has no parser for; vLLM
        then counts `thinking_token_budget` between them. vLLM's own errors propagate unchanged.
        """
        import_vllm()
        from vllm import LLM

        if reasoning_markers and not args.get("reasoning_parser") and "reasoning_config" not in args:
            from vllm.config.reasoning import ReasoningConfig

            start, end = reasoning_markers
            args = {**args, "reasoning_config": ReasoningConfig(reasoning_start_str=start, reasoning_end_str=end)}
        _tear_down_left_engines()
        files = temp_files.Start()  # a killed run's vllm_dist_* files go now; this start's are noted when it is done
        # a SIGKILLed run leaves no engine core behind; a Ctrl-C or SIGTERM stops the start at once
        try:
            with interrupts_reach_the_caller(), engine_processes_die_with_this_one():
                llm = LLM(model=model, **args)
        except BaseException:
            files.after(in_process=False)  # a failed start's files go at the exit
            raise
        files.after(in_process=type(llm.llm_engine.engine_core).__name__ == "InprocClient")
        _wake_when_dead(llm)
        core = cls(llm, files)
        if _alone_in_this_process(llm):
            _held_to_the_exit(core)
        return core

    # - configuration vLLM resolved -

    @property
    def max_num_seqs(self) -> int:
        """Sequences the scheduler runs at once."""
        return int(getattr(self.llm.llm_engine.vllm_config.scheduler_config, "max_num_seqs", 0) or 256)

    @property
    def reasoning_parser(self) -> str | None:
        """The reasoning parser structured outputs start after (a label constrained past the reasoning), if any."""
        return self.llm.llm_engine.vllm_config.structured_outputs_config.reasoning_parser or None

    @functools.cached_property
    def reasoning_tokens(self) -> ReasoningTokens | None:
        """The markers vLLM counts the reasoning between, as token ids; None when it knows none (read once: every output asks)."""
        config = self.llm.llm_engine.vllm_config.reasoning_config
        if config is None or not config.enabled:
            return None
        ends = [ids for ids in (config.reasoning_end_token_ids, config.natural_reasoning_end_token_ids) if ids]
        return ReasoningTokens(start=list(config.reasoning_start_token_ids or []), ends=[list(e) for e in ends])

    # - the loop -

    def add_chat(
        self,
        channel: Channel,
        tag: Hashable,
        conversation: list[dict[str, Any]],
        params: SamplingParams,
        *,
        first: int = 0,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        """Render one conversation with the model's chat template and add it; vLLM's refusal (too long, a bad image) raises."""
        (request_id,) = self.llm.enqueue_chat(
            [conversation], params, use_tqdm=False, chat_template_kwargs=chat_template_kwargs
        )
        self._own(request_id, channel, tag, first, params.n)

    def add_prompt(
        self,
        channel: Channel,
        tag: Hashable,
        prompt: str,
        params: SamplingParams,
        *,
        first: int = 0,
        tokenization_kwargs: dict[str, Any] | None = None,
    ) -> None:
        """Add an already rendered prompt (text only)."""
        (request_id,) = self.llm.enqueue(
            [{"prompt": prompt}], params, use_tqdm=False, tokenization_kwargs=tokenization_kwargs
        )
        self._own(request_id, channel, tag, first, params.n)

    def _own(self, request_id: str, channel: Channel, tag: Hashable, first: int, samples: int) -> None:
        self._owners[external_id(request_id)] = (channel, tag, first)
        channel.waiting += samples

    @property
    def in_flight(self) -> int:
        """Requests added through this core and not finished yet."""
        return len(self._owners)

    def step(self) -> None:
        """One scheduler step; the requests it finished go to their channels.

        Raises what vLLM raises (see `death` for an engine that is gone), and RuntimeError when vLLM
        has nothing left to run while requests added here have not finished.
        """
        engine = self.llm.llm_engine
        for output in engine.step():  # may finish any channel's requests (the judge's beside sampling)
            if output.finished and output.request_id in self._owners:
                channel, tag, first = self._owners.pop(output.request_id)
                samples = len(output.outputs)
                channel.waiting -= samples
                channel.ready += samples
                channel.finished.append(Finished(tag, first, output))
        if self._owners and not engine.has_unfinished_requests():
            raise RuntimeError(f"vLLM dropped {len(self._owners)} requests without finishing them")

    # - failures -

    def death(self, err: BaseException) -> str | None:
        """Why the engine cannot go on when `err` means it cannot (out of memory, its core process gone); else None."""
        from vllm.v1.engine.exceptions import EngineDeadError

        if (
            isinstance(err, MemoryError)
            or type(err).__name__ == "OutOfMemoryError"
            or "out of memory" in str(err).lower()
        ):
            return f"out of memory ({type(err).__name__}: {err})"
        if isinstance(err, EngineDeadError):
            return self._process_end() or "its engine core process stopped"
        return None

    def _process_end(self) -> str | None:
        """How vLLM's engine core process ended (killed by which signal, or its exit status), when vLLM says."""
        try:
            ended = self.llm.llm_engine.engine_core.resources.engine_manager.finished_procs()
        except AttributeError:  # an in-process engine, or another vLLM layout
            return None
        for name, code in ended.items():
            if code is not None and code < 0:
                killer = signal.Signals(-code).name
                oom = " (the kernel's out-of-memory killer sends it: see `dmesg`)" if killer == "SIGKILL" else ""
                return f"its process {name} was killed by {killer}{oom}"
            if code:
                return f"its process {name} exited with status {code}"
        return None

    def shutdown(self) -> None:
        """Free the engine (weights, KV cache, worker processes), so that a later engine in this process starts cleanly.

        In a process that ends with its command (`rs.util.long_lived.ends_with_the_command`), an engine that has no
        process of its own (`_alone_in_this_process`, checked when it started) is left to the exit instead, unless
        another engine starts first (`_tear_down_left_engines`): its teardown walks the whole heap three times
        (`EngineCore.shutdown` unfreezes it, then collects), 1.9 s of CPU for the tiny model, to free memory the exit
        frees anyway.
        """
        if self.llm is None or self in _LEFT_TO_THE_EXIT:
            return
        self._owners.clear()
        if ends_with_the_command() and self in _IN_THIS_PROCESS:
            _LEFT_TO_THE_EXIT.append(self)
            return
        self._tear_down()

    def _tear_down(self) -> None:
        llm, self.llm = self.llm, None  # type: ignore[assignment]
        _keep_the_context_of_a_dead_core(llm)
        try:
            # an engine core in this process tears down its distributed state itself (`cleanup_dist_env_and_memory`);
            # one in its own process leaves none here
            llm.llm_engine.engine_core.shutdown()
            torn_down = True
        except Exception:  # already shut down, or an engine without a separate core
            logger.debug("vLLM engine core shutdown failed", exc_info=True)
            torn_down = False
        del llm
        gc.collect()  # the engine's last cycles, and its weights and KV cache with them
        if not torn_down:
            try:
                from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

                cleanup_dist_env_and_memory()
            except Exception:
                logger.debug("vLLM distributed cleanup failed", exc_info=True)
        if self.files is not None:
            self.files.tear_down()  # what torch left of its file store (a core that died), unless still in use here
        # an in-process core's teardown unfroze the heap (`gc.unfreeze`) and walked it three times; what is left lives to
        # the end (torch, vLLM, the run's own objects): out of the rest of the run's collections again, as after the import
        gc.freeze()


_LEFT_TO_THE_EXIT: list[VLLMCore] = []
"""Closed engines left to the exit (`VLLMCore.shutdown`), held here: one collected late would tear down the process's
model-parallel state under the next engine."""


def _alone_in_this_process(llm: LLM) -> bool:
    """The engine core runs in this process (vLLM's `InprocClient`) and its model too (the `uni` executor): no process
    or shared memory of its own that must be stopped or released before this process ends."""
    engine = llm.llm_engine
    return (
        type(engine.engine_core).__name__ == "InprocClient"
        and engine.vllm_config.parallel_config.distributed_executor_backend == "uni"
    )


_IN_THIS_PROCESS: weakref.WeakSet[VLLMCore] = weakref.WeakSet()
"""The engines started here that run wholly in this process, open or left to the exit."""


def _held_to_the_exit(core: VLLMCore) -> None:
    _exit_hook()
    _IN_THIS_PROCESS.add(core)


@functools.cache
def _exit_hook() -> None:
    # registered once the first engine made vLLM's finalizers (and with them `weakref.finalize`'s exit hook), so it
    # runs before that hook: exit hooks run last in, first out
    atexit.register(_let_the_exit_free_them)


def _tear_down_left_engines() -> None:
    """Before another engine loads: the engines left to the exit are torn down now, their memory the new one's."""
    while _LEFT_TO_THE_EXIT:
        _LEFT_TO_THE_EXIT.pop()._tear_down()


def _let_the_exit_free_them() -> None:
    """At the exit of a process that ends with its command: the engines still held here, closed or not, are left to
    the process's end. Their in-process clients' finalizers (`InprocClient._finalizer`, which `weakref.finalize`'s exit
    hook would run: `EngineCore.shutdown`, three walks of the heap) are detached."""
    if not ends_with_the_command():
        return
    for core in list(_IN_THIS_PROCESS):
        if core.llm is not None and (finalizer := getattr(core.llm.llm_engine.engine_core, "_finalizer", None)):
            finalizer.detach()


_DEAD_CORES_CONTEXTS: list[Any] = []


def _keep_the_context_of_a_dead_core(llm: LLM) -> None:
    """Keep the ZeroMQ context of a client whose engine core process died for the rest of this process: never collected,
    never terminated.

    Collecting the client's context terminates it, and `zmq_ctx_term` waits for every message its sockets still hold.
    After the core died, one may be meant for it, or for the client's output thread that already stopped (vLLM 0.32's
    cleanup sends that thread a shutdown message with an unlimited linger): a run that had said why it stopped then
    waited at exit for good (2 kills of its core in 12, under load). A run ends soon after its engine dies; a Ray
    replica starts another engine, and keeps one idle context per engine that died.
    """
    resources = getattr(llm.llm_engine.engine_core, "resources", None)
    # read before `engine_core.shutdown()`, which sets it too: set already, the core died (or vLLM cleaned up after it)
    if resources is not None and getattr(resources, "engine_dead", False):
        _DEAD_CORES_CONTEXTS.append(resources.ctx)


def is_input_error(err: BaseException) -> bool:
    """Errors that the same input raises every time: cache them rather than retry them forever."""
    from vllm.exceptions import VLLMClientError

    return isinstance(err, (VLLMClientError, ValueError, TypeError, OSError))


def is_engine_error(err: BaseException) -> bool:
    """An error of the engine rather than of one request: it fails every request after it."""
    from vllm.exceptions import VLLMServerError

    return isinstance(err, (VLLMServerError, MemoryError))


def _wake_when_dead(llm: LLM) -> None:
    """Watch the engine core process, so that a step waiting for it does not wait forever once it has died.

    vLLM's offline client (0.32) notices a killed engine core process and shuts itself down, but a
    step already waiting for the core's outputs is never woken (the thread that feeds it stops
    without a word): the run would hang. A daemon thread puts vLLM's own `EngineDeadError` where
    that step waits, so the stage stops with the engine's reason. An in-process engine (no core
    process) needs nothing: its failures raise where they happen.
    """
    core = llm.llm_engine.engine_core
    resources, outputs = getattr(core, "resources", None), getattr(core, "outputs_queue", None)
    if resources is None or outputs is None or not hasattr(resources, "engine_dead"):
        return

    def watch() -> None:
        from vllm.v1.engine.exceptions import EngineDeadError

        while not resources.engine_dead:  # also set when the engine is closed: the thread ends then too
            time.sleep(0.5)
        outputs.put_nowait(EngineDeadError())

    threading.Thread(target=watch, name="rs-vllm-core-watch", daemon=True).start()


def import_vllm() -> None:
    """`vllm.LLM`'s module (and with it torch, transformers, ...) imported for good (`rs.util.long_lived`): a sixth of a
    tiny model's start on a CPU went to collections during the import (11.8 s -> 9.6 s of CPU, the whole process).
    Raises ImportError where vLLM is not installed."""
    import_for_good("vllm.entrypoints.llm")


def tokenizer_and_chat_template(model: str, args: dict[str, Any]) -> tuple[Any, str | None]:
    """The tokenizer and chat template `LLM.chat` would use for `vllm.LLM(model, **args)`, without loading the weights.

    vLLM's own resolver on a model configuration built from the arguments that choose them: the
    processor's template first, then the tokenizer's, then vLLM's fallbacks.
    """
    import_vllm()
    from vllm.engine.arg_utils import EngineArgs
    from vllm.renderers.hf import resolve_chat_template
    from vllm.tokenizers.registry import cached_tokenizer_from_config

    model_config = EngineArgs(
        model=model, **{k: v for k, v in args.items() if k in MODEL_CONFIG_ARGS}
    ).create_model_config()
    tokenizer = cached_tokenizer_from_config(model_config)
    return tokenizer, resolve_chat_template(tokenizer, None, None, model_config=model_config)


def decode_image(data: bytes) -> Image | str:
    """The image as vLLM's server would load it from a data URL (formats, EXIF orientation, RGB), or why it cannot be."""
    from vllm.multimodal.media.image import ImageMediaIO

    try:
        return ImageMediaIO().load_bytes(data).media
    except Exception as err:  # ValueError("Failed to load image: ..."), or a decoder's own error
        return f"{type(err).__name__}: {err}"
