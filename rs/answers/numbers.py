"""Numbers as final answers write them: digits, grouping, decimals, fractions, mixed numbers, LaTeX, percent signs,
number words and fraction words.

A number is a typed value (:class:`Number`): its exact value, whether it was written with a percent sign, and the
qualifier written with it ("about 3" is an approximation, "at least 3" a bound, "not 3" a negation), because a
qualified number is not the number. What cannot be read for sure (a superscript, another script's digit, a date,
a time, a scale glued to digits such as "5M") makes the whole text unreadable (``None``): a grader that cannot tell
what a number means concludes nothing.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field, fields
from fractions import Fraction
from functools import lru_cache

__all__ = ["Number", "plain_text", "read_numbers", "render", "simple_number"]


@dataclass(frozen=True, slots=True, init=False)
class Number:
    value: Fraction
    percent: bool = False
    qualifier: str | None = None
    """``approx`` ("about 3", "3-ish"), ``bound`` ("at least 3", "3+"), ``not`` ("not 3"); None for the number itself."""
    start: int = 0
    end: int = 0
    """Where it stands in the :func:`plain_text` it was read from (qualifier included)."""
    padded: bool = False
    """Written with leading zeros ("007"): an identifier as much as a number."""
    scaled: bool = False
    """Written with a scale word ("12.5 billion", "two million"): the same figure at another scale is near."""
    regrouped: Fraction | None = field(default=None, compare=False, repr=False)
    """The value the other convention reads in a number of one separator and three digits after it: "1.000" is 1, or
    1000 with a thousands point; "2,500" is 2500, or 2.5 with a decimal comma. A reference equal to it makes the
    number near (never certainly wrong); None for any other number."""

    def __init__(
        self,
        value: Fraction,
        percent: bool = False,
        qualifier: str | None = None,
        start: int = 0,
        end: int = 0,
        padded: bool = False,
        scaled: bool = False,
        regrouped: Fraction | None = None,
    ) -> None:
        # Each field set once, through its slot: the __init__ a frozen dataclass generates goes through
        # object.__setattr__ for every field, which cost more than reading a plain number.
        _set_value(self, value)
        _set_percent(self, percent)
        _set_qualifier(self, qualifier)
        _set_start(self, start)
        _set_end(self, end)
        _set_padded(self, padded)
        _set_scaled(self, scaled)
        _set_regrouped(self, regrouped)

    def readings(self) -> tuple[Fraction, ...]:
        """The values it may mean: "42%" is 42 (a percentage asked for) or 0.42 (a proportion)."""
        return (self.value, self.value / 100) if self.percent else (self.value,)

    def agrees(self, other: Number) -> bool:
        """Whether both state the same value, neither qualified: a percent sign is notation ("30%" is 30), a
        conversion ("30%" for 0.3) is not (see :meth:`converts`)."""
        if self.qualifier or other.qualifier or self.padded != other.padded:
            return False
        return (
            self.value.as_integer_ratio() == other.value.as_integer_ratio()
        )  # equality, without Fraction's type checks

    def converts(self, other: Number) -> bool:
        """Whether one is the other read through a percent sign ("30%" for 0.3, "3000%" for 30): a conversion a
        metric may make, never notation only."""
        if self.percent == other.percent:
            return False
        return any(a == b for a in self.readings() for b in other.readings())


# Each field's slot setter, one module name each (a global name is found faster than an item of a tuple).
(
    _set_value,
    _set_percent,
    _set_qualifier,
    _set_start,
    _set_end,
    _set_padded,
    _set_scaled,
    _set_regrouped,
) = (Number.__dict__[f.name].__set__ for f in fields(Number))


# ---- text made plain: LaTeX and Unicode notation as ASCII, positions kept simple by working on the result ----

_VULGAR = {
    "½": "1/2",
    "⅓": "1/3",
    "⅔": "2/3",
    "¼": "1/4",
    "¾": "3/4",
    "⅕": "1/5",
    "⅖": "2/5",
    "⅗": "3/5",
    "⅘": "4/5",
    "⅙": "1/6",
    "⅚": "5/6",
    "⅛": "1/8",
    "⅜": "3/8",
    "⅝": "5/8",
    "⅞": "7/8",
    "⅐": "1/7",
    "⅑": "1/9",
    "⅒": "1/10",
}
_MINUS = "\u2212\ufe63\uff0d\u2012\u2013\u2014"
_DASHES = "\u2012\u2013\u2014\u2015"
_SYMBOLS = {
    "≈": " ~ ",
    "≃": " ~ ",
    "∼": " ~ ",
    "≥": " >= ",
    "≤": " <= ",
    "±": " +- ",
    "×": " x ",
    "·": " ",
    "°": " degrees",
    "\u00a0": " ",
    "\u2009": " ",
    "\u202f": " ",
    "“": '"',
    "”": '"',
    "‘": "'",
    "’": "'",
}
_LATEX_FRAC = re.compile(r"\\[dt]?frac\s*\{\s*([^{}]*)\s*\}\s*\{\s*([^{}]*)\s*\}")
_LATEX_FRAC_SHORT = re.compile(r"\\[dt]?frac\s*(\d)\s*(\d)")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?")
_LATEX_WRAP = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_LATEX_WORDS = {
    r"\approx": " ~ ",
    r"\sim": " ~ ",
    r"\geq": " >= ",
    r"\ge": " >= ",
    r"\leq": " <= ",
    r"\le": " <= ",
    r"\pm": " +- ",
    r"\times": " x ",
    r"\cdot": " x ",
    r"\%": "%",
    r"\$": "$",
    r"\,": "",
    r"\!": "",
    r"\;": " ",
    r"\ ": " ",
    r"{,}": ",",
    r"\left": "",
    r"\right": "",
    r"\(": " ",
    r"\)": " ",
    r"\[": " ",
    r"\]": " ",
    r"\neq": " != ",
    r"\ne": " != ",
}
_LATEX_WORD = re.compile(
    "|".join(
        re.escape(k) + (r"(?![A-Za-z])" if k[-1].isalpha() else "")
        for k in sorted(_LATEX_WORDS, key=len, reverse=True)
    )
)


class Unreadable(ValueError):
    """The text holds a number whose meaning cannot be told for sure."""


@lru_cache(maxsize=1 << 14)
def plain_text(text: str) -> str | None:
    """``text`` with LaTeX number notation and Unicode symbols made ASCII (``\\frac{1}{2}`` is ``1/2``, ``7½`` is
    ``7 1/2``, ``−3`` is ``-3``, ``≈`` is ``~``); ``None`` when a character changes what a digit means and has no
    plain form (``3²``, another script's digit)."""
    if "\\" in text or "{" in text:
        text = _plain_latex(text)
    if "$" in text:
        text = re.sub(r"\$(?=\s*[-+]?\d)", "$ ", text)  # "$5" keeps its currency sign as a word of its own
    if text.isascii():
        return text
    return _plain_unicode(text)


def _plain_latex(text: str) -> str:
    """LaTeX number notation in plain text: wrappers dropped, fractions as ``a/b``, degrees and symbol commands as words."""
    text = _LATEX_WRAP.sub(r"\1", text)
    text = _LATEX_FRAC.sub(
        lambda m: (
            f"({m.group(1).strip()})/({m.group(2).strip()})"
            if not (m.group(1).strip().isdigit() and m.group(2).strip().isdigit())
            else f"{m.group(1).strip()}/{m.group(2).strip()}"
        ),
        text,
    )
    text = _LATEX_FRAC_SHORT.sub(r"\1/\2", text)
    text = _DEGREES.sub(" degrees", text)
    return _LATEX_WORD.sub(lambda m: _LATEX_WORDS[m.group(0)], text)


def _plain_unicode(text: str) -> str | None:
    """Each character of ``text`` outside ASCII in its plain form: a table of cases, one per kind of character;
    ``None`` for one that changes what a digit means."""
    out = []
    for i, c in enumerate(text):
        if c.isascii():
            out.append(c)
        elif c in _VULGAR:
            out.append((" " if i and text[i - 1].isdigit() else "") + _VULGAR[c])
        elif c in _MINUS and text[i + 1 : i + 2].isdigit() and not (c in _DASHES and text[i - 1 : i].isdigit()):
            out.append("-")
        elif c in _DASHES:
            out.append(" , ")  # "5? No, 6 — 6.": a dash between words is punctuation, no sign
        elif unicodedata.category(c) == "Nd":
            out.append(str(unicodedata.decimal(c)))  # "٣", "３": another script's digit is that digit
        elif c in _SYMBOLS:
            out.append(_SYMBOLS[c])
        elif unicodedata.category(c) == "Sm" or c in _MINUS:
            out.append(" <> ")  # "⩽ 3", "− 3": a relation or a detached sign qualifies the number after it
        elif unicodedata.category(c)[0] == "M" and i and text[i - 1].isdigit():
            return None  # "3̅": a mark that changes the digit
        elif unicodedata.category(c)[0] == "N":
            return None  # "3²", "٣", "Ⅲ": a digit of another kind
        elif c == "%" or c == "％":
            out.append("%")
        else:
            out.append(c)
    return "".join(out)


# ---- digits ----

_DIGITS = re.compile(
    r"(?<![A-Za-z0-9_.])(?P<sign>(?<![\d])[-+])?(?:"
    r"(?P<whole>\d+)\s+(?P<fn>\d+)\s*/\s*(?P<fd>\d+)(?![\d/])"
    r"|(?P<n>\d+(?:\.\d+)?)\s*/\s*(?P<d>\d+(?:\.\d+)?)(?![\d/]|\.\d)"
    r"|(?P<num>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|\.\d+)"
    r")(?P<tail>[A-Za-z]+)?(?P<pct>\s*(?:%|percent\b|per\s+cent\b))?(?P<scale>\s+(?:hundred|thousand|million|billion|trillion)\b)?"
)
_COMPOUND = re.compile(
    r"\d\s*:\s*\d|\d+[/-]\d+[/-]\d|\d\.\d+\.\d|\d\s*\^|\d\.?(?:\.\.\.|…)|\\overline|\\dot\b"
    r"|\d_\d|_\d|\d(?![eE][-+]?\d)[A-Za-z]+\d|\d,\d{4}|\d(?:'s|s)\b"
)
"""What makes a number unreadable: a time, a date, a version, a power, a repeating decimal ("0.333...",
"0.\\overline{3}"), a digit string that is no well-formed number ("2_500", "1,0000", "1O0"), a decade ("the 1980s")."""
_ORDINAL_TAIL = frozenset({"st", "nd", "rd", "th"})
_UNIT_TAIL = frozenset("cm mm km kg g mg ml s h hr hrs min px ft lb lbs pt pts yr yrs".split())
_SCALE_WORDS = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_APPROX_BEFORE = re.compile(
    r"(?:\b(?:about|around|approximately|approx|roughly|nearly|almost|circa|ca|close\s+to|some|estimated|~)|~)[\s.]*$"
)
_BOUND_BEFORE = re.compile(
    r"(?:\b(?:at\s+least|at\s+most|more\s+than|less\s+than|fewer\s+than|greater\s+than|over|under|above|below|up\s+to"
    r"|no\s+more\s+than|no\s+less\s+than|no\s+fewer\s+than|between)|>=|<=|>|<|\+-|!=)\s*$"
)
_NOT_BEFORE = re.compile(r"(?:\bnot|\bisn't|\baren't|\bnever|n't\s+be)\s*$")
_AFTER = re.compile(
    r"^(?:\s*(?:or\s+(?:so|more|less|fewer|above|below)|-?ish\b|\+(?!\d)|\s*\+-|\s+or\s+\d|\s*(?:to|-)\s*\d)"
    r"|\s+(?:at\s+(?:least|most)|plus|minus|max|min)\b)"
)


def _decimal(text: str) -> Fraction:
    return Fraction(text.replace(",", ""))


def _digit_numbers(text: str, low: str) -> list[Number]:
    found = []
    for m in _DIGITS.finditer(text):
        tail = (m.group("tail") or "").lower()
        if tail in _ORDINAL_TAIL and m.group("num") and not m.group("pct"):
            continue  # "3rd": a position, not an amount
        if tail and tail not in _UNIT_TAIL:
            if tail in ("k", "m", "b", "bn", "mn", "mil", "x"):
                raise Unreadable(m.group(0))  # "5M", "3k", "3x": a scale read wrongly would be a wrong value
            continue  # "3D", "2nd-hand": no amount
        value = _digit_value(m)
        num = m.group("num")
        regrouped = _regrouped(num) if num and 5 <= len(num) <= 7 and num[-4] in ".," else None
        if m.group("sign") == "-":
            value = -value
            regrouped = None if regrouped is None else -regrouped
        if m.group("scale"):
            scale = _SCALE_WORDS[m.group("scale").strip().lower()]
            value *= scale
            regrouped = None if regrouped is None else regrouped * scale
        padded = re.match(r"[-+]?0\d", m.group(0)) is not None
        found.append(
            _qualified(
                Number(
                    value, bool(m.group("pct")), None, m.start(), m.end(), padded, bool(m.group("scale")), regrouped
                ),
                text,
                low,
            )
        )
    return found


_THOUSANDS_POINT = re.compile(r"[1-9][0-9]{0,2}\.[0-9]{3}")
_DECIMAL_COMMA = re.compile(r"[0-9]{1,3},[0-9]{3}")


def _regrouped(digits: str) -> Fraction | None:
    """The value of ``digits`` under the other convention when one separator with three digits after it could be
    either ("1.000": a thousands point, 1000; "2,500": a decimal comma, 2.5); None for any other number."""
    if _THOUSANDS_POINT.fullmatch(digits):
        return Fraction(int(digits.replace(".", "")))
    if _DECIMAL_COMMA.fullmatch(digits):
        return Fraction(int(digits.replace(",", "")), 1000)
    return None


def _digit_value(m: re.Match[str]) -> Fraction:
    """The unsigned value of a `_DIGITS` match: a mixed number ("7 1/2"), a fraction ("3/4") or a decimal ("1,024.5")."""
    if m.group("whole") is not None:
        value = int(m.group("whole")) + Fraction(int(m.group("fn")), int(m.group("fd")) or 1)
        if int(m.group("fd")) == 0:
            raise Unreadable(m.group(0))
        return value
    if m.group("n") is not None:
        if _decimal(m.group("d")) == 0:
            raise Unreadable(m.group(0))
        return _decimal(m.group("n")) / _decimal(m.group("d"))
    return _decimal(m.group("num"))


def _qualified(number: Number, text: str, low: str) -> Number:
    before, after = low[max(0, number.start - 24) : number.start], low[number.end : number.end + 16]
    qualifier, start = None, number.start
    for kind, pattern in (("approx", _APPROX_BEFORE), ("bound", _BOUND_BEFORE), ("not", _NOT_BEFORE)):
        if (m := pattern.search(before)) is not None:
            qualifier, start = kind, number.start - (len(before) - m.start())
            break
    end = number.end
    if qualifier is None and (m := _AFTER.search(after)) is not None:
        qualifier, end = (
            "bound" if "ish" not in m.group(0) and "so" not in m.group(0) else "approx",
            number.end + m.end(),
        )
    if qualifier is None:
        return number
    return Number(number.value, number.percent, qualifier, start, end, number.padded, number.scaled, number.regrouped)


# ---- words ----

_UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen"
).split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_SMALL = {w: i for i, w in enumerate(_UNITS)} | {w: 20 + 10 * i for i, w in enumerate(_TENS)}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
_DENOMINATORS = {"half": 2, "halves": 2, "third": 3, "thirds": 3, "quarter": 4, "quarters": 4}
_DENOMINATORS |= {
    w + s: n
    for n, w in enumerate("fourth fifth sixth seventh eighth ninth tenth eleventh twelfth".split(), 4)
    for s in ("", "s")
}
_DENOMINATORS |= {
    "hundredth": 100,
    "hundredths": 100,
    "thousandth": 1000,
    "thousandths": 1000,
    "millionth": 10**6,
    "millionths": 10**6,
}
_PRONOUN_BEFORE = frozenset("the this that which each every any another other".split())
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def _word_numbers(text: str, low: str) -> list[Number]:
    words = [(m.group(0), m.start(), m.end()) for m in _WORD.finditer(low)]
    found: list[Number] = []
    i = 0
    while i < len(words):
        word, start, end = words[i]
        if word in ("none", "zero") or (word == "no" and _zero_no(low, end)):
            found.append(_qualified(Number(Fraction(0), False, None, start, end), text, low))
            i += 1
            continue
        value, j = _word_run(words, low, i)
        if value is None:
            if (k := _lone_fraction(words, low, i)) is not None:
                found.append(
                    _qualified(
                        Number(Fraction(1, _DENOMINATORS[words[k][0]]), False, None, start, words[k][2]), text, low
                    )
                )
                i = k + 1
            else:
                i += 1
            continue
        total, last_end, j = _fraction_after(words, low, j, Fraction(value), words[j - 1][2])
        if word == "one" and j == i + 1 and i and words[i - 1][0] in _PRONOUN_BEFORE:
            i = j  # "the red one", "each one": a pronoun
            continue
        pct = _WORD_PERCENT.match(low, last_end)  # "forty percent" is 40%
        scaled = any(w in _SCALES and w != "hundred" for w, _, _ in words[i:j])
        found.append(
            _qualified(
                Number(total, pct is not None, None, start, pct.end() if pct else last_end, False, scaled), text, low
            )
        )
        i = j
    return found


