"""The preference pairs (`recovery.pairs`): to one question, a verified response and a wrong one.

A pair is made for every question that has both, after the recovery pass:

- chosen: the answer the accepted splits publish (the greedy one, or the recovered sample), with its
  reasoning, when that reasoning concludes the answer it gives (`reasoning_agrees` not False);
- rejected: the greedy answer of a recovered item, else the first of its samples, that is certainly
  wrong (`rs.pipeline.route.certainly_wrong`: the verifier's certain rejection, or a calibrated judge's WRONG):
  an answer the verifier could not decide may be right, and is never the rejected side. Of those, the first that fits
  the row beside the chosen one (`rs.pipeline.route.pair_fits`): a row must fit its row group, and one runaway wrong
  answer never fails the family's write; a question whose wrong answers are all too large makes no pair (`too_large`).

Which answers pair is routing's (`rs.pipeline.route.pair_of`, counted by `PairCounts` there); here, the rows.

Rows are TRL's conversational preference layout with images (`images`, `prompt`, `chosen`,
`rejected`, each message's content its text: TRL puts the image before the user's text), which
`trl.DPOTrainer` takes as it is, plus what the pair was made of. One row per question: an image with two paired questions is in two rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from rs.pipeline.route import Outcome, Routes, joined, pair_of
from rs.splits import think_response


def _message(role: str, text: str) -> list[dict[str, Any]]:
    return [{"role": role, "content": text}]


def pair_rows(build_dir: str | Path, routes: Routes) -> Iterator[dict[str, Any]]:
    """One row per pair, in item order."""
    for row, results in joined(build_dir, routes):
        for item, result in results:
            if (pair := pair_row(row, item, result, routes)) is not None:
                yield pair


def pair_row(row: Any, item: dict[str, Any], result: Outcome, routes: Routes) -> dict[str, Any] | None:
    """The pairs repo's row of one item of the cleaned `row` (its image, hash and cleaning metadata), or None: it makes no pair."""
    pair = pair_of(item, result, routes)
    if pair is None:
        return None
    chosen, rejected = pair.chosen, pair.rejected
    return {
        "images": [{"bytes": row.image, "path": None}],
        "prompt": _message("user", item["prompt"]),
        "chosen": _message("assistant", think_response(chosen["reasoning"], chosen["final"])),
        "rejected": _message("assistant", think_response(rejected["reasoning"], rejected["final"])),
        "question": item["prompt"],
        "reference": item["reference"],
        "chosen_answer": chosen["final"],
        "chosen_by": result.decision.by,
        "chosen_from": pair.chosen_from,
        "chosen_sample": chosen.get("sample") if pair.chosen_from == "sample" else None,
        "rejected_answer": rejected["final"],
        "rejected_from": pair.rejected_from,
        "rejected_sample": rejected.get("sample") if pair.rejected_from == "sample" else None,
        "rejected_reason": pair.rejected_reason,
        "pass_rate": result.pass_rate,
        "k": result.k,
        "image_sha256": row.image_sha256,
        "clean_meta": row.clean_meta,
    }
