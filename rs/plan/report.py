"""The report `rs plan` prints: what a family's run will do, as data (`render` writes it for a person).

Filled in by the static checks (`rs.plan.static`), the token counts (`rs.plan.tokens`) and, with `--limit`, the live
projection (`rs.plan.projection`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from rs.pipeline.clean import CleaningReport
from rs.plan.render import render_report


@dataclass
class KindReport:
    """One kind of question in the sample: how it is asked and checked, and its prompts' sizes."""

    kind: str
    items: int
    instruction: str
    verifier: str
    example: str
    """One prompt as the model receives it (and as stored)."""
    prompt_tokens: list[int] = field(default_factory=list)
    """Tokens of each sampled prompt, image tokens included; empty when the processor could not be loaded."""
    image_tokens: list[int] = field(default_factory=list)
    """The image's share of each of those prompts (the processor's image placeholder tokens)."""
    largest: tuple[int, int, int] | None = None
    """(width, height, image tokens) of the image that takes the most tokens."""


@dataclass
class TemplateReport:
    thinking: str | None
    """Where the generation prompt leaves the reasoning with the family's `chat_template_kwargs`."""
    without_thinking: str | None
    """The same with `enable_thinking: false` (what a label-only judge asks for)."""
    markers: tuple[str, str] | None
    tail: str
    """The end of the generation prompt with the family's arguments."""


@dataclass
class RecoveryProjection:
    """The recovery pass run for real on the plan's images, after their greedy pass: what it sampled, and its tokens."""

    k: int
    temperature: float
    items: int
    """Questions of the plan's images (the greedy pass's items)."""
    sampled: dict[str, int]
    """Questions it sampled, by why (`rejected`, `cut_off`, `difficulty`: `rs.pipeline.recover.samples_for`)."""
    samples: int
    completion_tokens: list[int]
    """Output tokens of each sample (an engine error has none)."""
    judged: int
    """Samples the judge was asked about."""
    sent: int
    """Requests the engine answered (samples and verdicts; the rest came from the cache)."""
    seconds: float
    blocked: int = 0
    """Sampled questions the judge found CORRECT but could not promote (its calibration did not pass on the sample)."""
    difficulty_tokens: int = 0
    """Output tokens of the samples drawn for the accepted questions (`difficulty`): what the RL repo costs."""
    rl: int | None = None
    """Questions of the plan's images within the RL repo's pass-rate bounds; None: the family publishes no RL repo."""
    rl_bounds: tuple[float, float] | None = None
    adjudication: dict[str, int] | None = None
    """The suspect references' adjudication on the plan's images (`recovery.suspects`): `candidates`, `cases` (its
    calibration cases), `requests` (two per dispute, with the image), `sent` and `most_cases` (the calibration's most
    cases: `judge.calibration_samples` of each kind); None when off."""

    @property
    def share(self) -> float:
        """The share of questions the pass samples."""
        return sum(self.sampled.values()) / self.items if self.items else 0.0

    def family_tokens(self, family_qa: int, judge_max_tokens: int) -> float:
        """Output tokens of the pass over the whole family: its samples' and at most the judge's, per question of the plan's."""
        if not self.items:
            return 0.0
        return family_qa * (sum(self.completion_tokens) + self.judged * judge_max_tokens) / self.items


@dataclass
class Projection:
    """The first `images` images answered for real, and the whole family projected from them."""

    images: int
    answered: int
    completion_tokens: list[int]
    truncated: int
    accepted: int
    judged: int
    judge_max_tokens: int
    calibration_requests: int
    sent: int
    """Requests the engine answered in this plan (the rest came from the cache)."""
    seconds: float
    family_qa: int | None
    """Questions the whole family will answer (source records x questions per record x kept), when the source says its size."""
    tokens_per_second: float | None
    """Given (`--tokens-per-second`), else measured here when something was sent."""
    measured: bool
    endings: dict[str, int] = field(default_factory=dict)
    """How the sample's answers ended (`stop`, `length`, `repetition`, `thinking_budget`)."""
    loop_tokens_saved: int = 0
    """Tokens loop detection saved in the sample: what was left of `max_tokens` for each answer it ended."""
    loop_detection: bool = False
    """Whether the family's sampling has loop detection on."""
    recovery: RecoveryProjection | None = None
    """The recovery pass on the same images, when the family has a `recovery:` block."""
    blind: dict[str, int] | None = None
    """The no-image pass on the plan's questions (`blind:`): `questions`, `requests` (text only), `sent`,
    `prompt_tokens`, `completion_tokens`; None when off."""
    model_loads: int = 0
    """Engines the plan's run made: one per model, shared by the greedy pass, the judge and the recovery (as a run does)."""

    @property
    def mean_tokens(self) -> float:
        return statistics.fmean(self.completion_tokens) if self.completion_tokens else 0.0

    def family_tokens(self, *, without_loop_detection: bool = False) -> float | None:
        """Output tokens of the whole family: answers, plus at most the judge's on the same share of rejections and calibration.

        `without_loop_detection`: as if every answer loop detection ended had run on to `max_tokens` (what it saved added back).
        """
        if self.family_qa is None or not self.answered:
            return None
        judge_per_item = self.judged / self.answered * self.judge_max_tokens
        mean = self.mean_tokens + (self.loop_tokens_saved / self.answered if without_loop_detection else 0)
        return self.family_qa * (mean + judge_per_item) + self.calibration_requests * self.judge_max_tokens


@dataclass
class PlanReport:
    family: str
    model: str
    max_tokens: int
    max_model_len: int | None
    mm_processor_kwargs: dict[str, Any] = field(default_factory=dict)
    """The engine's `mm_processor_kwargs` (a pixel limit): prompts are counted with them, as vLLM counts them."""
    side: int | None = None
    """Pixels a side of one image token, for a processor whose image tokens grow with the image."""
    configuration: list[str] = field(default_factory=list)
    """What the family's configuration says about how questions are asked, read and judged."""
    notes: list[str] = field(default_factory=list)
    """What could not be checked here, and why."""
    warnings: list[str] = field(default_factory=list)
    template: TemplateReport | None = None
    kinds: list[KindReport] = field(default_factory=list)
    sample: CleaningReport | None = None
    source_records: int | None = None
    projection: Projection | None = None
    overlap: CleaningReport | None = None
    """The cleaning of the `--limit` images (their decontamination is reported); None without --limit."""

    def expected_questions(self) -> int | None:
        """Questions the whole family will answer, from the source's size and the sample's questions kept per record."""
        s = self.sample
        if s is None or self.source_records is None or not s.source_records:
            return None
        return round(self.source_records * s.kept_items / s.source_records)

    def render(self) -> str:
        """The report a person reads."""
        return render_report(self)
