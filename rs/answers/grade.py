"""The three-way decision on a final answer: accepted, certainly wrong, or undecided (the judge's).

Two rules, one for each decision the verifier may take without the judge:

* **Accepted** (:meth:`Grader._accepts`): the stated answer is one clean value of the reference's kind, the
  verifier's metric matches it, and it equals a reference once notation only is normalised
  (`Verifier.same_value`), or the match needs a leniency that is the task's own (`Verifier.own_leniency`: relaxed
  accuracy on a value read off an axis). The rest of the answer states no other value of that kind and nothing
  retracts, corrects or hedges (:func:`turns`). For free text, the rest must say nothing else.
* **Certain rejection** (:meth:`Grader._certain`): the stated answer is one clean value of the reference's kind that
  the metric does not match and that differs from every reference beyond any notation, scale, percent conversion,
  other separators ("1.000" for 1000), rounding or tolerance (`Verifier.near_value`), with nothing after it that
  turns, and no value in the rest that matches or nearly matches; a number stated in a unit a unit's factor from the
  reference (:func:`_in_another_unit`) and a reply to a negated yes/no question (:func:`_asks_a_negation`) never
  are. No judge verdict overrules it.
* **Undecided**: everything else. The verifier concludes nothing; the judge reads it.

A value is *clean* when only neutral words stand beside it: sentence frames ("There are", "The answer is"), the
question's own words except a negation, units.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any, Protocol

from rs.answers.numbers import read_numbers, simple_number
from rs.answers.reading import Reading, read, unwrap
from rs.answers.values import NEUTRAL_WORDS, UNIT_WORDS, Found, Kind, Vocabulary, find, reference_values

Item = Any
"""What is known of the item beside its references: its `question` and `options`, when it has them."""


class Verifier(Protocol):
    """What the grader asks of a verifier (`rs.verifiers.base.Verifier` is one)."""

    def kind(self, references: Sequence[str], *, item: Item = None, vocabulary: Vocabulary | None = None) -> Kind: ...

    def compare(self, value: str, references: Sequence[str], *, item: Item = None) -> bool: ...

    def compare_value(
        self,
        kind: Kind,
        value: Any,
        references: Sequence[str],
        *,
        item: Item = None,
        vocabulary: Vocabulary | None = None,
    ) -> bool: ...

    def certain_kind(
        self, kind: Kind, references: Sequence[str], *, item: Item = None, vocabulary: Vocabulary | None = None
    ) -> bool: ...

    def certain_value(self, kind: Kind, value: Any) -> bool: ...

    def same_value(
        self,
        kind: Kind,
        value: Any,
        references: Sequence[str],
        *,
        item: Item = None,
        vocabulary: Vocabulary | None = None,
    ) -> bool: ...

    def own_leniency(self, kind: Kind, value: Any, references: Sequence[str], *, item: Item = None) -> bool: ...

    def near_value(self, kind: Kind, value: Any, references: Sequence[str], *, item: Item = None) -> bool:
        """Asked only of a value :meth:`compare_value` does not match."""
        ...


__all__ = ["Grade", "Grader", "LITERAL_RULE", "Outcome", "READING_RULES"]

READING_RULES = (
    "Every final answer is read once, the same way for every verifier. Its *stated answer* is what an answer tag, "
    'a box, an "Answer:" line (also "答案：") or a sentence "The answer is ..." holds (every such mark must state the '
    "same thing), else its first line; emphasis, quotes, code ticks, math delimiters and a trailing period are removed. "
    "The answer is then read for values of the reference's kind: a number (digits of any script, number words, "
    "fractions and mixed numbers, LaTeX, percent signs, thousands separators, currency signs and units all "
    'normalised), yes or no, an option (its letter, its text, or its position such as "the second one", whenever '
    "the item has options, whatever the verifier), a term of the family's closed set of answers, or free text. A "
    'negation attached to a value ("not B") is part of it, even where the question says "not". '
    "**Accepted**: the stated answer is one value, with only neutral words beside it (a sentence frame such as "
    '"There are", the question\'s own words, a unit) and every other character accounted for (emphasis, quotes, '
    "brackets, punctuation, math delimiters and wrapper commands such as \\text; a digit, an operator, a radical or "
    "any other LaTeX command leaves the answer to the judge, and a reference is read by the same rule), the "
    "verifier's comparison below matches it, *and* it is a "
    "reference once notation only is normalised (case, punctuation, spacing, accents, markdown, LaTeX, thousands "
    "separators, a percent sign, number words, synonyms of the closed set); a match that needs the metric's leniency "
    "(an edit distance, a tolerance, a percent or scale conversion) is accepted only where that leniency is the "
    "task's own (relaxed accuracy on a value read off a chart's axis, never a count, a year or an identifier), and "
    "is otherwise the judge's. Nothing else in the answer may state another value of that kind, and nothing in it "
    'may retract, correct or hedge it, in any script ("wait", "on second look I was wrong", "red-ish", '
    '"应为"); free text is accepted only when nothing else is said. **Certainly wrong**: the stated answer is one '
    "such clean value that differs from every reference beyond any notation, scale word, percent conversion, "
    "rounding or tolerance, nothing after it retracts, corrects or hedges it, and nothing else in the answer states "
    "a value that matches or nearly matches. **Undecided**: everything else (a hedged or qualified value such as "
    '"about 3", several values, marks that disagree, another value stated after the answer, a retraction, a near '
    'miss, a number that cannot be read for sure such as "2_500", "1,0000", "0.333..." or "the 1980s"): the '
    "verifier concludes nothing, and the judge reads it. An option's letter counts only as a mark (alone, in "
    'brackets, after "option" or "answer", or first with a separator after it), never inside a word or an '
    "expression, and a mark followed by another option's text or another value is the judge's. Never accepted "
    'either: a digit run no reference has (a looping "0.99999..."), a sentence whose only value is one the question '
    'states, a percent sign added to a reference that has none where no percentage is asked, a "no" followed by '
    'a statement of what the question asks, a revision ("Update: ...") or a struck-out draft. Where a text metric\'s '
    'reference is written as a fraction ("2/4", a page, a date), it is compared as written, never as a value. '
    "Mathematics (`math`) is decided whole by math-verify: a parse must cover the whole answer, text such as a "
    "chemical formula is compared as written, and an answer is certainly wrong only where both sides parse completely "
    "and differ beyond a rounding."
)

LITERAL_RULE = (
    "This family's answers are transcriptions (`answers: {literal: true}`): an answer is read as written, with no "
    'typed conversion, so "3" is not the word "three" and only the same text (case, punctuation and accents '
    "aside) is accepted without the judge."
)


class Outcome(str, enum.Enum):
    ACCEPTED = "accepted"
    CERTAIN = "certain"
    UNDECIDED = "undecided"


# Enum members as module names where every check passes: Python 3.11 looks an enum class's attributes up through
# EnumType.__getattr__'s hook, several times dearer than a global name.
_ACCEPTED, _CERTAIN, _UNDECIDED = Outcome.ACCEPTED, Outcome.CERTAIN, Outcome.UNDECIDED
_NUMBER, _TEXT = Kind.NUMBER, Kind.TEXT


@dataclass(frozen=True, slots=True, init=False)
class Grade:
    outcome: Outcome
    kind: Kind
    stated: str
    """The stated answer the decision read ("" when none)."""
    value: Any = None
    """The stated answer's value of ``kind`` when it had exactly one clean value."""

    def __init__(self, outcome: Outcome, kind: Kind, stated: str, value: Any = None) -> None:
        # each field set once, through its slot (a frozen dataclass's own __init__ goes through object.__setattr__)
        _set_outcome(self, outcome)
        _set_kind(self, kind)
        _set_stated(self, stated)
        _set_value(self, value)

    @property
    def accepted(self) -> bool:
        return self.outcome is _ACCEPTED

    @property
    def certain(self) -> bool:
        return self.outcome is _CERTAIN


