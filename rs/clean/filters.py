"""The per-item cleaning policies: fields, provenance, task purity and reference form."""

from __future__ import annotations

import re

from rs.families.schema import ProvenanceConfig, PurityConfig, ReferenceFormConfig
from rs.sources.base import QAItem

from .base import ItemFilter

_WORD = re.compile(r"[^\W\d_]+")
_OPTION_LINE = re.compile(r"^[A-Z]\.\s", re.MULTILINE)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def normalise_name(name: str) -> str:
    """Dataset names compare without case or punctuation: `CLEVR-Math` == `clevr_math`."""
    return re.sub(r"[^0-9a-z]", "", name.casefold())


class RequiredFields(ItemFilter):
    """Empty questions and empty references cannot be asked or verified."""

    name = "required_fields"

    def check(self, item: QAItem, image_sha256: str, image_id: str | None) -> str | None:
        if not item.question.strip():
            return "empty_question"
        if not item.answer.strip():
            return "empty_answer"
        return None


class StripInstruction(ItemFilter):
    """Remove the family's instruction where the source already appended it.

    The instruction is appended once, at prompt time; a question that already ends with it would
    otherwise be asked with the instruction twice, and its words would count against task purity.
    """

    name = "strip_instruction"

    def __init__(self, instruction: str):
        super().__init__()
        words = instruction.split()
        self.pattern = re.compile(r"\s*" + r"\s+".join(map(re.escape, words)) + r"\s*$") if words else None

    def check(self, item: QAItem, image_sha256: str, image_id: str | None) -> str | None:
        if self.pattern is not None and (m := self.pattern.search(item.question)) and m.start() > 0:
            item.question = item.question[: m.start()]
            self.rewrote(item, "instruction_removed")
        return None


class Provenance(ItemFilter):
    """Drop items whose recorded source does not resolve to the image they are attached to."""

    name = "provenance"

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


class TaskPurity(ItemFilter):
    """Detect off-task QA pulled into a family (by a closed vocabulary and/or question patterns)."""

    name = "task_purity"

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


class ReferenceForm(ItemFilter):
    """A full sentence as reference where the instruction asks for a word or phrase."""

    name = "reference_form"

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
