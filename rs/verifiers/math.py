"""``math``: symbolic equivalence with Hugging Face ``math-verify`` (MathVista free-form, MathVerse, Geometry3K).

``math-verify`` parses LaTeX and plain expressions into SymPy and compares them numerically and symbolically
(``1/2`` == ``0.5`` == ``\\frac{1}{2}``, ``x=5`` == ``5``, intervals, sets). Three things it gets wrong on its own
are handled here:

* LaTeX is only found inside an environment (``$…$``, ``\\boxed{}``): ``parse("\\frac{L}{n}")`` is empty. The
  reference is therefore wrapped in ``\\boxed{…}`` (falling back to ``$…$`` and the raw text).
* Several ``\\boxed{}`` in one answer are joined into a set that matches nothing; the **last** box is taken
  first (then an ``<answer>`` tag or ``Answer:`` line), and wrapped again so bare LaTeX parses.
* An answer that names several values ("3 or 4", "between 3 and 5", "3, 4", "3 \\pm 1", two different boxed
  values, a parsed set, tuple or interval) never matches a single-valued reference: math-verify compares its
  last value or any of its values, so "3 or 4" used to match 4 (a deliberate deviation; a set, tuple or interval
  reference is compared as math-verify intends).
* A bound, an approximation or a negation ("at least 3", "x \\geq 3", "\\approx 3", "not 3") is parsed by math-verify
  as the bare value; it never matches a reference that is not qualified itself (a relation reference such as
  ``x \\geq 3`` is compared as math-verify intends). Two answer tags joined by a connector name several values, as
  boxes do, and a marked answer that what follows doubts or takes back ("\\boxed{3}" then "Hmm, it's 4") matches
  nothing; nor does one followed by a negation or contrast word ("no", "but", "however", "wrong", ...) together
  with a number the mark does not hold ("\\boxed{3}" then "No. The answer is 4.") or by a line that is just
  another number. An explanation with other numbers and no such word ("The triangle has sides 3, 4 and 5") is read.
* ``verify`` is asymmetric; the reference is always passed as gold, first.

An empty parse on either side is a non-match — never a raw string comparison of long texts.

Threads: ``math-verify`` enforces its timeouts with ``signal.alarm``, which only works in the main thread. Called
from any other thread this verifier runs **without** a timeout (logging a warning once) instead of raising; a
pathological expression can then hang that thread, so for parallel verification prefer processes
(``multiprocessing``/``concurrent.futures.ProcessPoolExecutor``), where each worker's main thread has timeouts.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from rs.answers import Kind, Number
from rs.answers.values import reference_values
from rs.verifiers.base import Item, Param, Verifier, VerifierError, register

__all__ = ["MathVerifier"]

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'rs[math]'"


def _math_verify() -> Any:
    try:
        import math_verify
    except ImportError as e:
        raise VerifierError(
            f"The 'math' verifier needs the optional dependency math-verify, which is not installed "
            f"({e}). Install it with: {INSTALL_HINT}"
        ) from None
    return math_verify


# A bound, an approximation or a negation of a value ("at least 3", "\\geq 3", "\\approx 3", "not 3"): not the value,
# though math-verify reads 3 from each. A reference that holds one itself ("x \\geq 3") is compared as math-verify does.
_QUALIFIED = re.compile(
    r"(?i)\\(?:neq?|geq?q?|leq?q?|gt|lt|approx|sim|simeq|cong|propto|not|nless|ngtr|gtrsim|lesssim)(?![a-z])"
    r"|[<>≤≥≈≠∼~≲≳]|\b(?:not|no|about|approximately|approx|around|roughly|nearly|almost|least|most|over|under"
    r"|above|below|more|less|fewer|than|circa|exceeds?)\b"
)


def _qualified(text: str) -> bool:
    return _QUALIFIED.search(_TEXT.sub(lambda m: f" {m.group(1)} ", text)) is not None


# Words and signs by which an answer names several values: "3 or 4", "between 3 and 5", "3 \\pm 1", "3; 4".
_SEVERAL = re.compile(r"(?i)\b(?:or|and|between|either|to)\b|\\pm|\\mp|±|∓|;|\\lor|\\vee|∨|\\cup")
# A comma that separates values, not one that groups thousands ("1,000").
_LIST_COMMA = re.compile(r",(?![0-9]{3}(?![0-9]))")
_TEXT = re.compile(r"\\(?:text|mathrm|textbf|mbox)\s*\{([^{}]*)\}")


def _is_several(parsed: list[Any]) -> bool:
    """A parse that is a set of several elements, a tuple, an interval or a list (math-verify's multi-values)."""
    if not parsed:
        return False
    value = parsed[0]
    name = type(value).__name__
    if name in ("FiniteSet", "Tuple", "Interval", "Union", "list", "tuple", "set", "ProductSet"):
        return not (name == "FiniteSet" and len(value) == 1)
    return False


@register
class MathVerifier(Verifier):
    """Mathematical equivalence via ``math-verify`` ``parse`` + ``verify(gold, prediction)``."""

    name = "math"
    version = "3"
    title = "mathematical equivalence (math-verify)"
    PARAMS = {
        "float_rounding": Param(int, 6, "decimal places numbers are rounded to before comparing"),
        "timeout_seconds": Param(int, 5, "per parse/compare timeout in seconds (main thread only; 0 disables)"),
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._mv = _math_verify()
        self._rounding = self._params["float_rounding"]
        self._timeout = self._params["timeout_seconds"]
        self._warned_thread = False
        # Gold parses are cached per instance: references repeat across samples of one item.
        self._parse_gold = lru_cache(maxsize=1 << 14)(self._parse_gold_uncached)

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        if not 0 <= params["float_rounding"] <= 15:
            raise VerifierError(
                f"Parameter 'float_rounding' of verifier 'math' must be between 0 and 15, got "
                f"{params['float_rounding']!r}; use the item's precision (e.g. 2 for MathVista floats) or 6."
            )
        if params["timeout_seconds"] < 0:
            raise VerifierError(
                f"Parameter 'timeout_seconds' of verifier 'math' must be >= 0, got {params['timeout_seconds']!r}."
            )

    @property
    def description(self) -> str:
        return (
            "Mathematical equivalence checked with Hugging Face Math-Verify: the reference and the model's final "
            "answer are parsed as LaTeX or plain mathematical expressions and compared numerically and "
            'symbolically, so "1/2", "0.5" and "\\frac{1}{2}" are the same answer, as are "x = 5" and "5". '
            f"Numbers are compared after rounding to {self._rounding} decimal places. If the answer contains "
            "several boxed values, only the last one is read (otherwise an explicit answer tag or "
            '"Answer:" line). An answer that cannot be parsed as mathematics is rejected, never compared as raw '
            'text, and number words ("two") are not parsed. An answer that names several values ("3 or 4", '
            '"between 3 and 5", "3, 4", "3 \\pm 1", two boxed values joined by "or") never matches a reference '
            "that is a single value, even when one of its values is the reference. Nor does a bound, an "
            'approximation or a negation ("at least 3", "\\geq 3", "\\approx 3", "not 3") unless the reference is '
            'one too, nor a marked answer that the text after it doubts or takes back ("\\boxed{3}" then '
            '"Hmm, it\'s 4") or corrects: a negation or contrast word ("no", "but", "however", "wrong") together '
            'with a number the marked answer does not hold ("\\boxed{3}" then "No. The answer is 4."), or a '
            "later line that is just another number. An explanation that mentions other numbers without negating "
            "anything is fine. Math-Verify's equivalence is the task's own and is accepted without the judge; a "
            'percent conversion ("40%" for 0.4) is not: the judge reads it. An expression is read whole: a parse '
            'of part of the answer ("\\sqrt{5}+", "the distance is 15 miles") is no parse, and text math-verify '
            'would read as a product of symbols (a chemical formula such as "CH3COOH", a segment or an angle named '
            'by capitals such as "\\angle ABC") matches only the same text. An answer is rejected without the '
            "judge only where both sides parse completely and differ beyond a rounding."
        )

    @property
    def contradiction_rule(self) -> str | None:
        return (
            f"{super().contradiction_rule} An expression (a radical, a multiple of pi, a power) is certainly wrong "
            "only where math-verify parses it and every reference completely and finds them different beyond a "
            "rounding."
        )

    def _timeout_now(self) -> int | None:
        if threading.current_thread() is threading.main_thread():
            return self._timeout or None
        if not self._warned_thread and self._timeout:
            self._warned_thread = True
            logger.warning(
                "math verifier called outside the main thread: math-verify's signal-based timeouts are "
                "unavailable there, so expressions are parsed and compared without a time limit. Use a process "
                "pool for parallel verification."
            )
        return None

    def _parse(self, text: str, timeout: int | None) -> list[Any]:
        return self._mv.parse(text, parsing_timeout=timeout)

    def _parse_gold_uncached(self, reference: str, timeout: int | None) -> tuple[Any, ...]:
        ref = reference.strip()
        if not ref:
            return ()
        for wrapped in (f"\\boxed{{{ref}}}", f"${ref}$", ref):
            parsed = self._parse(wrapped, timeout)
            if _expression(parsed):
                return tuple(parsed)
        return ()

    def _parse_prediction(self, value: str, timeout: int | None) -> list[Any]:
        """The stated answer's parse, boxed so that bare LaTeX parses; [] when no expression is read from it whole (a
        string is no parse, nor is the raw text's, which math-verify reads from any fragment it finds)."""
        parsed = self._parse(f"\\boxed{{{value}}}", timeout)
        return parsed if _expression(parsed) else []

    def compare(self, value: str, references: Sequence[str], *, item: Item | None = None) -> bool:
        return self.expression_verdict(value, references) is True

    def expression_verdict(self, value: str, references: Sequence[str]) -> bool | None:
        """math-verify's decision on a stated answer read whole: True when it equals a reference, False when both sides
        parse completely and it equals none, beyond a rounding; None when it cannot be told (a side that does not parse
        as a whole expression, non-mathematical text such as a chemical formula or a segment's name, a qualified or
        several-valued answer that matches nothing).

        A parse is complete when math-verify reads an expression (not just a string) from the whole text, and that text
        is mathematics: juxtaposed capitals ("NaCl", "HCOOCH3", "ABC") or a word that is no function name would be read
        as a product of symbols, so that two different formulas, or two angles named by the same letters, compare
        equal. Such text equals only itself, as written."""
        value = _thin(value)
        if not value:
            return None
        texts = [r for r in map(_thin, references) if r]
        if _non_math(value) or any(_non_math(r) for r in texts):
            key = _as_written(value)
            return True if any(_as_written(r) == key for r in texts) else None
        timeout = self._timeout_now()
        refs, golds = [], []
        for r in texts:
            if g := self._parse_gold(r, timeout):
                refs.append(r)
                golds.append(g)
        pred = self._parse_prediction(value, timeout)
        if not golds or not pred:
            return None
        if any(
            self._mv.verify(list(gold), pred, float_rounding=self._rounding, timeout_seconds=timeout)
            for gold in _comparable(value, pred, golds, refs)
        ):
            return True
        if len(golds) < len(texts) or _qualified(value) or _is_several(pred) or _names_several(value):
            return None  # a reference not read whole, or an answer that names no single value: the judge's
        if any(_is_several(list(g)) or _near(pred[0], g[0]) for g in golds):
            return None
        return False

    def own_leniency(self, kind: Any, value: Any, references: Sequence[str], *, item: Item | None = None) -> bool:
        """math-verify's equivalence (an equal expression, a number equal at its rounding) is the task's own; a
        percent conversion is not."""
        if not isinstance(value, Number):
            return True
        numbers = reference_values(Kind.NUMBER, references) or []
        return not value.qualifier and any(
            value.percent == r.percent
            and round(float(value.value), self._rounding) == round(float(r.value), self._rounding)
            for r in numbers
        )

    def compare_numbers(self, value: Number, references: Sequence[Number]) -> bool:
        """Equal after rounding to ``float_rounding`` places, as math-verify compares numbers."""
        if value.qualifier:
            return False
        return any(
            round(float(p), self._rounding) == round(float(t), self._rounding)
            for r in references
            if not r.qualifier
            for p in value.readings()
            for t in r.readings()
        )


def _comparable(value: str, pred: list[Any], golds: list[Any], refs: list[str]) -> list[Any]:
    """The parsed references a stated answer is compared with: a qualified or several-valued answer only with
    references of its own kind."""
    if _qualified(value):
        # "at least 3", "\\approx 3", "not 3" name no single value: only a reference qualified itself is compared
        golds = [g for g, r in zip(golds, refs) if _qualified(r)]
    if _is_several(pred) or _names_several(value):
        # "3 or 4" never matches 4; a set, tuple or interval reference is compared as math-verify does
        golds = [
            g for g in golds if _is_several(list(g)) or _SEVERAL.search(str(g[-1])) or _LIST_COMMA.search(str(g[-1]))
        ]
    return golds


def _expression(parsed: list[Any]) -> bool:
    """A parse that read an expression (math-verify returns the bare string when it read none)."""
    return len(parsed) > 1 or (len(parsed) == 1 and not isinstance(parsed[0], str))


# A thin space or a braced comma between digits groups thousands ("1\\,000", "1{,}000"): math-verify reads "1\\,000"
# as 1 times 0.
_THIN = re.compile(r"(?<=\d)(?:\\[,;! ]|\{,\}|\\thinspace\s*)(?=\d{3}(?!\d))")


def _thin(text: str) -> str:
    text = text.strip()
    return _THIN.sub(lambda m: "" if m.group(0) != "{,}" else ",", text) if "\\" in text or "{" in text else text


_COMMAND = re.compile(r"\\[A-Za-z]+")
_FUNCTIONS = frozenset(
    "sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh log ln lg exp sqrt pi max min lim gcd lcm det mod "
    "deg inf sup infty dx dy dt".split()
)
_LETTER_RUN = re.compile(r"[A-Za-z]{2,}")
# A letter with digits glued to it, or a capital after a subscript ("H2O", "C6H12O6", "H_2O", "0x10"): a formula or
# a code, no product.
_FORMULA = re.compile(r"[A-Za-z][0-9]|_\{?[0-9]+\}?[A-Z]")
_OPTION_LETTER = re.compile(r"\(?[A-Z]\)?")


def _non_math(text: str) -> bool:
    """Whether ``text`` holds what math-verify would misread as a product of symbols: juxtaposed letters with a capital
    ("NaCl", "CH3COOH", "ABC"), a capital with a count ("H2O", "H_2O"), an option's letter alone, or a word of three
    letters or more that names no function ("yes", "miles")."""
    plain = _COMMAND.sub(" ", text) if "\\" in text else text
    if _FORMULA.search(plain) or _OPTION_LETTER.fullmatch(plain.strip()):
        return True
    for run in _LETTER_RUN.findall(plain):
        if run.lower() in _FUNCTIONS:
            continue
        if not run.islower() or len(run) >= 3:
            return True
    return False


def _as_written(text: str) -> str:
    return "".join(text.split()).casefold()


def _near(pred: Any, gold: Any) -> bool:
    """Two numbers within a rounding of each other (1%): math-verify's own rounding may part them, the judge may not."""
    try:
        if not (getattr(pred, "is_number", False) and getattr(gold, "is_number", False)):
            return False
        a, b = complex(pred.evalf()), complex(gold.evalf())
    except (TypeError, ValueError, AttributeError):
        return True  # a value that cannot be evaluated: never certain
    return abs(a - b) <= 0.01 * max(abs(a), abs(b))


def _names_several(value: str) -> bool:
    """Whether a stated answer names several values: a connector or a list ("3 or 4", "between 3 and 5", "3, 4")."""
    text = _TEXT.sub(lambda m: f" {m.group(1)} ", value)
    return _SEVERAL.search(text) is not None or _LIST_COMMA.search(text) is not None


def _plain_number(value: Any) -> bool:
    """A SymPy number with no free symbols (3, 1/2, 0.25), not an expression, set or equation."""
    return bool(getattr(value, "is_number", False)) and not getattr(value, "free_symbols", True)