# Each field's slot setter, one module name each (a global name is found faster than an item of a tuple).
_set_outcome, _set_kind, _set_stated, _set_value = (Grade.__dict__[f.name].__set__ for f in fields(Grade))


class Grader:
    """Reads a final answer once and decides it with a verifier's comparison (see the module docstring).

    ``vocabulary`` is the family's closed set of answers with its synonyms, when it has one. ``literal``: the
    family's answers are transcriptions (`answers: {literal: true}`, the OCR families), read as written, with no
    typed conversion ("3" is not the word "three").
    """

    def __init__(self, verifier: Verifier, vocabulary: Vocabulary | None = None, *, literal: bool = False):
        self.verifier = verifier
        self.vocabulary = vocabulary if vocabulary else None
        self.literal = literal
        # A decision depends on the answer, the references, and the item's question and options only: short answers
        # repeat (yes, no, counts, colours; an item's samples), so most are decided once. What repeats is recent: a
        # longer memory (65,536 decisions) made the garbage collector walk more than re-deciding the older ones costs.
        self._decided = lru_cache(maxsize=1 << 14)(self._decide)

    def grade(self, answer: str | None, references: str | Sequence[str], *, item: Item | None = None) -> Grade:
        refs = (references,) if type(references) is str else tuple(references)
        if answer is None:
            return Grade(Outcome.UNDECIDED, self.verifier.kind(refs, item=item, vocabulary=self.vocabulary), "")
        if item is None:
            return self._decided(answer, refs, "", ())
        return self._decided(
            answer, refs, getattr(item, "question", None) or "", tuple(getattr(item, "options", ()) or ())
        )

    def _decide(self, answer: str, refs: tuple[str, ...], question: str, options: tuple[str, ...]) -> Grade:
        item = _Seen(question, options) if question or options else _NOTHING_SEEN
        kind = _TEXT if self.literal else self.verifier.kind(refs, item=item, vocabulary=self.vocabulary)
        if kind is _NUMBER and (grade := self._decide_plain_number(answer, refs, item)) is not None:
            return grade
        return self._read_and_decide(answer, kind, refs, item)

    def _decide_plain_number(self, answer: str, refs: tuple[str, ...], item: _Seen) -> Grade | None:
        """The decision on an answer that is one plain number and nothing else ("42", "3.5.", "1,234", "12%"), the most
        common answer of a number task, without the general reading; None for any other answer (read it in full).

        It is the general reading's decision (:meth:`_read_and_decide`), step by step: such an answer is its own stated
        answer once a trailing period is dropped, with no rest, no mark and nothing that turns; its one clean value is
        `simple_number`'s; so it is accepted by :meth:`_accepts` alone, and certainly wrong by :meth:`_certain`'s checks
        of the value alone."""
        stated = answer.strip()
        if stated[-1:] == ".":
            stated = stated[:-1]
        value = simple_number(stated)
        if value is None:
            return None
        v, kind = self.verifier, _NUMBER
        if v.compare_value(kind, value, refs, item=item, vocabulary=self.vocabulary):
            accepted = self._accepts(kind, value, refs, item, matches=True, stated=stated)
            return Grade(_ACCEPTED if accepted else _UNDECIDED, kind, stated, value)
        certain = (
            v.certain_kind(kind, refs, item=item, vocabulary=self.vocabulary)
            and v.certain_value(kind, value)
            and not v.near_value(kind, value, refs, item=item)
        )
        return Grade(_CERTAIN if certain else _UNDECIDED, kind, stated, value)

    def _read_and_decide(self, answer: str, kind: Kind, refs: tuple[str, ...], item: _Seen) -> Grade:
        """The general decision: the answer read in full (:func:`read`), then decided for its kind."""
        reading = read(answer)
        if reading.conflict or not reading.stated:
            return Grade(Outcome.UNDECIDED, kind, reading.stated)
        if kind is Kind.TEXT:
            return self._text(reading, refs, item)
        return self._typed(kind, reading, refs, item)

    def value(self, answer: str, kind: Kind, *, item: Item | None = None) -> Any:
        """The one value of ``kind`` an answer states, clean, with nothing beside it stating another; else None."""
        reading = read(answer)
        if reading.conflict or not reading.stated or kind is Kind.TEXT:
            return None
        context = _Context.of(kind, self.vocabulary, item, self.verifier)
        value = context.clean_value(reading.stated)
        return value if value is not None and context.rest_agrees(reading.rest, value) else None

    def reasoning_agrees(
        self, reasoning: str | None, grade: Grade, references: Sequence[str], *, item: Item | None = None
    ) -> bool | None:
        """Whether the conclusion the reasoning reaches (the last value of the accepted answer's kind it states) is the
        accepted value; None when it cannot be told (free text, or no value of that kind in the reasoning)."""
        if not reasoning or grade.value is None or grade.kind is Kind.TEXT:
            return None
        refs = (references,) if type(references) is str else tuple(references)
        context = _Context.of(grade.kind, self.vocabulary, item, self.verifier, refs)
        if grade.kind is Kind.TERM:
            found = context.find(reasoning)  # the terms of the answer's category
        else:  # read as stated, not inclusively: a negation in the reasoning is no "no"
            found = find(
                grade.kind, reasoning, vocabulary=self.vocabulary, letters=context.letters, options=context.options
            )
        values = [v for v in found.values if not (grade.kind is Kind.NUMBER and v.qualifier)]
        if not found.readable or not values:
            return None
        return context.same(values[-1], grade.value)

    def _accepts(
        self,
        kind: Kind,
        value: Any,
        refs: Sequence[str],
        item: Item | None,
        matches: bool | None = None,
        stated: str = "",
    ) -> bool:
        """THE rule for accepting a value: the verifier's metric matches it, and it is a reference once notation only
        is normalised, or the match needs a leniency that is the task's own (relaxed accuracy on a value read off an
        axis). A match that needs any other leniency (ANLS below 1, a tolerance on a count or a year, a percent or
        scale conversion) is the judge's. A degenerate answer (:func:`_degenerate`) and a percent sign a bare reference
        does not have (:func:`_adds_a_percent`) are never accepted."""
        v = self.verifier
        if matches is None:
            matches = v.compare_value(kind, value, refs, item=item, vocabulary=self.vocabulary)
        if not matches or _degenerate(stated, refs) or (kind is _NUMBER and _adds_a_percent(value, refs, item)):
            return False
        if getattr(v, "notation_only", False):
            return matches  # a metric that forgives notation only: its match is the same value
        return matches and (
            v.same_value(kind, value, refs, item=item, vocabulary=self.vocabulary)
            or v.own_leniency(kind, value, refs, item=item)
        )

    def _expression(self, reading: Reading, kind: Kind, refs: Sequence[str], item: Item | None) -> Grade | None:
        """A verifier that decides mathematics (``math``) decides a stated expression whole: accepted when it says
        equal, certainly wrong only when it says unequal on complete parses of both sides, when nothing else is said
        and nothing turns; None when this verifier decides no expressions."""
        verdict_of = getattr(self.verifier, "expression_verdict", None)
        if verdict_of is None:
            return None
        stated = reading.stated
        if (frame := _ANSWER_FRAME.match(stated)) is not None:
            stated = unwrap(stated[frame.end() :])  # "Answer: The answer is \\pi/8.": the frame is no mathematics
        verdict = verdict_of(stated, refs)
        if turns(reading, kind):
            return Grade(_UNDECIDED, kind, reading.stated)
        # accepted beside words only (an explanation with no number or expression in it, or the answer again);
        # certainly wrong only when nothing else is said
        said_else = _says_else(reading)
        if verdict is True and not _degenerate(reading.stated, refs):
            words_only = (
                not said_else
                or _MATH_NOTATION.search(reading.rest) is None
                and not any(c.isdigit() for c in reading.rest)
            )
            return Grade(_ACCEPTED if words_only else _UNDECIDED, kind, reading.stated)
        return Grade(_CERTAIN if verdict is False and not said_else else _UNDECIDED, kind, reading.stated)

    def _text(self, reading: Reading, refs: Sequence[str], item: Item | None) -> Grade:
        """Free text: accepted by :meth:`_accepts` when nothing else is said; never certainly wrong. A transcription
        family's answer is accepted only as written (:func:`_as_written`): a sentence that holds the reference in
        other words ("The number ten is written." for 10) is the judge's."""
        if not self.literal and (grade := self._expression(reading, Kind.TEXT, refs, item)) is not None:
            return grade
        matches = self._accepts(Kind.TEXT, reading.stated, refs, item, stated=reading.stated) and (
            not self.literal or _as_written(reading.stated) in {_as_written(r) for r in refs}
        )
        said_else = _says_else(reading)
        outcome = (
            Outcome.ACCEPTED if matches and not said_else and not turns(reading, Kind.TEXT) else Outcome.UNDECIDED
        )
        return Grade(outcome, Kind.TEXT, reading.stated)

    def _typed(self, kind: Kind, reading: Reading, refs: Sequence[str], item: Item | None) -> Grade:
        context = _Context.of(kind, self.vocabulary, item, self.verifier, refs)
        value = context.clean_value(reading.stated)
        if (
            value is None
            and kind is _NUMBER
            and _MATH_NOTATION.search(reading.stated)
            and context.find(reading.stated).readable  # "2_500", "0x10": no well-formed number, no expression either
        ):
            # a stated expression the number reading cannot account for ("\\sqrt{5}", "0.25\\pi"): mathematics decides it
            if (grade := self._expression(reading, kind, refs, item)) is not None:
                return grade
        if value is None:
            # Not one clean value. Its first clause may still be one that is certainly wrong ("4, because ..."): it
            # is never accepted on a clause (what follows in the line may hedge it), but a wrong value stays wrong.
            clause = reading.clause()
            value = None if clause is None else context.clean_value(clause.stated)
            if value is None or clause is None:
                return Grade(Outcome.UNDECIDED, kind, reading.stated)
            certain = self._certain(context, value, clause, refs, item)
            return Grade(Outcome.CERTAIN if certain else Outcome.UNDECIDED, kind, clause.stated, value)
        if self.verifier.compare_value(kind, value, refs, item=item, vocabulary=self.vocabulary):
            accepted = (
                not turns(reading, kind)
                and (kind is not Kind.POLAR or not _asks_a_negation(item) or _bare(reading))
                and (kind is not Kind.POLAR or value != "no" or not _affirms(reading.rest, item))
                and not _echoes(context, value, reading.stated, item)
                and context.rest_agrees(reading.rest, value)
                and self._accepts(kind, value, refs, item, matches=True, stated=reading.stated)
            )
            return Grade(Outcome.ACCEPTED if accepted else Outcome.UNDECIDED, kind, reading.stated, value)
        certain = self._certain(context, value, reading, refs, item, matches=False)
        return Grade(Outcome.CERTAIN if certain else Outcome.UNDECIDED, kind, reading.stated, value)

    def _certain(
        self,
        context: _Context,
        value: Any,
        reading: Reading,
        refs: Sequence[str],
        item: Item | None,
        matches: bool | None = None,
    ) -> bool:
        """THE rule for a certain rejection: one clean value of the reference's kind (every reference is of that
        kind, and the verifier can call such a value wrong) that the metric does not match and that differs from
        every reference beyond any notation, scale or tolerance difference, with nothing after it that retracts,
        corrects or hedges (in any script) and no value the rest states matching."""
        v = self.verifier
        if not (
            v.certain_kind(context.kind, refs, item=item, vocabulary=self.vocabulary)
            and v.certain_value(context.kind, value)
        ):
            return False
        if context.kind is Kind.POLAR and _asks_a_negation(item):
            return False
        if matches is None:
            matches = v.compare_value(context.kind, value, refs, item=item, vocabulary=self.vocabulary)
        if matches or turns(reading, context.kind) or self._near(context.kind, value, reading.stated, refs, item):
            return False
        rest = context.find(reading.rest, rest=True)
        return rest.readable and not any(
            v.compare_value(context.kind, other, refs, item=item, vocabulary=self.vocabulary)
            or self._near(context.kind, other, reading.rest, refs, item)
            for other in rest.values
        )

    def _near(self, kind: Kind, value: Any, text: str, refs: Sequence[str], item: Item | None) -> bool:
        """Whether a value ``text`` states could be a reference: the verifier's `near_value`, or a number stated in a
        unit a unit's factor from it (:func:`_in_another_unit`)."""
        return self.verifier.near_value(kind, value, refs, item=item) or (
            kind is Kind.NUMBER and _in_another_unit(text, value, refs)
        )


