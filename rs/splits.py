"""The published splits' names and vocabulary, without `datasets`: what routing, the cards and the audit share.

Their `datasets` features are in `rs.splits_schema`.
"""

from __future__ import annotations

SPLITS = ("think", "nothink", "rejected")

REJECT_REASONS = (
    "wrong_answer",
    "judge_overruled",
    "judge_unsure",
    "judge_blocked",
    "no_final_answer",
    "degenerate_repetition",
    "engine_error",
    "judge_not_asked",
    "suspect_reference",
)
"""Why a rejected item is in the rejected split; what each means on a card is in templates/card_splits.md.jinja."""


def think_response(reasoning: str | None, answer: str) -> str:
    """The assistant turn a think-variant row trains on."""
    return f"<think>\n{(reasoning or '').strip()}\n</think>\n\n{answer}"
