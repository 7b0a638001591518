"""The one small interface every sampling engine implements, and what a result records.

An engine answers a batch of requests (a prompt, with or without an image) with one `Generation`
per request, in order. A request that fails alone (an image the processor refuses, a prompt longer
than the context) comes back as a `Generation` with `error` set; it never fails its batch.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol, Sequence

from rs.answers.extract import split_reasoning
from rs.registry import KindConfig
from rs.util.config_checks import at_least

PROMPT_TAIL_CHARS = 64
"""How much of a rendered prompt's end an engine records (`Generation.prompt_tail`): enough for a pre-filled block."""


@dataclass(kw_only=True)
class EngineConfig(KindConfig):
    """What every engine kind's `engine:` block holds; each kind's `Config` adds its own keys."""

    batch_size: int = 256
    """Items answered and committed to the cache together."""

    def __post_init__(self) -> None:
        at_least("batch_size", self.batch_size, 1, what="items answered and committed together")

    def recorded(self) -> dict[str, Any]:
        """What the stats (and the card) record of this engine: its kind, and what of its settings shapes outputs."""
        return {"kind": self.kind}

    def devices_per_replica(self) -> int:
        """GPUs one replica of this engine holds on the Ray path."""
        return 1

    def computes_here(self) -> bool:
        """Whether a model computes the answers on this machine's devices, which the provenance then records (GPU names,
        torch's threads: importing torch costs a second); an engine that reads answers from a file computes nothing."""
        return True

    def for_replica(self) -> EngineConfig:
        """This configuration as a Ray replica runs it (an actor that already holds its devices)."""
        return self


