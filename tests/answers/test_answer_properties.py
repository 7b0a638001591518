"""The reading's invariants on generated answers (tests/answers_properties.py), drawn by hypothesis with a fixed seed.

A value of a verifier's task x a presentation x a continuation, each drawn independently: the corpus was written
answer by answer, these are composed, so no presentation or continuation is tried with only the values it was
written for. `bench/answers.py --properties` runs the same invariants over 100,000 answers per verifier.
"""

from __future__ import annotations

import random
from fractions import Fraction

import answers_properties as P  # noqa: E402
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rs.answers import Grader, Outcome  # noqa: E402
from rs.answers.numbers import render
from rs.verifiers import get_verifier
from rs.verifiers.base import ItemInfo

# derandomize: the same examples on every machine and run; a modest count keeps the file to a few seconds
SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, database=None)
GRADERS = P.Graders()
PRESENTATION = st.sampled_from(sorted(P.PRESENTATIONS))
CONTINUATION = st.sampled_from(sorted(P.CONTINUATIONS))


@st.composite
def drawn(draw: st.DrawFn, verifier: str) -> tuple[P.Spec, P.Value, P.Value, str]:
    spec = P.SPECS[verifier](random.Random(draw(st.integers(0, 2**32 - 1))))
    return spec, draw(st.sampled_from(spec.values)), draw(st.sampled_from(spec.values)), draw(CONTINUATION)


def _case(spec: P.Spec, value: P.Value, other: P.Value, presentation: str, continuation: str) -> P.Case:
    kind = P.CONTINUATIONS[continuation][1]
    mechanism = value.mechanism if kind == "plain" else continuation
    return P.Case(
        spec,
        value,
        presentation,
        continuation,
        P.compose(value.text, presentation, continuation, other.text),
        P.truth_of(value, continuation, other),
        mechanism,
        other.text,
    )


@pytest.mark.parametrize("verifier", sorted(P.SPECS))
@SETTINGS
@given(data=st.data())
def test_no_invariant_breaks_and_every_presentation_reads_alike(verifier: str, data: st.DataObject) -> None:
    spec, value, other, continuation = data.draw(drawn(verifier))
    first, second = data.draw(PRESENTATION), data.draw(PRESENTATION)
    a, b = _case(spec, value, other, first, continuation), _case(spec, value, other, second, continuation)
    outcome_a, outcome_b = GRADERS.grade(a).outcome, GRADERS.grade(b).outcome
    assert P.violations(a, outcome_a) == [], (a.answer, spec.references[:1], spec.question, outcome_a)
    assert outcome_a is outcome_b, (a.answer, b.answer, spec.references[:1], outcome_a, outcome_b)


@pytest.mark.parametrize("verifier", sorted(P.SPECS))
@SETTINGS
@given(data=st.data())
def test_a_right_value_alone_is_accepted_in_every_presentation(verifier: str, data: st.DataObject) -> None:
    spec = P.SPECS[verifier](random.Random(data.draw(st.integers(0, 2**32 - 1))))
    right = [v for v in spec.values if v.mechanism == "right"]
    value, presentation = data.draw(st.sampled_from(right)), data.draw(PRESENTATION)
    case = _case(spec, value, value, presentation, "none")
    assert GRADERS.grade(case).outcome is Outcome.ACCEPTED, (case.answer, spec.references[:1], spec.question)


@pytest.mark.parametrize("verifier", sorted(P.SPECS))
@SETTINGS
@given(data=st.data())
def test_a_retraction_or_hedge_leaves_any_value_undecided(verifier: str, data: st.DataObject) -> None:
    spec = P.SPECS[verifier](random.Random(data.draw(st.integers(0, 2**32 - 1))))
    value, presentation = data.draw(st.sampled_from(spec.values)), data.draw(PRESENTATION)
    turn = data.draw(st.sampled_from([c for c, (_, kind) in P.CONTINUATIONS.items() if kind == "turn"]))
    case = _case(spec, value, value, presentation, turn)
    assert GRADERS.grade(case).outcome is Outcome.UNDECIDED, case.answer


NUMBER_VERIFIERS = sorted(set(P.SPECS) - {"mcq"})
READERS = {name: Grader(get_verifier(name)) for name in NUMBER_VERIFIERS}
ANY_CONTINUATION = st.sampled_from(sorted(P.CONTINUATIONS))
"""Every continuation, its other value the answer's own: a correction restates it, so what is committed stays it."""


