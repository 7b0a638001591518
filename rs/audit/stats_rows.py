"""What `rs/stats.json` says of cleaning, decontamination and the question types, against the published rows.

The card rendered again (`rs.audit.rerender`) ties each of its lines to the stats; these tie the stats to the rows
where the rows hold the number: the QA cleaning kept are the QA answered, its rows the images published; the QA
decontamination flagged are the rows' `clean_meta.contamination` entries; the per-type counts are the samples repo's
questions by `question_type`. The rest of the cleaning (what it dropped) is in no published file: the stats alone say it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rs.audit.checkers import Audit, checker


def _published_rows(a: Audit) -> list[dict[str, Any]] | None:
    """The rows of the nothink and rejected repos (every image the family answered), or None where one is unreadable."""
    nothink, rejected = a.family.of("nothink"), a.family.of("rejected")
    if nothink is None or rejected is None:
        return None
    return nothink.rows + rejected.rows


@checker("*")
def cleaning_against_rows(a: Audit) -> None:
    rows = _published_rows(a)
    if rows is None:
        return
    stats = f"{a.repo.name}/rs/stats.json"
    cleaning = a.report.cleaning
    a.same("cleaning.kept_items (= the QA answered)", stats, cleaning.kept_items, a.answered)
    a.same(
        "cleaning.rows (= the images the splits publish)",
        stats,
        cleaning.rows,
        len({r["image_sha256"] for r in rows}),
    )
    decontamination = cleaning.decontamination
    if not decontamination:
        return
    flagged: dict[str, set[tuple[str, str]]] = {}
    marked: Counter[str] = Counter()
    seen: set[tuple[str, str, str, str]] = set()
    for row in rows:
        for entry in (row.get("clean_meta") or {}).get("contamination") or []:
            key = (row["image_sha256"], entry["key"], entry["set"], entry["method"])
            if key in seen:  # an image with accepted and rejected QA is in both repos, its clean_meta with it
                continue
            seen.add(key)
            flagged.setdefault(entry["set"], set()).add((row["image_sha256"], entry["key"]))
            marked[entry["method"]] += 1
    for name, one in decontamination["sets"].items():
        a.same(
            f"cleaning.decontamination.sets.{name}.flagged_items (= the rows' clean_meta.contamination)",
            stats,
            one["flagged_items"],
            len(flagged.get(name, ())),
        )
    step = cleaning.steps.get("decontamination")
    if step is not None:
        a.same(
            "cleaning.steps.decontamination.marked (= the rows' clean_meta.contamination, by method)",
            stats,
            {k: v for k, v in step["marked"].items() if v},
            dict(marked),
        )


@checker("*")
def question_types_against_rows(a: Audit) -> None:
    """The per-type table's counts against the samples repo's questions (one row per question, its type and fate)."""
    types = (a.report.question_types or {}).get("types")
    samples = a.family.of("samples")
    if not types or samples is None:
        return
    held: dict[str, dict[str, Any]] = {}
    for row in samples.rows:
        t = held.setdefault(
            row["question_type"],
            {"answered": 0, "accepted": 0, "greedy_accepted": 0, "recovered": 0, "rates": []},
        )
        t["answered"] += 1
        t["accepted"] += bool(row["accepted"])
        t["greedy_accepted"] += bool(row["greedy_accepted"])
        t["recovered"] += row["accepted_by"] == "recovery"
        if row["pass_rate"] is not None:
            t["rates"].append(row["pass_rate"])
    stats = f"{a.repo.name}/rs/stats.json question_types"
    a.same("question types", stats, sorted(types), sorted(held))
    for name, stated in types.items():
        t = held.get(name)
        if t is None:
            continue
        rates = t.pop("rates")
        truth = {
            **t,
            "measured": len(rates),
            "sometimes": sum(0 < r < 1 for r in rates),
            "pass_rate_min": min(rates) if rates else None,
            "pass_rate_max": max(rates) if rates else None,
        }
        a.same(f"question_types.{name}", stats, {k: stated.get(k) for k in truth}, truth)
