"""The exact text the model receives, which is also the question stored in the published rows.

One function builds it, and one builds the request around it (single process and Ray workers
alike), so the training text, the inference-time input and the cache key cannot drift apart.
"""

from __future__ import annotations

from rs.engines.base import Request
from rs.sources.base import QAItem


def build_prompt(question: str, instruction: str) -> str:
    """The cleaned question followed by the family's instruction, byte for byte.

    Cleaning has already removed a copy of the instruction that the source had appended, so it
    appears exactly once.
    """
    return question + instruction


def sampling_request(item: QAItem, instruction: str, image_sha256: str, image: bytes | None = None) -> Request:
    """The request that asks the model one item about its image (the bytes may be left out: the cache key needs only the hash)."""
    return Request(prompt=build_prompt(item.question, instruction), image=image, image_sha256=image_sha256, item_key=item.key)
