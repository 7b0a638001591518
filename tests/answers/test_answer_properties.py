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


# ---- issue 60: acceptance by accounting --------------------------------------------------------------------------

PLAIN_CONTINUATION = st.sampled_from(sorted(c for c, (_, kind) in P.CONTINUATIONS.items() if kind == "plain"))
LIFE = ["larva", "pupa", "adult", "egg", "nymph", "seed"]
IN_WORDS = [
    "the distance between point {L} and the island is 15 nautical miles",
    "\\frac{{1}}{{2}}({l}^{{2}}+{L}^{{2}})",
    "segment A{L} is the longest",
    "{L}C = 5",
    "the angle at vertex {L} is 40 degrees",
    "x_{L} + y_{L}",
    "{L}^{{2}}",
    "2{L} + 1",
]


@pytest.mark.parametrize("verifier", ["mcq", "alnum", "exact", "math"])
@SETTINGS
@given(
    index=st.integers(0, 3),
    template=st.sampled_from(IN_WORDS),
    presentation=PRESENTATION,
    continuation=PLAIN_CONTINUATION,
)
def test_a_letter_inside_a_word_or_an_expression_is_no_option(
    verifier: str, index: int, template: str, presentation: str, continuation: str
) -> None:
    """An option's letter counts only as a mark (alone, bracketed, named, first with a separator): never read out of a
    sentence or an expression, in any presentation."""
    letter = "ABCD"[index]
    said = template.format(L=letter, l=letter.lower())
    answer = P.compose(said, presentation, continuation, said)
    item = ItemInfo(options=tuple(LIFE[:4]), question="Which stage is shown?")
    outcome = Grader(get_verifier(verifier)).grade(answer, letter, item=item).outcome
    assert outcome is not Outcome.ACCEPTED, (answer, letter)


@pytest.mark.parametrize("verifier", ["mcq", "alnum"])
@SETTINGS
@given(
    index=st.integers(0, 3),
    shift=st.integers(1, 3),
    form=st.sampled_from(["({L}) {text}", "{L}. {text}", "{L}) {text}", "**{L}** {text}", "({L}) {number}"]),
    number=st.integers(2, 500),
    presentation=PRESENTATION,
    continuation=PLAIN_CONTINUATION,
)
def test_a_mark_whose_text_is_not_its_option_is_the_judges(
    verifier: str, index: int, shift: int, form: str, number: int, presentation: str, continuation: str
) -> None:
    """A mark followed by another option's text, or a value not the marked option's ("(D) 140°" where D is 20°), names
    two things: never accepted, never certainly wrong, whichever the reference is."""
    said = form.format(L="ABCD"[index], text=LIFE[(index + shift) % 4], number=number)
    answer = P.compose(said, presentation, continuation, said)
    item = ItemInfo(options=tuple(LIFE[:4]), question="Which stage is shown?")
    for reference in ("ABCD"[index], "ABCD"[(index + shift) % 4]):
        outcome = Grader(get_verifier(verifier)).grade(answer, reference, item=item).outcome
        assert outcome is Outcome.UNDECIDED, (answer, reference, outcome)


@pytest.mark.parametrize(
    "verifier", ["math", "relaxed"]
)  # the verifiers whose leniency (a rounding, a tolerance) took it
@SETTINGS
@given(
    n=st.integers(1, 500),
    run=st.integers(11, 120),
    digit=st.sampled_from("09"),
    presentation=PRESENTATION,
    continuation=PLAIN_CONTINUATION,
)
def test_a_degenerate_digit_run_is_never_accepted(
    verifier: str, n: int, run: int, digit: str, presentation: str, continuation: str
) -> None:
    """A looping model's digit run ("0.99999…", "2.0000000000001") is read as the reference once rounded: never accepted."""
    said = f"{n - 1}.{'9' * run}" if digit == "9" else f"{n}.{'0' * run}1"
    answer = P.compose(said, presentation, continuation, said)
    item = ItemInfo(question="What is the value of the blue bar in 2015?")  # a value read off an axis
    outcome = READERS[verifier].grade(answer, str(n), item=item).outcome
    assert outcome is not Outcome.ACCEPTED, (answer, n)


