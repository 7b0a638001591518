"""The family's numbers recomputed from the published rows alone (never from `stats.json`).

Each is None where the repo that holds it could not be read. `rs audit` holds the card's text and the
stats against these.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rs.audit.repo import Family
from rs.pipeline.write.report import PASS_RATE_BINS, pass_rate_bin


@dataclass
class Facts:
    accepted_by: dict[str, int] | None = None
    """nothink: accepted QA by who accepted them."""
    rejected_by_reason: dict[str, int] | None = None
    """rejected: QA by reason."""
    kept_out_of_think: int | None = None
    """nothink QA - think QA: the accepted answers whose reasoning concludes another value (when the family keeps them out)."""
    pass_rates: dict[str, list[int]] | None = None
    """greedy_accepted / recovered / rejected -> QA per `PASS_RATE_BINS` bin (those with a measured pass rate)."""
    samples: int | None = None
    """Recovery samples drawn: the sum of `k` over the QA that were sampled (accepted and rejected)."""
    pairs: dict[str, Any] | None = None
    """The pairs repo's rows counted as `rs.pipeline.write.pairs.PairCounts` counts them."""
    qa: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)

    @property
    def accepted(self) -> int | None:
        return sum(self.accepted_by.values()) if self.accepted_by is not None else None

    @property
    def rejected(self) -> int | None:
        return sum(self.rejected_by_reason.values()) if self.rejected_by_reason is not None else None

    @property
    def recovered(self) -> int | None:
        return self.accepted_by.get("recovery", 0) if self.accepted_by is not None else None

    @property
    def greedy_accepted(self) -> int | None:
        return self.accepted - self.recovered if self.accepted_by is not None else None  # type: ignore[operator]


def _bins(values: list[float]) -> list[int]:
    counts = [0] * len(PASS_RATE_BINS)
    for value in values:
        counts[pass_rate_bin(value)] += 1
    return counts


def _pairs(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "pairs": len(rows),
        "images": len({r["image_sha256"] for r in rows}),
        "chosen_from": dict(Counter(r["chosen_from"] for r in rows)),
        "rejected_from": dict(Counter(r["rejected_from"] for r in rows)),
        "rejected_reason": dict(Counter(r["rejected_reason"] for r in rows)),
    }


def family_facts(family: Family) -> Facts:
    """What the readable repos of `family` hold, counted."""
    facts = Facts()
    for split, repo in family.siblings.items():
        facts.qa[split] = len(repo.qa)
        facts.rows[split] = len(repo.rows)
    nothink, rejected, think, pairs = (family.of(s) for s in ("nothink", "rejected", "think", "pairs"))
    if nothink is not None:
        facts.accepted_by = dict(Counter(qa["accepted_by"] for qa in nothink.qa))
    if rejected is not None:
        facts.rejected_by_reason = dict(Counter(qa["reason"] for qa in rejected.qa))
    if nothink is not None and think is not None:
        facts.kept_out_of_think = len(nothink.qa) - len(think.qa)
    if family.repo.report.recovery is not None and nothink is not None and rejected is not None:
        _measured(facts, nothink.qa, rejected.qa)
    if pairs is not None:
        facts.pairs = _pairs(pairs.rows)
    return facts


def _measured(facts: Facts, accepted: list[dict[str, Any]], rejected: list[dict[str, Any]]) -> None:
    """The pass-rate histogram and the samples drawn, from the accepted and rejected QA's `pass_rate` and `k`."""
    measured = [(qa, "recovered" if qa["accepted_by"] == "recovery" else "greedy_accepted") for qa in accepted]
    measured += [(qa, "rejected") for qa in rejected]
    facts.pass_rates = {
        group: _bins([qa["pass_rate"] for qa, g in measured if g == group and qa["pass_rate"] is not None])
        for group in ("greedy_accepted", "recovered", "rejected")
    }
    facts.samples = sum(qa["k"] or 0 for qa, _ in measured)
