"""Typed values: what kind of value a reference is, and every value of that kind a text states.

Kinds: a number (counts included), yes/no, an option letter, a term of the family's closed set of answers (CLEVR's
colours, shapes, materials, sizes, with their synonyms), and free text, which has no typed values. A text's values
of a kind are read with their place in the text, so that what is left around them can be checked (a stated answer
is *clean* when nothing but neutral words stands beside its value).
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rs.answers.numbers import Number, plain_text, read_numbers, simple_number

__all__ = ["Kind", "Found", "Vocabulary", "classify", "find", "unaccounted", "NEUTRAL_WORDS", "UNIT_WORDS"]


class Kind(str, enum.Enum):
    NUMBER = "number"
    POLAR = "yes/no"
    OPTION = "option"
    TERM = "term"
    TEXT = "text"


# Members as module names where every check passes (Python 3.11 looks an enum class's attributes up through a hook).
_NUMBER = Kind.NUMBER


@dataclass(frozen=True)
class Found:
    """The values of one kind a text states, in order, with their spans; ``readable`` False when a value of that
    kind may be there but cannot be read for sure (a number written as "3²")."""

    values: tuple[Any, ...]
    spans: tuple[tuple[int, int], ...]
    text: str
    """The text the spans point into (numbers are read from its plain form)."""
    readable: bool = True
    ambiguous: bool = False
    """A word that may be a value or not ("A dog": the article, or option A?): never clean."""

    @functools.cached_property
    def leftover(self) -> tuple[str, ...]:
        """:meth:`leftover_words`, computed once."""
        return tuple(self.leftover_words())

    @functools.cached_property
    def outside(self) -> str:
        """``text`` outside the values' spans (each span a space)."""
        if not self.spans:
            return self.text
        parts, pos = [], 0
        for start, end in sorted(self.spans):
            parts.append(self.text[pos:start])
            pos = max(pos, end)
        parts.append(self.text[pos:])
        return " ".join(parts)

    def leftover_words(self) -> list[str]:
        """The words of ``text`` outside the values' spans, lower-cased (a wrapper command such as ``\\text`` is
        notation, no word)."""
        left = self.outside
        return _WORDS.findall((_WRAPPER.sub(" ", left) if "\\" in left else left).lower())

    @functools.cached_property
    def stray(self) -> bool:
        """Whether anything outside the values' spans is neither a word nor a decoration of the closed list
        (:func:`unaccounted`): a digit, an operator, a LaTeX command that is no wrapper, a brace no wrapper opened."""
        return unaccounted(self.outside)


_WORDS = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")

# What may stand beside a value and change nothing: the closed list of decorations. Everything else that is no word
# (a digit, an operator, a radical, a LaTeX command other than a wrapper, a brace no wrapper opened, a strikethrough)
# is a character the reader does not model: the value beside it is not clean (acceptance by accounting).
_WRAPPER = re.compile(
    r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mathit|mbox|operatorname|boxed)\s*\{"
    r"|\\(?:displaystyle|quad|qquad|left|right|bigl?|bigr?|Big)(?![A-Za-z])|\\[,;:! ]|\\(?=[$%])"
)
_DECORATION = re.compile(
    r"[\s.,;:!'\"`()\[\]#$*_“”‘’«»。，、：；！（）「」【】€£¥₹-]"  # punctuation, quotes, brackets, emphasis, currency
    r"|(?:(?<=\s)|^)[–—•>](?=\s|$)"  # a dash between words, a bullet, a quote mark
)


@functools.lru_cache(maxsize=1 << 14)
def unaccounted(text: str) -> bool:
    """Whether ``text`` (what stands beside a value) holds a character that is neither part of a word nor a
    decoration of the closed list (:data:`_DECORATION`, wrapper commands with their braces)."""
    if "\\" in text:
        opened = len(_WRAPPER.findall(text))
        text = _WRAPPER.sub(" ", text)
        if text.count("}") > opened or "{" in text:
            return True
        text = text.replace("}", " ")
    elif "{" in text or "}" in text:
        return True
    text = _WORDS.sub(" ", _DECORATION.sub(" ", text))
    return not _DECORATION_ONLY.fullmatch(_DECORATION.sub(" ", text))


_DECORATION_ONLY = re.compile(r"\s*")

