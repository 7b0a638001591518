"""The family report: what a build measured, the one contract between the build and the cards.

The write stage fills a `FamilyReport` (`rs.pipeline.write.stats`), writes it as `stats.json` (`to_dict`) and each published repo
keeps a copy in `rs/stats.json` (without `run`, whose timings differ from run to run); the cards
are rendered from it, also from a published copy with `--cards-only` (`from_dict`). Every number a
card states is a field here, measured by the run that built the family.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rs.errors import RsError
from rs.util import invocation

__all__ = [
    "CleaningSummary",
    "Endings",
    "FamilyReport",
    "JudgeSummary",
    "PromptSummary",
    "RecoverySummary",
    "ReportError",
    "RunTimes",
    "SplitSummary",
    "Totals",
    "VerifierSummary",
]


class ReportError(RsError, ValueError):
    """A stats.json this version cannot read: written by another version of rs, or not a family report."""


@dataclass(frozen=True)
class VerifierSummary:
    name: str
    title: str
    params: dict[str, Any]
    description: str
    """The card text of the verifier, with the actual parameter values."""
    contradiction_rule: str | None
    """Which rejections are certain (the judge may not overrule them); None when the verifier knows none."""
    reading: str = ""
    """How every final answer is read before the comparison (`rs.answers.READING_RULES`)."""
    synonyms: list[list[str]] = field(default_factory=list)
    """The family's closed set of answers: each term with its other spellings (`answers.synonyms`)."""
    outcomes: dict[str, int] = field(default_factory=dict)
    """Answers the verifier accepted, rejected for certain, and left undecided (the judge's)."""
    reasoning_disagrees: int = 0
    """Accepted answers whose reasoning concludes another value of their kind."""
    reasoning_unchecked: int = 0
    """Answers the verifier accepted whose reasoning could not be compared (free text, or no value of their kind in it)."""
    think_needs_agreeing_reasoning: bool = True
    """Whether those are kept out of the think split (`answers.think_needs_agreeing_reasoning`)."""
    answer_bytes: int | None = None
    """Bytes of the model's text a row's published answers may hold together (`rs.pipeline.route.Routes.answer_bytes`);
    None in a report written before the bound."""
    verified_too_large: int = 0
    """Answers it accepted that were rejected `answer_too_large` (`rs.pipeline.route.Routing.verified_too_large`)."""


@dataclass(frozen=True)
class JudgeSummary:
    enabled: bool
    model: dict[str, Any]
    max_tokens: int
    mode: str
    """`label_only` or `think_then_label` (`judge.mode`)."""
    think_budget: int | None
    """Reasoning tokens a `think_then_label` judge may use; None for `label_only`."""
    prompt_states: dict[str, int]
    """Where the judge's rendered prompts left its reasoning (`closed` when it was switched off there)."""
    verdicts: dict[str, int]
    """CORRECT / WRONG / UNSURE over the rejections judged."""
    judged: int
    contradicted: int
    """Rejections the verifier knows are wrong: never judged into the accepted splits."""
    contradicted_verdicts: dict[str, int]
    calibration: dict[str, Any] | None
    """`rs.pipeline.sample.calibration`'s measurement (positives, easy and hard negatives, certain rejections, the gate); None when
    the judge is off."""
    sees_image: bool = False
    """Whether the judge was shown the item's image (`judge.sees_image`); False in the stats of an older rs, whose judge
    never was."""


@dataclass(frozen=True)
class PromptSummary:
    """How the questions were asked: what the stored question ends with."""

    instruction: str
    multiple_choice_instruction: str | None
    multiple_choice_items: int
    """Questions with options, asked with `multiple_choice_instruction` instead of `instruction`."""
    reasoning: dict[str, Any]
    """How the outputs were read (`model.reasoning`: parser, markers, answer tags, required) and where the rendered
    prompts left the reasoning (`states`: `open` / `closed` / `none` / `unknown` -> answers)."""


@dataclass(frozen=True)
class CleaningSummary:
    source_records: int
    source_items: int
    kept_items: int
    dropped_items: int
    rows: int
    merged_records: int
    dropped: dict[str, int]
    """Drop reason -> items."""
    steps: dict[str, dict[str, Any]]
    """Step name -> its counts (`seen`, `dropped`, `rewritten`, `marked`), in pipeline order."""
    decontamination: dict[str, Any] | None = None
    """What the evaluation sets matched (`rs.pipeline.clean.decontam.Decontaminator.report`); None when the family is checked against none."""


@dataclass(frozen=True)
class Totals:
    source_qa: int
    dropped_by_cleaning: int
    answered: int
    accepted: int
    rejected: int
    accept_rate: float | None
    accepted_by: dict[str, int]
    """`verifier` / `judge` -> accepted items."""
    rejected_by_reason: dict[str, int]


