"""After the clean and sample stages: route each answered item to `RS_think`, `RS_nothink` or `rejected`, row by row.

Routing is a pure function of an item's result and the run's calibration, applied while a split
is written: building a second split reads the same stores and never re-runs the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from rs.splits_schema import think_response
from rs.store import read_clean_rows, read_records

VERSION = "1"
"""Which split an answered item goes to: bump when a change routes some item otherwise (`rs.versions`)."""


@dataclass(frozen=True)
class Decision:
    accepted: bool
    by: str | None = None
    """`verifier` or `judge` when accepted."""
    reason: str | None = None
    """One of `rs.splits_schema.REJECT_REASONS` when rejected."""


def decide(item: dict[str, Any], judge_promotes: bool) -> Decision:
    if item["error"] is not None:
        return Decision(False, reason="engine_error")
    if item.get("ending") == "repetition":  # loop detection ended it: a loop, not an answer that was merely long
        return Decision(False, reason="degenerate_repetition")
    if item["final"] is None:
        return Decision(False, reason="no_final_answer")
    if item["verified"]:
        return Decision(True, by="verifier")
    verdict = item["judge"]
    if verdict == "CORRECT":
        if item["contradicts"]:
            return Decision(False, reason="judge_overruled")
        return Decision(True, by="judge") if judge_promotes else Decision(False, reason="judge_blocked")
    if verdict == "UNSURE":
        return Decision(False, reason="judge_unsure")
    return Decision(False, reason="wrong_answer")


def _qa(split: str, item: dict[str, Any], decision: Decision) -> dict[str, Any] | None:
    if split == "rejected":
        if decision.accepted:
            return None
        return {"question": item["prompt"], "answer": item["reference"], "wrong_vlm": item["final"] or "", "reason": decision.reason}
    if not decision.accepted:
        return None
    answer = item["final"]
    if split == "nothink":
        return {"question": item["prompt"], "answer": answer, "reference": item["reference"], "accepted_by": decision.by}
    return {
        "question": item["prompt"], "reasoning": item["reasoning"] or "", "answer": answer,
        "response": think_response(item["reasoning"], answer), "reference": item["reference"], "accepted_by": decision.by,
        "budgeted": item.get("ending") == "thinking_budget",
    }


def kept_out_of_think(item: dict[str, Any], needs_agreeing_reasoning: bool) -> bool:
    """An accepted item whose reasoning concludes another value (`reasoning_agrees` False), when the family asks for
    reasoning that agrees: it is in the nothink split only."""
    return needs_agreeing_reasoning and item.get("reasoning_agrees") is False


def split_rows(build_dir: str | Path, split: str, judge_promotes: bool, *,
               needs_agreeing_reasoning: bool = True) -> Iterator[dict[str, Any]]:
    """The rows of one split: the cleaned rows joined, in order, with their items' results. With
    `needs_agreeing_reasoning`, an accepted item whose reasoning concludes another value is not in the think split."""
    build_dir = Path(build_dir)
    items = read_records(build_dir / "items", "items")
    item = next(items, None)
    for index, row in enumerate(read_clean_rows(build_dir / "clean")):
        qa = []
        for _ in row.qa:
            if item is None or item["row"] != index:
                raise RuntimeError(f"the items store of {build_dir} does not match its cleaned rows at row {index}; rebuild the family")
            skip = split == "think" and kept_out_of_think(item, needs_agreeing_reasoning)
            if not skip and (entry := _qa(split, item, decide(item, judge_promotes))) is not None:
                qa.append(entry)
            item = next(items, None)
        if qa:
            yield {"image": {"bytes": row.image, "path": None}, "qa": qa, "clean_meta": row.clean_meta, "image_sha256": row.image_sha256}
    if item is not None:
        raise RuntimeError(f"the items store of {build_dir} has results past its cleaned rows; rebuild the family")