# What retracts, corrects or hedges an answer, in any script: a turn anywhere beside the stated answer leaves it
# undecided ("Yes.\n\nNo wait, I had that backwards.", "3 ... on second look I was wrong", "red-ish", "应为4").
_TURN = re.compile(
    r"\b(?:wait|actually|hmm+|oops|sorry|scratch\s+that|correction|correcting|i\s+mean|rather|instead|on\s+second\s+"
    r"(?:thought|look|glance|thoughts)|(?:i|i'm|i\s+am)\s+(?:was\s+)?(?:wrong|mistaken)|i\s+was\s+wrong|backwards|mistake|"
    r"mistaken|misread|miscounted|not\s+(?:\w+\s+)?(?:sure|certain|quite|right|correct)|unsure|uncertain|maybe|perhaps|probably|"
    r"possibly|might|i\s+think|i\s+guess|i\s+believe|seems?|likely|approximately|roughly|sort\s+of|kind\s+of|or\s+so|"
    r"re-?check|re-?count|recounting|double-check|that's\s+wrong|is\s+wrong|incorrect|\w+-ish|ish|hard\s+to\s+(?:tell|say))\b"
    r"|应为|应该是|更正|不对|错了|等等|其实|改为|修正|也许|可能|大概|訂正|実は|정정",
    re.IGNORECASE,
)