@pytest.mark.parametrize("verifier", ["count", "relaxed", "math", "alnum", "vqa"])
@SETTINGS
@given(
    n=st.integers(0, 40),
    sentence=st.sampled_from(
        [
            "The model has ___ dots divided into {n} equal groups",
            "The dots are divided into {n} equal groups",
            "There are {n} equal groups",
        ]
    ),
    presentation=PRESENTATION,
    continuation=PLAIN_CONTINUATION,
)
def test_the_questions_own_number_restated_is_never_accepted(
    verifier: str, n: int, sentence: str, presentation: str, continuation: str
) -> None:
    """A sentence whose only value is one the question states restates the question: never accepted (the value alone is
    an answer, and is accepted)."""
    question = f"The model has ___ dots divided into {n} equal groups. How many dots are in each group?"
    said = sentence.format(n=n)
    answer = P.compose(said, presentation, continuation, said)
    outcome = READERS[verifier].grade(answer, str(n), item=ItemInfo(question=question)).outcome
    assert outcome is not Outcome.ACCEPTED, (answer, n)


# ---- the differential property against math-verify ---------------------------------------------------------------


@st.composite
def expression(draw: st.DrawFn) -> tuple[str, Fraction | None]:
    """A LaTeX expression and, where it is rational, its value: radicals, multiples of pi, powers, fractions, decimals,
    units in \\text and \\mathrm, thin-space thousands."""
    a, b = draw(st.integers(1, 12)), draw(st.integers(2, 9))
    kind = draw(st.sampled_from(["int", "frac", "decimal", "sqrt", "ksqrt", "pi", "power", "unit", "thousands"]))
    if kind == "int":
        return str(a), Fraction(a)
    if kind == "frac":
        return f"\\frac{{{a}}}{{{b}}}", Fraction(a, b)
    if kind == "decimal":
        return render(Fraction(a, 4)), Fraction(a, 4)
    if kind == "sqrt":
        return f"\\sqrt{{{a * a if draw(st.booleans()) else a}}}", None
    if kind == "ksqrt":
        return f"{b}\\sqrt{{{a}}}", None
    if kind == "pi":
        return draw(st.sampled_from([f"\\frac{{\\pi}}{{{b}}}", f"{render(Fraction(1, 4))}\\pi", f"{a}\\pi"])), None
    if kind == "power":
        return f"{b}^{{{a % 5 + 1}}}", Fraction(b ** (a % 5 + 1))
    if kind == "unit":
        return f"{a}\\{draw(st.sampled_from(['text', 'mathrm']))}{{ cm}}", Fraction(a)
    n = a * 1000 + b * 7
    return f"{a}\\,{b * 7:03d}", Fraction(n)


def _math_verify_says(answer: str, reference: str) -> bool | None:
    """math-verify's verdict on complete parses of both (an expression read, not a string), the thin-space thousands
    grouped as the verifier groups them; None when a side does not parse."""
    from math_verify import parse, verify

    from rs.verifiers.math import _thin

    gold, pred = parse(f"\\boxed{{{_thin(reference)}}}"), parse(f"\\boxed{{{_thin(answer)}}}")
    if not (len(gold) > 1 and len(pred) > 1):
        return None
    return bool(verify(gold, pred, float_rounding=6))


MATH = Grader(get_verifier("math"))


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(pair=st.tuples(expression(), expression()), same=st.booleans(), presentation=PRESENTATION)
def test_math_never_accepts_what_math_verify_rejects_nor_is_certain_where_it_accepts(
    pair: tuple[tuple[str, Fraction | None], tuple[str, Fraction | None]], same: bool, presentation: str
) -> None:
    """rs on a math pair against math-verify on complete parses of both: never accepted where math-verify says unequal,
    never certainly wrong where it says equal (half the pairs are one expression against itself in another form)."""
    (answer, value), (reference, _) = pair
    if same:  # the same value, as written or in another notation
        forms = (
            [answer]
            if value is None
            else [answer, render(value), f"\\frac{{{value.numerator}}}{{{value.denominator}}}"]
        )
        reference = forms[(len(answer) + len(reference)) % len(forms)]
    said = P.compose(answer, presentation, "none", answer)
    outcome = MATH.grade(said, reference).outcome
    verdict = _math_verify_says(answer, reference)
    if verdict is False:
        assert outcome is not Outcome.ACCEPTED, (said, reference)
    if verdict is True:
        assert outcome is not Outcome.CERTAIN, (said, reference)
