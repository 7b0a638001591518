"""The published splits' names and vocabulary, without `datasets`: what routing, the cards and the audit share.

Their `datasets` features are in `rs.splits_schema`.
"""

from __future__ import annotations

SPLITS = ("think", "nothink", "rejected")

REJECT_REASONS: dict[str, str] = {
    "wrong_answer": "the verifier knows the answer differs from the reference (another number, option or yes/no), whatever the judge said unless it was CORRECT; or the verifier rejected it and the judge called it WRONG (or the judge was off, or the answer held nothing to grade)",
    "judge_overruled": "the judge called it CORRECT, but the verifier knows the answer differs from the reference (another number, option or yes/no), which no verdict may overrule",
    "judge_unsure": "the verifier could not decide and rejected the answer, and the judge answered UNSURE (or something that is not a label)",
    "judge_blocked": "the judge called it CORRECT, but failed this run's calibration, so it may not promote anything",
    "no_final_answer": "the output was cut off by max_tokens or its reasoning never closed, so there was nothing to score",
    "degenerate_repetition": "the output fell into a loop (one pattern repeated) and the engine's loop detection ended it early",
    "engine_error": "the engine failed on this item alone (for example an image the processor refused, or a prompt longer than the context)",
    "judge_not_asked": "re-read offline (`rs refilter`) under a changed reader, the verifier could not decide the answer, and the judge was never asked about it (no verdict on exactly this question, reference and candidate was stored or cached): neither accepted nor known to be wrong, until `rs publish` asks the judge",
    "answer_too_large": "the model's own text (its reasoning and answer, and its answer without the image where the family asks for one, as the splits publish them) would take more than its share of a published row group (`shard.row_group_bytes`, less what its image and questions take): published with its question and reference and no answer, so that one item never fails the family's write",
    "suspect_reference": "the greedy answer and every recovery sample gave the same value, one the verifier knows is not the reference, and the same model, shown the image with both values in both orders, sided against the reference each time (an adjudicator that passed this run's calibration): the reference may be what is wrong; kept out of the preference pairs and the RL repo",
}
"""Why a rejected item is in the rejected split, with what it means: the rejected card's list and the documentation's
reference say these words."""


def think_response(reasoning: str | None, answer: str) -> str:
    """The assistant turn a think-variant row trains on."""
    return f"<think>\n{(reasoning or '').strip()}\n</think>\n\n{answer}"
