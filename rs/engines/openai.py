"""The `openai` engine: any OpenAI-compatible chat server (`vllm serve`, SGLang, a hosted API).

Requests run concurrently (a bounded thread pool) and are retried by the `openai` client itself
(`max_retries`): exponential backoff with jitter, `Retry-After` honoured, on transient errors only
(connection errors, timeouts, 408, 409, 429, 5xx). What a retry cannot fix is reported per request,
so that the cache keeps the right ones:

* bad input (400, 413, 422, ...: a prompt longer than the context, an image the server cannot
  decode) fails the same way every time: a cacheable failure;
* a transient error still failing after `max_retries`: a failure that is *not* cached, so the
  next run asks again;
* a wrong API key, model name or URL (401, 403, 404) would fail every request: the batch raises
  `OpenAIEngineError` instead of filling the cache with failures.

The API key is read from the environment variable named in the configuration, handed to the
client and never logged.
"""

from __future__ import annotations

import base64
import logging
import os
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Hashable, Literal, Sequence

from rs.engines.base import EngineConfig, Generation, Request, SamplingSettings
from rs.errors import RsError
from rs.registry import ENGINES
from rs.util.config_checks import at_least, positive

if TYPE_CHECKING:  # the client is imported when an engine is built: configs validate without it
    import openai

    from rs.families.schema import ModelConfig

logger = logging.getLogger(__name__)

__all__ = ["OpenAIEngine", "OpenAIEngineError", "image_data_url"]

_TRANSIENT_STATUS = frozenset({408, 409, 429})
_CONFIG_STATUS = {
    401: "the API key was refused",
    403: "the API key may not use this model",
    404: "the model or URL does not exist",
}

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)


class OpenAIEngineError(RsError, RuntimeError):
    """The server refuses every request (key, model name or URL): fix the configuration, then re-run."""


def image_data_url(data: bytes) -> str:
    """The image's original bytes as a base64 data URL, typed from its magic bytes."""
    mime = next((m for magic, m in _MAGIC if data.startswith(magic)), None)
    if mime is None:
        mime = "image/webp" if data[:4] == b"RIFF" and data[8:12] == b"WEBP" else "image/png"
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


@dataclass(kw_only=True)
class OpenAIEngineConfig(EngineConfig):
    kind: Literal["openai"]
    """`openai`: any OpenAI-compatible chat server (`vllm serve`, SGLang, a hosted API)."""
    base_url: str
    """Server URL, e.g. http://127.0.0.1:8000/v1."""
    api_key_env: str | None = None
    """Environment variable holding the API key (the key itself never goes in YAML)."""
    concurrency: int = 32
    """Requests in flight at once."""
    timeout_s: float = 600.0
    """Per-request timeout in seconds."""
    max_retries: int = 5
    """Retries with exponential backoff on transient errors."""

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("concurrency", self.concurrency, 1, what="requests in flight at once")
        positive("timeout_s", self.timeout_s, what="seconds a request may take")
        at_least("max_retries", self.max_retries, 0, what="0: no retry")

    def recorded(self) -> dict[str, Any]:
        return {"kind": self.kind, "base_url": self.base_url}


