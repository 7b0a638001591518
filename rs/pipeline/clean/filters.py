"""The per-item cleaning policies: fields, provenance, task purity and reference form."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from rs.records import QAItem
from rs.registry import CLEANING
from rs.util.config_checks import at_least

from .base import ItemFilter, StepCard

_WORD = re.compile(r"[^\W\d_]+")
_OPTION_LINE = re.compile(r"^[A-Z]\.\s", re.MULTILINE)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def normalise_name(name: str) -> str:
    """Dataset names compare without case or punctuation: `CLEVR-Math` == `clevr_math`."""
    return re.sub(r"[^0-9a-z]", "", name.casefold())


MAX_QUESTION_CHARS = 16_384
"""Characters a question may have, its options included (`question_too_long` beyond). Benchmark questions are a
sentence or two (CLEVR, ChartQA, DocVQA, TextVQA: under 300 characters), the longest a paragraph of context with
its choices (ScienceQA's hints, MMMU: a few thousand); 16,384 characters (about 4,000 tokens) is several times
that, and about as much as a VLM's whole context holds beside an image. A longer one is a broken record (a page of
OCR or markup in the question column), and one such item would otherwise be hashed, deduplicated, sent to the model
and stored in every split it reaches."""
MAX_ANSWER_CHARS = 4_096
"""Characters an answer or annotator's answer may have (`answer_too_long` beyond): references are words, numbers or
a short phrase (ANLS and VQA answers, under 100 characters); a verifier compares them with the model's answer, so
a reference of pages could be matched by nothing."""


class RequiredFields(ItemFilter):
    """Empty questions and empty references cannot be asked or verified; text past the bounds above is no item."""

    name = "required_fields"
    reasons = {
        "empty_question": "nothing to ask",
        "empty_answer": "nothing to verify against",
        "question_too_long": "a question (with its options) over 16,384 characters: no benchmark's is; exclusions.jsonl "
        "records such a text cut at 16,384 characters",
        "answer_too_long": "a reference over 4,096 characters: no benchmark's is",
    }
    version = "2"  # 2: question_too_long, answer_too_long
    order = 10
    card = StepCard(
        "Required fields",
        "Items with an empty question or an empty reference are dropped, and those whose question (with its options) "
        f"is over {MAX_QUESTION_CHARS:,} characters or a reference over {MAX_ANSWER_CHARS:,}: no benchmark's is.",
    )

    def check(self, item: QAItem, image_sha256: str, image_id: str | None) -> str | None:
        if not item.question.strip():
            return "empty_question"
        if not item.answer.strip():
            return "empty_answer"
        if len(item.question) + sum(len(option) for option in item.options) > MAX_QUESTION_CHARS:
            return "question_too_long"
        if any(len(answer) > MAX_ANSWER_CHARS for answer in (item.answer, *item.references)):
            return "answer_too_long"
        return None


class StripInstruction(ItemFilter):
    """Remove the family's instructions where the source already appended one.

    The instruction is appended once, at prompt time; a question that already ends with it would
    otherwise be asked with the instruction twice, and its words would count against task purity.
    A family has two (`rs.prompt.Instructions`): the one for questions with options is removed too.
    """

    name = "strip_instruction"
    order = 20
    card = StepCard(
        "Instruction appended once",
        "Where the source had already appended the family's instruction to a question, it is removed there and appended exactly once at prompt time.",
        shows_rewrites=True,
    )

    def __init__(self, instructions: tuple[str, ...]):
        super().__init__()
        longest_first = sorted((words for words in (i.split() for i in instructions) if words), key=len, reverse=True)
        self.patterns = [re.compile(r"\s*" + r"\s+".join(map(re.escape, words)) + r"\s*$") for words in longest_first]

    def check(self, item: QAItem, image_sha256: str, image_id: str | None) -> str | None:
        for pattern in self.patterns:
            if (m := pattern.search(item.question)) and m.start() > 0:
                item.question = item.question[: m.start()]
                self.rewrote(item, "instruction_removed")
                break
        return None


@dataclass
class ProvenanceConfig:
    enabled: bool = True
    sources: list[str] = field(default_factory=list)
    """Dataset names an item may record as its source; empty accepts any name."""
    check_image_ref: bool = True
    """Drop items whose recorded image id/hash does not match the image they are attached to."""


@CLEANING.register("provenance")
class Provenance(ItemFilter):
    """Drop items whose recorded source does not resolve to the image they are attached to."""

    name = "provenance"
    reasons = {
        "foreign_source": "the item's recorded dataset is not one of `provenance.sources`",
        "image_id_mismatch": "the image id the item was recorded against is not the attached image's",
        "image_hash_mismatch": "the image hash the item was recorded against is not the attached image's",
    }
    Config = ProvenanceConfig
    order = 30
    card = StepCard(
        "Provenance check",
        "Each QA item records where it came from; items whose recorded source does not resolve to the image they are attached to are dropped.",
    )

    def __init__(self, config: ProvenanceConfig):
        super().__init__()
        self.allowed = {normalise_name(s) for s in config.sources}
        self.check_image_ref = config.check_image_ref

    def check(self, item: QAItem, image_sha256: str, image_id: str | None) -> str | None:
        if self.allowed and item.source is not None and normalise_name(item.source) not in self.allowed:
            return "foreign_source"
        if self.check_image_ref and item.image_ref:
            ref = item.image_ref.strip().lower()
            if _SHA256.match(ref):
                if ref != image_sha256:
                    return "image_hash_mismatch"
            elif image_id is not None and item.image_ref != image_id:
                return "image_id_mismatch"
        return None


@dataclass
class PurityConfig:
    enabled: bool = False
    vocabulary: list[str | list[str]] = field(default_factory=list)
    """Closed vocabulary of the benchmark: a question using other words is off-task. Nested lists
    (YAML anchors of shared word lists) are flattened."""
    max_unknown_words: int = 0
    """Words outside `vocabulary` tolerated per question."""
    allow_patterns: list[str] = field(default_factory=list)
    """Regexes; when given, a question must match one of them."""
    deny_patterns: list[str] = field(default_factory=list)
    """Regexes; a question matching any of them is off-task."""

    def __post_init__(self) -> None:
        self.vocabulary = [w for item in self.vocabulary for w in ([item] if isinstance(item, str) else item)]
        at_least("max_unknown_words", self.max_unknown_words, 0, what="0: every word must be in the vocabulary")


@CLEANING.register("purity")
class TaskPurity(ItemFilter):
    """Detect off-task QA pulled into a family (by a closed vocabulary and/or question patterns)."""

    name = "task_purity"
    reasons = {
        "off_task_vocabulary": "the question uses words outside the benchmark's vocabulary: it is not of this benchmark",
        "off_task_pattern": "the question matches a deny pattern, or no allow pattern: it is not of this benchmark",
    }
    Config = PurityConfig
    order = 50
    card = StepCard(
        "Task purity",
        "Questions that leave this benchmark's closed vocabulary or patterns are off-task (pools that assign samples to a family by image match pull unrelated general-VQA questions in) and are dropped.",
    )

    def __init__(self, config: PurityConfig):
        super().__init__()
        self.vocabulary = frozenset(w.casefold() for w in config.vocabulary)
        self.max_unknown = config.max_unknown_words
        self.allow = [re.compile(p, re.IGNORECASE) for p in config.allow_patterns]
        self.deny = [re.compile(p, re.IGNORECASE) for p in config.deny_patterns]

    def check(self, item: QAItem, image_sha256: str, image_id: str | None) -> str | None:
        text = _OPTION_LINE.sub("", item.question)
        if any(p.search(text) for p in self.deny):
            return "off_task_pattern"
        if self.allow and not any(p.search(text) for p in self.allow):
            return "off_task_pattern"
        if self.vocabulary:
            unknown = sum(1 for w in _WORD.findall(text.casefold()) if w not in self.vocabulary)
            if unknown > self.max_unknown:
                return "off_task_vocabulary"
        return None


@dataclass
class ReferenceFormConfig:
    enabled: bool = False
    max_words: int = 3
    """A reference longer than this, where the instruction asks for a word or phrase, is a sentence."""
    action: Literal["drop", "mark"] = "drop"
    """`drop` the item, or keep it and record the flag in clean_meta."""

    def __post_init__(self) -> None:
        at_least("max_words", self.max_words, 1, what="below that, every reference would be a sentence")


@CLEANING.register("reference_form")
class ReferenceForm(ItemFilter):
    """A full sentence as reference where the instruction asks for a word or phrase."""

    name = "reference_form"
    reasons = {
        "sentence_reference": "a sentence where the instruction asks for a word or phrase (`action: mark` keeps it, "
        "flagged)",
    }
    Config = ReferenceFormConfig
    order = 60
    card = StepCard(
        "Reference form",
        "References that are full sentences where the instruction asks for a single word or phrase are caught.",
    )

    def __init__(self, config: ReferenceFormConfig):
        super().__init__()
        self.max_words = config.max_words
        self.drop = config.action == "drop"

    def check(self, item: QAItem, image_sha256: str, image_id: str | None) -> str | None:
        if len(item.answer.split()) <= self.max_words:
            return None
        if self.drop:
            return "sentence_reference"
        self.marked(item, "sentence_reference")
        return None
