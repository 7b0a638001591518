"""``count``: the answer must state exactly one integer, equal to the reference count.

Counting questions (CLEVR, CLEVR-Math, Super-CLEVR) have integer answers, and models like to wrap them in a
sentence ("There are 3 cubes.") or spell them out ("three"). Taking "the last number in the text" is the common
lenient alternative, but it turns ``5 objects (3 red + 2 blue)`` into 2 and ``3 or 4`` into 4; this verifier instead
requires the answer to mention exactly one distinct number and rejects everything else.

Rules:

* Numbers are ASCII digit runs (``1,000``-style grouping allowed), optionally with a decimal part and a leading
  ``-``, not glued to letters (``3rd``, ``x3``, ``2D`` are not numbers), and number words ``zero`` … ``nineteen``,
  ``twenty`` … ``ninety`` and compounds such as ``twenty-one`` / ``twenty one``; ``none`` counts as 0. ``no`` is
  *not* 0 (it is a yes/no answer) and ``a``/``an`` are not 1. Ranges and lists are several numbers (``2-3``,
  ``3/4``, ``3,4``), and non-ASCII digits are not numbers.
* Answers mentioning scale or fraction words (``hundred``, ``thousand``, ``million``, ``billion``, ``dozen``,
  ``half``) are rejected rather than half-parsed ("one hundred" would otherwise read as 1).
* The same value may be repeated ("3 (three)", "3, so the answer is 3"); two different values never match.
* ``3.0`` counts as 3 (its value is an integer); ``3.5`` never matches an integer count.
* If the prediction contains an explicit answer marker — ``<answer>…</answer>``, ``\\boxed{…}`` or an
  ``Answer: …`` line — only that part is read (in this priority order), so worked solutions that end in a marked
  answer are judged by the marked answer. Several tags (or boxes) must all hold the same count, and nothing after the
  last marker may doubt or take it back ("Answer: 3" then "Wait, there are 4"); otherwise there is no count. A
  negation or contrast word after it ("no", "not", "but", "however", "wrong", "incorrect", ...) together with a
  value the mark does not hold takes it back ("Answer: 3\\n\\nNo. 4.", "\\boxed{3}. But recounting gives 4."), as
  does a later line that is just another number ("Answer: 3\\n4"). An explanation mentioning other numbers without
  such a word ("Answer: 5\\n\\nThere are 2 red and 3 blue cubes") or such a word without another number is read.
* The reference itself must be a single integer (digits or a number word); any other reference never matches.
* Unreadable, never read as the bare integer (each would otherwise be a false accept): a hedged or bounded count
  ("about 3", "at least 3", "3 or so", "3-ish", "3+", "> 3"), a negated one ("not 3", "3 is wrong", "3? No."),
  a fraction or ordinal word ("three quarters",
  "two thirds"), a percent ("3%"), and a non-ASCII character that changes what a digit means: another script's
  digit, a superscript or vulgar fraction ("3²", "3½"), a mark or symbol glued to a digit ("3°"). A Unicode
  minus sign ("−3") is a minus: -3, which is not 3.

Certain rejections (``contradicts``): the answer states one plain integer and it differs from every reference.
Deviation from the reference metrics: lmms-eval and VLMEvalKit count tasks take the last number in the text or
an exact string match; this verifier reads only a single stated integer and rejects everything else.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

from rs.extract import answer_line_span, answer_tag_spans, boxed_spans, hedges, negates
from rs.verifiers.base import Item, Verifier, as_references, register

__all__ = ["CountVerifier", "numbers_in"]

logger = logging.getLogger(__name__)

_UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen"
).split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
# Work on ASCII bytes: bytes.translate/split are several times faster than any regex tokeniser.
_WORD_VALUES: dict[bytes, float] = {b"none": 0.0}
_WORD_VALUES.update((w.encode(), float(i)) for i, w in enumerate(_UNITS))
_TENS_VALUES = {w.encode(): 20.0 + 10 * i for i, w in enumerate(_TENS)}
_WORD_VALUES.update(_TENS_VALUES)
_DIGIT_WORDS = {w.encode(): float(i) for i, w in enumerate(_UNITS[1:10], 1)}
for _tens, _value in _TENS_VALUES.items():
    for _unit, _u in _DIGIT_WORDS.items():
        _WORD_VALUES[_tens + b"-" + _unit] = _value + _u
_SPELLED = {word.decode(): int(value) for word, value in _WORD_VALUES.items()}
# Numbers we refuse to half-parse: "one hundred" must not read as 1, "three quarters" not as 3.
_SCALE_WORDS = frozenset(
    (w + s).encode()
    for w in ("hundred", "thousand", "million", "billion", "dozen", "half", "third", "quarter", "fourth", "fifth", "sixth",
              "seventh", "eighth", "ninth", "tenth", "percent", "degree")
    for s in ("", "s")
) | {b"halves", b"percentage"}
# A hedged or bounded count is not the count: "at least 3", "about 3", "3-ish", "3 or so" never match 3.
_HEDGE_WORDS = frozenset(
    w.encode()
    for w in ("least", "most", "more", "fewer", "less", "over", "under", "above", "below", "than", "about", "approximately",
              "approx", "roughly", "around", "nearly", "almost", "circa", "ish", "maybe", "probably", "perhaps", "possibly",
              "between", "plus", "minus", "or", "either",
              # a negated count is not the count: "not 3", "3 is wrong", "3? No."
              "not", "no", "nope", "isn", "aren", "wrong", "incorrect", "neither", "nor")
)
_UNREADABLE_WORDS = _SCALE_WORDS | _HEDGE_WORDS
# Unicode minus signs, and dashes that stand for one before a digit.
_MINUS = frozenset("\u2212\ufe63\uff0d\u2010\u2011\u2012\u2013\u2014\u2015")

# Lower-case letters, keep [0-9a-z] and the in-token separators `.`, `,`, `-`; everything else (including
# non-ASCII, which `encode(..., "replace")` turns into "?") separates tokens. "x3" and "3rd" stay whole tokens.
_KEEP = b"0123456789abcdefghijklmnopqrstuvwxyz.,-"
_TABLE = bytes(
    c + 32 if 65 <= c <= 90 else c if c in _KEEP else 32  # A-Z -> a-z
    for c in range(256)
)
_DECIMAL = re.compile(rb"[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+\.[0-9]+")
_SEPARATORS = re.compile(rb"[.,\-]")
_REF_INT = re.compile(r"[+-]?[0-9]+")
_BOUND = re.compile(r"[0-9]\s*\+|[<>]")  # "3+", "> 3"; "≤", "≥" are math symbols, see _ascii_view


def _token_values(token: bytes, values: set[float]) -> bool:
    """Add the number(s) a token denotes to ``values``; ``False`` if the token makes the answer unreadable."""
    if token.isdigit():
        values.add(float(token))
        return True
    word = _WORD_VALUES.get(token)
    if word is not None:
        values.add(word)
        return True
    if token.isalpha():
        return token not in _UNREADABLE_WORDS
    if token[:1] == b"-":
        body = token[1:]
        if body.isdigit() or _DECIMAL.fullmatch(body) is not None:
            values.add(-float(body.replace(b",", b"")))
            return True
        return _token_values(body, values)  # "-five", "-t-shirt": the dash is punctuation
    if _DECIMAL.fullmatch(token) is not None:
        values.add(float(token.replace(b",", b"")))
        return True
    if b"." in token or b"," in token or b"-" in token:
        # "2-3", "3,4", "1.2.3": several numbers (or none, as in "t-shirt", "e.g").
        return all(_token_values(part, values) for part in _SEPARATORS.split(token) if part)
    return True  # digits glued to letters ("3rd", "x3"): not a number


def _ascii_view(text: str) -> str | None:
    """``text`` with Unicode minus signs made ASCII; ``None`` when a non-ASCII character would change what a
    digit means: another script's digit, a superscript or fraction ("3²", "3½"), a mark or symbol glued to a
    digit ("3°", "3\u0305"), or any math symbol but a minus glued to a digit ("≤ 3", "≈ 3", "− 3"). Other
    non-ASCII characters separate tokens."""
    out = []
    for i, c in enumerate(text):
        if c.isascii():
            out.append(c)
            continue
        category = unicodedata.category(c)
        if category[0] == "N":
            return None
        before = text[i - 1] if i else ""
        after = text[i + 1] if i + 1 < len(text) else ""
        if c in _MINUS and after.isdigit() and after.isascii() and not (before.isascii() and before.isalnum()):
            out.append("-")
            continue
        if category == "Sm":  # "≤ 3", "≈ 3", "− 3": a comparison or a detached minus is no plain count
            return None
        if category[0] in "MS" and ((before.isdigit() and before.isascii()) or (after.isdigit() and after.isascii())):
            return None
        out.append(" ")
    return "".join(out)


def numbers_in(text: str) -> set[float] | None:
    """Distinct numeric values mentioned in ``text``, or ``None`` if it is unreadable (a scale, fraction or hedge
    word, a percent sign, a bound such as "3+", or a non-ASCII character that changes a digit)."""
    if not text.isascii():
        text = _ascii_view(text)
        if text is None:
            return None
    if "%" in text or "~" in text or (("+" in text or "<" in text or ">" in text) and _BOUND.search(text)):
        return None
    values: set[float] = set()
    return values if _scan(text, values, strict=True) else None


def _values_mentioned(text: str) -> set[float] | None:
    """Every numeric value ``text`` mentions, whatever words surround it ("No. 4." holds 4, though "no" makes it no
    count); ``None`` when a non-ASCII character changes a digit (what it mentions cannot be told)."""
    if not text.isascii():
        text = _ascii_view(text)
        if text is None:
            return None
    values: set[float] = set()
    _scan(text, values, strict=False)
    return values


def _scan(text: str, values: set[float], *, strict: bool) -> bool:
    """Add the values of the (ASCII) ``text``'s tokens to ``values``; ``False`` at the first token that makes it
    unreadable when ``strict``, else such tokens are skipped."""
    raw_tokens = text.encode("ascii", "replace").translate(_TABLE).split()
    skip = False
    for i, raw in enumerate(raw_tokens):
        if skip:
            skip = False
            continue
        token = raw.rstrip(b".,-").lstrip(b".,")
        if not token:
            continue
        tens = _TENS_VALUES.get(token)
        if tens is not None and token == raw and i + 1 < len(raw_tokens):
            unit = _DIGIT_WORDS.get(raw_tokens[i + 1].rstrip(b".,-"))
            if unit is not None:  # "twenty one", the only number spelled with a space
                values.add(tens + unit)
                skip = True
                continue
        if not _token_values(token, values) and strict:
            return False
    return True


def _single_integer(text: str) -> int | None:
    values = numbers_in(text)
    if not values or len(values) != 1:
        return None
    (value,) = values
    return int(value) if value.is_integer() else None


@lru_cache(maxsize=1 << 14)
def _reference_count(reference: str) -> int | None:
    ref = reference.strip()
    if ref[-1:] == ".":
        ref = ref[:-1].rstrip()
    if _REF_INT.fullmatch(ref) is not None:
        return int(ref)
    key = " ".join(ref.lower().split()).encode("ascii", "replace")
    # The reference must be just the number ("three", "twenty one", "3.0"), not a sentence containing one.
    if key in _WORD_VALUES or key.replace(b" ", b"-") in _WORD_VALUES or _DECIMAL.fullmatch(key) is not None:
        return _single_integer(ref)
    logger.debug("count: reference %r is not an integer; it can never match", reference)
    return None


def _marked_answer(prediction: str) -> str | None:
    """The explicitly marked part of the prediction, or the whole prediction when there is no marker; ``None`` when
    the marks disagree ("\\boxed{3} or \\boxed{4}") or what follows the last one takes it back ("Answer: 3\\n\\nWait,
    there are 4", "Answer: 3\\n\\nNo. 4.")."""
    spans = answer_tag_spans(prediction) if "<" in prediction else []
    if not spans and "\\boxed" in prediction:
        spans = boxed_spans(prediction) or []
    if spans:
        values = {_single_integer(content) for _, _, content in spans}
        if len(values) != 1:
            return None  # two different counts marked, or one that is no count
        end, marked = spans[-1][1], spans[-1][2]
    else:
        line = answer_line_span(prediction)
        if line is None:
            return prediction
        end, marked = line[1], line[2]
    rest = prediction[end:]
    return None if hedges(rest, negations=False) or _corrected(rest, marked) else marked


def _corrected(rest: str, marked: str) -> bool:
    """Whether ``rest`` (what follows the last mark) corrects the ``marked`` count: it negates or contradicts
    ("no", "but", "however", "wrong", ...) and mentions a value the mark does not hold ("Answer: 3\\n\\nNo. 4."), or
    one of its lines is just another number ("Answer: 3\\n4"). Other numbers in an explanation that negates nothing
    ("There are 2 red and 3 blue cubes") and a negation without another value ("No other object is a cube") are no
    correction."""
    if not rest.strip():
        return False
    mine = numbers_in(marked) or set()
    if negates(rest):
        mentioned = _values_mentioned(rest)
        if mentioned is None or not mentioned <= mine:
            return True
    for line in rest.splitlines():
        line = line.strip().strip("*_#>`. \t")
        if not line or len(line.split()) > 2 or line.endswith((":", "：")):
            continue
        mentioned = _values_mentioned(line)
        if mentioned is None or not mentioned <= mine:
            return True
    return False


@register
class CountVerifier(Verifier):
    """Exactly one integer in the (marked) answer, equal to the integer reference; see the module docstring."""

    name = "count"
    title = "single-integer count match"
    PARAMS = {}

    @property
    def description(self) -> str:
        return (
            "The answer must state exactly one number, and that number must equal the reference count. Digits "
            'and number words both count ("3", "three", "twenty-one"; "none" is 0), and the number may sit in a '
            'sentence ("There are 3 cubes."). An answer that mentions two different numbers ("3 or 4", '
            '"2 red and 3 blue, so 5") is rejected rather than guessed at, as is a non-integer ("3.5"); "3.0" '
            'counts as 3. "No" is not read as zero. When the answer marks its final value explicitly '
            '(an "Answer:" line, a boxed value or an answer tag), only the marked value is read, provided every mark '
            'holds the same count and nothing after the last one doubts it ("Answer: 3" then "Wait, there are 4" '
            'is no count) or corrects it: a negation or contrast word ("no", "but", "however", "wrong") together '
            'with another number ("Answer: 3" then "No. 4.") or a later line that is just another number. An '
            'explanation that mentions other numbers without negating anything ("Answer: 5" then "There are 2 red '
            'and 3 blue cubes") is fine. A hedged, bounded or negated count ("about 3", "at least 3", "3+", "not 3"), a fraction '
            '("three quarters"), a percent, or a digit changed by a superscript, fraction or symbol ("3²", "3½", '
            '"3°") is rejected; a Unicode minus sign is a minus.'
        )

    def match(
        self, prediction: str | None, reference: str | Sequence[str], *, item: Item | None = None
    ) -> bool:
        if prediction is None:
            return False
        if type(reference) is str and reference.isdigit() and reference.isascii():
            targets = (int(reference),)
        else:
            refs = (reference,) if type(reference) is str else as_references(reference)
            targets = {c for c in map(_reference_count, refs) if c is not None}
            if not targets:
                return False
        # Fast path: a bare number ("3", "3.", "Three."), the common answer to "answer with a single number".
        bare = prediction.strip()
        if bare.isdigit() and bare.isascii():
            return int(bare) in targets
        if bare.isascii():
            bare = bare.rstrip(".")
            value = int(bare) if bare.isdigit() else _SPELLED.get(bare.lower())
            if value is not None:
                return value in targets
        marked = _marked_answer(prediction)
        value = None if marked is None else _single_integer(marked)
        return value is not None and value in targets

    def contradicts(
        self, prediction: str | None, reference: str | Sequence[str], *, item: Item | None = None
    ) -> bool:
        if prediction is None:
            return False
        counts = [_reference_count(r) for r in as_references(reference)]
        if not counts or None in counts:
            return False
        marked = _marked_answer(prediction)
        value = None if marked is None else _single_integer(marked)
        return value is not None and value not in counts

    @property
    def contradiction_rule(self) -> str:
        return ("An answer that states exactly one whole number, plainly (no hedge, bound or second number), "
                "different from the reference count.")
