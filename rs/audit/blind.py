"""Every card's no-image line (`templates/card_blind.md.jinja`), recomputed from the published rows.

A check of its own (`rs.pipeline.sample.blind`): the questions answered, those marked right without the image and those
right at temperature 0 that the card and `stats.json` state are counted from the `blind` column of the nothink and
rejected splits' QA (every question answered is in one of them, once); the per-type counts of `stats.json` must add up
to them, and are counted from the samples repo's rows (each question's type and whole no-image record) where it is
published.
"""

from __future__ import annotations

import re
from typing import Any

from rs.audit.card_text import number
from rs.audit.checkers import Audit, checker
from rs.util.text import pct

_STATED = re.compile(
    r"^\*\*Right without the image\.\*\* (\d[\d,]*) of the (\d[\d,]*) questions answered \((\d+\.\d%|n/a)\)", re.M
)
_RIGHT = re.compile(r"(\d[\d,]*) temperature-0 answers? (?:was|were) right\.")


def held(a: Audit) -> dict[str, int] | None:
    """Questions, marked and right at temperature 0, counted from the nothink and rejected QA; None where one of those
    repos could not be read."""
    accepted, rejected = a.family.of("nothink"), a.family.of("rejected")
    if accepted is None or rejected is None:
        return None
    marks: list[dict[str, Any]] = [qa["blind"] for qa in [*accepted.qa, *rejected.qa]]
    return {
        "questions": len(marks),
        "marked": sum(bool(m and m["marked"]) for m in marks),
        "right": sum(bool(m and m["right"]) for m in marks),
        "unrecorded": sum(m is None for m in marks),
    }


@checker("*")
def blind_questions(a: Audit) -> None:
    """The card's `N of the M questions answered (P)` and `R temperature-0 answers were right`, and the stats' counts,
    against the rows' `blind` column; the stats' per-type counts against their totals."""
    blind = a.report.blind
    if blind is None:
        return
    truth = held(a)
    stats, body = f"{a.repo.name}/rs/stats.json blind", a.repo.body
    stated = _STATED.search(body)
    where = f"{a.repo.name}/README.md" + (f":{body.count(chr(10), 0, stated.start()) + 1}" if stated else "")
    if truth is not None:
        a.same("questions without a no-image record", stats, 0, truth["unrecorded"])
        for name in ("questions", "marked", "right"):
            a.same(f"blind.{name}", stats, blind[name], truth[name])
    if stated is None:
        a.fail("the no-image sentence", where, "the stats call for it and the card does not state it")
    elif truth is not None:
        a.same("questions right without the image", where, number(stated[1]), truth["marked"])
        a.same("questions answered", where, number(stated[2]), truth["questions"])
        a.same(
            "share right without the image",
            where,
            stated[3],
            pct(truth["marked"] / truth["questions"] if truth["questions"] else None),
        )
        right = _RIGHT.search(body)
        a.same(
            "temperature-0 answers right without the image", where, number(right[1]) if right else None, truth["right"]
        )
    types, samples = blind.get("types"), a.family.of("samples")
    if types and samples is not None:  # one row per question, with its type and its whole no-image record
        counted: dict[str, dict[str, int]] = {}
        for row in samples.rows:
            t = counted.setdefault(row["question_type"], {"questions": 0, "marked": 0, "right": 0})
            record = row.get("blind") or {}
            t["questions"] += 1
            t["marked"] += bool(record.get("marked"))
            t["right"] += bool(record.get("right") and record["right"][0])
        a.same(
            "blind.types",
            stats,
            {t: {k: c[k] for k in ("questions", "marked", "right")} for t, c in types.items()},
            counted,
        )
    if types:
        for name in ("questions", "marked", "right"):
            a.same(
                f"blind.types: the {name} of every type",
                stats,
                sum(t[name] for t in blind["types"].values()),
                blind[name],
            )
