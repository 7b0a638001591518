"""The published schema of the three splits, as `datasets` features.

Every split's rows are one image each with its QA for that split:

- `image`: `datasets.Image()`, the original bytes (the Hub viewer renders it)
- `qa`: a list of structs, per split below
- `clean_meta`: provenance (source dataset, config, split, revision, record ids) and the cleaning
  policy that admitted the row (policy name, version, steps; what was rewritten or flagged), and `contamination`:
  each of its questions found in an evaluation set and kept (`decontamination.action: flag`), by its `key`
  (`record_id#turn`, as `flags` and `rewrites` name it), with the set, the method and the distance (`rs.pipeline.clean.decontam.Match`)
- `image_sha256`: SHA-256 of the image bytes

QA structs:

- `rejected`: `{question, answer, wrong_vlm, reason}`, as on the seed cards: `answer` is the
  official ground truth, `wrong_vlm` the model's final answer (empty when it gave none), `reason`
  one of `rs.splits.REJECT_REASONS`.
- `think`: `{question, reasoning, answer, response, reference, accepted_by}`: `answer` is the
  model's final answer, `response` the full assistant turn to train on
  (`<think>\\n{reasoning}\\n</think>\\n\\n{answer}`), `reference` the ground truth, `accepted_by`
  `verifier` or `judge`, `budgeted` whether the engine cut the reasoning at `sampling.thinking_token_budget`
  (the answer after the cut was verified like any other).
- `nothink`: `{question, answer, reference, accepted_by}`: the final answer alone.

With a recovery pass (`recovery:`), `accepted_by` may be `recovery`, and the QA structs carry what was measured:
the accepted splits `sample` (the recovered sample's index; null for the greedy answer), `temperature` and `seed`
(of the answer published), `greedy_answer` (a recovered item's wrong greedy answer), and all three splits
`pass_rate` and `k` (accepted samples over samples drawn; null where the item was not sampled), and the rejected split
`suspect` (`SUSPECT`: the evidence of a `suspect_reference`, null for the other reasons). With a no-image pass
(`blind:`), every split's QA carries `blind` (`BLIND`). With
`recovery.pairs`, a fourth repo holds preference pairs (`PAIRS`, `rs.pipeline.write.pairs`).

`question` is byte-identical to the prompt the model received, instruction included.
"""

from __future__ import annotations

from datasets import Features, Image, List, Value

_STR = Value("string")

CLEAN_META = {
    "source": {"dataset": _STR, "config": _STR, "split": _STR, "revision": _STR},
    "record_ids": List(_STR),
    "policy": {"name": _STR, "version": _STR, "steps": List(_STR)},
    "rewrites": List(_STR),
    "flags": List(_STR),
    "contamination": List({"key": _STR, "set": _STR, "method": _STR, "distance": Value("float64")}),
}

QA = {
    "rejected": {"question": _STR, "answer": _STR, "wrong_vlm": _STR, "reason": _STR},
    "think": {
        "question": _STR,
        "reasoning": _STR,
        "answer": _STR,
        "response": _STR,
        "reference": _STR,
        "accepted_by": _STR,
        "budgeted": Value("bool"),
    },
    "nothink": {"question": _STR, "answer": _STR, "reference": _STR, "accepted_by": _STR},
}


MEASURED = {"pass_rate": Value("float64"), "k": Value("int32")}
RECOVERED = {
    "sample": Value("int32"),
    "temperature": Value("float64"),
    "seed": Value("int64"),
    "greedy_answer": _STR,
    **MEASURED,
}
"""The columns a recovery pass adds: to the accepted splits' QA (`RECOVERED`), to the rejected split's (`MEASURED`)."""

SUSPECT = {"agreeing": _STR, "samples": List(_STR), "verdicts": List(_STR)}
"""A `suspect_reference` rejection's evidence, in the rejected split's QA with a recovery pass (null for the others): the
value the model kept giving, its samples' final answers, and the adjudicator's two verdicts (`reference` / `other` /
`unsure`, the reference shown first, then second: `rs.pipeline.sample.adjudicate`)."""

BLIND = {
    "answer": _STR,
    "right": Value("bool"),
    "passed": Value("int32"),
    "k": Value("int32"),
    "marked": Value("bool"),
}
"""The no-image pass's record of a question, in every split's QA with `blind:` (`rs.pipeline.sample.blind`): the answer
given to the same prompt without the image at temperature 0 (the first rotation of a multiple-choice question; "" for an
`answer_too_large` rejection, whose model text is left out: `rs.pipeline.route.published_bytes`), whether
the verifier accepted it, how many of the `k` no-image answers it accepted (the rotations, or that answer and the
samples), and `marked`: right in every rotation, or right at temperature 0."""

