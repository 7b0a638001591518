"""Question types (`question_types:`): how a family's questions are typed, and what the model made of each type.

A question's type is the one its source records (`QAItem.qtype`: a `source.columns.qtype` column, the synthetic
scenes' own), else the first rule whose pattern its question matches, else the family's default. The cards show,
per type, the accept rate, the recovery rate and the spread of the pass rates, and name the types the model fails
most: an average accept rate hides a type the model cannot do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from rs.store import read_records

if TYPE_CHECKING:
    from rs.families.schema import QuestionTypesConfig
    from rs.pipeline.route import Outcome

Typer = Callable[[str, "str | None"], str]
"""(question as the source gave it, the type the source records) -> the question's type."""


def typer(config: QuestionTypesConfig) -> Typer:
    """The function that types a question under `config`."""
    rules = [(rule.type, re.compile(rule.pattern, re.IGNORECASE)) for rule in config.rules]

    def type_of(question: str, qtype: str | None) -> str:
        if config.source and qtype:
            return qtype
        return next((name for name, pattern in rules if pattern.search(question)), config.default)

    return type_of


def item_types(build_dir: str | Path, type_of: Typer) -> Iterator[tuple[int, str, str]]:
    """(row, key, type) of every cleaned QA item, in item order; reads the clean store's `qa` column only (no images)."""
    for index, row in enumerate(read_records(Path(build_dir) / "clean", "rows", columns=["qa"])):
        for qa in row["qa"]:
            yield index, qa["key"], type_of(qa["question"], qa["qtype"])


@dataclass
class TypeCounts:
    """What the cards say of one question type."""

    answered: int = 0
    accepted: int = 0
    greedy_accepted: int = 0
    recovered: int = 0
    sampled_rejected: int = 0
    """Questions the greedy pass rejected that were sampled (the recovery rate's denominator)."""
    pass_rates: list[float] = field(default_factory=list)

    def add(self, result: Outcome) -> None:
        self.answered += 1
        self.accepted += result.decision.accepted
        self.greedy_accepted += result.greedy.accepted
        self.recovered += result.recovered
        self.sampled_rejected += not result.greedy.accepted and result.samples is not None
        if result.pass_rate is not None:
            self.pass_rates.append(result.pass_rate)

    def to_dict(self) -> dict[str, Any]:
        rates = sorted(self.pass_rates)
        return {
            "answered": self.answered, "accepted": self.accepted, "greedy_accepted": self.greedy_accepted,
            "recovered": self.recovered, "sampled_rejected": self.sampled_rejected,
            "accept_rate": self.accepted / self.answered if self.answered else None,
            "recovery_rate": self.recovered / self.sampled_rejected if self.sampled_rejected else None,
            "measured": len(rates),
            "pass_rate_mean": sum(rates) / len(rates) if rates else None,
            "pass_rate_median": _median(rates),
            "pass_rate_min": rates[0] if rates else None, "pass_rate_max": rates[-1] if rates else None,
            "sometimes": sum(0 < r < 1 for r in rates),
        }


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


MOST_FAILED = 3
"""How many types the rejected card names."""


def most_failed(types: dict[str, dict[str, Any]], n: int = MOST_FAILED) -> list[str]:
    """The types with the lowest accept rate (most rejections first on a tie, then by name), those with a rejection only."""
    failing = [(t["accept_rate"], -(t["answered"] - t["accepted"]), name) for name, t in types.items()
               if t["answered"] > t["accepted"]]
    return [name for *_, name in sorted(failing)[:n]]
