"""Split raw model outputs into reasoning and final answer, and pull answers out of common markers.

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
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "answer_line", "answer_line_span", "answer_tag", "answer_tag_between", "answer_tag_spans", "any_candidate",
    "boxed_spans", "candidates", "hedges", "negates", "last_boxed", "outside_spans", "reasoning_state", "split_reasoning",
]

# `<think>`, `<thinking>`, `</think>`, `</ thinking >`; case-insensitive because models and chat templates
# disagree on capitalisation.
_OPEN_TAG = re.compile(r"<\s*think(?:ing)?\s*>", re.IGNORECASE)
_CLOSE_TAG = re.compile(r"<\s*/\s*think(?:ing)?\s*>", re.IGNORECASE)
_ANY_TAG = re.compile(r"<\s*/?\s*think(?:ing)?\s*>", re.IGNORECASE)

# `Answer: X`, `Final answer: X`, `**Final Answer:** X`, `**Answer**: X`, full-width colon. Anchored at the start of a
# line so "the answer: maybe" inside a sentence does not count.
_ANSWER_LINE = re.compile(
    r"^[ \t>#*_-]*(?:final[ \t]+)?answer[ \t]*(?:\*\*|__)?[ \t]*[:：][ \t]*(?:\*\*|__)?[ \t]*(\S.*?)[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)
# Blank line (possibly holding only spaces) = paragraph break.
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n")

_BOXED = "\\boxed"
# Words after an answer that offer another answer, doubt it or take it back, matched as whole words. Bytes
# translate and split: this runs on every multi-line answer a first line would accept, and a regex is 3x slower.
_DOUBT_WORDS = frozenset(
    b"or alternatively otherwise maybe perhaps possibly possible plausible probably might could either unsure "
    b"uncertain seems likely unclear actually correction wait "
    # a change of mind ("3\n\nHmm, on second thought, 4", "B\n\nSorry, I meant C")
    b"instead rather sorry oops mistake mistaken hmm thought again recount reconsider recheck rethink revise revised "
    b"meant "
    # a recount or a second look ("3\n\nI miscounted; it's 4", "B\n\nC may also be right")
    b"may miscount miscounted misread miscalculated miscalculation".split()
)
# Words that negate or contradict what came before ("3\n\nNo, it's 4", "red\n\nI was wrong: blue"). An explanation
# uses them too, so a first line followed by them is no answer alone (that explanation goes to the judge); a
# multiple-choice explanation discussing the other options ("A is wrong") is read without them.
_NEGATION_WORDS = frozenset(
    b"no not nope nor neither however but though although unless wrong incorrect isn aren wasn weren doesn don didn "
    b"cannot".split()
)
_HEDGE_WORDS = _DOUBT_WORDS | _NEGATION_WORDS
_HEDGE_PHRASES = (b"not sure", b"i think", b"hard to tell")
_PHRASE_ENDS = frozenset(p.rsplit(b" ", 1)[1] for p in _HEDGE_PHRASES)
_HEDGE_OR_PHRASE_END = _HEDGE_WORDS | _PHRASE_ENDS
# Bytes of ASCII letters and digits kept (lowercased), every other byte a word break.
_WORD_BYTES = bytes(ord(chr(c).lower()) if chr(c).isascii() and chr(c).isalnum() else 32 for c in range(256))


def negates(rest: str) -> bool:
    """Whether ``rest`` holds a word that negates or contradicts ("no", "not", "but", "however", "wrong", ...); a
    verifier that reads the answer's marked part takes it back when such a word comes with another value after it."""
    return not _NEGATION_WORDS.isdisjoint(rest.encode("utf-8", "replace").translate(_WORD_BYTES).split())


