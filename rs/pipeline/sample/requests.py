"""The request that asks the model one item about its image: the prompt's text (`rs.prompt`) with the image.

One function builds it for the sample stage, the recovery pass, the Ray workers, `rs audit --replay` and
`rs refilter`, so the inference-time input and the cache key cannot drift from the question the rows store.
"""

from __future__ import annotations

from rs.engines.base import Request
from rs.prompt import Instructions, build_prompt
from rs.records import QAItem


def sampling_request(
    item: QAItem, instructions: Instructions, image_sha256: str, image: bytes | None = None
) -> Request:
    """The request that asks the model one item about its image (the bytes may be left out: the cache key needs only the hash)."""
    prompt = build_prompt(item.question, instructions.for_item(item))
    return Request(prompt=prompt, image=image, image_sha256=image_sha256, item_key=item.key)