# Words that stand around a stated value without changing it: sentence frames ("There are 3 objects.", "It is
# blue.", "The answer is B."). A word not here, in the question, or a unit leaves the value unclean, and an unclean
# value is never accepted or rejected for certain on the verifier's word: the judge reads it.
NEUTRAL_WORDS = frozenset(
    "the a an is are was were be it its it's they them their there there's this that these those here of in on at "
    "to for with by total altogether all answer final correct right so thus therefore hence we i i'd i'm i've have "
    "has see can count counted exactly just only value number result option choice letter equals equal "
    "would will image picture scene shown visible remaining left objects object items item things thing".split()
)
# Units a number may carry in a stated answer ("8 objects", "7 1/2 cups", "42 percent").
UNIT_WORDS = frozenset(
    "percent percentage points point pts cups cup dollars dollar usd eur euros euro pounds yen cents cent years year "
    "months month days day hours hour minutes minute seconds second cm mm m km kg g mg lb lbs ml l meters metres "
    "meter metre kilometers kilograms grams inches inch feet foot ft miles mile degrees degree units unit people "
    "persons times".split()
)

# "_false_" is emphasis: an underscore touches a yes or no as markdown does, no word character
_POLAR_TOKEN = re.compile(
    r"(?<![^\W_])(yes|no|true|false)(?![^\W_])(?=\s*(?:[,.!;:)\]*_\"'\n}$`”’]|$))", re.IGNORECASE
)
_POLAR_WORD = re.compile(r"(?<![^\W_])(yes|no|true|false)(?![^\W_])", re.IGNORECASE)
_POLAR_MAP = {"yes": "yes", "true": "yes", "no": "no", "false": "no"}
# What a sentence states against a "yes" ("There isn't any.", "No cube is red", "Nothing is there."): yes/no answers
# are polarities, and a negated statement asserts one.
_NEGATED = re.compile(
    r"n't\b|\b(?:not|never|none|nothing|nobody|neither|nor|(?:no|zero|0)(?=\s+[a-z]))\b", re.IGNORECASE
)


def polar_of(text: str) -> str | None:
    """ "yes" or "no" when ``text`` is just that (surrounding punctuation aside), else None."""
    return _POLAR_MAP.get(text.strip().strip(".!*_\"'()[] ").casefold())


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """A family's closed set of answers: every spelling (synonyms, plurals) of each canonical term, and its category.

    Built from the cleaned references and the family's ``answers.synonyms`` / ``answers.categories``; a term a
    category does not name has the category ``term``.
    """

    spellings: Mapping[str, str]
    """Every spelling, case-folded, to its canonical term."""
    categories: Mapping[str, str] = field(default_factory=dict)
    pattern: re.Pattern[str] = field(default=re.compile(r"(?!)"), compare=False)

    @classmethod
    def build(
        cls,
        terms: Iterable[str],
        synonyms: Mapping[str, Sequence[str]] | None = None,
        categories: Mapping[str, Sequence[str]] | None = None,
    ) -> Vocabulary:
        spellings: dict[str, str] = {}
        for canonical, others in (synonyms or {}).items():
            for spelling in (canonical, *others):
                spellings[spelling.casefold()] = canonical.casefold()
        for term in terms:
            key = term.strip().casefold()
            if key and polar_of(key) is None and (read_numbers(key) or None) is None:
                spellings.setdefault(key, key)
        category = {t.casefold(): name for name, members in (categories or {}).items() for t in members}
        cats = {canonical: category.get(canonical, "term") for canonical in set(spellings.values())}
        alternation = "|".join(re.escape(s) for s in sorted(spellings, key=len, reverse=True))
        pattern = (
            re.compile(rf"(?<![\w-])(?:{alternation})(?![\w-])", re.IGNORECASE) if spellings else re.compile(r"(?!)")
        )
        return cls(spellings, cats, pattern)

    def __bool__(self) -> bool:
        return bool(self.spellings)

    @functools.cached_property
    def words(self) -> frozenset[str]:
        """Every word of every spelling (what may stand beside a value of another kind: "3 cubes")."""
        return frozenset(w for spelling in self.spellings for w in _WORDS.findall(spelling))

    def canonical(self, text: str) -> str | None:
        """The canonical term ``text`` is (a synonym or plural read as its term), or None."""
        return self.spellings.get(text.strip().casefold())

    def synonym_groups(self) -> list[list[str]]:
        """Each canonical term with its other spellings, for the card; only terms that have some."""
        groups: dict[str, list[str]] = {}
        for spelling, canonical in self.spellings.items():
            if spelling != canonical:
                groups.setdefault(canonical, []).append(spelling)
        return [[canonical, *sorted(others)] for canonical, others in sorted(groups.items())]