@dataclass(frozen=True)
class SplitSummary:
    repo: str
    rows: int
    qa: int
    shards: int
    bytes: int
    """Bytes of the parquet files."""
    dataset_bytes: int
    """Bytes of the data in memory, as `datasets` counts them (the card's `dataset_info`)."""
    files: list[str]


@dataclass(frozen=True)
class Lengths:
    """How long the model's answers ran, in tokens (reasoning included), over one side of the routing."""

    max_tokens: int
    """The sampling limit: an answer that reached it was cut off (`truncated`)."""
    total: int
    """Answers counted (those the engine answered; failed requests have no length)."""
    truncated: int
    median: int | None
    edges: list[int]
    """Histogram bin edges, from 0 to `max_tokens`."""
    counts: list[int]
    """Answers per bin: edges[i] <= tokens < edges[i + 1] (the last bin includes `max_tokens`)."""
    loops: int = 0
    """Answers loop detection ended (`repetition`), short of `max_tokens`."""
    loop_counts: list[int] | None = None
    """Those answers per bin (the figure marks them apart from the `max_tokens` cut)."""
    budget_cuts: int = 0
    """Answers whose reasoning the engine cut at `thinking_token_budget`."""
    thinking_token_budget: int | None = None

    @classmethod
    def from_counts(
        cls,
        tokens: dict[int, int],
        truncated: int,
        max_tokens: int,
        bins: int = 20,
        *,
        loop_tokens: dict[int, int] | None = None,
        budget_cuts: int = 0,
        thinking_token_budget: int | None = None,
    ) -> Lengths:
        """From a count of answers per token length (bounded by `max_tokens`, so it stays small at any family size)."""
        width = max(1, -(-max_tokens // bins))
        edges = list(range(0, max_tokens, width)) + [max_tokens]
        counts = [0] * (len(edges) - 1)
        for n, count in tokens.items():
            counts[min(len(counts) - 1, n // width)] += count
        loop_counts = [0] * (len(edges) - 1)
        for n, count in (loop_tokens or {}).items():
            loop_counts[min(len(loop_counts) - 1, n // width)] += count
        total = sum(tokens.values())
        median, seen = None, 0
        for n in sorted(tokens):
            seen += tokens[n]
            if 2 * seen >= total:
                median = n
                break
        return cls(
            max_tokens=max_tokens,
            total=total,
            truncated=truncated,
            median=median,
            edges=edges,
            counts=counts,
            loops=sum((loop_tokens or {}).values()),
            loop_counts=loop_counts,
            budget_cuts=budget_cuts,
            thinking_token_budget=thinking_token_budget,
        )


@dataclass(frozen=True)
class Endings:
    """How the answers ended, and what loop detection and the thinking budget did (`sampling`'s settings)."""

    counts: dict[str, int]
    """`stop` / `length` / `repetition` / `thinking_budget` / `error` -> answers (`rs.engines.base.ENDINGS`)."""
    completion_tokens: int
    """Tokens the engine generated for the answers (reasoning included)."""
    loop_tokens_saved: int
    """For each answer loop detection ended, what was left of its `max_tokens`: tokens not generated."""
    budgeted_answered: int
    """Answers cut at the thinking budget that still gave a final answer (verified like any other)."""


PASS_RATE_BINS = ("0", "(0, 0.25]", "(0.25, 0.5]", "(0.5, 0.75]", "(0.75, 1)", "1")
"""The card's pass-rate histogram: never, up to a quarter, ..., always (an item strictly between 0 and 1 is one the
model answers right only sometimes)."""


def pass_rate_bin(rate: float) -> int:
    """The index of `rate`'s bin in `PASS_RATE_BINS`."""
    if rate <= 0:
        return 0
    if rate >= 1:
        return 5
    return min(4, math.ceil(rate * 4))


def pass_rate_histogram(rates: dict[str, Counter[float]]) -> dict[str, list[int]]:
    """Items per `PASS_RATE_BINS` bin, by group, of items counted per pass rate (`rs.pipeline.route.Routing.pass_rates`)."""
    histogram = {}
    for group, counts in rates.items():
        bins = [0] * len(PASS_RATE_BINS)
        for rate, n in counts.items():
            bins[pass_rate_bin(rate)] += n
        histogram[group] = bins
    return histogram


@dataclass(frozen=True)
class RecoverySummary:
    """What the recovery pass did (`recovery:`): the samples, what they recovered, the pass rates, the pairs."""

    settings: dict[str, Any]
    """The `recovery:` block as the run used it (samples, temperature, top_p, seed, max_tokens, ...)."""
    sampled: dict[str, int]
    """Items sampled, by why: `rejected`, `cut_off`, `difficulty`."""
    samples: int
    """Samples drawn (answers), from the engine or the cache."""
    outcomes: dict[str, int]
    """The verifier on the samples: accepted, certain (rejections it knows are wrong), undecided."""
    verdicts: dict[str, int]
    """The judge on the undecided samples."""
    endings: dict[str, int]
    greedy_accepted: int
    """Items the greedy pass accepted (verifier and judge): the seed's figure."""
    recovered: int
    """Items the greedy pass rejected that a sample recovered (`accepted_by: recovery`)."""
    still_rejected: int
    """Items sampled after a rejection that no sample recovered (still in the rejected split)."""
    greedy_accept_rate: float | None
    accept_rate: float | None
    """After recovery."""
    pass_rates: dict[str, list[int]]
    """Items per `PASS_RATE_BINS` bin, by what they are: `greedy_accepted`, `recovered`, `rejected`."""
    pairs: dict[str, Any] | None = None
    """`rs.pipeline.write.pairs.PairCounts`, when the family publishes pairs."""
    suspects: dict[str, Any] | None = None
    """The suspect references (`recovery.suspects`): `candidates`, `against`, `marked` (the `suspect_reference`
    rejections), `requests`, the adjudicator's `calibration` and the first `examples`
    (`rs.pipeline.sample.adjudicate`); None when off."""


@dataclass(frozen=True)
class RunTimes:
    clean_seconds: float
    sample_seconds: float
    sampling_engine_calls: int
    judge_engine_calls: int


@dataclass(frozen=True)
class FamilyReport:
    """Everything a card says of a family, measured by the build (`stats.json`)."""

    family: str
    source: dict[str, Any]
    """Dataset, config, split and revision the data was read from."""
    model: dict[str, Any]
    engine: dict[str, Any]
    sampling: dict[str, Any]
    prompts: PromptSummary
    verifier: VerifierSummary
    judge: JudgeSummary
    cleaning: CleaningSummary
    totals: Totals
    splits: dict[str, SplitSummary]
    limit: int | None
    versions: dict[str, str | None]
    lengths: dict[str, Lengths]
    """`accepted` / `rejected` -> how long those answers ran (with a recovery pass: the greedy answers, on the side the
    greedy pass put them; a recovered item's greedy answer is on the rejected side)."""
    endings: Endings | None = None
    """How the answers ended; None in a report written before rs counted it."""
    run: RunTimes | None = None
    """Timings and engine calls of this run; not published (they differ from run to run)."""
    recovery: RecoverySummary | None = None
    """The recovery pass; None without one."""
    provenance: dict[str, Any] | None = None
    """What rebuilding the family needs (`rs.pipeline.write.provenance`); None in a report written before rs recorded it."""
    question_types: dict[str, Any] | None = None
    """With `question_types`: `types` (each type's counts and rates, `rs.pipeline.route.TypeCounts`) and `most_failed`."""
    filter: dict[str, Any] | None = None
    """What `rs refilter` changed of the family's routing; None: the run's own routing."""
    blind: dict[str, Any] | None = None
    """With `blind:`, the no-image pass (`rs.pipeline.write.stats.blind_summary`): questions marked right without the
    image, overall and per question type."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (`stats.json`); without `run` when there is none (a published copy), without `recovery` for a
        family that has none."""
        out = dataclasses.asdict(self)
        for name in ("run", "recovery", "provenance", "question_types", "filter", "blind"):
            if getattr(self, name) is None:
                del out[name]
        return out

    def published(self) -> FamilyReport:
        """The copy a published repo keeps: everything but the run's own timings."""
        return dataclasses.replace(self, run=None)

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "stats.json") -> FamilyReport:
        """Read a `to_dict` back; a report of another shape raises `ReportError` saying to rebuild."""
        try:
            return cls(
                **{
                    **data,
                    "prompts": PromptSummary(**data["prompts"]),
                    "verifier": VerifierSummary(**data["verifier"]),
                    "judge": JudgeSummary(**data["judge"]),
                    "cleaning": CleaningSummary(**data["cleaning"]),
                    "totals": Totals(**data["totals"]),
                    "splits": {name: SplitSummary(**split) for name, split in data["splits"].items()},
                    "lengths": {side: Lengths(**lengths) for side, lengths in data["lengths"].items()},
                    "endings": Endings(**data["endings"]) if data.get("endings") else None,
                    "run": RunTimes(**data["run"]) if data.get("run") else None,
                    "recovery": RecoverySummary(**data["recovery"]) if data.get("recovery") else None,
                }
            )
        except (KeyError, TypeError, AttributeError) as err:
            family = data.get("family", "the family") if isinstance(data, dict) else "the family"
            raise ReportError(
                f"{where} was not written by this version of rs ({type(err).__name__}: {err}); rebuild {family} "
                f"(`{invocation.command('publish', str(family))}` without --cards-only)"
            ) from None
