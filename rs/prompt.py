"""The exact text the model receives, which is also the question stored in the published rows.

One function builds it, and the sampling stage builds its requests with it (`rs.pipeline.sample.requests`),
so the training text, the inference-time input and the cache key cannot drift apart. No engine here:
cleaning uses the instructions too.
"""

from __future__ import annotations

from dataclasses import dataclass

from rs.families.schema import MULTIPLE_CHOICE_INSTRUCTION, FamilyConfig
from rs.records import QAItem

VERSION = "1"
"""What the model is asked: bump when a change asks some item otherwise (`rs.pipeline.versions`)."""


def build_prompt(question: str, instruction: str) -> str:
    """The cleaned question followed by an instruction, byte for byte.

    Cleaning has already removed a copy of the instruction that the source had appended, so it
    appears exactly once.
    """
    return question + instruction


@dataclass(frozen=True)
class Instructions:
    """Which instruction a family appends to which question.

    A question with options (rendered by cleaning as a lettered block, or given by the source) is
    answered with a letter and verified as one: asking it for "a single word or phrase" is not
    well posed, so it gets `multiple_choice` instead of `default`.
    """

    default: str
    multiple_choice: str | None = MULTIPLE_CHOICE_INSTRUCTION
    """None: questions with options get `default` too."""

    @classmethod
    def of(cls, config: FamilyConfig) -> Instructions:
        return cls(config.instruction, config.multiple_choice_instruction)

    def for_item(self, item: QAItem) -> str:
        return self.multiple_choice if item.options and self.multiple_choice is not None else self.default

    def all(self) -> tuple[str, ...]:
        """Every instruction a question may be asked with (what cleaning strips where a source already appended it)."""
        return (
            (self.default,) if self.multiple_choice in (None, self.default) else (self.default, self.multiple_choice)
        )
