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

from rs.extract import any_candidate
from rs.verifiers.base import Item, Verifier, as_references, numbers_or_polars_differ, register

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
    title = "normalised exact match"
    PARAMS = {}

    @property
    def description(self) -> str:
        return (
            "The prediction must equal the reference after both are lowercased (Unicode case folding), trimmed, "
            "have runs of whitespace collapsed to a single space, and lose one trailing period. Nothing else is "
            'forgiven: "t-shirt" differs from "t shirt", "3.5" from "35", "two" from "2", and articles count.\n\n'
            "The prediction is additionally tried as its first line and its first paragraph, so a model that "
            "gives the right answer and then explains anyway is not penalised for the explanation (not when what "
            "follows hedges, corrects it or offers another answer). When several "
            "references are given, matching any one of them is enough; an empty reference never matches."
        )

    def match(
        self, prediction: str | None, reference: str | Sequence[str], *, item: Item | None = None
    ) -> bool:
        if prediction is None:
            return False
        norm = exact_normalise
        if type(reference) is str:
            ref = norm(reference)
            if not ref:
                return False
            if prediction == reference:
                return True
            if "\n" not in prediction:
                return norm(prediction) == ref
            return any_candidate(prediction, lambda c: norm(c) == ref)
        refs = {r for r in map(norm, as_references(reference)) if r}
        if not refs:
            return False
        if "\n" not in prediction:
            return norm(prediction) in refs
        return any_candidate(prediction, lambda c: norm(c) in refs)

    def contradicts(
        self, prediction: str | None, reference: str | Sequence[str], *, item: Item | None = None
    ) -> bool:
        if prediction is None:
            return False
        return numbers_or_polars_differ(prediction, list(as_references(reference)))

    @property
    def contradiction_rule(self) -> str:
        return ("A plain number different from every reference number, or yes against no (and no against yes), after "
                "lowercasing and trimming.")
