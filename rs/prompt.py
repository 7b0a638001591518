"""The exact text the model receives, which is also the question stored in the published rows.

One function builds it, so the training text and the inference-time input cannot drift apart.
"""

from __future__ import annotations


def build_prompt(question: str, instruction: str) -> str:
    """The cleaned question followed by the family's instruction, byte for byte.

    Cleaning has already removed a copy of the instruction that the source had appended, so it
    appears exactly once.
    """
    return question + instruction