_WORD_PERCENT = re.compile(r"\s*(?:%|percent\b|per\s+cent\b)")


def _lone_fraction(words: list[tuple[str, int, int]], low: str, i: int) -> int | None:
    """Where a fraction without a count starting at ``words[i]`` ends ("half", "a third": the index of its denominator
    word); None when none starts there (an ordinal alone, "the third cube", is not an amount)."""
    word, _, end = words[i]
    if word in ("half", "halves") or (
        word == "a" and i + 1 < len(words) and words[i + 1][0] in _DENOMINATORS and _joined(low[end : words[i + 1][1]])
    ):
        return i + (word == "a")
    return None


def _fraction_after(
    words: list[tuple[str, int, int]], low: str, j: int, total: Fraction, last_end: int
) -> tuple[Fraction, int, int]:
    """A number run's value with the fraction words after it ("seven hundredths", "one and a half"), where they end
    and the index of the next word; the run unchanged when no fraction follows."""
    if j < len(words) and words[j][0] in _DENOMINATORS and _joined(low[last_end : words[j][1]]):
        return total / _DENOMINATORS[words[j][0]], words[j][2], j + 1  # "seven hundredths"
    if j + 2 < len(words) and [w for w, _, _ in words[j : j + 2]] == ["and", "a"] and words[j + 2][0] in _DENOMINATORS:
        return total + Fraction(1, _DENOMINATORS[words[j + 2][0]]), words[j + 2][2], j + 3  # "one and a half"
    return total, last_end, j