def hedges(rest: str, *, negations: bool = True) -> bool:
    """Whether ``rest`` (what follows an answer) offers another answer, doubts it or takes it back; with
    ``negations`` False, words that only negate ("not", "no", "wrong", "but") do not count."""
    words = rest.encode("utf-8", "replace").translate(_WORD_BYTES).split()
    if _HEDGE_OR_PHRASE_END.isdisjoint(words):
        return False
    if not (_HEDGE_WORDS if negations else _DOUBT_WORDS).isdisjoint(words):
        return True
    text = b" ".join(words)
    return any(phrase in text for phrase in _HEDGE_PHRASES)


_UNICODE_WORD = re.compile(r"[^\W_]+")
_ANSWER_WORDS = ("final", "answer")


def _line_words(line: str) -> list[str]:
    words = _UNICODE_WORD.findall(line.casefold())
    while words and words[0] in _ANSWER_WORDS:  # "Answer: red" restates "red"
        words = words[1:]
    return words


def _another_short_answer(answer: str, rest: str) -> bool:
    """Whether a line of ``rest`` (what follows a first-line or first-paragraph ``answer``) is a short answer of its
    own: one or two words ("no" after "yes", "4" after "3"), not a heading ending in ":" nor ``answer`` restated."""
    mine = None
    for line in rest.splitlines():
        line = line.strip().strip("*_#>-` \t")
        if not line or line.endswith((":", "：")):
            continue
        words = _UNICODE_WORD.findall(line)
        if len(words) > 2:
            continue
        if mine is None:
            mine = _line_words(answer)
        if _line_words(line) != mine:
            return True
    return False


