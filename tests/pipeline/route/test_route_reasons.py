"""Every combination of a verifier's outcome and a judge's verdict routes to the reason that made the decision (no model).

An answer the verifier rejected for certain (`contradicts`) keeps `wrong_answer` whatever an unsure or wrong judge
said (it was reported as `judge_unsure`); a judge's CORRECT against it is `judge_overruled`.
"""

from __future__ import annotations

import itertools

import pytest

from rs.pipeline.route import Decision, certainly_wrong, decide
from rs.splits import REJECT_REASONS

VERIFIER = {  # the verifier's outcome: verified, contradicts
    "accepted": (True, False),
    "certainly wrong": (False, True),
    "undecided": (False, False),
}
VERDICTS = ("CORRECT", "WRONG", "UNSURE", None)

EXPECTED = {
    ("accepted", "CORRECT", True): Decision(True, by="verifier"),
    ("certainly wrong", "CORRECT", True): Decision(False, reason="judge_overruled"),
    ("certainly wrong", "WRONG", True): Decision(False, reason="wrong_answer"),
    ("certainly wrong", "UNSURE", True): Decision(False, reason="wrong_answer"),
    ("certainly wrong", None, True): Decision(False, reason="wrong_answer"),
    ("undecided", "CORRECT", True): Decision(True, by="judge"),
    ("undecided", "CORRECT", False): Decision(False, reason="judge_blocked"),
    ("undecided", "WRONG", True): Decision(False, reason="wrong_answer"),
    ("undecided", "UNSURE", True): Decision(False, reason="judge_unsure"),
    ("undecided", None, True): Decision(False, reason="wrong_answer"),
}


def expected(outcome: str, verdict: str | None, promotes: bool) -> Decision:
    if outcome == "accepted":
        return Decision(True, by="verifier")
    if outcome == "certainly wrong" or verdict != "CORRECT":
        return EXPECTED[(outcome, verdict, True)]
    return EXPECTED[(outcome, verdict, promotes)]


def answer(outcome: str, verdict: str | None, **extra) -> dict:
    verified, contradicts = VERIFIER[outcome]
    return {
        "error": None,
        "ending": None,
        "final": "4",
        "verified": verified,
        "contradicts": contradicts,
        "judge": verdict,
        **extra,
    }


@pytest.mark.parametrize("outcome,verdict,promotes", list(itertools.product(VERIFIER, VERDICTS, (True, False))))
def test_each_outcome_and_verdict_routes_to_the_reason_that_decided(
    outcome: str, verdict: str | None, promotes: bool
) -> None:
    decision = decide(answer(outcome, verdict), promotes)
    assert decision == expected(outcome, verdict, promotes)
    assert decision.accepted or decision.reason in REJECT_REASONS
    if outcome == "certainly wrong":
        assert certainly_wrong(answer(outcome, verdict), promotes)


@pytest.mark.parametrize("verdict", VERDICTS)
@pytest.mark.parametrize("outcome", list(VERIFIER))
def test_an_answer_without_a_final_or_with_an_error_or_a_loop_is_rejected_for_that(
    outcome: str, verdict: str | None
) -> None:
    assert decide(answer(outcome, verdict, error="boom"), True) == Decision(False, reason="engine_error")
    assert decide(answer(outcome, verdict, ending="repetition"), True) == Decision(
        False, reason="degenerate_repetition"
    )
    assert decide(answer(outcome, verdict, final=None), True) == Decision(False, reason="no_final_answer")