def classify(references: Sequence[str], vocabulary: Vocabulary | None = None) -> Kind:
    """The kind of value every reference is (see :func:`_classify`).

    One reference that is one plain number (`simple_number`) is a number, told without `_classify`'s cache: that is
    what `_classify` finds first (its `_plain_number` is that number), and most such references are new (chart
    values), where a cache only costs."""
    if len(references) == 1 and simple_number(references[0]) is not None:
        return _NUMBER
    return _classify(references if type(references) is tuple else tuple(references), vocabulary)


@functools.lru_cache(maxsize=1 << 14)
def _classify(references: tuple[str, ...], vocabulary: Vocabulary | None = None) -> Kind:
    """The kind of value every reference is: yes/no, a plain number, a term of the closed set, else free text."""
    if not references:
        return Kind.TEXT
    # numbers first: no text is both a number and a yes or no, and most references are numbers
    for r in references:
        if _plain_number(r) is None:
            break
    else:
        return _NUMBER
    for r in references:
        if polar_of(r) is None:
            break
    else:
        return Kind.POLAR
    if vocabulary and all(vocabulary.canonical(r) is not None for r in references):
        return Kind.TERM
    return Kind.TEXT


# Few entries: a reference is read again within its own decision and for the other samples of its item, soon after;
# a cache that kept every reference's number alive made the garbage collector walk two more objects per check.
@functools.lru_cache(maxsize=1 << 6)
def _plain_number(reference: str) -> Number | None:
    """The number a reference is when it is nothing else ("3", "$2,556.25", "13%", "\\frac{2}{5}", "three")."""
    if (number := simple_number(reference)) is not None:
        return number  # one plain number: no glued unit, nothing left over, no qualifier
    return _read_plain_number(reference)


def _read_plain_number(reference: str) -> Number | None:
    """:func:`_plain_number` by the general reading."""
    if _GLUED_UNIT.search(reference):
        return None  # "1g", "3D": a label as much as a number
    found = find(Kind.NUMBER, reference)
    if not found.readable or len(found.values) != 1 or found.leftover or found.stray:
        return None  # a reference is read by the rule answers are: "√{2}" is no 2
    number = found.values[0]
    return None if number.qualifier else number


_GLUED_UNIT = re.compile(r"[0-9][A-Za-z]")


def reference_values(
    kind: Kind, references: Sequence[str], vocabulary: Vocabulary | None = None
) -> tuple[Any, ...] | None:
    """Each reference as a value of ``kind``; None when one is not. Each reference is read once (`_plain_number`)."""
    if kind is _NUMBER:
        if len(references) == 1:
            number = _plain_number(references[0])
            return None if number is None else (number,)
        numbers = tuple(map(_plain_number, references))
        for number in numbers:
            if number is None:
                return None
        return numbers
    return _reference_values(kind, tuple(references), vocabulary)


@functools.lru_cache(maxsize=1 << 14)
def _reference_values(
    kind: Kind, references: tuple[str, ...], vocabulary: Vocabulary | None
) -> tuple[Any, ...] | None:
    out = []
    for r in references:
        if kind is Kind.NUMBER:
            v = _plain_number(r)
        elif kind is Kind.POLAR:
            v = polar_of(r)
        elif kind is Kind.TERM:
            v = vocabulary.canonical(r) if vocabulary else None
        else:
            v = None
        if v is None:
            return None
        out.append(v)
    return tuple(out)


def find(
    kind: Kind,
    text: str,
    *,
    vocabulary: Vocabulary | None = None,
    letters: str = "",
    options: Sequence[str] = (),
    rest: bool = False,
) -> Found:
    """Every value of ``kind`` that ``text`` states. ``rest``: ``text`` is what stands beside a stated answer, read
    inclusively (a negated statement states "no"; "A is also right" names option A)."""
    return _find(kind, text, vocabulary, letters, tuple(options), rest)