def split_reasoning(text: str, *, start: str = "<think>", end: str = "</think>", opened: bool = False) -> tuple[str, str | None]:
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
    return _Tags(re.compile(re.escape(start)), re.compile(re.escape(end)),
                 re.compile(f"{re.escape(start)}|{re.escape(end)}"), shared)


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


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{…}`` in ``text``, or ``None``.

    Braces are counted (arbitrary nesting, ``\\boxed{\\sqrt{\\frac{a}{b^{2}}}}`` works) and escaped braces
    ``\\{``/``\\}`` are skipped, so ``\\boxed{\\{1, 2\\}}`` returns ``\\{1, 2\\}``. Whitespace between ``\\boxed``
    and ``{`` is allowed. Non-standard forms (``\\boxed 5``, ``\\fbox{5}``) are not answers. If the last
    ``\\boxed{`` is never closed (truncated output) the result is ``None`` rather than an earlier box, which may
    be a draft the model went on to correct.
    """
    end = len(text)
    while True:
        pos = text.rfind(_BOXED, 0, end)
        if pos < 0:
            return None
        i = pos + len(_BOXED)
        n = len(text)
        while i < n and text[i] in " \t":
            i += 1
        if i < n and text[i] == "{":
            return _braced(text, i)
        # `\boxedfoo` or `\boxed 5`: not a box, keep looking further left.
        end = pos


def _braced(text: str, open_pos: int) -> str | None:
    """Content of the brace group opening at ``open_pos``, or ``None`` when it never closes."""
    close = _brace_close(text, open_pos)
    return None if close is None else text[open_pos + 1 : close].strip()


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
    closes (a truncated answer, as in :func:`last_boxed`). ``\\boxed 5`` and ``\\boxedfoo`` are no boxes."""
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


def outside_spans(text: str, spans: list[tuple[int, int, str]]) -> str:
    """``text`` without the (ordered, disjoint) ``spans`` of :func:`boxed_spans` or :func:`answer_tag_spans`, each
    replaced by a space."""
    bounds = [0] + [i for start, end, _ in spans for i in (start, end)] + [len(text)]
    return " ".join(text[bounds[i] : bounds[i + 1]] for i in range(0, len(bounds), 2))


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


def answer_line(text: str) -> str | None:
    """Value of the last ``Answer: X`` line (also ``Final answer:``, ``**Final Answer:** X``), or ``None``.

    Matching is case-insensitive and anchored at the start of a line; bold markers around the value
    (``Final Answer: **73**``) are removed. The **last** such line wins because reasoning models restate and
    correct themselves.
    """
    span = answer_line_span(text)
    return None if span is None else span[2]


def answer_line_span(text: str) -> tuple[int, int, str] | None:
    """``(start, end, value)`` of the line :func:`answer_line` reads, or ``None``."""
    if "nswer" not in text and "NSWER" not in text and "answer" not in text.lower():
        return None
    last = None
    for last in _ANSWER_LINE.finditer(text):
        pass
    if last is None:
        return None
    value = last.group(1).strip("*_ \t\r")
    return (last.start(), last.end(), value) if value else None


def answer_tag(text: str) -> str | None:
    """Content of the last complete ``<answer>…</answer>`` pair (any case), trimmed, or ``None``.

    The last tag wins (lmms-eval takes the first) because a model that restates its answer usually means the
    later one.
    """
    return answer_tag_between(text, "<answer>", "</answer>")


def answer_tag_between(text: str, start: str, end: str) -> str | None:
    """Content of the last complete ``start…end`` pair (case-insensitive), trimmed, or ``None`` (:func:`answer_tag`)."""
    if start[0] not in text and start[0].swapcase() not in text:
        return None
    low, start, end = text.lower(), start.lower(), end.lower()
    close = low.rfind(end)
    if close < 0:
        return None
    opening = low.rfind(start, 0, close)
    if opening < 0:
        return None
    return text[opening + len(start) : close].strip()


def candidates(answer: str) -> tuple[str, ...]:
    """``(full, first line, first paragraph)`` of a trimmed answer, duplicates removed, order kept.

    Short-answer verifiers accept when *any* candidate matches, so a model that answers and then explains
    ("12\\n\\nExplanation: …") is not penalised for the explanation. When the rest hedges, corrects or negates
    ("red\\n\\nAlternatively it could be blue", "3\\n\\nNo, it's 4"), only the full text is a candidate; a first
    line or paragraph followed by a line that is a short answer of its own ("yes\\nno", "3\\n4") is no candidate
    either.
    Numeric-tolerance and multiple-choice verifiers must not use this: a first line can hold several numbers or
    option letters.
    """
    full = answer.strip()
    newline = full.find("\n")
    if newline < 0:
        return (full,)
    if hedges(full[newline + 1 :]):
        return (full,)  # "3\n\nor maybe 4": what follows offers another answer, the first line is no answer alone
    first_line = full[:newline].strip()
    found = [full]
    if not _another_short_answer(first_line, full[newline + 1 :]):
        found.append(first_line)
    paragraph_break = _PARAGRAPH_BREAK.search(full, newline)
    if paragraph_break is not None:
        paragraph = full[: paragraph_break.start()].strip()
        if paragraph != first_line and not _another_short_answer(paragraph, full[paragraph_break.end() :]):
            found.append(paragraph)
    return tuple(found)


def any_candidate(answer: str, accepts: Callable[[str], bool]) -> bool:
    """Whether ``accepts`` holds for one of :func:`candidates` of ``answer``.

    Same answer as ``any(map(accepts, candidates(answer)))``, but the hedge checks run only when a first line or
    paragraph would be accepted: most multi-line answers are rejected before they are needed.
    """
    full = answer.strip()
    if accepts(full):
        return True
    newline = full.find("\n")
    if newline < 0:
        return False
    first_line = full[:newline].strip()
    line_ok = accepts(first_line)
    paragraph_break = _PARAGRAPH_BREAK.search(full, newline)
    paragraph = None if paragraph_break is None else full[: paragraph_break.start()].strip()
    paragraph_ok = paragraph is not None and paragraph != first_line and accepts(paragraph)
    if not (line_ok or paragraph_ok) or hedges(full[newline + 1 :]):
        return False
    if line_ok and not _another_short_answer(first_line, full[newline + 1 :]):
        return True
    if not paragraph_ok:
        return False
    assert paragraph is not None and paragraph_break is not None  # paragraph_ok says so
    return not _another_short_answer(paragraph, full[paragraph_break.end() :])