# "5? No, 6": a "no" that opens a clause corrects what stands before it, unless yes or no is what is asked.
_NO_CLAUSE = re.compile(r"(?:^|[\s—–,.;:?!-])no\s*[,!.;:—–-]\s*\S", re.IGNORECASE)


_NEGATION = re.compile(r"n't\b|\b(?:not|no|never|none|nothing|nobody|neither|nor)\b", re.IGNORECASE)
_BARE_POLAR = re.compile(r"(?:yes|no|true|false)[.!]?", re.IGNORECASE)


def _asks_a_negation(item: Item | None) -> bool:
    """Whether a yes/no question is itself negated ("Is there no red cube?", "Isn't it red?"). A reply's yes or no may
    then agree with the negation ("No, there isn't": the reference's *yes*) or answer the proposition, and a negated
    statement ("There is no red cube.") affirms it: only a bare yes or no with nothing beside it is accepted, and no
    answer is certainly wrong."""
    question = getattr(item, "question", None)
    return bool(question) and _NEGATION.search(question) is not None


_MEASURE = re.compile(
    r"\d\s*(?:mm|cm|m|km|in|inch(?:es)?|ft|feet|foot|miles?|meters?|metres?|kilometers?|kilometres?|mg|g|kg|lbs?|"
    r"grams?|kilograms?|ml|l|liters?|litres?|cents?|dollars?|s|secs?|seconds?|mins?|minutes?|h|hrs?|hours?|days?|"
    r"weeks?|months?|years?)\b",
    re.IGNORECASE,
)
_UNIT_FACTORS = (10, 12, 24, 60, 100, 1000, 3600, 1_000_000)