@dataclass(frozen=True)
class SamplingSettings:
    """What decides an output besides the prompt and the image; part of every cache key."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    max_tokens: int = 8192
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    choices: tuple[str, ...] = ()
    """When set, the output is constrained to exactly one of these strings (the judge's labels)."""
    choices_after_reasoning: bool = False
    """The constraint applies once the reasoning has ended, not from the first token (a think-then-label judge)."""
    close_reasoning: tuple[str, str] | None = None
    """`(start, end)` markers: a text-only prompt is rendered with the reasoning closed at its end (a block the template
    left open is closed, an empty one added where it opened none), so the output starts after the reasoning (a
    label-only judge on a template that ignores `enable_thinking`)."""
    repetition_detection: tuple[int, int, int] | None = None
    """`(min_pattern_size, max_pattern_size, min_count)`: an output that repeats one pattern this often ends (`repetition`)."""
    thinking_token_budget: int | None = None
    """Reasoning tokens before the engine closes the reasoning and the model must answer."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def keyed(self) -> dict[str, Any]:
        """What a cache key covers: everything but the limits the cache stores beside each answer (`LIMITS`)."""
        return {k: v for k, v in asdict(self).items() if k not in LIMITS}


LIMITS = ("max_tokens", "repetition_detection", "thinking_token_budget")
"""Settings that only end an output early: not part of a cache key, stored beside each answer, so that changing one
re-sends only the answers it ended or would end (`rs.engines.generation_cache`)."""

ENDINGS = ("stop", "length", "repetition", "thinking_budget", "error")
"""How an answer ended: stopped by itself, cut at `max_tokens`, ended by loop detection, its reasoning cut at the
thinking budget (then answered or not), or failed."""


@dataclass(frozen=True)
class Request:
    prompt: str
    """The exact user text; for sampling, also the question stored in the dataset."""
    image: bytes | None = None
    """The image's original bytes; None for text-only requests (the judge)."""
    image_sha256: str | None = None
    item_key: str | None = None
    """The QA item this request asks about (record id and turn); the replay engine looks outputs up by it."""
    sample: int = 0
    """Which sample of this prompt (`samples` > 1: the first one): sample `i` is drawn with seed `settings.seed + i`,
    as vLLM seeds the `n` samples of one request, so a sample is the same whether asked alone or among others."""
    samples: int = 1
    """How many samples, `sample` to `sample + samples - 1`, drawn from one request (vLLM's `n`: the prompt and the
    image are processed once); each comes back as its own `Generation`, its `sample` set."""

    def one(self, sample: int) -> "Request":
        """This request's sample `sample` alone."""
        return replace(self, sample=sample, samples=1)

    def image_hash(self) -> str:
        """The image's SHA-256 (the stored one, else computed from the bytes); "" for a text-only request."""
        return self.image_sha256 or (hashlib.sha256(self.image).hexdigest() if self.image else "")


@dataclass
class Generation:
    """One engine output, with the reasoning and the final answer split apart."""

    text: str
    """The raw output, as produced."""
    reasoning: str | None
    answer: str | None
    """The final answer; None when there is none (cut off by max_tokens, reasoning never closed, error)."""
    finish_reason: str
    """`stop`, `length`, `repetition` (vLLM's loop detection ended it), or `error`."""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str = ""
    model_revision: str | None = None
    error: str | None = None
    """Why this request failed alone (engine_error), if it did."""
    cacheable: bool = True
    """False for transient failures (timeouts, server errors): those are retried on the next run."""
    max_tokens: int | None = None
    """The budget it was made with (the cache records it: `rs.engines.generation_cache`)."""
    prompt_tail: str | None = None
    """The end of the prompt as the engine rendered it (`rs.engines.reasoning.PROMPT_TAIL_CHARS`): whether the chat template
    left the reasoning open there decides how the output is read. None where the engine cannot see it."""
    split_by: str | None = None
    """`server` when the engine got the reasoning already separated (`text` is then the answer part)."""
    prompt_reasoning: str | None = None
    """`open` / `closed` / `none`: where the prompt left the reasoning, as `rs.engines.reasoning` read it."""
    repetition_detection: tuple[int, int, int] | None = None
    """The loop detection it was made with (the cache records it, as `max_tokens`)."""
    thinking_token_budget: int | None = None
    """The thinking budget it was made with."""
    thinking_tokens: int | None = None
    """Reasoning tokens, counted as vLLM counts them against the budget; None where the engine cannot count them."""
    budget_cut: bool = False
    """The engine closed the reasoning at `thinking_token_budget`."""
    sample: int = 0
    """Which sample of its request it is (`Request.sample`): drawn with seed `settings.seed + sample`."""
    repeats: list[int] | None = None
    """`repeats[n - 1]`: the most times an n-token pattern repeats in a row in the output (n up to `REPEAT_PROFILE`),
    from its tokens: which loop settings would have ended it, without asking the model again. None where unknown."""
    made_on: dict[str, Any] | None = None
    """The machine and engine that made it (`rs.engines.machine.record`), stamped where the engine runs; the cache stores
    it beside the answer, not in it. None: made before rs recorded it (`rs.engines.machine.UNKNOWN`)."""

    @property
    def ending(self) -> str:
        """How it ended (one of `ENDINGS`): loop detection first, then a budget cut, then the engine's finish reason."""
        if self.finish_reason == "repetition":
            return "repetition"
        if self.budget_cut:
            return "thinking_budget"
        return self.finish_reason

    @classmethod
    def from_text(cls, text: str, *, finish_reason: str, reasoning: str | None = None, **kwargs: Any) -> "Generation":
        """A raw output, split by the default `<think>` rules; an output cut off by max_tokens has no final answer.

        The sampling stage reads every output again with the family's reasoning format (`rs.engines.reasoning`).
        """
        if reasoning is not None:  # the server already separated it (`message.reasoning`)
            answer: str | None = text.strip()
            kwargs.setdefault("split_by", "server")
        else:
            reasoning, answer = split_reasoning(text)
        if finish_reason in ("length", "repetition"):  # cut off, or a loop: nothing final to score
            answer = None
        return cls(text=text, reasoning=reasoning or None, answer=answer, finish_reason=finish_reason, **kwargs)

    @classmethod
    def failed(cls, error: str, *, cacheable: bool, **kwargs: Any) -> "Generation":
        return cls(
            text="", reasoning=None, answer=None, finish_reason="error", error=error, cacheable=cacheable, **kwargs
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Generation":
        if data.get("repetition_detection") is not None:  # JSON keeps a tuple as a list
            data = {**data, "repetition_detection": tuple(data["repetition_detection"])}
        return cls(**data)


REPEAT_PROFILE = 128
"""Pattern sizes (tokens) `Generation.repeats` covers: a loop setting with a larger `max_pattern_size` re-sends."""


def repeat_profile(tokens: Sequence[int], *, stopped: bool) -> list[int]:
    """`repeats` of an output's tokens: for each n, the most times an n-token pattern repeats in a row.

    vLLM's check (`check_sequence_repetition`, after every token) ends an output once its last `min_count` x n tokens
    are one n-token pattern repeated: it fires under `(n, min_count)` exactly when a run of
    `tokens[i] == tokens[i - n]` reaches `n x (min_count - 1)` somewhere. An output that stopped (end of sequence or
    a stop token) was not checked at its last token, so that token is left out. All sizes at once, in numpy: well
    under a millisecond for a typical answer.
    """
    import numpy as np

    ids = np.asarray(tokens[:-1] if stopped and tokens else tokens, dtype=np.int64)
    n_max = min(REPEAT_PROFILE, len(ids) - 1)
    if n_max < 1:
        return [1]
    padded = np.concatenate((np.full(n_max, -1, dtype=np.int64), ids))
    shifted = np.lib.stride_tricks.sliding_window_view(padded, len(ids))[:n_max][::-1]  # row n - 1: ids shifted by n
    runs = np.zeros((n_max, len(ids) + 2), dtype=np.int8)
    runs[:, 1:-1] = shifted == ids
    edges = np.diff(runs, axis=1)
    rows, starts = np.nonzero(edges == 1)
    _, ends = np.nonzero(edges == -1)
    longest = np.zeros(n_max, dtype=np.int64)
    np.maximum.at(longest, rows, ends - starts)
    profile = (longest // np.arange(1, n_max + 1) + 1).tolist()
    while len(profile) > 1 and profile[-1] == 1:  # most outputs: a short list
        profile.pop()
    return profile


def loop_would_end(repeats: list[int] | None, setting: tuple[int, int, int]) -> bool | None:
    """Whether loop detection `setting` would have ended an output with this profile; None when the profile cannot tell."""
    if repeats is None:
        return None
    low, high, count = setting
    if high > REPEAT_PROFILE:
        return None
    return any(repeats[n - 1] >= count for n in range(max(1, low), min(high, len(repeats)) + 1))


class Engine(Protocol):
    """A sampling engine: `vllm` (offline), `openai` (any compatible server) or `replay` (a file).

    An engine kind is a class registered with `rs.registry.ENGINES` under its `kind`, with a `Config`
    (an :class:`EngineConfig`, its `engine:` block), `from_config(config, model, base_dir=)` and
    `runs_in_replica` (whether the Ray path may build it inside a replica).
    """

    kind: str

    def identity(self) -> dict[str, Any]:
        """Model id, revision and chat template (hash): what, with the request, decides an output."""
        ...

    def generate(self, requests: Sequence[Request], settings: SamplingSettings) -> list[Generation]:
        """One Generation per request, in order; failures are isolated per request. Each request asks for one
        sample (`samples` 1, its `sample` seeding it); a stream asks for several at once only of an engine whose own
        stream can (`open_stream`)."""
        ...

    def load(self) -> None:
        """Get ready to answer (load the weights); a replica calls it before its first batch."""
        ...

    def close(self) -> None: ...
