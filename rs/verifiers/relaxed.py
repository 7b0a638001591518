"""``relaxed``: ChartQA relaxed accuracy.

The ChartQA paper (§5.1) accepts a numeric answer within 5% of the gold value and requires an exact match
otherwise; pix2struct's ``relaxed_correctness`` is the de-facto reference implementation. This module keeps its
semantics where they are intended and hardens the accidents (verifier research notes, §1):

* Both sides are trimmed and lose one trailing period before anything else (``"Yes."`` == ``"yes"``).
* A *number* is only what the strict pattern ``[+-]?(\\d+(\\.\\d*)?|\\.\\d+)([eE][+-]?\\d+)?`` accepts (ASCII digits
  only), optionally followed by ``%``. Python-``float`` quirks are therefore not numbers: ``1_000``, ``0x10``, ``nan``, ``inf``,
  ``1e999`` (overflows) fall through to the string comparison — ``"nan"`` equals ``"nan"`` only as a string.
* Thousands separators are removed only for strict ``1,234,567`` grouping; ``1,23`` is not a number.
* ``%`` divides by 100 on whichever side carries it (reference-compatible): ``12%`` vs ``12`` fails,
  ``0.12`` vs ``12%`` passes.
* A zero reference is compared exactly (``0`` == ``0.0`` == ``-0``); the reference code falls back to string
  equality there, so ``0.0`` vs ``0`` used to fail.
* The tolerance boundary is inclusive and decided in exact decimal arithmetic when floating point is too close
  to call (``0.105`` vs ``0.1`` is exactly 5%).
* ``year_guard`` (on by default, a deliberate deviation): a reference that is a year (1500–2099 written as four
  digits) must be matched exactly, because 5% of 2010 is ±100 years (pix2struct#35): the published metric
  accepts 2008 for 2010, a wrong answer in training data. ``year_guard: false`` restores it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from typing import Any, NamedTuple

from rs.answers import Kind, Number, render
from rs.answers.numbers import decimal_places
from rs.answers.values import reference_values
from rs.verifiers.base import Item, Param, Verifier, VerifierError, register

__all__ = ["RelaxedVerifier", "parse_number"]

# ASCII digits only: `\d` would also accept Arabic-Indic and other Unicode digits, which float() parses.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_GROUPED = re.compile(r"[+-]?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]*)?")
_YEAR = re.compile(r"(?:1[5-9]|20)[0-9][0-9]")
_NUMBER_START = frozenset("+-.0123456789")
_NUMBER_KIND = Kind.NUMBER  # a module name: Python 3.11 looks an enum class's attributes up through a hook


class ParsedNumber(NamedTuple):
    """A parsed number: float value (percent already divided by 100), its digits as written, percent flag."""

    value: float
    digits: str
    percent: bool

    def exact(self) -> Decimal:
        """The value in exact decimal arithmetic (percent divided by 100)."""
        return _exact(self.digits, self.percent)


# Internally numbers are plain (value, digits, percent) tuples: building a NamedTuple costs more than parsing.
_Num = tuple[float, str, bool]


def _number(text: str) -> _Num | None:
    if text.isdigit() and text.isascii():  # fast path: plain integer, the most common answer
        return float(text), text, False
    if not text or text[0] not in _NUMBER_START:
        return None
    percent = text[-1] == "%"
    digits = text[:-1].rstrip() if percent else text
    if _NUMBER.fullmatch(digits) is None:
        if "," not in digits or _GROUPED.fullmatch(digits) is None:
            return None
        digits = digits.replace(",", "")
    value = float(digits)
    if not math.isfinite(value):  # "1e999" overflows to inf
        return None
    return (value / 100.0 if percent else value), digits, percent


def _exact(digits: str, percent: bool) -> Decimal:
    value = Decimal(digits)
    return value / 100 if percent else value


def parse_number(text: str) -> ParsedNumber | None:
    """Parse an already trimmed answer as a number under the strict rules above; ``None`` if it is not one."""
    parsed = _number(text)
    return None if parsed is None else ParsedNumber(*parsed)


def _clean(text: str) -> str:
    text = text.strip()
    if text[-1:] == ".":
        text = text[:-1].rstrip()
    return text


def _float(numerator: int, denominator: int) -> float | None:
    """What `_number` reads from ``render(Fraction(numerator, denominator))``: its float (both are correctly rounded),
    or None when that is no number (no finite decimal, such as 1/3) or is not finite, except a whole number's digits,
    read as infinite."""
    if denominator != 1 and decimal_places(denominator) is None:
        return None
    try:
        return numerator / denominator
    except OverflowError:
        return math.inf if denominator == 1 and numerator >= 0 else None


@lru_cache(maxsize=1 << 16)
def _reference(reference: str) -> tuple[str, _Num | None, bool]:
    """Cleaned reference, its number and whether it is a year; cached because references repeat."""
    ref = _clean(reference)
    return ref, _number(ref), _YEAR.fullmatch(ref) is not None


_COUNT_QUESTION = re.compile(
    r"\b(?:how\s+many|number\s+of|count|how\s+often|times|which\s+year|what\s+year|when|"
    r"code|id|rank|position)\b",
    re.IGNORECASE,
)


@lru_cache(maxsize=1 << 14)
def _axis_value(question: str, references: tuple[str, ...]) -> bool:
    """Whether the references (numbers) are values read off an axis, where a tolerance is the task's own: not a count,
    a year or an identifier (a question that asks for one; a year-like or zero-padded reference; an integer with no
    question). Decided once per item."""
    for r in references:
        if _YEAR.fullmatch(_clean(r)) or r.strip().startswith("0") and r.strip()[1:2].isdigit():
            return False
    if not question:
        for n in reference_values(_NUMBER_KIND, references) or ():
            if n.value.denominator == 1:
                return False
        return True
    return _COUNT_QUESTION.search(question) is None


@register
class RelaxedVerifier(Verifier):
    """ChartQA relaxed accuracy, hardened as described in the module docstring."""

    name = "relaxed"
    version = "2"
    title = "ChartQA relaxed accuracy"
    PARAMS = {
        "tolerance": Param(float, 0.05, "maximum relative error |p - t| / |t| for numeric answers, inclusive"),
        "year_guard": Param(bool, True, "require an exact match when the reference is a four-digit year"),
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._tol = self._params["tolerance"]
        self._tol_exact = Decimal(repr(self._tol))
        self._year_guard = self._params["year_guard"]

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        tol = params["tolerance"]
        if not (0.0 <= tol < 1.0) or math.isnan(tol):
            raise VerifierError(
                f"Parameter 'tolerance' of verifier 'relaxed' must be in [0, 1), got {tol!r}; "
                "use e.g. 0.05 for the ChartQA 5% rule."
            )

    @property
    def description(self) -> str:
        pct = f"{self._tol * 100:g}%"
        text = (
            "The official ChartQA metric. If both the prediction and the reference parse as numbers, the "
            f"answer is correct when it lands within **{pct} relative tolerance** of the reference — chart values "
            "are read off axes, so exact digit agreement is not a fair requirement. Otherwise the two strings "
            "must match exactly after lowercasing, trimming, and dropping a trailing period.\n\n"
            f"The {pct} boundary itself counts as correct. A number is plain digits with an optional sign, "
            'decimal point and exponent; "1,234,567"-style thousands separators are accepted; units, currency '
            'signs and words ("5 million", "$5", "two") are not. A trailing "%" divides that side by 100, as in '
            'the reference implementation, so "12%" matches "0.12". A reference of '
            "zero must be matched exactly by a numeric zero.\n\n"
            "What the pipeline accepts without the judge is narrower. The same number (a percent sign, grouping, "
            'currency signs and number words being notation: "12%" is 12) is accepted; a number within the tolerance '
            'only when it is a value read off an axis: not when the question asks for a count ("how many", "number '
            'of") or a year, not when the reference is a year or written with leading zeros, and not when the '
            'reference is a whole number and the question is unknown. Those, and a percent conversion ("12%" for '
            '0.12, "3000%" for 30), are left to the judge, and are never rejected for certain.'
        )
        if self._year_guard:
            text += " A reference that is a year (1500–2099) must be matched exactly, not within tolerance."
        return text

    def compare(self, value: str, references: Sequence[str], *, item: Item | None = None) -> bool:
        return any(self._match_one(value, r) for r in references)

    def compare_numbers(self, value: Number, references: Sequence[Number]) -> bool:
        """The tolerance on every reading of both sides ("42%" is 42 or 0.42), a year matched exactly."""
        if value.qualifier:
            return False
        readings = value.readings() if value.percent else (value.value,)
        for r in references:
            if not r.qualifier:
                for t in r.readings() if r.percent else (r.value,):
                    for p in readings:
                        if self._close(p, t):
                            return True
        return False

    def own_leniency(self, kind: Kind, value: Any, references: Sequence[str], *, item: Item | None = None) -> bool:
        """The tolerance is ChartQA's own on a value read off an axis: a number within it of a reference, written as
        the reference is (no percent conversion), when the question asks for no count and the reference is no year
        and no identifier ("007"). Without the question, an integer reference may be a count: the judge's."""
        if kind is not _NUMBER_KIND or value.qualifier:
            return False
        numbers = reference_values(kind, references)
        if not numbers or not _axis_value(getattr(item, "question", None) or "", tuple(references)):
            return False
        for r in numbers:
            if not r.qualifier and value.percent == r.percent and self._close(value.value, r.value):
                return True
        return False

    def _match_one(self, prediction: str, reference: str) -> bool:
        ref, t, is_year = _reference(reference)
        if not ref:
            return False
        if prediction == reference:
            return True
        pred = _clean(prediction)
        if t is not None:
            p = _number(pred)
            if p is not None:
                if t[0] == 0.0 or (is_year and self._year_guard):
                    return _exact(p[1], p[2]) == _exact(t[1], t[2])
                target = t[0]
                rel = abs(p[0] - target) / abs(target)
                tol = self._tol
                if abs(rel - tol) > 1e-9 * tol + 1e-15:
                    return rel <= tol
                # Too close to call in binary floating point: decide the inclusive boundary exactly.
                exact_t = _exact(t[1], t[2])
                return abs(_exact(p[1], p[2]) - exact_t) <= self._tol_exact * abs(exact_t)
        return pred.lower() == ref.lower()

    def _close(self, prediction: Fraction, reference: Fraction) -> bool:
        """:meth:`_match_one` on two numbers' plain decimal forms (`render`), decided on their values without writing
        them: the same value matches; else both must be numbers (a finite decimal within float range: "1/3" is compared
        as text, and matches no other text) within the tolerance, a zero or a year (1500–2099) reference exactly."""
        pn, pd = prediction.as_integer_ratio()
        tn, td = reference.as_integer_ratio()
        if pn == tn and pd == td:
            return True
        if (pd != 1 and decimal_places(pd) is None) or (td != 1 and decimal_places(td) is None):
            return False  # no finite decimal: compared as text, and it differs
        try:
            p, t = pn / pd, tn / td
        except OverflowError:
            p, t = _float(pn, pd), _float(tn, td)
            if p is None or t is None:
                return False
        if t == 0.0 or (self._year_guard and td == 1 and 1500 <= tn <= 2099):
            return False  # matched exactly, and they differ
        rel = abs(p - t) / abs(t)
        tol = self._tol
        if abs(rel - tol) > 1e-9 * tol + 1e-15:
            return rel <= tol
        # Too close to call in binary floating point: decide the inclusive boundary exactly.
        exact_t = Decimal(render(reference))
        return abs(Decimal(render(prediction)) - exact_t) <= self._tol_exact * abs(exact_t)
