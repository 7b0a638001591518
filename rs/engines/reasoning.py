"""How a model's output marks its reasoning and its final answer, and where its prompt leaves the reasoning.

Thinking VLMs differ. Some chat templates pre-fill an open `<think>` in the generation prompt, so the
output holds only the closing marker (Qwen3-VL-Thinking, QwQ); some open it in the output
themselves (Qwen3 hybrids, GLM-4.1V-Thinking) or use other markers (`◁think▷` ... `◁/think▷`,
Kimi-VL-Thinking); some put the final answer in `<answer>` tags. A family says which in
`model.reasoning` (`rs.families.schema.ReasoningConfig`), and every output is read here, by the
sampling stage and by the Ray driver alike, from the raw text the cache keeps: a change of format
re-reads outputs without asking the model again.

The rule that matters: reasoning text is never scored as the answer. An output whose prompt ended
inside an open reasoning block (detected from the rendered prompt's tail, which the `vllm` engine
records with every result) and that never closes it has no final answer, however plain it looks.

A vLLM reasoning parser (`parser: qwen3`, `deepseek_r1`, ...; `vllm.reasoning`) is preferred where
one exists for the model: it names the model's own markers. Where it names a start and an end, the
split follows the strict rules of `rs.answers.extract.split_reasoning` with the detected prompt state, because
the parsers' own `extract_reasoning` decides without the prompt: an output without markers is all
reasoning for one (deepseek_r1) and all answer for another (qwen3 with thinking off), whatever the
template did (vLLM #17349, #53284). A parser whose format has no such pair (gpt-oss channels) splits
with its own `extract_reasoning`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any, Callable

from rs.answers.extract import answer_tag_spans, reasoning_state, split_reasoning
from rs.engines.base import Generation
from rs.errors import UsageError

if TYPE_CHECKING:  # the families' schema is the engines' caller's (rs.engines.factory), not theirs
    from rs.families.schema import ReasoningConfig

__all__ = ["ReasoningFormat", "ReasoningFormatError", "vllm_parser_names"]

VERSION = "1"
"""How reasoning is told from the answer: bump when a change splits some output otherwise (`rs.pipeline.versions`)."""


class ReasoningFormatError(UsageError, ValueError):
    """A `model.reasoning` this machine cannot use (an unknown vLLM parser, no tokenizer to build it with)."""


def vllm_parser_names() -> list[str]:
    """The reasoning parsers the installed vLLM registers (empty without vLLM)."""
    try:
        from vllm.reasoning import ReasoningParserManager
    except ImportError:
        return []
    return sorted(ReasoningParserManager.list_registered())


class ReasoningFormat:
    """Reads outputs of one model under one set of chat-template arguments.

    Args:
        config: the model's `reasoning` block.
        tokenizer: returns the model's tokenizer (no weights); needed only by a vLLM parser, built on first use.
        chat_template_kwargs: what the requests were rendered with (a parser's state may depend on `enable_thinking`).
    """

    def __init__(
        self,
        config: ReasoningConfig,
        *,
        tokenizer: Callable[[], Any] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
    ):
        self.config = config
        self._tokenizer = tokenizer
        self._kwargs = dict(chat_template_kwargs or {})
        self._parser: Any = None

    @functools.cached_property
    def markers(self) -> tuple[str, str] | None:
        """`(start, end)` of a reasoning block; None for a model that does not reason or a parser with no such pair."""
        if self.config.parser == "none":
            return None
        if not self.config.uses_vllm_parser:
            return self.config.start, self.config.end
        parser = self.parser()
        start, end = parser.reasoning_start_str, parser.reasoning_end_str
        return (start, end) if start and end else None

    def parser(self) -> Any:
        """The vLLM reasoning parser named by the configuration, built with the model's tokenizer."""
        if self._parser is None:
            name = self.config.parser
            try:
                from vllm.reasoning import ReasoningParserManager
            except ImportError:
                raise ReasoningFormatError(
                    f"model.reasoning.parser {name!r} is a vLLM reasoning parser and vLLM is not installed",
                    hint="install vLLM, or use parser: tags with the model's markers",
                ) from None
            known = vllm_parser_names()
            if name not in known:
                raise ReasoningFormatError(
                    f"model.reasoning.parser {name!r} is not a reasoning parser of the installed vLLM",
                    hint=f"use tags, none, or one of: {', '.join(known)}",
                )
            if self._tokenizer is None:
                raise ReasoningFormatError(
                    f"model.reasoning.parser {name!r} needs the model's tokenizer, which this engine does not load",
                    hint="use parser: tags with the model's markers (a server started with --reasoning-parser separates "
                    "the reasoning itself)",
                )
            self._parser = ReasoningParserManager.get_reasoning_parser(name)(
                self._tokenizer(), chat_template_kwargs=self._kwargs
            )
        return self._parser

    def check(self) -> None:
        """Fail now, before any request is sent, if this format cannot be used here."""
        if self.config.uses_vllm_parser:
            self.parser()

    def prompt_state(self, prompt_tail: str | None) -> str | None:
        """`open`, `closed` or `none` (`rs.answers.extract.reasoning_state`); None when the prompt or the markers are unknown."""
        markers = self.markers
        if prompt_tail is None or markers is None:
            return None
        return reasoning_state(prompt_tail, start=markers[0], end=markers[1])

    def read(self, generation: Generation) -> Generation:
        """The generation with its reasoning, final answer and prompt state read from its raw text."""
        if generation.error is not None:
            return dataclasses.replace(generation, reasoning=None, answer=None, prompt_reasoning=None)
        state = self.prompt_state(generation.prompt_tail)
        reasoning, answer = self._split(generation, state)
        start, end = self.config.answer_start, self.config.answer_end
        if answer is not None and start is not None and end is not None:
            # the answer the pairs hold; pairs that disagree ("<answer>3</answer> or <answer>4</answer>") hold none
            answers = {content for _, _, content in answer_tag_spans(answer, start, end)}
            answer = answers.pop() if len(answers) == 1 else None
        if generation.finish_reason in ("length", "repetition"):
            answer = None  # cut off by max_tokens, or ended as a loop: whatever it says, it did not finish
        return dataclasses.replace(generation, reasoning=reasoning or None, answer=answer, prompt_reasoning=state)

    def _split(self, generation: Generation, state: str | None) -> tuple[str | None, str | None]:
        text = generation.text
        if generation.split_by == "server":  # the server's parser separated it; content is the answer
            return generation.reasoning, text.strip() or None
        if self.config.parser == "none":
            return None, text.strip()
        markers = self.markers
        if markers is None:  # a vLLM format without a start/end pair: the parser's own reading
            reasoning, content = self.parser().extract_reasoning(text, request=None)
            return reasoning, content.strip() if content is not None else None
        # `required`: as if the prompt had opened the block, so an output that never closes one has no answer
        opened = state == "open" or self.config.required
        return split_reasoning(text, start=markers[0], end=markers[1], opened=opened)
