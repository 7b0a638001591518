"""Suspect references: a rejection the model keeps answering the same way, adjudicated by the model shown the image.

A rejected question whose greedy answer and every recovery sample state the same clean value of the reference's
kind, one the verifier knows is not the reference nor near it (`Grade.certain`), is a *candidate*
(`agreeing_value`): either the model is consistently wrong, or the reference is. The same model is then shown the
image, the question and the two values, once with the reference first and once with it second (so that a bias for a
position cannot decide), and asked which one the image supports (`Adjudicator`). A candidate it sides against the
reference in both orders is *against* its reference.

The adjudicator is measured, never assumed (`AdjudicationSampler`, `calibrate`), on cases whose truth is known:

- **wrong references**: a question the verifier accepted, its reference replaced by a value of the same kind that the
  verifier knows is wrong for it (a near miss, or another question's answer of the same kind), against the accepted
  answer's value: it must be sided against the shown reference in both orders;
- **right references**: a question whose greedy answer was certainly wrong and that a sample recovered to the
  reference (the verifier accepted it), the reference against the greedy value: it must not be.

The gate is the judge's (`rs.pipeline.sample.calibration`): each check's 95% Wilson lower bound must reach its
threshold (the family's `judge.min_negative_agreement` for the right references, a reference wrongly called suspect
being the costly error; `judge.min_positive_agreement` for the wrong ones), with at least `judge.min_calibration_cases`
cases each. Only then are the candidates against their reference marked **suspect** (`rs.pipeline.route`:
`suspect_reference`); a blocked adjudicator marks nothing, and its report says why.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import pyarrow as pa

from rs.answers import Grade, Grader, Kind, render
from rs.engines.base import Generation, Request, SamplingSettings
from rs.engines.cached_engine import CachedEngine
from rs.engines.reasoning import ReasoningFormat
from rs.families.schema import JudgeConfig, ReasoningConfig
from rs.pipeline.sample.calibration import Answered, BottomK, CalibrationSampler, Check, question_kind, wilson
from rs.pipeline.sample.judge import JudgeCase, prompt_template
from rs.records import QAItem
from rs.util.shipped import TEMPLATES

VERSION = "2"
"""(2: a blocked adjudicator gives every reason that holds.) The adjudicator, its prompt, the candidates it is asked
about and how it is measured: bump when a change asks or reads it otherwise, or marks some question otherwise
(`rs.pipeline.versions`)."""
PROMPT_TEMPLATE = "adjudicate_prompt.jinja"
"""What the adjudicator is asked, in `TEMPLATES`."""
LABELS = ("A", "B")
ORDERS = ("reference_first", "reference_second")
"""The two requests about one dispute: the reference shown as answer A, then as answer B."""
SIDES = ("reference", "other", "unsure")
"""What a verdict says, read through its order: the image supports the reference, the other value, or it said neither."""

ADJUDICATION = pa.schema(
    [
        ("row", pa.int64()),
        ("key", pa.string()),
        ("agreeing", pa.string()),
        ("verdicts", pa.list_(pa.string())),
        ("against", pa.bool_()),
        ("suspect", pa.bool_()),
    ]
)
"""The recovery store's `adjudication-*.parquet` (`rs.pipeline.recover`): one record per candidate, in item order: the
value the model kept giving, the two verdicts (`SIDES`, in `ORDERS`), whether both side against the reference, and
whether it is marked suspect (against, and the adjudicator passed its calibration)."""


def agreeing_value(
    grader: Grader, item: QAItem, references: Sequence[str], greedy: str | None, samples: Sequence[str | None]
) -> str | None:
    """The value a rejected question's answers agree on against its reference, or None when it is no candidate.

    Every answer (the greedy one and each of at least one sample) must be a certain rejection (`Grade.certain`: one
    clean value of the reference's kind that the verifier knows is neither the reference nor near it), and every sample's
    value must be the greedy answer's: the reader (`rs.answers`) reads each, the greedy answer's value (`written`) as
    the sample's reference. Returns that value as written ("3" for "There are 3 dots.")."""
    if greedy is None or not samples:
        return None
    first = grader.grade(greedy, references, item=item)
    if not first.certain or first.value is None:
        return None
    value = written(first)
    for answer in samples:
        if answer is None:
            return None
        grade = grader.grade(answer, references, item=item)
        if not grade.certain or grade.value is None or not grader.grade(answer, [value], item=item).accepted:
            return None
    return value


def written(grade: Grade) -> str:
    """A graded answer's one clean value, written as a reference would be: "3" for "There are 3 dots.", "50%", "no",
    "B" (`Grade.value`)."""
    value = grade.value
    if grade.kind is Kind.NUMBER:
        return render(value.value) + ("%" if value.percent else "")
    return str(value)


def clean_value(grader: Grader, item: QAItem, references: Sequence[str], answer: str | None) -> str | None:
    """The stated value of an answer the reader reads as one clean value of the reference's kind (accepted or certainly
    wrong); None otherwise."""
    if answer is None:
        return None
    grade = grader.grade(answer, references, item=item)
    return written(grade) if grade.value is not None and (grade.accepted or grade.certain) else None


@dataclass(frozen=True)
class Dispute:
    """One question and two values of it to adjudicate: the reference as shown, and the other value."""

    row: int
    at: int
    """The item's position in the items store (the adjudication records are written in item order)."""
    key: str
    question: str
    """The exact prompt the model was asked."""
    reference: str
    other: str
    image_sha256: str
    image: bytes | None = None
    truth: str | None = None
    """For a calibration case: `wrong_reference` or `right_reference`; None for a candidate."""

    @property
    def order(self) -> tuple[int, int, str]:
        """Where it is asked among the others: by row (the images read once, in order), then item, a candidate first."""
        return (self.row, self.at, self.truth or "")


def against(sides: Sequence[str]) -> bool:
    """Whether the verdicts side against the reference in both orders."""
    return len(sides) == len(ORDERS) and all(side == "other" for side in sides)


def adjudication_record(dispute: Dispute, sides: Sequence[str], passes: bool) -> dict[str, Any]:
    """A candidate's adjudication record (`ADJUDICATION`), as the recover stage writes it and `rs audit --replay` and
    `rs refilter`'s re-read make it again from the cached verdicts; `passes`: whether the adjudicator passed its
    calibration (a blocked one marks nothing)."""
    marked = against(sides)
    return {
        "row": dispute.row,
        "key": dispute.key,
        "agreeing": dispute.other,
        "verdicts": list(sides),
        "against": marked,
        "suspect": marked and passes,
    }


class Adjudicator:
    """Renders the adjudication prompt in both orders, runs it through the (cached) sampling engine with the image, at
    temperature 0, its reasoning switched off and its reply constrained to a letter (as a `label_only` judge), and reads
    which value each verdict sides with."""

    def __init__(
        self,
        runner: CachedEngine,
        *,
        reasoning: ReasoningConfig | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        tokenizer: Callable[[], Any] | None = None,
        template_dir: Path = TEMPLATES,
    ):
        self.runner = runner
        self.template = prompt_template(PROMPT_TEMPLATE, template_dir)
        kwargs = {**(chat_template_kwargs or {}), "enable_thinking": False}
        self.reasoning = ReasoningFormat(
            reasoning or ReasoningConfig(), tokenizer=tokenizer, chat_template_kwargs=kwargs
        )
        self.settings = SamplingSettings(
            temperature=0.0,
            max_tokens=4,
            chat_template_kwargs=kwargs,
            choices=LABELS,
            close_reasoning=self.reasoning.markers,
        )

    def prompt(self, question: str, first: str, second: str) -> str:
        return self.template.render(question=question, first=first, second=second)

    def requests(self, dispute: Dispute) -> list[Request]:
        """The two requests about a dispute, in `ORDERS`."""
        pairs = ((dispute.reference, dispute.other), (dispute.other, dispute.reference))
        return [
            Request(
                prompt=self.prompt(dispute.question, first, second),
                image=dispute.image,
                image_sha256=dispute.image_sha256,
                item_key=dispute.key,
            )
            for first, second in pairs
        ]

    def keyed(self, disputes: Iterable[Dispute]) -> Iterator[tuple[str, Request]]:
        """The requests about `disputes`, each with its generation cache key."""
        for dispute in disputes:
            for request in self.requests(dispute):
                yield self.runner.key(request, self.settings), request

    def side(self, order: int, generation: Generation) -> str:
        """What a verdict in order `order` sides with (`SIDES`): a reply that is not exactly one letter is `unsure`."""
        read = self.reasoning.read(generation)
        label = (read.answer or "").strip()
        if label not in LABELS:
            return "unsure"
        return "reference" if LABELS.index(label) == order else "other"

    def verdicts(self, disputes: Iterable[Dispute]) -> Iterator[tuple[Dispute, list[str]]]:
        """Each dispute with its two verdicts' sides, in the order given (the engine sees both orders of a dispute
        together)."""
        pending: list[Dispute] = []

        def requests() -> Iterator[Request]:
            for dispute in disputes:
                pending.append(dispute)
                yield from self.requests(dispute)

        sides: list[str] = []
        for _, generation in self.runner.run(requests(), self.settings, desc="adjudication"):
            sides.append(self.side(len(sides), generation))
            if len(sides) == len(ORDERS):
                yield pending.pop(0), sides
                sides = []


@dataclass(frozen=True)
class _Base:
    row: int
    at: int
    key: str
    question: str
    item: QAItem
    value: str
    """The accepted answer's value (wrong-reference cases), or the greedy answer's wrong value (right-reference cases)."""
    image_sha256: str


class AdjudicationSampler:
    """Draws the adjudicator's calibration cases from a recovery pass's items as they stream past (the k with the
    smallest hash of their key, so every path draws the same)."""

    def __init__(self, grader: Grader, near: CalibrationSampler, samples: int):
        self.grader, self.near, self.samples = grader, near, samples
        self._accepted: BottomK[_Base] = BottomK(2 * samples)
        self._recovered: BottomK[_Base] = BottomK(samples)
        self._kind_values: BottomK[tuple[str, str]] = BottomK(64 * samples)

    def offer_accepted(
        self, row: int, at: int, question: str, item: QAItem, answer: str | None, image_sha256: str
    ) -> None:
        """A question whose greedy answer the verifier accepted."""
        value = clean_value(self.grader, item, item.all_references(), answer)
        if value is None:
            return
        self._accepted.offer(item.key, _Base(row, at, item.key, question, item, value, image_sha256))
        kind = question_kind(item)
        self._kind_values.offer(f"{kind}\x00{value}", (kind, value))

    def offer_recovered(
        self, row: int, at: int, question: str, item: QAItem, greedy: str | None, image_sha256: str
    ) -> None:
        """A question whose greedy answer was certainly wrong, recovered by a sample the verifier accepted."""
        references = item.all_references()
        if greedy is None or not self.grader.grade(greedy, references, item=item).certain:
            return
        value = clean_value(self.grader, item, references, greedy)
        if value is not None:
            self._recovered.offer(item.key, _Base(row, at, item.key, question, item, value, image_sha256))

    def cases(self) -> list[Dispute]:
        """The calibration cases, in the order they are asked (`Dispute.order`)."""
        by_kind: dict[str, list[str]] = {}
        for kind, value in self._kind_values.items():
            by_kind.setdefault(kind, []).append(value)
        wrong: list[Dispute] = []
        for base in self._accepted.items():
            if len(wrong) >= self.samples:
                break
            shown = self._wrong_value(base, by_kind.get(question_kind(base.item), []))
            if shown is not None:
                wrong.append(
                    Dispute(
                        base.row,
                        base.at,
                        base.key,
                        base.question,
                        shown,
                        base.value,
                        base.image_sha256,
                        truth="wrong_reference",
                    )
                )
        right = [
            Dispute(b.row, b.at, b.key, b.question, b.item.answer, b.value, b.image_sha256, truth="right_reference")
            for b in self._recovered.items()
        ]
        return sorted(wrong + right, key=lambda d: d.order)

    def _wrong_value(self, base: _Base, same_kind: list[str]) -> str | None:
        """A value of the reference's kind that the verifier knows is wrong for the question: the judge's near miss of the
        reference, else another question's answer of the same kind."""
        item, references = base.item, base.item.all_references()
        answered = Answered(
            JudgeCase(base.question, item.answer, item.answer, item.key),
            tuple(references),
            item.options,
            question_kind(item),
            item.qtype,
        )
        tried = [self.near.near_miss(answered, [])] + sorted(same_kind)
        for value in tried:
            if value is not None and value.strip() and self.grader.grade(value, references, item=item).certain:
                return value
        return None


@dataclass
class AdjudicationCalibration:
    """The adjudicator's checks, and whether it may mark anything on this run."""

    wrong_reference: Check
    """Wrong references (an accepted question's reference replaced by a wrong value) it sided against in both orders."""
    right_reference: Check
    """Right references (the model recovered to them) it did NOT side against in both orders."""
    min_wrong_agreement: float
    min_right_agreement: float
    min_calibration_cases: int
    passes: bool
    blocked_reason: str | None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["wrong_reference"], d["right_reference"] = self.wrong_reference.to_dict(), self.right_reference.to_dict()
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AdjudicationCalibration:
        checks = {name: Check.from_dict(data[name]) for name in ("wrong_reference", "right_reference")}
        return cls(**{**data, **checks})


def gate(wrong: Check, right: Check, config: JudgeConfig) -> str | None:
    """Why the adjudicator may not mark anything on this run (every reason that holds, too few cases first), or None
    when both checks have the evidence they need."""
    need = config.min_calibration_cases
    reasons = []
    for check, what in (
        (wrong, "wrong references (accepted questions shown a wrong value as their reference)"),
        (right, "right references (questions the model recovered to their reference)"),
    ):
        if check.total < need:
            reasons.append(
                f"too few calibration cases to trust the adjudicator: {check.total} {what}, at least {need} needed"
            )
    for check, threshold, what, said in (
        (right, config.min_negative_agreement, "right references", "sided against {bad} of {total}"),
        (wrong, config.min_positive_agreement, "wrong references", "sided against only {agreed} of {total}"),
    ):
        if check.total and check.low < threshold:
            told = said.format(bad=check.total - check.agreed, agreed=check.agreed, total=check.total)
            reasons.append(
                f"on {what} the adjudicator {told} in both orders: agreement {check.rate:.1%}, whose 95% lower bound "
                f"{check.low:.1%} is below {threshold:.0%}"
            )
    return "; ".join(reasons) or None


def calibrate(verdicts: Iterable[tuple[Dispute, list[str]]], config: JudgeConfig) -> AdjudicationCalibration:
    """The checks of the calibration cases' verdicts, and the gate's decision."""
    counts = {"wrong_reference": [0, 0], "right_reference": [0, 0]}
    for dispute, sides in verdicts:
        assert dispute.truth is not None
        marked = against(sides)
        counts[dispute.truth][0] += marked if dispute.truth == "wrong_reference" else not marked
        counts[dispute.truth][1] += 1
    wrong, right = wilson(*counts["wrong_reference"]), wilson(*counts["right_reference"])
    reason = gate(wrong, right, config)
    return AdjudicationCalibration(
        wrong,
        right,
        config.min_positive_agreement,
        config.min_negative_agreement,
        config.min_calibration_cases,
        reason is None,
        reason,
    )


@dataclass
class AdjudicationReport:
    """What the adjudication did (in `recovery.json`)."""

    candidates: int = 0
    """Rejected questions whose answers all agree on one value the reference is not near (`agreeing_value`)."""
    against: int = 0
    """Candidates the adjudicator sided against the reference in both orders."""
    suspects: int = 0
    """Those marked `suspect_reference`: `against`, where the adjudicator passed its calibration (else 0)."""
    requests: int = 0
    engine_calls: int = 0
    calibration: AdjudicationCalibration | None = None
    verdicts: dict[str, int] = field(default_factory=dict)
    """The candidates' verdicts, by side (`SIDES`), both orders counted."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["calibration"] = self.calibration.to_dict() if self.calibration else None
        d["verdicts"] = dict(sorted(self.verdicts.items()))
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AdjudicationReport:
        cal = data.get("calibration")
        return cls(**{**data, "calibration": AdjudicationCalibration.from_dict(cal) if cal else None})