@ENGINES.register("openai")
class OpenAIEngine:
    """Answers requests through an OpenAI-compatible chat completions endpoint.

    Args:
        model: Model name the server serves (also recorded with every output).
        base_url: Server URL including `/v1`. Not part of the identity: the same model behind
            another URL gives the same outputs, so moving a server keeps the cache valid.
        api_key_env: Environment variable holding the API key; `None` for servers without one.
        concurrency: Requests in flight at once.
        timeout_s: Per-request timeout.
        max_retries: Retries of a request after a transient error (so `max_retries + 1` attempts).
        revision: Model revision, recorded and part of the identity (the server cannot tell it).
    """

    kind = "openai"
    Config = OpenAIEngineConfig
    runs_in_replica = False
    computes_here = False  # its answers' machine is not this one (`rs.engines.machine.ELSEWHERE`)

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key_env: str | None,
        concurrency: int = 32,
        timeout_s: float = 600,
        max_retries: int = 5,
        revision: str | None = None,
    ):
        from openai import OpenAI

        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be at least 0, got {max_retries}")
        api_key = "EMPTY"  # what vLLM and SGLang accept when started without --api-key
        if api_key_env:
            api_key = os.environ.get(api_key_env, "")
            if not api_key:
                raise ValueError(
                    f"environment variable {api_key_env} (engine.api_key_env) is empty or not set; export the API key in it"
                )
        self.model = model
        self.revision = revision
        self.base_url = base_url
        self.max_retries = max_retries
        self.concurrency = concurrency
        self._client = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries)
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="rs-openai")
        self._warned_closing = False

    @classmethod
    def from_config(
        cls, config: OpenAIEngineConfig, model: ModelConfig, *, base_dir: Path | None = None
    ) -> OpenAIEngine:
        return cls(
            model.id,
            base_url=config.base_url,
            api_key_env=config.api_key_env,
            concurrency=config.concurrency,
            timeout_s=config.timeout_s,
            max_retries=config.max_retries,
            revision=model.revision,
        )

    def identity(self) -> dict[str, Any]:
        return {"model": self.model, "revision": self.revision}

    def generate(self, requests: Sequence[Request], settings: SamplingSettings) -> list[Generation]:
        options = self._options(settings)
        futures: list[Future[Generation]] = [
            self._pool.submit(self._one, r, {**options, "seed": options["seed"] + r.sample} if r.sample else options)
            for r in requests
        ]
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise

    def open_stream(self, settings: SamplingSettings) -> OpenAIStream:
        """Requests kept in flight over the thread pool: each one starts as soon as a worker is free."""
        return OpenAIStream(self, settings)

    def load(self) -> None:
        """Nothing to load: the server holds the model."""

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()

    # - internals -

    def _options(self, settings: SamplingSettings) -> dict[str, Any]:
        if settings.close_reasoning and not self._warned_closing:
            self._warned_closing = True  # the server renders the prompt: a template that always thinks stays open
            logger.warning(
                "The openai engine cannot close the reasoning in the judge's prompt; the server's chat template "
                "decides (with --reasoning-parser the server constrains the label after the reasoning instead)"
            )
        extra: dict[str, Any] = {}
        if settings.chat_template_kwargs:
            extra["chat_template_kwargs"] = dict(settings.chat_template_kwargs)
        if settings.choices:
            extra["structured_outputs"] = {"choice": list(settings.choices)}
        if settings.repetition_detection is not None:  # vLLM's server takes both (its ChatCompletionRequest)
            low, high, count = settings.repetition_detection
            extra["repetition_detection"] = {"min_pattern_size": low, "max_pattern_size": high, "min_count": count}
        if settings.thinking_token_budget is not None:
            extra["thinking_token_budget"] = settings.thinking_token_budget
        options: dict[str, Any] = {
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "seed": settings.seed,
            "max_tokens": settings.max_tokens,
        }
        if extra:
            options["extra_body"] = extra
        return options

    def _one(self, request: Request, options: dict[str, Any]) -> Generation:
        import openai

        content: str | list[dict[str, Any]] = request.prompt
        if request.image is not None:
            content = [
                {"type": "image_url", "image_url": {"url": image_data_url(request.image)}},
                {"type": "text", "text": request.prompt},
            ]
        messages = [{"role": "user", "content": content}]
        meta = {"model": self.model, "model_revision": self.revision}
        try:  # the client retries transient errors itself; what reaches here is the last one
            response = self._client.chat.completions.create(model=self.model, messages=messages, **options)
        except openai.APIStatusError as err:
            status = err.status_code
            if status in _CONFIG_STATUS:
                raise OpenAIEngineError(
                    f"{self.base_url} answered {status} for model {self.model!r}: {_CONFIG_STATUS[status]}; "
                    f"check engine.base_url, model.id and the key in engine.api_key_env ({_message(err)})"
                ) from None
            refused = _refused_limit(options, status, _message(err))
            if refused:
                raise OpenAIEngineError(
                    f"{self.base_url} does not take sampling.{refused} (it answered {status}: {_message(err)})",
                    hint=f"set sampling.{refused}: null for this family (a vLLM server takes it: vllm serve ... "
                    "--reasoning-parser for thinking_token_budget)",
                ) from None
            if not _is_transient_status(status):
                return Generation.failed(f"HTTP {status}: {_message(err)}", cacheable=400 <= status < 500, **meta)
            error: Exception = err
        except (openai.APIConnectionError, openai.APIResponseValidationError) as err:  # includes timeouts
            error = err
        else:
            return self._generation(response, meta)
        attempts = _attempts(error)
        attempts_said = f"{attempts} attempt{'s' if attempts > 1 else ''}"
        logger.warning("%s after %s; leaving the request for the next run", _describe(error), attempts_said)
        return Generation.failed(f"{_describe(error)} after {attempts_said}", cacheable=False, **meta)

    def _generation(self, response: Any, meta: dict[str, Any]) -> Generation:
        if not response.choices:
            return Generation.failed("the server returned no choices", cacheable=False, **meta)
        choice = response.choices[0]
        finish_reason = choice.finish_reason
        if finish_reason in (None, "abort", "error"):
            return Generation.failed(
                f"the server ended the request with finish_reason {finish_reason!r}", cacheable=False, **meta
            )
        message = choice.message
        # vLLM and SGLang started with a reasoning parser separate the reasoning (`reasoning`, or
        # `reasoning_content` in older servers); otherwise any `<think>` block is still in content.
        reasoning = getattr(message, "reasoning", None)
        if reasoning is None:
            reasoning = getattr(message, "reasoning_content", None)
        usage = response.usage
        generation = Generation.from_text(
            message.content or "",
            reasoning=reasoning,
            finish_reason=finish_reason,
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
            **meta,
        )
        if reasoning is not None and message.content is None:
            generation.answer = None  # the parser found no end of reasoning: there is no final answer
        return generation