def _word_run(words: list[tuple[str, int, int]], low: str, i: int) -> tuple[int | None, int]:
    """The value of the number words starting at ``words[i]`` ("twenty-one", "one hundred and five", "a dozen") and
    where they end; None when no number starts there."""
    total, current, j = 0, None, i
    if (
        words[i][0] == "a"
        and i + 1 < len(words)
        and words[i + 1][0] in ("hundred", "thousand", "million", "billion", "dozen")
    ):
        current, j = 1, i + 1
    while j < len(words):
        w, ws, _ = words[j]
        if j > i and not _joined(low[words[j - 1][2] : ws]):
            break
        if w in _SMALL:
            v = _SMALL[w]
            if current is None:
                current = v
            elif current % 100 == 0 and v < 100 and (current or total):
                current += v
            elif 20 <= current % 100 and current % 10 == 0 and v < 10:
                current += v
            else:
                break  # "three four": two numbers
        elif w == "dozen" and current is not None:
            current *= 12
        elif w in _SCALES and current is not None:
            if w == "hundred":
                current *= 100
            else:
                total, current = total + current * _SCALES[w], 0
        elif (
            w == "and" and current is not None and current >= 100 and j + 1 < len(words) and words[j + 1][0] in _SMALL
        ):
            pass
        else:
            break
        j += 1
    if current is None:
        return None, i
    return total + current, j


