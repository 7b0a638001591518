"""``exact``: normalised exact match for single-reference short answers (GQA, CLEVR attributes, yes/no).

Only presentation differences are forgiven — case, surrounding and repeated whitespace, one trailing period —
because anything more (punctuation deletion, article removal) starts merging different answers: deleting
punctuation makes ``3.5`` equal ``35``. Non-ASCII text is put in Unicode NFC form so that a composed and a
decomposed "é" compare equal; "café" still differs from "cafe" (use ``alnum`` when accents must not matter).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from functools import lru_cache

from rs.verifiers.base import Item, Verifier, register

__all__ = ["ExactVerifier", "exact_normalise"]


@lru_cache(maxsize=1 << 16)
def exact_normalise(text: str) -> str:
    """Casefold, collapse whitespace runs to one space, trim, drop one trailing period (NFC for non-ASCII)."""
    if not text.isascii():
        text = unicodedata.normalize("NFC", text)
    text = " ".join(text.casefold().split())
    if text[-1:] == ".":
        text = text[:-1].rstrip()
    return text


@register
class ExactVerifier(Verifier):
    """Equality after :func:`exact_normalise`, also trying the prediction's first line and first paragraph."""

    name = "exact"
    version = "2"
    title = "normalised exact match"
    identifiers_as_written = True
    notation_only = True
    PARAMS = {}

    @property
    def description(self) -> str:
        return (
            "The prediction must equal the reference after both are lowercased (Unicode case folding), trimmed, "
            "have runs of whitespace collapsed to a single space, and lose one trailing period. Nothing else is "
            'forgiven: "t-shirt" differs from "t shirt", "3.5" from "35", "two" from "2", and articles count.\n\n'
            "When several references are given, matching any one of them is enough; an empty reference never "
            "matches."
        )

    def compare(self, value: str, references: Sequence[str], *, item: Item | None = None) -> bool:
        norm = exact_normalise(value)
        return any(norm == ref for ref in map(exact_normalise, references) if ref)
