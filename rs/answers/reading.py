"""The one reading of a final answer that every verifier shares: the *stated answer*, wrappers removed, and the rest.

A final answer (the reasoning already removed, see :mod:`rs.engines.reasoning`) is read once:

* an explicit mark, in this order: ``<answer>…</answer>`` tags, ``\\boxed{…}``, an ``Answer:`` line (also
  ``答案：``, ``Final answer:``, ``**Answer:** X``, a heading ``**Final Answer**`` with the value on the next line), a sentence
  ``The answer is X`` (also ``The correct option is X``); every mark of that kind must state the same thing, else
  the marks disagree and nothing is stated;
* else the first line (the whole answer when it has one line).

The stated answer loses its wrappers (emphasis, quotes, code ticks, ``$…$``, ``\\text{…}``, a trailing period);
everything else is the *rest*. What the rest may do to the stated answer is the graders' business
(:mod:`rs.answers.grade`), decided by the values it states, not by the words around them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from rs.answers.extract import answer_tag_spans, boxed_spans

__all__ = ["Reading", "read", "unwrap"]


@dataclass(frozen=True)
class Reading:
    stated: str
    """The stated answer, wrappers removed; "" when nothing is stated."""
    rest: str
    """Everything else the answer says (explanations before or after), with the marks removed."""
    mark: str | None = None
    """``tag``, ``box``, ``line``, ``sentence``; None when the stated answer is the first line."""
    conflict: bool = False
    """Several marks that state different things: no answer is stated."""

    def clause(self) -> Reading | None:
        """The stated answer's first clause as the stated answer, the clause after it joined to the rest
        ("3, because ..." states 3); None when the stated answer is one clause."""
        m = _CLAUSE.search(self.stated)
        if m is None or m.start() == 0:
            return None
        head, tail = unwrap(self.stated[: m.start()]), self.stated[m.end() :]
        if not head:
            return None
        return Reading(head, f"{tail}\n{self.rest}".strip(), self.mark, self.conflict)


# A clause break: ", " "; " ": " " - " " — " or a sentence end, not inside a number ("1,234", "3.5").
_CLAUSE = re.compile(r"(?<!\d)[,;:](?=\s)|(?<=[^\d\s])[,;:]|\s[-—–]\s|[.!?](?=\s)|\s\(|(?<=\w)\)(?=\s)")
_ANSWER_LINE = re.compile(
    r"^[ \t>#*_-]*(?:(?:final[ \t]+|correct[ \t]+)?answer|最终答案|答案|答)[ \t]*(?:\*\*|__)?[ \t]*[:：][ \t]*(?:\*\*|__)?[ \t]*"
    r"(\S.*?)[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)
_ANSWER_HEADING = re.compile(
    r"^[ \t>#*_-]*(?:final[ \t]+)?answer[ \t*_:：]*\n[ \t]*\n?[ \t]*(\S.*?)[ \t]*$", re.IGNORECASE | re.MULTILINE
)
_ANSWER_SENTENCE = re.compile(
    r"\b(?:the[ \t]+)?(?:final[ \t]+|correct[ \t]+|right[ \t]+|best[ \t]+)?(?:answer|option|choice)[ \t]+"
    r"(?:is|would[ \t]+be|will[ \t]+be|=)[ \t]*:?[ \t]*([^\n]*)",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<!\b[A-Z])[.!?](?=\s|$)")  # not an initial ("John A. Smith")
_PAIRS = (
    ("**", "**"),
    ("__", "__"),
    ("`", "`"),
    ('"', '"'),
    ("“", "”"),
    ("'", "'"),
    ("‘", "’"),
    ("«", "»"),
    ("$$", "$$"),
    ("$", "$"),
    ("\\(", "\\)"),
    ("\\[", "\\]"),
    ("*", "*"),
    ("_", "_"),
    ("<answer>", "</answer>"),
)
_WRAPPER_COMMAND = re.compile(r"^\\(?:text|textbf|textit|mathrm|mathbf|mbox|boxed)\s*\{(.*)\}$", re.DOTALL)
_LEADING = re.compile(r"^(?:[-*#]+[ \t]+|#+)")
_PREFIX = re.compile(r"^(?:(?:final[ \t]+|correct[ \t]+)?answer|最终答案|答案)[ \t]*[:：-][ \t]*", re.IGNORECASE)


@lru_cache(maxsize=1 << 14)
def unwrap(text: str) -> str:
    """``text`` without the wrappers around it: emphasis, quotes, code ticks, math delimiters, ``\\text{}``,
    ``\\boxed{}``, a list marker, an ``Answer:`` prefix, a trailing period; bold inside it removed."""
    text = text.strip()
    if "**" in text or "__" in text:
        text = text.replace("**", "").replace("__", "")
    while True:
        before = text
        text = _LEADING.sub("", text).strip()
        text = _PREFIX.sub("", text).strip()
        if text[-1:] in ".!" and text[-2:-1] not in (".", "!"):
            text = text[:-1].rstrip()
        for left, right in _PAIRS:
            if (
                len(text) > len(left) + len(right) - 1
                and text.startswith(left)
                and text.endswith(right)
                and len(text) >= len(left) + len(right)
            ):
                inner = text[len(left) : len(text) - len(right)]
                if left in ("'", "‘") and "'" in inner:
                    continue  # "it's" inside: not a quote
                text = inner.strip()
                break
        if (m := _WRAPPER_COMMAND.match(text)) is not None:
            text = m.group(1).strip()
        if text == before:
            return text


def read(answer: str) -> Reading:
    """Read a final answer into its stated answer and the rest (see the module docstring)."""
    return _read(answer.strip())


@lru_cache(maxsize=1 << 14)
def _read(text: str) -> Reading:
    if not text:
        return Reading("", "")
    if "<" in text and (spans := answer_tag_spans(text)):
        return _marked(text, [(s, e, c) for s, e, c in spans], "tag")
    if "\\boxed" in text:
        spans = boxed_spans(text)
        if spans is None:
            return Reading("", text, "box", conflict=True)  # a box never closed: a cut answer
        if spans:
            return _marked(text, spans, "box")
    low = text.lower()
    if ("answer" in low or "答" in low) and (lines := _answer_lines(text)):
        return _marked(text, sorted(lines), "line")
    if ("answer" in low or "option" in low or "choice" in low) and (sentences := _answer_sentences(text)):
        return _marked(text, sentences, "sentence")
    newline = text.find("\n")
    if newline < 0:
        return Reading(unwrap(text), "")
    return Reading(unwrap(text[:newline]), text[newline + 1 :].strip())


def _answer_lines(text: str) -> list[tuple[int, int, str]]:
    """Lines that state the answer ("Answer: B"; an "Answer" heading with the value on the line under it)."""
    lines = [(m.start(), m.end(), m.group(1)) for m in _ANSWER_LINE.finditer(text)]
    lines += [(m.start(), m.end(), m.group(1)) for m in _ANSWER_HEADING.finditer(text)]
    return lines


def _answer_sentences(text: str) -> list[tuple[int, int, str]]:
    """Sentences that state the answer ("The answer is 3."): each span to the sentence's end, its value without it."""
    sentences = []
    for m in _ANSWER_SENTENCE.finditer(text):
        value = m.group(1)
        end = _SENTENCE_END.search(value)
        value_end = m.start(1) + (end.start() if end else len(value))
        sentences.append((m.start(), value_end + (1 if end else 0), text[m.start(1) : value_end]))
    return sentences


def _marked(text: str, spans: list[tuple[int, int, str]], mark: str) -> Reading:
    stated = [unwrap(content) for _, _, content in spans]
    rest = _outside(text, spans)
    if len({s.casefold() for s in stated}) > 1:
        return Reading("", rest, mark, conflict=True)
    return Reading(stated[-1], rest, mark)


def _outside(text: str, spans: list[tuple[int, int, str]]) -> str:
    parts, pos = [], 0
    for start, end, _ in spans:
        parts.append(text[pos:start])
        pos = max(pos, end)
    parts.append(text[pos:])
    return "\n".join(p.strip() for p in parts if p.strip())