def _joined(between: str) -> bool:
    return between.strip(" -") == ""


def _zero_no(low: str, end: int) -> bool:
    """ "no cubes" is a count of zero; "No, ..." and "no." are the answer no."""
    rest = low[end : end + 2]
    return len(rest) == 2 and rest[0] == " " and rest[1].isalpha()


def read_numbers(text: str) -> list[Number] | None:
    """Every number ``text`` states, in order, with its qualifier; ``None`` when one cannot be read for sure.

    Example:
        >>> [str(n.value) for n in read_numbers("7 1/2 cups, about three quarters of 10, 42%")]
        ['15/2', '3/4', '10', '42']
    """
    plain = plain_text(text)
    if plain is None:
        return None
    return _numbers(plain)


@lru_cache(maxsize=1 << 14)
def _cached(plain: str) -> tuple[Number, ...] | None:
    if (number := simple_number(plain)) is not None:
        return (number,)
    return _read_plain(plain)


def _read_plain(plain: str) -> tuple[Number, ...] | None:
    """The general reading of a plain text's numbers (see :func:`read_numbers`)."""
    low = plain.lower()
    if _COMPOUND.search(plain):
        return None
    try:
        found = _digit_numbers(plain, low)
        if any(c.isalpha() for c in low):
            taken = [(n.start, n.end) for n in found]
            found += [n for n in _word_numbers(plain, low) if not any(s <= n.start < e for s, e in taken)]
    except Unreadable:
        return None
    return tuple(sorted(found, key=lambda n: n.start))