@functools.lru_cache(maxsize=1 << 16)
def _find(
    kind: Kind, text: str, vocabulary: Vocabulary | None, letters: str, options: tuple[str, ...], rest: bool
) -> Found:
    if kind is Kind.NUMBER:
        return _numbers_found(text)
    if kind is Kind.POLAR:
        return _polar_found(text, rest)
    if kind is Kind.TERM:
        return _terms_found(text, vocabulary)
    if kind is Kind.OPTION:
        return _options(text, letters, options, inclusive=rest)
    return Found((), (), text)


def _numbers_found(text: str) -> Found:
    """The numbers ``text`` states, their spans in ``plain_text(text)``; unreadable when one cannot be read for sure."""
    numbers = read_numbers(text)  # spans in plain_text(text)
    if numbers is None:
        return Found((), (), text, readable=False)
    return Found(tuple(numbers), tuple((n.start, n.end) for n in numbers), plain_text(text) or "")


def _polar_found(text: str, rest: bool) -> Found:
    """The yes and no answers ``text`` states; beside an answer (``rest``) every yes or no it says and every negated statement."""
    hits = [(_POLAR_MAP[m.group(1).lower()], m.start(), m.end()) for m in _POLAR_TOKEN.finditer(text)]
    if rest:  # what stands beside an answer: every yes or no it says, and every negated statement
        hits = [(_POLAR_MAP[m.group(1).lower()], m.start(), m.end()) for m in _POLAR_WORD.finditer(text)]
        hits += [("no", m.start(), m.end()) for m in _NEGATED.finditer(text)]
    hits.sort(key=lambda h: h[1])
    return Found(tuple(h[0] for h in hits), tuple((h[1], h[2]) for h in hits), text)


def _terms_found(text: str, vocabulary: Vocabulary | None) -> Found:
    """The vocabulary's terms ``text`` names, each as its canonical spelling; nothing without a vocabulary."""
    if not vocabulary:
        return Found((), (), text)
    hits = [
        (vocabulary.spellings[m.group(0).casefold()], m.start(), m.end()) for m in vocabulary.pattern.finditer(text)
    ]
    # "not red" names no red: a negated term is another value (its span stays the term's, so the "not" is left over)
    hits = [(f"not {h[0]}" if _NEGATED_BEFORE.search(text, 0, h[1]) else h[0], h[1], h[2]) for h in hits]
    return Found(tuple(h[0] for h in hits), tuple((h[1], h[2]) for h in hits), text)


_LETTER = re.compile(r"(?<![\w'’-])([A-Za-z])(?![\w'’-])")
_OPTION_WORD = re.compile(
    r"(?:option|choice|answer|letter)(?:\s+(?:is|was|would\s+be|will\s+be|=))?\s*[:(\[]?[\s*_`]*$", re.IGNORECASE
)


def _norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.casefold()))


# What follows an option named as the subject of a sentence ("A is also correct", "A could be right").
_SUBJECT_VERB = re.compile(
    r"\s+(?:is|was|would|could|might|may|also|and|or|seems|looks|matches|fits|shows|can|"
    r"should|must|appears|describes|best|too|if|when|instead|otherwise|though|rather|then)\b"
)


def _options(text: str, letters: str, options: Sequence[str], *, inclusive: bool = False) -> Found:
    """Option letters standing as options ("B", "(B)", "B.", "option B"; "A" or "I" followed by a word is the article
    or the pronoun), and the options' own texts ("pupa" when B is "pupa") read as their letters."""
    valid = letters[: len(options)] if options else letters
    hits, skipped = _letter_hits(text, valid, options, inclusive)
    hits += _option_text_hits(text, valid, options)
    hits += _position_hits(text, valid, options)
    hits.sort(key=lambda h: h[1])
    # "not B" names no B: a negated option is another value (its span stays the letter's, so the "not" is left over)
    hits = [(f"not {h[0]}" if _NEGATED_BEFORE.search(text, 0, h[1]) else h[0], h[1], h[2]) for h in hits]
    ambiguous = any(not any(s <= pos < e for _, s, e in hits) for pos in skipped)
    return Found(tuple(h[0] for h in hits), tuple((h[1], h[2]) for h in hits), text, ambiguous=ambiguous)