def _in_another_unit(text: str, value: Any, refs: Sequence[str]) -> bool:
    """Whether a number ``text`` states with a unit of measure is a reference times a unit's factor ("3 cm" for 30
    asked in millimetres, "50 cents" for 0.5 dollars, "2 hours" for 120 minutes): the same quantity, perhaps, in
    another unit."""
    if _MEASURE.search(text) is None:
        return False
    numbers = reference_values(Kind.NUMBER, refs) or ()
    a = value.value
    return any(a == r.value * f or a * f == r.value for r in numbers for f in _UNIT_FACTORS)


_DIGIT_RUN = re.compile(r"[0-9]+")
_REPEATED_DIGIT = re.compile(r"([0-9])\1{6,}")
_LONGEST_PLAIN_RUN = 10
_SUSPECT_RUN = re.compile(r"[0-9]{11}|([0-9])\1{6}")


def _degenerate(stated: str, refs: Sequence[str]) -> bool:
    """Whether a stated answer holds a digit run no reference has: longer than every reference's and than ten digits, or
    one digit repeated seven times or more where no reference repeats it so ("0.99999…" of a looping model, read as 1
    once rounded). Never accepted."""
    if len(stated) < 7 or _SUSPECT_RUN.search(stated) is None:
        return False  # no long run, no digit seven times over: the common answer, told by one search
    longest = max(map(len, _DIGIT_RUN.findall(stated)), default=0)
    repeated = _REPEATED_DIGIT.search(stated)
    if longest <= _LONGEST_PLAIN_RUN and repeated is None:
        return False
    reference_runs = [len(run) for r in refs for run in _DIGIT_RUN.findall(r)]
    if longest > max(_LONGEST_PLAIN_RUN, *reference_runs, 0):
        return True
    return repeated is not None and not any(repeated.group(0) in r for r in refs)


