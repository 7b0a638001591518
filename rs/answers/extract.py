"""Split raw model outputs into reasoning and final answer, and find the common answer markers in them.

How a final answer is read (its stated answer, the rest, typed values) is :mod:`rs.answers`.

Verifiers must only ever see the *final answer*: scoring text that still contains the model's reasoning lets a
number mentioned in passing ("maybe 5... no, 3") decide the outcome. Everything here is deliberately strict —
when the output is ambiguous (an opening ``<think>`` that was never closed, an unclosed ``\\boxed{``) the helpers
return ``None`` rather than guess, because in rejection sampling a false accept puts a wrong answer into the
training data while a false reject only costs one sample.

All functions are pure, fast on the common case (no regex work when the marker substring is absent) and safe to
call from any thread.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

__all__ = ["answer_tag_spans", "boxed_spans", "reasoning_state", "split_reasoning"]

VERSION = "1"
"""The reasoning and answer marks found: bump when a change finds them otherwise in some output (`rs.pipeline.versions`)."""

# `<think>`, `<thinking>`, `</think>`, `</ thinking >`; case-insensitive because models and chat templates
# disagree on capitalisation.
_OPEN_TAG = re.compile(r"<\s*think(?:ing)?\s*>", re.IGNORECASE)
_CLOSE_TAG = re.compile(r"<\s*/\s*think(?:ing)?\s*>", re.IGNORECASE)
_ANY_TAG = re.compile(r"<\s*/?\s*think(?:ing)?\s*>", re.IGNORECASE)


_BOXED = "\\boxed"


def split_reasoning(
    text: str, *, start: str = "<think>", end: str = "</think>", opened: bool = False
) -> tuple[str, str | None]:
    """Split a raw model output into ``(reasoning, final_answer)``.

    Rules, chosen so that reasoning text can never be scored as the answer:

    * No marker at all: no reasoning, the whole (trimmed) text is the answer, unless ``opened``:
      the generation prompt itself ended inside an open reasoning block (a template that pre-fills
      ``<think>``), so the whole output is reasoning that was never closed and the answer is ``None``.
    * One or more reasoning blocks: the answer is the text after the **last** closing marker; the
      reasoning is everything before it with the markers removed.
    * A closing marker without an opening one (the chat template pre-filled the opening): same rule.
    * An opening marker that is never closed (generation truncated mid-reasoning), including one opened
      again after the last closing marker: the answer is ``None``, there is no final answer to score.

    The default markers also match ``<thinking>`` and any case and spacing, as models and templates
    write them; other markers (``◁think▷`` / ``◁/think▷``) match exactly. The answer is
    whitespace-trimmed and may be ``""`` when the model closed its reasoning and then said nothing.

    Example:
        >>> split_reasoning("<think>3... no, 4</think>\\nThe answer is 4.")
        ('3... no, 4', 'The answer is 4.')
        >>> split_reasoning("<think>never closed")
        ('never closed', None)
        >>> split_reasoning("pre-filled reasoning, never closed", opened=True)
        ('pre-filled reasoning, never closed', None)
    """
    tags = _tags(start, end)
    if tags.first_char not in text:
        return (text.strip(), None) if opened else ("", text.strip())
    last_close = None
    for last_close in tags.close.finditer(text):
        pass
    if last_close is None:
        opening = tags.open.search(text)
        if opening is None:
            return (tags.strip(text), None) if opened else ("", text.strip())
        return tags.strip(text[opening.end() :]), None
    answer = text[last_close.end() :]
    reasoning = tags.strip(text[: last_close.start()])
    if tags.open.search(answer) is not None:
        # Reasoning re-opened after the last close and never closed again: truncated.
        return reasoning, None
    return reasoning, answer.strip()


@dataclass(frozen=True)
class _Tags:
    open: re.Pattern[str]
    close: re.Pattern[str]
    any: re.Pattern[str]
    first_char: str
    """A character every marker holds: an output without it has none (a fast path for most answers)."""

    def strip(self, text: str) -> str:
        return self.any.sub("", text).strip()


_THINK_TAGS = _Tags(_OPEN_TAG, _CLOSE_TAG, _ANY_TAG, "<")


@functools.lru_cache(maxsize=16)
def _tags(start: str, end: str) -> _Tags:
    if (start, end) == ("<think>", "</think>"):
        return _THINK_TAGS
    if not start or not end:
        raise ValueError(f"reasoning markers must not be empty, got start={start!r}, end={end!r}")
    shared = next((c for c in start if c in end), "")  # none shared: no fast path ("" is in every text)
    return _Tags(
        re.compile(re.escape(start)),
        re.compile(re.escape(end)),
        re.compile(f"{re.escape(start)}|{re.escape(end)}"),
        shared,
    )


def reasoning_state(prompt_tail: str, *, start: str = "<think>", end: str = "</think>") -> str:
    """Where a rendered generation prompt leaves the reasoning: ``open``, ``closed`` or ``none``.

    ``open``: the prompt ends with an opening marker (the template pre-filled it), so the output
    starts inside the reasoning; ``closed``: it ends with a closed (usually empty) block, so the
    output is the answer; ``none``: no marker at its end, the model opens one itself or not at all.
    """
    tags = _tags(start, end)
    tail = prompt_tail.rstrip()
    last = None
    for last in tags.any.finditer(tail):
        pass
    if last is None or tail[last.end() :].strip():
        return "none"
    return "closed" if tags.close.fullmatch(last.group(0)) else "open"


def _brace_close(text: str, open_pos: int) -> int | None:
    """Position of the brace closing the group that opens at ``open_pos``, or ``None`` when it never closes."""
    depth = 0
    i = open_pos
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2  # escaped char, e.g. `\{`, `\}` or `\\`
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def boxed_spans(text: str) -> list[tuple[int, int, str]] | None:
    """Every outermost ``\\boxed{…}`` of ``text`` as ``(start, end, content)``, in order; ``None`` when one never
    closes (a truncated answer: no falling back to an earlier box, a draft). ``\\boxed 5`` and ``\\boxedfoo`` are no boxes."""
    spans: list[tuple[int, int, str]] = []
    pos = text.find(_BOXED)
    while pos >= 0:
        i = pos + len(_BOXED)
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == "{":
            close = _brace_close(text, i)
            if close is None:
                return None
            spans.append((pos, close + 1, text[i + 1 : close].strip()))
            pos = text.find(_BOXED, close + 1)
        else:
            pos = text.find(_BOXED, i)
    return spans


def answer_tag_spans(text: str, start: str = "<answer>", end: str = "</answer>") -> list[tuple[int, int, str]]:
    """Every complete ``<answer>…</answer>`` pair (any case) as ``(start, end, content)``, in order; an opening tag
    repeated before its closing one starts the pair afresh, as in :func:`answer_tag_between`."""
    low, start, end = text.lower(), start.lower(), end.lower()
    spans: list[tuple[int, int, str]] = []
    pos = 0
    while (opening := low.find(start, pos)) >= 0:
        close = low.find(end, opening + len(start))
        if close < 0:
            break
        opening = low.rfind(start, opening, close)
        spans.append((opening, close + len(end), text[opening + len(start) : close].strip()))
        pos = close + len(end)
    return spans