def _letter_hits(
    text: str, valid: str, options: Sequence[str], inclusive: bool
) -> tuple[list[tuple[str, int, int]], list[int]]:
    """The valid letters standing as options, and where a leading "A" was read as the article (ambiguous unless an
    option's text covers it)."""
    hits: list[tuple[str, int, int]] = []
    skipped: list[int] = []
    for m in _LETTER.finditer(text):
        letter = m.group(1)
        upper = letter.upper()
        if upper not in valid:
            continue
        before, after = text[: m.start()], text[m.end() :]
        named = _OPTION_WORD.search(before) is not None
        if letter.islower() and not named and text.strip(" .()[]*_:") != letter:
            continue  # "a" and "i" in prose are words, not options
        if not inclusive and not named and not _is_mark(before, after):
            if letter.isupper():
                skipped.append(m.start())  # "B, C": a letter that may name an option, or not: never clean
            continue  # "point B", "(a^{2}+B^{2})": a label or a variable, no option mark
        if (
            upper in "AI"
            and not named
            and re.match(r"\s+[a-z]", after)
            and not _is_option_text(after, upper, valid, options)
            and not (inclusive and _SUBJECT_VERB.match(after))
        ):
            if upper == "A" and m.start() == len(text) - len(text.lstrip()):
                skipped.append(m.start())
            continue  # "A dog", "I think": the article and the pronoun
        hits.append((upper, m.start(), m.end()))
    return hits, skipped


# An option mark: the letter alone, in brackets ("(B)", "[B]"), or first with a separator after it ("B.", "B) pupa",
# "B: pupa", "B - pupa", "B, because"); a letter "option", "answer" or "choice" names is one too (`_OPTION_WORD`).
_MARK_BEFORE = re.compile(r"(?:^|[(\[])[\s*_`$]*$")
_MARK_AFTER = re.compile(r"^[\s*_`$]*(?:$|[.):,;!\]]|[-–—](?:\s|$)|\s+[-–—(]|\s+[^\W\d_])")
_BRACKETED = re.compile(r"[(\[][\s*_]*$")


def _is_mark(before: str, after: str) -> bool:
    """Whether a letter between ``before`` and ``after`` stands as an option mark, never inside a word or an expression:
    bracketed, or at the start of the text followed by a separator, a bracket or a word."""
    if _BRACKETED.search(before):
        return re.match(r"[\s*_]*[)\]]", after) is not None
    return _MARK_BEFORE.search(before) is not None and _MARK_AFTER.match(after) is not None


def _option_text_hits(text: str, valid: str, options: Sequence[str]) -> list[tuple[str, int, int]]:
    """Each option's own text where ``text`` says it, read as the option's letter."""
    hits = []
    for index, option in enumerate(options):
        if index >= len(valid) or not _norm(option):
            continue
        pattern = r"(?<!\w)" + r"\W+".join(re.escape(w) for w in _norm(option).split()) + r"(?!\w)"
        for m in re.finditer(pattern, text, re.IGNORECASE):
            hits.append((valid[index], m.start(), m.end()))
    return hits


_NEGATED_BEFORE = re.compile(
    r"\b(?:not|isn't|never|except)\s+(?:the\s+)?(?:option\s+|choice\s+|answer\s+)?\(?$", re.IGNORECASE
)
_ORDINALS = {w: i for i, w in enumerate("first second third fourth fifth sixth seventh eighth".split())}
_ORDINALS |= {w: i for i, w in enumerate("1st 2nd 3rd 4th 5th 6th 7th 8th".split())}
_POSITION = re.compile(
    r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|1st|2nd|3rd|[4-8]th|last|final)\s+"
    r"(?:one|option|choice|answer|alternative|item)\b",
    re.IGNORECASE,
)


def _position_hits(text: str, valid: str, options: Sequence[str]) -> list[tuple[str, int, int]]:
    """An option named by its position ("the second one", "the last option"), read as its letter."""
    if "one" not in text.lower() and "o" not in text.lower():
        return []
    count = len(options) if options else len(valid)
    hits = []
    for m in _POSITION.finditer(text):
        word = m.group(1).lower()
        if word in ("last", "final"):
            index = count - 1 if options else -1
        else:
            index = _ORDINALS[word]
        if 0 <= index < min(count, len(valid)):
            hits.append((valid[index], m.start(), m.end()))
    return hits


def _is_option_text(after: str, letter: str, valid: str, options: Sequence[str]) -> bool:
    if not options or valid.find(letter) >= len(options):
        return False
    return _norm(after).startswith(_norm(options[valid.find(letter)]))
