"""The model-as-judge second pass, and the measurement of how far it can be trusted.

String verifiers under-credit answers that are right but phrased differently. Each rejected item
with a final answer is re-examined in a text-only pass by the same model (by default): it sees the
question, the reference and the candidate, is told to compare and never to solve, and answers
exactly one of CORRECT / WRONG / UNSURE (constrained decoding where the engine supports it;
anything else counts as UNSURE). Only CORRECT promotes.

A judge is measured on every run before it may promote anything (`calibrate`): on items the
verifier accepted (it should say CORRECT) and on constructed mismatches (it should not). A judge
that calls everything CORRECT fails the second check and promotes nothing.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from rs.engines.base import Generation, Request, SamplingSettings
from rs.engines.cached import CachedEngine
from rs.families.schema import JudgeConfig

LABELS = ("CORRECT", "WRONG", "UNSURE")
TEMPLATES = Path(__file__).resolve().parents[1] / "templates"


def fence(text: str) -> str:
    """Fence untrusted text with more backticks than it contains in a row, so it cannot close the fence."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}\n{text}\n{ticks}"


def parse_verdict(text: str) -> str:
    """The label, when the output is exactly one label; anything else is UNSURE, never CORRECT."""
    stripped = text.strip()
    return stripped if stripped in LABELS else "UNSURE"


@dataclass(frozen=True)
class JudgeCase:
    question: str
    reference: str
    candidate: str
    item_key: str | None = None


class Judge:
    """Renders the judge prompt and runs it through the (cached) engine."""

    def __init__(self, runner: CachedEngine, config: JudgeConfig, *, template_dir: Path = TEMPLATES):
        self.runner = runner
        self.config = config
        env = Environment(loader=FileSystemLoader(template_dir), undefined=StrictUndefined, keep_trailing_newline=False, autoescape=False)
        env.globals["fence"] = fence
        self.template = env.get_template("judge.jinja")
        self.settings = SamplingSettings(
            temperature=0.0, max_tokens=config.max_tokens, chat_template_kwargs={"enable_thinking": False}, choices=LABELS,
        )

    def prompt(self, case: JudgeCase) -> str:
        return self.template.render(question=case.question, reference=case.reference, candidate=case.candidate)

    def verdicts(self, cases: Iterable[JudgeCase], *, desc: str = "judge") -> Iterator[tuple[JudgeCase, str, Generation]]:
        cases = iter(cases)
        pending: list[JudgeCase] = []

        def requests() -> Iterator[Request]:
            for case in cases:
                pending.append(case)
                yield Request(prompt=self.prompt(case), item_key=case.item_key)

        for _, generation in self.runner.run(requests(), self.settings, desc=desc):
            case = pending.pop(0)
            label = parse_verdict(generation.text) if generation.error is None else "UNSURE"
            yield case, label, generation


@dataclass
class Check:
    """One calibration check: how often the judge agreed, with a 95% Wilson interval."""

    agreed: int
    total: int
    low: float
    high: float

    @property
    def rate(self) -> float | None:
        return self.agreed / self.total if self.total else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rate": self.rate}


def wilson(agreed: int, total: int, z: float = 1.959964) -> Check:
    if total == 0:
        return Check(0, 0, 0.0, 1.0)
    p = agreed / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return Check(agreed, total, max(0.0, centre - half), min(1.0, centre + half))


@dataclass
class Calibration:
    """Both checks, and whether the judge may promote anything for this family on this run."""

    positive: Check
    """Verifier-accepted items the judge called CORRECT."""
    negative: Check
    """Constructed mismatches the judge did NOT call CORRECT."""
    min_positive_agreement: float
    min_negative_agreement: float
    promotes: bool
    blocked_reason: str | None
    verdicts: dict[str, dict[str, int]]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["positive"] = self.positive.to_dict()
        d["negative"] = self.negative.to_dict()
        return d


def calibrate(judge: Judge, positives: list[JudgeCase], negatives: list[JudgeCase]) -> Calibration:
    """Run the judge on verifier-accepted items and on constructed mismatches; decide if it may promote."""
    counts = {"positive": dict.fromkeys(LABELS, 0), "negative": dict.fromkeys(LABELS, 0)}
    for _, label, _ in judge.verdicts(positives, desc="judge calibration +"):
        counts["positive"][label] += 1
    for _, label, _ in judge.verdicts(negatives, desc="judge calibration -"):
        counts["negative"][label] += 1
    positive = wilson(counts["positive"]["CORRECT"], len(positives))
    negative = wilson(len(negatives) - counts["negative"]["CORRECT"], len(negatives))
    c = judge.config
    reason = None
    if not negatives:
        reason = "no constructed mismatches to measure the judge on"
    elif negative.rate < c.min_negative_agreement:
        reason = f"the judge called {counts['negative']['CORRECT']}/{len(negatives)} constructed mismatches CORRECT (negative agreement {negative.rate:.2f} < {c.min_negative_agreement})"
    elif positives and positive.rate < c.min_positive_agreement:
        reason = f"positive agreement {positive.rate:.2f} < {c.min_positive_agreement}"
    return Calibration(positive, negative, c.min_positive_agreement, c.min_negative_agreement, reason is None, reason, counts)
