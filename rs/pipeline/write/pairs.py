"""The preference pairs (`recovery.pairs`): to one question, a verified response and a wrong one.

A pair is made for every question that has both, after the recovery pass:

- chosen: the answer the accepted splits publish (the greedy one, or the recovered sample), with its
  reasoning, when that reasoning concludes the answer it gives (`reasoning_agrees` not False);
- rejected: the greedy answer of a recovered item, else the first of its samples, that is certainly
  wrong (`rs.pipeline.route.certainly_wrong`: the verifier's certain rejection, or a calibrated judge's WRONG):
  an answer the verifier could not decide may be right, and is never the rejected side.

Rows are TRL's conversational preference layout with images (`images`, `prompt`, `chosen`,
`rejected`, each message's content its text: TRL puts the image before the user's text), which
`trl.DPOTrainer` takes as it is, plus what the pair was made of. One row per question: an image with two paired questions is in two rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from rs.pipeline.route import Outcome, Routes, certainly_wrong, joined
from rs.splits_schema import think_response


@dataclass(frozen=True)
class Pair:
    chosen: dict[str, Any]
    chosen_from: str
    """`greedy` or `sample`."""
    rejected: dict[str, Any]
    rejected_from: str
    rejected_reason: str
    """`certain` (the verifier knows it is wrong) or `judge` (a calibrated judge said WRONG)."""


def pair_of(item: dict[str, Any], result: Outcome, routes: Routes) -> Pair | None:
    """The pair one item makes, if any."""
    if not result.decision.accepted or result.answer.get("reasoning_agrees") is False:
        return None
    wrong = [("greedy", item)] if result.recovered else []
    wrong += [("sample", s) for s in result.samples or ()]
    for source, answer in wrong:
        if certainly_wrong(answer, routes.promotes):
            return Pair(result.answer, "sample" if result.recovered else "greedy", answer, source,
                        "certain" if answer["contradicts"] else "judge")
    return None


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
        "question": item["prompt"], "reference": item["reference"],
        "chosen_answer": chosen["final"], "chosen_by": result.decision.by, "chosen_from": pair.chosen_from,
        "chosen_sample": chosen.get("sample") if pair.chosen_from == "sample" else None,
        "rejected_answer": rejected["final"], "rejected_from": pair.rejected_from,
        "rejected_sample": rejected.get("sample") if pair.rejected_from == "sample" else None,
        "rejected_reason": pair.rejected_reason,
        "pass_rate": result.pass_rate, "k": result.k,
        "image_sha256": row.image_sha256, "clean_meta": row.clean_meta,
    }


@dataclass
class PairCounts:
    """What the pairs card states: how many pairs, made of what; and the accepted questions that made none."""

    pairs: int = 0
    chosen_from: Counter[str] = field(default_factory=Counter)
    rejected_from: Counter[str] = field(default_factory=Counter)
    rejected_reason: Counter[str] = field(default_factory=Counter)
    images: int = 0
    unpaired: Counter[str] = field(default_factory=Counter)
    """Accepted questions without a pair: `no_wrong_answer` (none certainly wrong), `reasoning_disagrees`."""
    _last_row: int = field(default=-1, repr=False)

    def add(self, item: dict[str, Any], result: Outcome, routes: Routes) -> bool:
        if not result.decision.accepted or result.samples is None:  # a recovered item was sampled too
            return False
        pair = pair_of(item, result, routes)
        if pair is None:
            self.unpaired["reasoning_disagrees" if result.answer.get("reasoning_agrees") is False else "no_wrong_answer"] += 1
            return False
        self.pairs += 1
        self.images += item["row"] != self._last_row
        self._last_row = item["row"]
        self.chosen_from[pair.chosen_from] += 1
        self.rejected_from[pair.rejected_from] += 1
        self.rejected_reason[pair.rejected_reason] += 1
        return True

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "images": self.images, **{k: dict(sorted(getattr(self, k).items()))
                for k in ("chosen_from", "rejected_from", "rejected_reason", "unpaired")}}
