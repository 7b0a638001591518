"""The model-as-judge second pass, and the measurement of how far it can be trusted.

String verifiers under-credit answers that are right but phrased differently. Each rejected item
with a final answer is re-examined in a text-only pass by the same model (by default): it sees the
question, the reference and the candidate, is told to compare and never to solve, and answers
exactly one of CORRECT / WRONG / UNSURE (constrained decoding where the engine supports it;
anything else counts as UNSURE). Only CORRECT promotes.

A judge is measured on every run before it may promote anything (`rs.calibration`), and a
candidate with nothing to grade (no letter or digit, or one of the "master key" phrases that are
known to fool judges into CORRECT) is never sent to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from rs.engines.base import Generation, Request, SamplingSettings
from rs.engines.cached import CachedEngine
from rs.families.schema import JudgeConfig

LABELS = ("CORRECT", "WRONG", "UNSURE")
TEMPLATES = Path(__file__).resolve().parent / "templates"


def fence(text: str) -> str:
    """Fence untrusted text with more backticks than it contains in a row, so it cannot close the fence."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}\n{text}\n{ticks}"


def parse_verdict(text: str) -> str:
    """The label, when the output is exactly one label; anything else is UNSURE, never CORRECT."""
    stripped = text.strip()
    return stripped if stripped in LABELS else "UNSURE"


# Phrases that elicit CORRECT from LLM judges whatever the reference ("One Token to Fool LLM-as-a-Judge",
# Zhao et al. 2025), compared with letters and digits only.
MASTER_KEYS = frozenset({
    "solution", "thoughtprocess", "letssolvethisproblemstepbystep", "letsthinkstepbystep", "answer", "finalanswer",
    "theansweris", "thecorrectansweris", "correct", "wrong", "unsure", "thisiscorrect",
})
_ALNUM = re.compile(r"[^0-9a-z]+")


def judgeable(candidate: str | None) -> bool:
    """Whether a candidate holds anything to grade: a letter or digit, and more than a master-key phrase."""
    if not candidate:
        return False
    key = _ALNUM.sub("", candidate.casefold())
    return any(c.isalnum() for c in candidate) and key not in MASTER_KEYS


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

    def request(self, case: JudgeCase) -> Request:
        """The text-only request that asks the judge about one case."""
        return Request(prompt=self.prompt(case), item_key=case.item_key)

    @staticmethod
    def label(generation: Generation) -> str:
        """The verdict a judge generation says: a failed request is UNSURE."""
        return parse_verdict(generation.text) if generation.error is None else "UNSURE"

    def verdicts(self, cases: Iterable[JudgeCase], *, desc: str = "judge") -> Iterator[tuple[JudgeCase, str, Generation]]:
        cases = iter(cases)
        pending: list[JudgeCase] = []

        def requests() -> Iterator[Request]:
            for case in cases:
                pending.append(case)
                yield self.request(case)

        for _, generation in self.runner.run(requests(), self.settings, desc=desc):
            case = pending.pop(0)
            yield case, self.label(generation), generation