_ASKS_A_PERCENT = re.compile(r"percent|%|per\s*cent|proportion|share|rate", re.IGNORECASE)


def _adds_a_percent(value: Any, refs: Sequence[str], item: Item | None) -> bool:
    """Whether a number adds a percent sign to a reference that has none, where the question asks for no percentage:
    "45%" for a count of 45 is another quantity, or the same one, as only the judge can tell."""
    if not value.percent:
        return False
    numbers = reference_values(Kind.NUMBER, refs) or ()
    if any(r.percent for r in numbers):
        return False
    return _ASKS_A_PERCENT.search(getattr(item, "question", None) or "") is None


def _echoes(context: _Context, value: Any, stated: str, item: Item | None) -> bool:
    """Whether a stated sentence's only value is one the question itself states ("The model has ___ dots divided into 2
    equal groups." for 2): the question restated, no answer. A value said alone, or in a frame of neutral words ("The
    answer is 2."), is an answer."""
    if context.kind is not _NUMBER and context.kind is not Kind.TERM:
        return False
    question = getattr(item, "question", None)
    if not question or not any(w not in NEUTRAL_WORDS for w in context.find(stated).leftover):
        return False  # the value alone, or in a frame ("The answer is 2."): an answer
    if context.kind is Kind.TERM:
        return any(context.same(v, value) for v in context.find(question).values)
    return any(value.agrees(n) for n in read_numbers(question) or ())