BLIND_RECORD = {
    "multiple_choice": Value("bool"),
    "answers": List(_STR),
    "right": List(Value("bool")),
    "errors": Value("int32"),
    "marked": Value("bool"),
    "made_on": List(_STR),
}
"""A question's whole no-image record in the samples repo (`blind`, with `blind:`): each no-image answer's final answer
(null where it gave none), whether it was right and the id of the machine that made it (`provenance.made_on`), the
temperature-0 one first (`rs.pipeline.sample.blind.BLIND`), so that `rs refilter --from-samples` gives the items store
its no-image records back."""

_MESSAGES = List({"role": _STR, "content": _STR})

PAIRS = {
    "images": List(Image()),
    "prompt": _MESSAGES,
    "chosen": _MESSAGES,
    "rejected": _MESSAGES,
    "question": _STR,
    "reference": _STR,
    "chosen_answer": _STR,
    "chosen_by": _STR,
    "chosen_from": _STR,
    "chosen_sample": Value("int32"),
    "rejected_answer": _STR,
    "rejected_from": _STR,
    "rejected_sample": Value("int32"),
    "rejected_reason": _STR,
    **MEASURED,
    "image_sha256": _STR,
    "clean_meta": CLEAN_META,
}
"""The pairs repo: one row per question, TRL's conversational preference layout with images (`rs.pipeline.write.pairs`): the
messages' content is text, and TRL puts the image before the user's text (`trl.data_utils.prepare_multimodal_messages`)."""


_INTERVAL = {
    "pass_rate": Value("float64"),
    "passed": Value("int32"),
    "k": Value("int32"),
    "pass_rate_low": Value("float64"),
    "pass_rate_high": Value("float64"),
}

GENERATION = {
    "kind": _STR,
    "sample": Value("int32"),
    "sampled_for": _STR,
    "seed": Value("int64"),
    "temperature": Value("float64"),
    "text": _STR,
    "reasoning": _STR,
    "final": _STR,
    "too_large": Value("bool"),
    "finish_reason": _STR,
    "ending": _STR,
    "completion_tokens": Value("int64"),
    "thinking_tokens": Value("int64"),
    "error": _STR,
    "reader": _STR,
    "judge": _STR,
    "reasoning_agrees": Value("bool"),
    "accepted": Value("bool"),
    "accepted_by": _STR,
    "reason": _STR,
    "made_on": _STR,
}
"""One answer a question got, in the samples repo (`rs.pipeline.write.samples`)."""

CLEAN_ITEM = {
    "key": _STR,
    "record_id": _STR,
    "turn": Value("int32"),
    "question": _STR,
    "answer": _STR,
    "references": List(_STR),
    "options": List(_STR),
    "qtype": _STR,
    "source": _STR,
    "image_ref": _STR,
    "rewrites": List(_STR),
    "flags": List(_STR),
}
"""A question as cleaning kept it (`rs.store.CLEAN_QA`): what the reader grades an answer against."""

SAMPLES = {
    "image": Image(),
    "row": Value("int64"),
    "key": _STR,
    "question": _STR,
    "reference": _STR,
    "references": List(_STR),
    "question_type": _STR,
    "item": CLEAN_ITEM,
    "model": _STR,
    "model_revision": _STR,
    "prompt_tokens": Value("int64"),
    "prompt_reasoning": _STR,
    "accepted": Value("bool"),
    "accepted_by": _STR,
    "reason": _STR,
    "greedy_accepted": Value("bool"),
    "published": Value("int32"),
    **_INTERVAL,
    "generations": List(GENERATION),
    "image_sha256": _STR,
    "clean_meta": CLEAN_META,
}
"""The samples repo (`publish.samples`): one row per question with every generation it got."""

RL = {
    "images": List(Image()),
    "prompt": _MESSAGES,
    "solution": _STR,
    "references": List(_STR),
    "question": _STR,
    "question_type": _STR,
    **_INTERVAL,
    "greedy_accepted": Value("bool"),
    "image_sha256": _STR,
    "clean_meta": CLEAN_META,
}
"""The RL repo (`recovery.difficulty.rl`): TRL's GRPO layout (conversational `prompt`, `images`; the other columns go to
the reward functions, `solution` the reference), one row per question whose pass rate is within the bounds."""

ROW_SCHEMAS = {"pairs": PAIRS, "samples": SAMPLES, "rl": RL}
"""The repos whose rows are one question each (not an image with its QA list)."""


def features(split: str, *, recovery: bool = False, blind: bool = False) -> Features:
    """The declared features of one published split; `recovery`: the family has a recovery pass; `blind`: a no-image
    pass (`BLIND`, last in the QA struct; the samples repo's `BLIND_RECORD`, last in its rows)."""
    if split == "samples" and blind:
        return Features({**SAMPLES, "blind": BLIND_RECORD})
    if split in ROW_SCHEMAS:
        return Features(ROW_SCHEMAS[split])
    qa = (
        QA[split]
        if not recovery
        else {**QA[split], **({**MEASURED, "suspect": SUSPECT} if split == "rejected" else RECOVERED)}
    )
    if blind:
        qa = {**qa, "blind": BLIND}
    return Features({"image": Image(), "qa": List(qa), "clean_meta": CLEAN_META, "image_sha256": _STR})
