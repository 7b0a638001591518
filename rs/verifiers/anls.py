"""``anls``: Average Normalised Levenshtein Similarity (DocVQA, InfographicVQA, ST-VQA).

Biten et al. 2019: ``s = 1 - NL`` when the normalised Levenshtein distance ``NL = lev(a, o) / max(|a|, |o|)`` is
below 0.5, else 0; the best reference counts. Normalisation follows the RRC-derived script (trim, lowercase,
collapse whitespace on both sides, distance on the normalised strings) with the strict ``NL < 0.5`` boundary;
lmms-eval/VLMEvalKit divide by the *raw* lengths and so over-credit whitespace padding.

ANLS is a soft score; rejection sampling needs a yes/no, so a match requires ``score >= min_score``
(default 0.9: one typo in ten characters). Four strictness rules on top:

* ``numeric_exact`` (default on): when a reference is a number (digits with optional sign, currency symbol,
  thousands commas, decimal point, percent, one trailing period), the prediction must be the same number — ANLS
  would give ``2011`` 0.75 against ``2010`` and a ten-digit number with one wrong digit 0.9. ``$1,234`` then
  equals ``1234`` (the reference metric scores that pair 0.67: a deliberate leniency on presentation), but
  leading zeros are significant (``007`` is not ``7``). A reference that only *contains* digits ("March 12,
  2010") is scored by ANLS, but only when the prediction's digit runs are the reference's: the reference metric
  accepts "March 12, 2011" at 0.93, a wrong date.
* An empty reference never matches, even an empty prediction (the reference scripts score that pair 1.0).
* A negation is never a typo: the prediction must hold as many negating words ("not", "no", "never", "n't", ...)
  as the reference, else only an exact match counts ("The report was not approved …" scores 0.92 against
  "The report was approved …").
* A typo is forgiven only inside a word: the answers must have the same number of words, and a changed word
  must have four characters or more, start with the same two as its counterpart, be one edit from it (two from
  eight characters on), be no number word, and not be a code of the
  reference (an acronym, letters and digits mixed, or parts joined by hyphens): "unlimited liability" for "limited liability",
  "decrease" for "increase", "John B. Smith" for "John A. Smith" and "XJ-4412-KLMN" for "XJ-4412-KLMM" all reach
  0.9 and are refused.

The answer is read once by :mod:`rs.answers`; this module scores the stated answer it gives.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any

from rapidfuzz.distance import Levenshtein

from rs.answers import Kind, Vocabulary
from rs.verifiers.base import Item, Param, Verifier, VerifierError, as_references, register

__all__ = ["AnlsVerifier", "anls_normalise", "anls_score", "levenshtein"]

ANLS_THRESHOLD = 0.5
# Sign, optional currency symbol, digits with optional strict thousands grouping, decimals, percent.
_NUMERIC = re.compile(r"(?P<sign>[+-]?)[$€£¥]?(?P<int>[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?P<frac>\.[0-9]+)?(?P<pct>%?)")


def levenshtein(a: str, b: str, max_distance: int | None = None) -> int:
    """Edit distance (insert/delete/substitute, cost 1) between ``a`` and ``b``, by rapidfuzz.

    With ``max_distance`` the answer is ``max_distance + 1`` whenever the distance exceeds it: the verifier only needs
    to know whether a pair is close enough, and rapidfuzz stops early. (rapidfuzz gives the hand-written dynamic
    programme's distances on 20,000 random pairs, 130-180x faster: README, "Verifier throughput".)
    """
    return Levenshtein.distance(a, b, score_cutoff=max_distance)


@lru_cache(maxsize=1 << 16)
def anls_normalise(text: str) -> str:
    """Trim, lowercase and collapse whitespace runs (the RRC ANLS script's normalisation)."""
    return " ".join(text.lower().split())


def _similarity(pred: str, ref: str, max_distance: int | None = None) -> float:
    """``1 - NL`` if ``NL < 0.5`` else 0, on already normalised strings."""
    if pred == ref:
        return 1.0
    length = max(len(pred), len(ref))
    dist = levenshtein(pred, ref, max_distance)
    nl = dist / length
    return 1.0 - nl if nl < ANLS_THRESHOLD else 0.0


def anls_score(prediction: str, references: str | Sequence[str]) -> float:
    """ANLS of ``prediction`` against the best reference.

    Pure ANLS, without the ``numeric_exact`` rule; empty references are ignored.
    """
    refs = [r for r in map(anls_normalise, as_references(references)) if r]
    pred = anls_normalise(prediction)
    return max((_similarity(pred, ref) for ref in refs), default=0.0)


@lru_cache(maxsize=1 << 14)
def _as_number(text: str) -> tuple[bool, str, Decimal, bool] | None:
    """``(negative, integer digits as written, fraction, is_percent)`` for a numeric answer such as ``$1,234.50``,
    ``-12%`` or ``7.`` (one trailing period), else ``None``.

    The integer digits are compared as written: ``007`` is an identifier, not ``7``. The fraction is compared by
    value (``1.50`` is ``1.5``)."""
    if text[-1:] == ".":
        text = text[:-1]
    m = _NUMERIC.fullmatch(text)
    if m is None:
        return None
    digits = m["int"].replace(",", "")
    fraction = Decimal("0" + (m["frac"] or ""))
    negative = m["sign"] == "-" and (digits.strip("0") != "" or fraction != 0)
    return negative, digits, fraction, bool(m["pct"])


_DIGITS = re.compile(r"[0-9]+")
_LEADING_ZERO = re.compile(r"(?<![0-9.,])0[0-9]")
# Words that negate what they stand in: "not approved" is one insertion away from "approved" (ANLS 0.92 on a long
# answer), so a typo is never forgiven across a different count of them.
_NEGATION = re.compile(r"\b(?:not|no|never|none|nor|neither|without|cannot)\b|n['’]t\b")


def _negations(text: str) -> int:
    return len(_NEGATION.findall(text)) if "n" in text else 0


_CODE = re.compile(r"\b(?:[A-Z0-9]+(?:-[A-Z0-9]+)+|[A-Z]{2,5}|(?=[A-Za-z]*[0-9])(?=[0-9]*[A-Za-z])[A-Za-z0-9]+)\b")
"""A code in a reference as written: capitals or digits joined by hyphens ("XJ-4412-KLMM"), an acronym of two to five
capitals ("KLMN", "USA"), or letters and digits mixed ("B12")."""
_MIN_TYPO_WORD = 4
_NUMBER_WORD = re.compile(
    r"(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|"
    r"eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand|million|billion|first|"
    r"second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|twentieth|thirtieth|half|halves|"
    r"quarter|dozen)s?"
)
"""A number written as a word: "sixty" for "sixth" or "fifty" for "fifteen" is another number, not a typo."""


def _typo_distance(word: str) -> int:
    """The edits a typo may make in a word: one, two from eight characters on ("recieved" is a swap)."""
    return 2 if len(word) >= 8 else 1


def _number_word(word: str) -> bool:
    return any(_NUMBER_WORD.fullmatch(part) for part in word.strip(".,;:!?()\"'").split("-"))


@lru_cache(maxsize=1 << 14)
def _codes(reference: str) -> frozenset[str]:
    return frozenset(m.group(0).lower() for m in _CODE.finditer(reference)) if reference else frozenset()


def _typos_only(pred: str, ref: str, codes: frozenset[str]) -> bool:
    """Whether the words that differ between two normalised answers could be typos of each other.

    ANLS forgives a distance, not a kind of difference: "unlimited" for "limited", "decrease" for "increase",
    "John B. Smith" for "John A. Smith" and a code with one wrong character all score 0.9 or more on a long
    answer. A forgiven difference is one of spacing, or keeps the words in place (none added or removed) and each
    changed word is long enough to hold a typo (4 characters), starts as its counterpart does (a prefix changes the
    meaning), is one edit from it (two from 8 characters on: a suffix changes the meaning too, "careless" for
    "careful"), is no number word ("fifty" for "fifteen") and no code of the reference."""
    if pred.replace(" ", "") == ref.replace(" ", ""):
        return True  # only the spacing differs: "CocaCola", "Coca Cola"
    mine, theirs = pred.split(), ref.split()
    if len(mine) != len(theirs):
        return False
    for p, r in zip(mine, theirs):
        if p == r:
            continue
        if min(len(p), len(r)) < _MIN_TYPO_WORD or p[:2] != r[:2] or r.strip(".,;:!?()\"'") in codes:
            return False
        limit = _typo_distance(r)
        if levenshtein(p, r, limit) > limit or _number_word(p) or _number_word(r):
            return False  # "careless" for "careful", "above" for "about", "fifty" for "fifteen": another word
    return True


@register
class AnlsVerifier(Verifier):
    """Accept when ANLS reaches ``min_score`` (exact number for numeric references); see the module docstring."""

    name = "anls"
    version = "3"
    title = "average normalised Levenshtein similarity"
    identifiers_as_written = True
    PARAMS = {
        "min_score": Param(float, 0.9, "minimum ANLS in (0, 1] to accept"),
        "numeric_exact": Param(bool, True, "numeric references need the same number, not a similar string"),
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._min = self._params["min_score"]
        self._numeric = self._params["numeric_exact"]

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        m = params["min_score"]
        if not 0.0 < m <= 1.0:
            raise VerifierError(
                f"Parameter 'min_score' of verifier 'anls' must be in (0, 1], got {m!r}; 0.9 tolerates one wrong "
                "character in ten, 1.0 requires an exact (case- and whitespace-insensitive) match."
            )

    @property
    def description(self) -> str:
        text = (
            "ANLS, the DocVQA / InfographicVQA metric: both answers are lowercased, trimmed and have runs of "
            "whitespace collapsed, then their similarity is one minus the edit distance divided by the longer "
            "length, counted as zero when the strings differ in half of their characters or more. The best "
            f"reference counts, and the answer is accepted when the similarity is at least **{self._min:g}**"
        )
        if self._min < 1.0:
            text += f" (about {round((1 - self._min) * 100):d} wrong characters per hundred are tolerated)."
        else:
            text += " (an exact match after normalisation)."
        if self._numeric:
            text += (
                "\n\nWhen the reference is a number, the prediction must be the same number instead: currency "
                'signs, thousands separators and one trailing period are ignored ("$1,234." equals "1234"), but '
                '"2011" does not match "2010" however similar the strings look, and leading zeros count ("007" is '
                'an identifier, not "7"). When the reference merely contains digits ("March 12, 2010", "Room 101"), '
                "a typo is tolerated in its letters but never in its digits: the prediction's runs of digits must be "
                "the reference's."
            )
        text += (
            '\n\nA typo is never forgiven in a negation: an answer with a "not", "no", "never" or "n\'t" '
            "more or less than the reference does not match it however similar the strings are. Nor is it forgiven "
            "outside a word: apart from spacing, the answer must have the reference's words in place, and a changed "
            'word must have four characters or more, start as the reference\'s does ("unlimited" is not "limited", '
            '"decrease" not "increase"), differ from it by one edit (two in a word of eight characters or more: '
            '"careless" is not "careful"), be no number word ("fifty" is not "fifteen") and not be a code (an '
            "acronym, letters and digits mixed, hyphenated parts)."
            "\n\nAn empty reference never matches."
            "\n\nThe pipeline accepts without the judge only an answer that is the reference once case, punctuation "
            'and runs of whitespace are folded: a typo the metric forgives ("Jenson" for "Jensen") is left to the judge, and '
            "free text is never rejected for certain."
        )
        return text

    def kind(
        self, references: Sequence[str], *, item: Item | None = None, vocabulary: Vocabulary | None = None
    ) -> Kind:
        if not self._numeric or any(_LEADING_ZERO.search(r) for r in references):
            return Kind.TEXT  # "007" is an identifier, compared as written; without numeric_exact, pure ANLS
        return super().kind(references, item=item, vocabulary=vocabulary)

    def compare(self, value: str, references: Sequence[str], *, item: Item | None = None) -> bool:
        refs = [(n, _codes(r)) for r in references if (n := anls_normalise(r))]
        return bool(refs) and self._matches(anls_normalise(value), refs)

    def _matches(self, pred: str, refs: list[tuple[str, frozenset[str]]]) -> bool:
        min_score = self._min
        for ref, codes in refs:
            if pred == ref:
                return True
            if self._numeric:
                number = _as_number(ref)
                if number is not None:
                    if _as_number(pred) == number:
                        return True
                    continue
            length = max(len(pred), len(ref))
            # Distance bound implied by min_score (+1 guards against float rounding); exact check follows.
            bound = int((1.0 - min_score) * length) + 1
            if (
                _similarity(pred, ref, bound) >= min_score
                and (not self._numeric or _DIGITS.findall(pred) == _DIGITS.findall(ref))
                and _negations(pred) == _negations(ref)
                and _typos_only(pred, ref, codes)
            ):
                return (
                    True  # a typo may be forgiven in a word's letters, never in digits, a negation, a prefix or a code
                )
        return False