def _refused_limit(options: dict[str, Any], status: int, message: str) -> str | None:
    """The loop or budget setting a server refused by name (a 400 or 422 naming the field), if it did."""
    if status not in (400, 422):
        return None
    sent = options.get("extra_body") or {}
    return next(
        (key for key in ("repetition_detection", "thinking_token_budget") if key in sent and key in message), None
    )


def _is_transient_status(status: int) -> bool:
    return status in _TRANSIENT_STATUS or status >= 500


def _attempts(error: Exception) -> int:
    """How many times the client sent the request: it counts its retries in the `x-stainless-retry-count` header."""
    request = getattr(error, "request", None)
    try:
        return int(request.headers.get("x-stainless-retry-count", 0)) + 1 if request is not None else 1
    except ValueError:
        return 1


def _message(err: openai.APIStatusError) -> str:
    """The server's error message, without the client's `Error code: N - ` prefix."""
    body = err.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else None
        if isinstance(message, str) and message:
            return message
        if isinstance(body.get("message"), str):
            return body["message"]
    return err.message


def _describe(error: Exception) -> str:
    import openai

    if isinstance(error, openai.APIStatusError):
        return f"HTTP {error.status_code}: {_message(error)}"
    if isinstance(error, openai.APITimeoutError):
        return "the request timed out"
    cause = error.__cause__
    return f"{type(error).__name__}: {error}" + (f" ({type(cause).__name__}: {cause})" if cause else "")


class OpenAIStream:
    """A concurrency window over the engine's thread pool: results come back as their responses arrive."""

    def __init__(self, engine: OpenAIEngine, settings: SamplingSettings):
        self.engine = engine
        self.window = 2 * engine.concurrency  # a queued request per worker: no worker waits for the caller
        self._options = engine._options(settings)
        self._futures: dict[Future[Generation], tuple[Hashable, int]] = {}

    @property
    def in_flight(self) -> int:
        return len(self._futures)

    def submit(self, tag: Hashable, request: Request) -> None:
        """A request of several samples goes as one HTTP request per sample, sample `i` seeded `seed + i` (what a vLLM
        server's `n` does with one request's seed), so each is the same whether asked alone or among others."""
        for sample in range(request.sample, request.sample + request.samples):
            options = self._options if sample == 0 else {**self._options, "seed": self._options["seed"] + sample}
            self._futures[self.engine._pool.submit(self.engine._one, request.one(sample), options)] = (tag, sample)

    def poll(self, *, wait: bool = True) -> list[tuple[Hashable, Generation]]:
        if not self._futures:
            return []
        done, _ = futures_wait(self._futures, timeout=None if wait else 0, return_when=FIRST_COMPLETED)
        finished = []
        for future in done:
            tag, sample = self._futures.pop(future)
            generation = future.result()
            generation.sample = sample
            finished.append((tag, generation))
        return finished