@pytest.mark.parametrize("verifier", NUMBER_VERIFIERS)
@SETTINGS
@given(
    whole=st.integers(1, 999),
    three=st.integers(0, 999),
    comma=st.booleans(),
    presentation=PRESENTATION,
    continuation=ANY_CONTINUATION,
)
def test_a_number_the_other_separators_make_the_reference_is_never_certainly_wrong(
    verifier: str, whole: int, three: int, comma: bool, presentation: str, continuation: str
) -> None:
    """One separator with three digits after it reads two ways: "1.000" is 1, or 1000 with a thousands point; "2,500"
    is 2500, or 2.5 with a decimal comma. Where the other way is the reference, the answer may be right: the judge's,
    never certainly wrong (and not accepted: the text does not settle which way it was written)."""
    if comma:
        written, other = f"{whole},{three:03d}", Fraction(whole * 1000 + three, 1000)
    else:
        written, other = f"{whole}.{three:03d}", Fraction(whole * 1000 + three)
    answer = P.compose(written, presentation, continuation, written)
    outcome = READERS[verifier].grade(answer, render(other)).outcome
    assert outcome is Outcome.UNDECIDED, (answer, render(other), outcome)


UNITS = [("mm", 10), ("cm", 10), ("cm", 100), ("m", 1000), ("km", 1000), ("g", 1000), ("kg", 1000), ("cents", 100)]
UNITS += [("seconds", 60), ("minutes", 60), ("hours", 60), ("hours", 24), ("days", 24), ("feet", 12), ("s", 3600)]


@pytest.mark.parametrize("verifier", sorted(set(NUMBER_VERIFIERS) - {"anls"}))
@SETTINGS
@given(
    n=st.integers(1, 999),
    unit=st.sampled_from(UNITS),
    larger=st.booleans(),
    glued=st.booleans(),
    presentation=PRESENTATION,
    continuation=ANY_CONTINUATION,
)
def test_a_number_in_another_unit_is_never_certainly_wrong(
    verifier: str, n: int, unit: tuple[str, int], larger: bool, glued: bool, presentation: str, continuation: str
) -> None:
    """A number stated with a unit of measure, a unit's factor from the reference ("3 cm" for 30 asked in millimetres,
    "50 cents" for 0.5), may be the same quantity in another unit: never certainly wrong, in any presentation."""
    name, factor = unit
    reference = render(Fraction(n * factor) if larger else Fraction(n, factor))
    written = f"{n}{'' if glued else ' '}{name}"
    answer = P.compose(written, presentation, continuation, written)
    outcome = READERS[verifier].grade(answer, reference).outcome
    assert outcome is not Outcome.CERTAIN, (answer, reference)


NEGATED_QUESTIONS = ["Is there no red cube?", "Isn't the cube red?", "Aren't there any spheres?", "Is it not metal?"]


@SETTINGS
@given(
    question=st.sampled_from(NEGATED_QUESTIONS),
    said=st.sampled_from(["No", "Yes", "There is no red cube", "It is not red", "There isn't one", "No, there isn't"]),
    reference=st.sampled_from(["yes", "no"]),
    presentation=PRESENTATION,
    continuation=ANY_CONTINUATION,
)
def test_a_reply_to_a_negated_question_is_never_certainly_wrong_nor_a_statement_accepted(
    question: str, said: str, reference: str, presentation: str, continuation: str
) -> None:
    """A yes or no replying to a negated question may agree with the negation or answer the proposition, and a
    negated statement affirms it: in any presentation and continuation, nothing is certainly wrong, and only a bare
    yes or no is ever accepted."""
    answer = P.compose(said, presentation, continuation, said)
    outcome = READERS["alnum"].grade(answer, reference, item=ItemInfo(question=question)).outcome
    assert outcome is not Outcome.CERTAIN, (question, answer, reference)
    if said not in ("No", "Yes"):
        assert outcome is not Outcome.ACCEPTED, (question, answer, reference)


@SETTINGS
@given(
    said=st.integers(0, 20),
    votes=st.integers(1, 2),
    majority=st.integers(0, 20),
    presentation=PRESENTATION,
    continuation=ANY_CONTINUATION,
)
def test_an_answer_some_annotators_gave_is_never_certainly_wrong(
    said: int, votes: int, majority: int, presentation: str, continuation: str
) -> None:
    """vqa: an answer one or two of ten annotators gave (below the threshold) is a human's answer: never certainly wrong,
    in any presentation; with the same text said by none, it may be."""
    if majority == said:
        majority += 1
    references = [str(said)] * votes + [str(majority)] * (10 - votes)
    answer = P.compose(str(said), presentation, continuation, str(said))
    outcome = READERS["vqa"].grade(answer, references).outcome
    assert outcome is not Outcome.CERTAIN and outcome is not Outcome.ACCEPTED, (answer, references, outcome)