_SENTENCE = re.compile(r"[^.!?\n]+")
_FRAME = frozenset("there is are it its was were the a an this that of".split())


def _affirms(rest: str, item: Item | None) -> bool:
    """Whether the rest of a "no" states the question's proposition without a negation ("No.\n\nThere is a red
    cube." to "Is there a red cube?"): an affirmation, against the no."""
    question = getattr(item, "question", None)
    if not question or not rest:
        return False
    asked = set(_QUESTION_WORDS.findall(question.lower()))
    for sentence in _SENTENCE.findall(rest):
        words = [w for w in _QUESTION_WORDS.findall(sentence.lower()) if w not in _FRAME]
        if len(words) >= 2 and all(w in asked for w in words) and _NEGATION.search(sentence) is None:
            return True
    return False


_QUESTION_WORDS = re.compile(r"[^\W\d_]+")


def _as_written(text: str) -> str:
    """A transcription as written, case, punctuation, spacing and accents aside."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    return "".join(c for c in folded if c.isalnum())


_ANSWER_FRAME = re.compile(r"(?:the\s+)?(?:final\s+|correct\s+)?answer\s+(?:is|=)\s*:?\s*", re.IGNORECASE)
_MATH_NOTATION = re.compile(r"[\\^_{}=+*/√π∞]")


def _says_else(reading: Reading) -> bool:
    """Whether the rest says anything but the stated answer again."""
    return any(c.isalnum() for c in reading.rest) and unwrap(reading.rest).casefold() != reading.stated.casefold()


def _bare(reading: Reading) -> bool:
    """A yes or no said alone: the stated answer one word, and nothing else said."""
    return _BARE_POLAR.fullmatch(reading.stated.strip()) is not None and not any(c.isalnum() for c in reading.rest)


# A revision marker ("Update:", "Edit:") and a struck-out draft ("~~(C)~~ water"): what follows or stands beside it
# replaces what was said.
_REVISION = re.compile(
    r"\b(?:update|updated|edit|edited|revision|revised|erratum|addendum)\b\s*[:：]|~~", re.IGNORECASE
)


def turns(reading: Reading, kind: Kind | None = None) -> bool:
    """Whether anything beside the stated answer, or in it, retracts, corrects or hedges it (see `_TURN`), revises it
    or strikes it out (`_REVISION`)."""
    for text in (reading.stated, reading.rest):
        if text and (
            _TURN.search(text) is not None
            or _REVISION.search(text) is not None
            or (kind is not Kind.POLAR and _NO_CLAUSE.search(text) is not None)
        ):
            return True
    return False


@dataclass(frozen=True)
class _Seen:
    """What a decision reads of an item: its question's words and its options."""

    question: str
    options: tuple[str, ...]
    qtype: None = None


