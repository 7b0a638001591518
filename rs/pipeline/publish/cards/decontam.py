"""What a card says of decontamination: a table per evaluation set and the example pair of matched images."""

from __future__ import annotations

import base64
from typing import Any

from rs.pipeline.clean.decontam.methods import METHODS


def pair_path(set_name: str) -> str:
    return f"images/decontamination-{''.join(c if c.isalnum() or c in '-_' else '_' for c in set_name)}.png"


def card_sets(report: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per evaluation set: its rows (method, what it compares, threshold, images and QA matched, action), totals, example."""
    if not report:
        return []
    methods = report["methods"]
    out = []
    for name, stats in report["sets"].items():
        rows = [
            {
                "method": m,
                "compares": methods[m]["compares"],
                "threshold": methods[m]["threshold"],
                "images": stats["images"].get(m, 0),
                "qa": stats["items"].get(m, 0),
                "action": methods[m]["action"],
            }
            for m in METHODS
            if m in methods
        ]
        example = stats.get("example")
        out.append(
            {
                "name": name,
                "rows": rows,
                "eval_images": stats["eval_images"],
                "eval_questions": stats["eval_questions"],
                "dropped": stats["dropped_items"],
                "flagged": stats["flagged_items"],
                "example": example,
                "pair_path": pair_path(name) if example and example.get("pair_png") else None,
            }
        )
    return out


def pair_files(report: dict[str, Any] | None) -> list[tuple[str, bytes]]:
    """The example pairs' PNG files a card links, as (path in the repo, bytes)."""
    return [(s["pair_path"], base64.b64decode(s["example"]["pair_png"])) for s in card_sets(report) if s["pair_path"]]


def summary(report: dict[str, Any] | None) -> str | None:
    """One line for `rs publish`'s summary (`rs.cli.publish`): per set, images and QA matched, dropped and flagged."""
    if not report:
        return None
    parts = [
        f"{name}: {sum(s['images'].values())} images and {sum(s['items'].values())} QA matched, "
        f"{s['dropped_items']} dropped, {s['flagged_items']} flagged"
        for name, s in report["sets"].items()
    ]
    return "  decontamination: " + "; ".join(parts)


def plan_lines(report: dict[str, Any] | None, where: str) -> list[str]:
    """What `rs plan` says of the overlap it found in `where`, per evaluation set and method."""
    if not report:
        return []
    out = [f"evaluation overlap in {where}:"]
    for name, s in report["sets"].items():
        by = ", ".join(f"{m} {n}" for m, n in sorted(s["images"].items())) or "none"
        qa = ", ".join(f"{m} {n}" for m, n in sorted(s["items"].items())) or "none"
        out.append(
            f"  {name} ({s['eval_images']} images, {s['eval_questions']} questions): images matched: {by}; "
            f"QA matched: {qa}; {s['dropped_items']} QA would be dropped, {s['flagged_items']} flagged"
        )
    return out
