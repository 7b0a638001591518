"""The plain-number fast path decides exactly as the general reading does (drawn by hypothesis with a fixed seed).

An answer or a reference that is one plain number ("42", "3.5.", "1,234", "12%") is read without the general
reading (`simple_number`, `Grader._decide_plain_number`), and relaxed accuracy compares numbers by value without
writing them out (`RelaxedVerifier._close`); each shortcut must give what the general path gives, for every verifier.
`bench/decisions.py` checks the same on the benches' answers.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rs.answers import Kind, Number, render
from rs.answers.grade import _NOTHING_SEEN, _Seen
from rs.answers.numbers import _read_plain, simple_number
from rs.answers.values import _read_plain_number
from rs.verifiers import get_verifier, known_verifiers
from rs.verifiers.base import _SCALES, near_number

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None)

DIGITS = st.text("0123456789", min_size=1, max_size=7)
GROUPED = st.builds(
    lambda head, groups: head + "".join("," + g for g in groups),
    st.text("0123456789", min_size=1, max_size=3),
    st.lists(st.text("0123456789", min_size=3, max_size=3), max_size=3),
)
# a plain number, and near misses of one: signs, spaces, stray separators, exponents, letters, other scripts
NUMBERISH = st.one_of(
    st.builds(
        lambda whole, frac, pct: whole + (f".{frac}" if frac else "") + pct,
        st.one_of(DIGITS, GROUPED),
        st.one_of(st.just(""), DIGITS),
        st.sampled_from(["", "%"]),
    ),
    st.text("0123456789.,%-+ e_x١", min_size=1, max_size=9),
)
ANSWERS = st.builds(
    lambda pre, core, post: pre + core + post,
    st.sampled_from(["", " ", "-", "$"]),
    NUMBERISH,
    st.sampled_from(["", ".", ". ", "..", "\n", " cm", "?"]),
)
QUESTIONS = st.sampled_from(["", "How many bars are there?", "What was the revenue (in billions)?", "Which year?"])


@SETTINGS
@given(text=NUMBERISH)
def test_a_plain_number_is_read_as_the_general_reading_reads_it(text: str) -> None:
    number = simple_number(text)
    if number is not None:
        assert _read_plain(text) == (number,)
        assert _read_plain_number(text) == number
        assert _read_plain(text)[0].regrouped == number.regrouped  # not in ==: a reading, not the value


@pytest.mark.parametrize(
    "text",
    ["0", "007", "3.50", "1,234", "12,345.6", "45%", "0,123", "1234.5678%", "1.000", "2,500", "0.500", "12.345%"],
)
def test_the_fast_path_takes_the_common_shapes(text: str) -> None:
    assert simple_number(text) is not None and _read_plain(text) == (simple_number(text),)
    assert _read_plain(text)[0].regrouped == simple_number(text).regrouped


@pytest.mark.parametrize("text", ["1,2345", "1,23", "12.", ".5", "-3", "1e3", "1_000", "12 %", " 12", "１２", "3.5.1"])
def test_anything_else_goes_to_the_general_reading(text: str) -> None:
    assert simple_number(text) is None


@pytest.mark.parametrize("verifier", [name for name in known_verifiers() if name != "math"])
@SETTINGS
@given(answer=ANSWERS, reference=NUMBERISH, question=QUESTIONS)
def test_a_plain_number_answer_is_decided_as_the_general_reading_decides(
    verifier: str, answer: str, reference: str, question: str
) -> None:
    grader = get_verifier(verifier).grader()
    item = _Seen(question, ()) if question else _NOTHING_SEEN
    refs = (reference,)
    kind = grader.verifier.kind(refs, item=item, vocabulary=None)
    fast = grader._decide_plain_number(answer, refs, item) if kind is Kind.NUMBER else None
    if fast is not None:
        assert fast == grader._read_and_decide(answer, kind, refs, item)


FRACTIONS = st.one_of(
    st.integers(-3000, 3000).map(Fraction),
    st.builds(lambda n, places: Fraction(n, 10**places), st.integers(-(10**6), 10**6), st.integers(0, 4)),
    st.builds(Fraction, st.integers(-40, 40), st.integers(1, 40)),
    st.sampled_from(
        [
            Fraction(0),
            Fraction(1500),
            Fraction(2099),
            Fraction(2100),
            Fraction(-2010),
            Fraction(10**320),
            Fraction(1, 10**330),
        ]
    ),
)
RELAXED = [
    get_verifier("relaxed"),
    get_verifier("relaxed", tolerance=0.1),
    get_verifier("relaxed", year_guard=False),
    get_verifier("relaxed", tolerance=0.0),
]


@SETTINGS
@given(
    a=FRACTIONS,
    b=FRACTIONS,
    ratio=st.sampled_from([None, Fraction(105, 100), Fraction(95, 100), Fraction(1001, 1000)]),
)
def test_relaxed_compares_values_as_it_compares_their_written_forms(
    a: Fraction, b: Fraction, ratio: Fraction | None
) -> None:
    if ratio is not None:
        b = a * ratio
    for verifier in RELAXED:
        assert verifier._close(a, b) == verifier._match_one(render(a), render(b))


def _half_unit(x: Fraction) -> Fraction:
    """Half a unit of the last decimal place of ``x`` (0 without a finite decimal), as written before."""
    d = x.denominator
    while d % 2 == 0:
        d //= 2
    while d % 5 == 0:
        d //= 5
    if d != 1:
        return Fraction(0)
    places, scaled = 0, x
    while scaled.denominator != 1:
        scaled *= 10
        places += 1
    return Fraction(1, 2 * 10**places)


@SETTINGS
@given(
    a=FRACTIONS,
    b=FRACTIONS,
    percents=st.tuples(st.booleans(), st.booleans()),
    scaled=st.booleans(),
    scales=st.booleans(),
)
def test_near_number_in_integers_is_the_rounding_rule(
    a: Fraction, b: Fraction, percents: tuple[bool, bool], scaled: bool, scales: bool
) -> None:
    value, reference = Number(a, percents[0], scaled=scaled), Number(b, percents[1])
    expected = (
        value.converts(reference)
        or ((scales or scaled) and any(a == b * s or a * s == b for s in _SCALES))
        or (abs(a - b) <= max(_half_unit(a), _half_unit(b)) and a != b and not (a.denominator == b.denominator == 1))
    )
    assert near_number(value, reference, scales=scales) == expected