# The most common answer and reference: ASCII digits, strict thousands grouping, a decimal part, a percent sign glued.
_SIMPLE = re.compile(r"([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.([0-9]+))?(%?)")


@lru_cache(maxsize=1 << 6)  # briefly: an answer that is its reference's own text ("42" for "42") is read once
def simple_number(text: str) -> Number | None:
    """The number ``text`` is when it is one plain number and nothing else ("42", "3.25", "1,234.5", "007", "12%"), as
    :func:`read_numbers` reads it, without its general reading; None for anything else (then read it in full).

    Such a text is its own plain form, holds nothing `_COMPOUND` refuses, is one whole `_DIGITS` match (no sign, tail
    or scale) and has nothing around it to qualify it: the general reading gives exactly this one number."""
    whole, point, decimals = text.partition(".")
    regrouped = None
    if whole.isdigit() and (decimals.isdigit() or not point) and text.isascii():
        percent = ""  # "42", "3.25", "007": the most common, told without the pattern
    elif (m := _SIMPLE.fullmatch(text)) is None:
        return None
    else:
        whole, decimals, percent = m.groups("")
        if "," in whole:
            if not decimals:
                regrouped = _regrouped(whole)  # "2,500": or 2.5 with a decimal comma
            whole = whole.replace(",", "")
    if len(decimals) == 3 and len(whole) <= 3 and whole[0] != "0":
        regrouped = Fraction(int(whole + decimals))  # "1.000": or 1000 with a thousands point (`_regrouped`'s rule)
    value = Fraction(int(whole + decimals), 10 ** len(decimals)) if decimals else Fraction(int(whole))
    padded = text[0] == "0" and text[1:2].isdigit()  # "007" (ASCII digits only here)
    return Number(value, bool(percent), None, 0, len(text), padded, False, regrouped)


