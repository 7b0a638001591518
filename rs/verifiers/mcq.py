"""``mcq``: multiple-choice letter match (AI2D, ScienceQA, A-OKVQA MC, MMMU, MathVista MC).

Reference extractors guess when they cannot parse: MMMU and ScienceQA fall back to a *random* option, MathVista
to the nearest option by edit distance, several others to the first capital letter in the text ("A dog is shown,
so the answer is B" → A). For rejection sampling a guess is a coin-flip false accept, so nothing is guessed here:
the answer is read once by :mod:`rs.answers` (its stated answer must name one option: a letter such as ``B``,
``(B)``, ``B.``, ``option B``, ``B (pupa)``, or the option's own text), nothing after it may name another option
(by letter or by text), and this verifier compares the letter with the reference's.

Valid letters are the first ``len(options)`` of ``letters`` when options are given, else all of ``letters``; a
letter outside them is no option. "A" or "I" followed by a word ("A dog", "I think") is the article or the
pronoun, not an option, unless the words are that option's own text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from rs.answers import Kind, Vocabulary
from rs.verifiers.base import Item, ItemInfo, Param, Verifier, VerifierError, as_references, register

__all__ = ["McqVerifier", "extract_choice"]

_BARE = re.compile(r"[\W_]*(?:\\text(?:bf)?\s*\{)?[\W_]*([A-Za-z])[\W_]*")


def _norm_option(text: str) -> str:
    text = " ".join(text.casefold().split()).strip("*_ ")
    return text[:-1].rstrip() if text.endswith(".") else text


def _bare_letter(text: str) -> str | None:
    """The upper-cased letter of a (stripped) answer that is just a wrapped letter ("b", "(B)", "**B**")."""
    return _bare_letter_cached(text) if len(text) <= 16 else _bare_letter_uncached(text)


def _bare_letter_uncached(text: str) -> str | None:
    bare = _BARE.fullmatch(text)
    return None if bare is None else bare.group(1).upper()


# Short answers repeat ("B", "(B)", "**B**"): the regex runs once per distinct one.
_bare_letter_cached = lru_cache(maxsize=1 << 12)(_bare_letter_uncached)


def _reference_letter(reference: str, valid: str, options: Sequence[str] | None) -> str | None:
    ref = reference.strip()
    letter = _bare_letter(ref)
    if letter is not None:
        return letter if letter in valid else None
    if options:
        wanted = _norm_option(ref)
        hits = [valid[i] for i, opt in enumerate(options) if _norm_option(opt) == wanted]
        return hits[0] if len(hits) == 1 else None
    return None


def extract_choice(text: str, letters: str = "ABCD", options: Sequence[str] | None = None) -> str | None:
    """The one option letter ``text`` commits to, read as :mod:`rs.answers` reads every answer, or None.

    Example:
        >>> extract_choice("The correct answer is **B**.")
        'B'
        >>> extract_choice("Both A and B are possible.") is None
        True
    """
    verifier = McqVerifier(letters=letters)
    return verifier.grader().value(text, Kind.OPTION, item=ItemInfo(options=tuple(options or ())))


@register
class McqVerifier(Verifier):
    """The prediction must commit to exactly one option letter, equal to the reference letter."""

    name = "mcq"
    version = "2"
    title = "multiple-choice letter match"
    notation_only = True
    PARAMS = {
        "letters": Param(str, "ABCDEFGH", "option labels in order, upper-case A-Z without repeats"),
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._letters = self._params["letters"]

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        letters = params["letters"]
        if (
            not letters
            or not letters.isascii()
            or not letters.isalpha()
            or not letters.isupper()
            or len(set(letters)) != len(letters)
        ):
            raise VerifierError(
                f"Parameter 'letters' of verifier 'mcq' must be distinct upper-case letters A-Z, got {letters!r}; "
                "e.g. 'ABCD' for four options."
            )

    @property
    def letters(self) -> str:
        """The option labels, in order."""
        return self._letters

    @property
    def description(self) -> str:
        span = self._letters if len(self._letters) <= 2 else f"{self._letters[0]}–{self._letters[-1]}"
        return (
            f"Multiple choice with options labelled {span}. The answer must name exactly one option, and its letter "
            'must equal the reference letter: a letter ("B", "(B)", "B.", "**B**", "option B", "B (pupa)"), its '
            'position ("the second one", "the last option"), or, when the option texts are known, an option\'s own '
            'text. A letter counts only as a mark: alone, in brackets, after "option" or "answer", or first with a '
            'separator after it; a letter inside a sentence or an expression ("point B", "A^2+B^2") names no option, '
            'and a mark followed by another option\'s text or another value ("(D) 140°" where D is 20°) is left to '
            'the judge. A negated option ("not B") names no option, even when the question asks which is not. Nothing is '
            "ever guessed: an answer naming two "
            'different options ("A and B") or none, or a letter that is not an option, is not accepted, and no '
            "random or nearest-option fallback is used as in some benchmark scripts."
        )

    def kind(
        self, references: Sequence[str], *, item: Item | None = None, vocabulary: Vocabulary | None = None
    ) -> Kind:
        return Kind.OPTION

    def _targets(self, references: Sequence[str], item: Item | None) -> set[str | None]:
        options = item.options if item is not None and item.options else None
        valid = self._letters[: len(options)] if options else self._letters
        return {_reference_letter(r, valid, options) for r in as_references(references)}

    def compare(self, value: str, references: Sequence[str], *, item: Item | None = None) -> bool:
        letter = _bare_letter(value.strip())
        return letter is not None and letter in self._targets(references, item) - {None}

    def compare_value(
        self,
        kind: Kind,
        value: Any,
        references: Sequence[str],
        *,
        item: Item | None = None,
        vocabulary: Vocabulary | None = None,
    ) -> bool:
        return self.compare(str(value), references, item=item)

    def certain_kind(
        self, kind: Kind, references: Sequence[str], *, item: Item | None = None, vocabulary: Vocabulary | None = None
    ) -> bool:
        return None not in self._targets(references, item)
