"""The realistic-answer corpus (tests/answers_corpus.py) read by every verifier, and the reading's own rules."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from answers import grade_all, tally  # noqa: E402
from answers_corpus import MUST_READ, corpus  # noqa: E402

from rs.answers import Outcome, read, read_numbers, render  # noqa: E402


@pytest.fixture(scope="module")
def graded():
    return grade_all(corpus())


def test_the_corpus_is_large_and_covers_every_verifier_of_the_families(graded) -> None:
    assert len(graded) >= 3000
    assert {case.verifier for case, _ in graded} >= {"alnum", "count", "relaxed", "anls", "vqa", "mcq", "math"}


def test_no_false_accept_in_any_class(graded) -> None:
    wrong = [(c.verifier, c.phrasing, c.answer, c.references[0]) for c, o in graded if o is Outcome.ACCEPTED and not c.truth]
    assert wrong == []


def test_no_right_answer_is_rejected_for_certain(graded) -> None:
    wrong = [(c.verifier, c.phrasing, c.answer, c.references[0]) for c, o in graded if o is Outcome.CERTAIN and c.truth]
    assert wrong == []


def test_wrapped_marked_and_synonym_answers_are_read(graded) -> None:
    missed = [(c.verifier, c.phrasing, c.answer) for c, o in graded if c.truth and c.phrasing in MUST_READ and o is not Outcome.ACCEPTED]
    assert missed == []


def test_the_figures_the_readme_states(graded) -> None:
    totals: Counter[str] = Counter()
    for row in tally(graded).values():
        totals.update(row)
    assert (totals["cases"], totals["false_accept"], totals["certain_false_reject"]) == (6026, 0, 0)
    assert totals["false_reject"] == 544  # every one undecided: corrections and free-text explanations, the judge's


@pytest.mark.parametrize(("answer", "stated", "rest", "mark"), [
    ("Answer: 3\n\nThere are three.", "3", "There are three.", "line"),
    ("**Final Answer**\n\n7", "7", "", "line"),
    ("I counted.\n\n\\boxed{5}", "5", "I counted.", "box"),
    ("The answer is John A. Smith.", "John A. Smith", "", "sentence"),
    ("$\\boxed{\\text{no}}$", "no", "$\n$", "box"),
    ("Blue\n\nThe color is cyan.", "Blue", "The color is cyan.", None),
])
def test_one_reading_gives_the_stated_answer_and_the_rest(answer: str, stated: str, rest: str, mark: str | None) -> None:
    reading = read(answer)
    assert (reading.stated, reading.rest, reading.mark, reading.conflict) == (stated, rest, mark, False)


def test_marks_that_disagree_state_nothing() -> None:
    assert read("\\boxed{3} or \\boxed{4}").conflict and read("<answer>B</answer> <answer>C</answer>").conflict


@pytest.mark.parametrize(("text", "values"), [
    ("7 1/2 cups", ["7.5"]), ("7½", ["7.5"]), ("\\frac{2}{5}", ["0.4"]), ("seven hundredths", ["0.07"]),
    ("one hundred and five", ["105"]), ("twenty-one", ["21"]), ("$2,556.25", ["2556.25"]), ("5 million", ["5000000"]),
    ("There are no objects left.", ["0"]), ("3rd", []), ("3D", []),
])
def test_numbers_as_answers_write_them(text: str, values: list[str]) -> None:
    assert [render(n.value) for n in read_numbers(text)] == values


@pytest.mark.parametrize("text", ["3²", "12/05/1998", "3:45", "5M", "٣"])
def test_a_number_that_cannot_be_read_for_sure_makes_the_text_unreadable(text: str) -> None:
    assert read_numbers(text) is None