def _numbers(plain: str) -> list[Number] | None:
    found = _cached(plain)
    return None if found is None else list(found)


def render(value: Fraction) -> str:
    """The plain decimal form of a value ("7.5", "42", "-0.25"), or "p/q" when it has no finite decimal."""
    numerator, denominator = value.numerator, value.denominator
    if denominator == 1:
        return str(numerator)
    digits = decimal_places(denominator)
    if digits is None:
        return f"{numerator}/{denominator}"
    scaled = numerator * 10**digits // denominator  # exact: the denominator divides 10**digits
    sign = "-" if scaled < 0 else ""
    text = str(abs(scaled)).rjust(digits + 1, "0")
    return f"{sign}{text[:-digits]}.{text[-digits:]}"


@lru_cache(maxsize=1 << 10)  # few denominators: those of decimals written to a few places
def decimal_places(denominator: int) -> int | None:
    """How many decimal places a fraction in lowest terms with this denominator has (the least k with denominator
    dividing 10**k: the larger of its powers of 2 and 5); None when it has no finite decimal."""
    twos = (denominator & -denominator).bit_length() - 1
    rest = denominator >> twos
    fives = 0
    while rest % 5 == 0:
        rest //= 5
        fives += 1
    return None if rest != 1 else max(twos, fives)
