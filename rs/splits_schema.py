"""The published schema of the three splits, as `datasets` features.

Every split's rows are one image each with its QA for that split:

- `image`: `datasets.Image()`, the original bytes (the Hub viewer renders it)
- `qa`: a list of structs, per split below
- `clean_meta`: provenance (source dataset, config, split, revision, record ids) and the cleaning
  policy that admitted the row (policy name, version, steps; what was rewritten or flagged)
- `image_sha256`: SHA-256 of the image bytes

QA structs:

- `rejected`: `{question, answer, wrong_vlm, reason}`, as on the seed cards: `answer` is the
  official ground truth, `wrong_vlm` the model's final answer (empty when it gave none), `reason`
  one of `REJECT_REASONS`.
- `think`: `{question, reasoning, answer, response, reference, accepted_by}`: `answer` is the
  model's final answer, `response` the full assistant turn to train on
  (`<think>\\n{reasoning}\\n</think>\\n\\n{answer}`), `reference` the ground truth, `accepted_by`
  `verifier` or `judge`, `budgeted` whether the engine cut the reasoning at `sampling.thinking_token_budget`
  (the answer after the cut was verified like any other).
- `nothink`: `{question, answer, reference, accepted_by}`: the final answer alone.

`question` is byte-identical to the prompt the model received, instruction included.
"""

from __future__ import annotations

from datasets import Features, Image, List, Value

SPLITS = ("think", "nothink", "rejected")

REJECT_REASONS = ("wrong_answer", "judge_overruled", "judge_unsure", "judge_blocked", "no_final_answer", "degenerate_repetition",
                  "engine_error")
"""Why a rejected item is in the rejected split; what each means on a card is in templates/card_splits.md.jinja."""

_STR = Value("string")

CLEAN_META = {
    "source": {"dataset": _STR, "config": _STR, "split": _STR, "revision": _STR},
    "record_ids": List(_STR),
    "policy": {"name": _STR, "version": _STR, "steps": List(_STR)},
    "rewrites": List(_STR),
    "flags": List(_STR),
}

QA = {
    "rejected": {"question": _STR, "answer": _STR, "wrong_vlm": _STR, "reason": _STR},
    "think": {"question": _STR, "reasoning": _STR, "answer": _STR, "response": _STR, "reference": _STR, "accepted_by": _STR,
              "budgeted": Value("bool")},
    "nothink": {"question": _STR, "answer": _STR, "reference": _STR, "accepted_by": _STR},
}


def features(split: str) -> Features:
    """The declared features of one published split."""
    return Features({"image": Image(), "qa": List(QA[split]), "clean_meta": CLEAN_META, "image_sha256": _STR})


def think_response(reasoning: str | None, answer: str) -> str:
    """The assistant turn a think-variant row trains on."""
    return f"<think>\n{(reasoning or '').strip()}\n</think>\n\n{answer}"
