"""Multiple-choice normalisation: options as a lettered block, the reference as the bare letter.

Pools often flatten options into prose ("... Options: red, blue, green.", "(a) cube (b) sphere") and
keep the option text as the reference. A model asked such a question may answer with a letter, a
word or a sentence, and no verifier can tell them apart reliably. Re-rendering makes the task well
posed: the question ends with `A. ...` lines and the reference is one letter.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

from rs.records import QAItem
from rs.registry import CLEANING
from rs.util.config_checks import ConfigValueError

from .base import ItemFilter, StepCard

_LABEL = r"(?:options|choices|answer choices|candidates|choose from|choose one|select one|pick one|select from)"
_PROSE = re.compile(rf"(?is)^(?P<stem>.*?)[\s(]*\b{_LABEL}\s*[:\-]?\s*(?P<list>.+?)\s*\)?[.?]?\s*$")
_INLINE_MARK = re.compile(r"\(([A-Ja-j])\)\s*|(?:(?<=\s)|^)([A-J])[.:)]\s+")
_LINE = re.compile(r"^\s*\(?([A-Ja-j])[.:)]\)?\s+(.+?)\s*$")
_LETTER_REF = re.compile(
    r"(?i)^\s*(?:(?:the\s+)?(?:correct\s+)?answer(?:\s+is)?\s*[:\-]?\s*)?(?:option\s+)?\(?([A-J])\)?[.)]?\s*$"
)
_PUNCT = str.maketrans("", "", string.punctuation)


def _norm(text: str) -> str:
    return " ".join(text.casefold().translate(_PUNCT).split())


def _split_prose(listing: str) -> list[str]:
    parts = re.split(r"\s*,\s*(?:or\s+|and\s+)?|\s+or\s+|\s*;\s*|\s*/\s*", listing.strip().rstrip("."))
    return [p.strip() for p in parts if p.strip()]


def parse_options(question: str) -> tuple[str, list[str]] | None:
    """Find options in a question; returns (stem, options) or None when it is not multiple choice.

    Three layouts, tried in this order: lettered lines, inline letter markers, a prose list after a label.
    """
    return _lettered_lines(question) or _inline_marks(question) or _prose_list(question)


def _lettered_lines(question: str) -> tuple[str, list[str]] | None:
    """1. The last run of lettered lines A., B., ...

    Text after the block is the pool's own answer instruction ("Answer with the option's letter..."); it
    is not part of the stem, the family's instruction replaces it.
    """
    lines = question.rstrip().split("\n")
    matches = [_LINE.match(line) for line in lines]
    for start in reversed(range(len(lines))):
        if not (matches[start] and matches[start].group(1).upper() == "A"):
            continue
        run = []
        for m in matches[start:]:
            if not (m and m.group(1).upper() == string.ascii_uppercase[len(run)]):
                break
            run.append(m)
        if len(run) >= 2:
            head = "\n".join(lines[:start]).rstrip()
            stem = re.sub(rf"(?i)\s*\b{_LABEL}\s*[:\-]?\s*$", "", head)
            return stem, [m.group(2) for m in run]
    return None


def _inline_marks(question: str) -> tuple[str, list[str]] | None:
    """2. Inline letter markers: "(a) cube (b) sphere" or "A. cube B. sphere"."""
    marks = list(_INLINE_MARK.finditer(question))
    for start in range(len(marks)):
        run = [marks[start]]
        for m in marks[start + 1 :]:
            if (m.group(1) or m.group(2)).upper() == chr(ord((run[-1].group(1) or run[-1].group(2)).upper()) + 1):
                run.append(m)
        if (run[0].group(1) or run[0].group(2)).upper() == "A" and len(run) >= 2:
            bounds = [m.start() for m in run] + [len(question)]
            options = [question[run[i].end() : bounds[i + 1]].strip().rstrip(",;.").strip() for i in range(len(run))]
            if all(options):
                stem = re.sub(rf"(?i)[\s(]*\b{_LABEL}\s*[:\-]?\s*$", "", question[: run[0].start()].rstrip())
                return stem.rstrip(), options
    return None


def _prose_list(question: str) -> tuple[str, list[str]] | None:
    """3. A prose list after a label: "Options: red, blue or green."."""
    if m := _PROSE.match(question):
        options = _split_prose(m.group("list"))
        if len(options) >= 2:
            return m.group("stem").rstrip(), options
    return None


def letter_of(reference: str, options: list[str], letters: str) -> str | None:
    """The letter a reference names: a letter form ("(b)", "Answer: B") or an option's text."""
    if m := _LETTER_REF.match(reference):
        letter = m.group(1).upper()
        return letter if letter in letters[: len(options)] else None
    wanted = _norm(reference)
    hits = [letters[i] for i, option in enumerate(options) if _norm(option) == wanted]
    return hits[0] if len(hits) == 1 else None


def render(stem: str, options: list[str], letters: str) -> str:
    return stem + "\n" + "\n".join(f"{letters[i]}. {option}" for i, option in enumerate(options))


@dataclass
class MultipleChoiceConfig:
    enabled: bool = False
    """Render options as a lettered block in the question (`A. ...` lines) and make the reference its letter. On wherever
    `source.columns.options` is mapped; `false` beside a mapped options column is refused, since the model would be asked
    for a letter of options it is never shown."""
    letters: str = "ABCDEFGHIJ"
    """The option letters, in order; a question with more options than letters is dropped."""

    def __post_init__(self) -> None:
        if not self.letters or len(set(self.letters)) != len(self.letters):
            raise ConfigValueError(
                "letters", f"must be distinct letters, one per option (e.g. ABCDEFGHIJ), got {self.letters!r}"
            )


@CLEANING.register("multiple_choice")
class MultipleChoice(ItemFilter):
    """Re-render flattened options as a lettered block; rewrite the reference to its letter."""

    name = "multiple_choice"
    reasons = {
        "mc_reference_not_in_options": "the reference names none of the options",
        "mc_too_many_options": "more options than `letters`",
    }
    Config = MultipleChoiceConfig
    order = 40
    card = StepCard(
        "Multiple-choice normalisation",
        "Where options had been flattened into prose, they are re-rendered as a lettered block and the reference is rewritten to the bare letter, so the task is well posed and the answer is unambiguous; a reference that names no option is dropped.",
    )

    def __init__(self, config: MultipleChoiceConfig):
        super().__init__()
        self.letters = config.letters

    def check(self, item: QAItem, image_sha256: str, image_id: str | None) -> str | None:
        if item.options:
            stem, options = item.question.rstrip(), list(item.options)
        elif parsed := parse_options(item.question):
            stem, options = parsed
        else:
            return None
        if len(options) > len(self.letters):
            return "mc_too_many_options"
        letter = letter_of(item.answer, options, self.letters)
        if letter is None:
            return "mc_reference_not_in_options"
        rendered = render(stem, options, self.letters)
        if rendered != item.question:
            item.question = rendered
            self.rewrote(item, "options_rendered")
        if letter != item.answer:
            item.answer = letter
            self.rewrote(item, "reference_to_letter")
        item.options = tuple(options)
        return None