_NOTHING_SEEN = _Seen("", ())


@dataclass(frozen=True)
class _Context:
    kind: Kind
    vocabulary: Vocabulary | None
    letters: str
    options: tuple[str, ...]
    neutral: frozenset[str]
    category: str | None = None

    @classmethod
    def of(
        cls,
        kind: Kind,
        vocabulary: Vocabulary | None,
        item: Item | None,
        verifier: Verifier,
        references: Sequence[str] = ("",),
    ) -> _Context:
        question = getattr(item, "question", None) or ""
        options = tuple(getattr(item, "options", ()) or ())
        category = None
        if kind is Kind.TERM and vocabulary:
            category = vocabulary.categories.get(vocabulary.canonical(references[0]) or "")
        return cls(kind, vocabulary, getattr(verifier, "letters", ""), options, _neutral(question), category)

    def find(self, text: str, *, rest: bool = False) -> Found:
        # a yes/no is read inclusively on both sides: "No, there are not more cubes" says no twice
        rest = rest or self.kind is Kind.POLAR
        found = find(
            self.kind, text, vocabulary=self.vocabulary, letters=self.letters, options=self.options, rest=rest
        )
        if self.kind is Kind.TERM and self.category is not None:
            # a term of another category ("cube" beside the colour "red") is no value of this kind
            kept = [
                (v, span)
                for v, span in zip(found.values, found.spans)
                if self.vocabulary.categories.get(v.removeprefix("not ")) == self.category
            ]
            found = Found(tuple(v for v, _ in kept), tuple(span for _, span in kept), found.text, found.readable)
        return found

    def clean_value(self, stated: str) -> Any:
        """The one value ``stated`` is, when only neutral words stand beside it; else None."""
        if "?" in stated:
            return None  # "3?": asked, not stated
        if self.kind is Kind.NUMBER:
            stated = _VARIABLE.sub("", stated)  # "x = 5" states 5
        found = self.find(stated)
        if not found.readable or not found.values or found.ambiguous:
            return None
        first = found.values[0]
        if any(not self.same(v, first) for v in found.values[1:]):
            return None
        if self.kind is Kind.NUMBER and first.qualifier:
            return None
        allowed = self.neutral | (UNIT_WORDS if self.kind is Kind.NUMBER else frozenset())
        if self.vocabulary:
            allowed = allowed | self.vocabulary.words  # "3 cubes", "Yes, the sphere is metal.", "the red cube"
        if any(word not in allowed for word in found.leftover) or found.stray:
            return None  # a character the reader does not model: not accounted for
        return first

    def rest_agrees(self, rest: str, value: Any) -> bool:
        """Whether everything of this kind that ``rest`` states is ``value`` (nothing at all will do)."""
        found = self.find(rest, rest=True)
        return found.readable and all(self.same(other, value) for other in found.values)

    def same(self, a: Any, b: Any) -> bool:
        if self.kind is Kind.NUMBER:
            return a.agrees(b)
        return a == b


_VARIABLE = re.compile(r"^\s*[A-Za-z]\w{0,2}\s*=\s*(?=[-+$(\d.\\])")


@lru_cache(maxsize=1 << 12)
def _neutral(question: str) -> frozenset[str]:
    if not question:
        return NEUTRAL_WORDS
    # a negation is never neutral, not even the question's own ("Which is NOT ...": "not B" is no B)
    return NEUTRAL_WORDS | (frozenset(Found((), (), question).leftover) - _NEGATIONS)


_NEGATIONS = frozenset(
    "not no never none nothing neither nor isn't aren't wasn't weren't don't doesn't cannot can't "
    "except without".split()
)
