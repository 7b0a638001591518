"""The suspect references re-derived by `rs refilter`'s re-read, with no engine (`rs.pipeline.sample.adjudicate`).

A reader change may change which rejections are candidates (their answers agree on a value the reference is not near)
and which questions are the adjudicator's calibration cases (the accepted ones, the recovered ones). So the re-read finds
them again exactly as the recover stage does (`rs.pipeline.recover.RecoveryPass`: the questions in item order, graded by
the reader now), and takes the adjudicator's two verdicts on each from the generation cache, under the keys the recover
stage asked them with (the sampler identity the run recorded, the adjudicator's settings, the image's hash, the prompt).
The calibration is measured again on them and gates the marks as in the run.

What the run never asked (a new candidate, a new calibration case) cannot be asked without the model. Where that could
change a mark (a candidate without its verdicts, or a candidate sided against its reference while the calibration lacks
cases), the re-read refuses, naming how many and that `rs publish` asks them: publishing such a question as
`wrong_answer` would call a reference the model may have shown wrong the model's mistake. Where it cannot (no candidate
is or could be sided against), the re-read goes on, its adjudicator blocked for the missing cases, saying so.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from rs.context import BuildContext, BuildPaths
from rs.engines.base import Generation
from rs.engines.cached_engine import key_function
from rs.engines.factory import sampling_settings
from rs.engines.generation_cache import GenerationCache
from rs.errors import RsError
from rs.families.schema import FamilyConfig
from rs.pipeline.sample import Reader
from rs.pipeline.sample.adjudicate import (
    ADJUDICATION,
    AdjudicationCalibration,
    AdjudicationReport,
    AdjudicationSampler,
    Adjudicator,
    Dispute,
    adjudication_record,
    agreeing_value,
    calibrate,
)
from rs.pipeline.sample.calibration import CalibrationSampler
from rs.pipeline.sample.stage import vocabulary_of
from rs.records import QAItem
from rs.store import ParquetStreamWriter, qa_item


class Unadjudicated(RsError):
    """Candidates (or calibration cases) the run's adjudicator was never asked about, where their verdicts could mark one."""


@dataclass
class Readjudicated:
    """What the re-read's adjudication made: the report (`recovery.json`'s `adjudication`) and each candidate's record,
    by its position among the items."""

    report: AdjudicationReport
    records: dict[int, dict[str, Any]]


class Readjudication:
    """Collects the candidates and the calibration cases as the re-read's items stream past, then adjudicates them from
    the generation cache."""

    def __init__(
        self,
        config: FamilyConfig,
        reader: Reader,
        cache: GenerationCache | None,
        identity: str | None,
        problem: str | None,
    ):
        """`cache`, `identity`: the run's generation cache and sampler identity (`rs.refilter.reread._Cache`); `problem`:
        why the cache cannot be read (then nothing is found in it)."""
        assert config.recovery is not None
        self.config, self.grader, self.k = config, reader.grader, config.recovery.samples
        self.cache, self.identity, self.problem = cache, identity, problem
        settings = sampling_settings(config)
        self.adjudicator: Adjudicator | None = None
        try:  # a vLLM reasoning parser needs the model's tokenizer, which refilter does not load
            self.adjudicator = Adjudicator(
                None,  # type: ignore[arg-type]  # keyed and read only: nothing is sent
                reasoning=config.model.reasoning,
                chat_template_kwargs=settings.chat_template_kwargs,
            )
            self.adjudicator.reasoning.check()
        except RsError as err:
            self.adjudicator = None
            self.problem = (
                self.problem or f"the adjudicator's replies cannot be read without the model's tokenizer ({err})"
            )
        letters = config.cleaning.step("multiple_choice").letters
        near = CalibrationSampler(
            reader.verifier, config.judge.calibration_samples, letters=letters, grader=reader.grader
        )
        self.sampler = AdjudicationSampler(reader.grader, near, config.judge.calibration_samples)
        self.candidates: list[Dispute] = []

    def offer(
        self, at: int, qa: QAItem, image_sha256: str, item: dict[str, Any], draws: dict[str, Any] | None
    ) -> bool:
        """One re-read item (`item`, graded again; `draws`, its recovery record or None) at position `at`: offered to the
        calibration cases, or a candidate (then True: its decision waits for the adjudication) as
        `RecoveryPass.draws` and `RecoveryPass._complete` find them. A question short of its samples (some neither
        stored nor cached) is neither: a run would draw them first (`rs publish`)."""
        row, prompt = item["row"], item["prompt"]
        if item["verified"] and item["error"] is None:
            self.sampler.offer_accepted(row, at, prompt, qa, item["final"], image_sha256)
        if draws is None or draws["why"] != "rejected" or len(draws["samples"]) < self.k:
            return False
        finals = [s["final"] if s["error"] is None else None for s in draws["samples"]]
        agreeing = agreeing_value(self.grader, qa, qa.all_references(), item["final"], finals)
        if agreeing is not None:
            self.candidates.append(Dispute(row, at, qa.key, prompt, qa.answer, agreeing, image_sha256))
            return True
        if any(s["verified"] for s in draws["samples"]):
            self.sampler.offer_recovered(row, at, prompt, qa, item["final"], image_sha256)
        return False

    def adjudicate(self, out_dir: Path, family: str) -> Readjudicated:
        """The verdicts from the cache, the calibration measured again, the candidates' records written into `out_dir`
        (`adjudication-*.parquet`, in item order); `Unadjudicated` where a missing verdict could change a mark."""
        cases = self.sampler.cases()
        disputes = sorted(self.candidates + cases, key=lambda d: d.order)
        sides = self._sides(disputes)
        lacking_candidates = [d for d in self.candidates if d.order not in sides]
        lacking_cases = [d for d in cases if d.order not in sides]
        against_any = any(all(s == "other" for s in sides[d.order]) for d in self.candidates if d.order in sides)
        if lacking_candidates or (lacking_cases and against_any):
            raise Unadjudicated(self._refusal(family, lacking_candidates, lacking_cases))
        calibration = calibrate([(d, sides[d.order]) for d in cases if d.order in sides], self.config.judge)
        if lacking_cases:
            calibration = _blocked(calibration, len(lacking_cases), len(cases), self.problem)
        report = AdjudicationReport(
            candidates=len(self.candidates), requests=2 * len(disputes), calibration=calibration
        )
        verdicts: Counter[str] = Counter()
        records: dict[int, dict[str, Any]] = {}
        with ParquetStreamWriter(out_dir, "adjudication", ADJUDICATION) as writer:
            for dispute in self.candidates:
                made = adjudication_record(dispute, sides[dispute.order], calibration.passes)
                verdicts.update(made["verdicts"])
                report.against += made["against"]
                report.suspects += made["suspect"]
                records[dispute.at] = made
                writer.write(made)
        report.verdicts = dict(verdicts)
        return Readjudicated(report, records)

    def _sides(self, disputes: Sequence[Dispute]) -> dict[tuple[int, int, str], list[str]]:
        """Each dispute's two verdicts found in the cache, by `Dispute.order`; one lacking either is left out."""
        adjudicator = self.adjudicator
        if self.cache is None or adjudicator is None or not self.identity or not disputes:
            return {}
        key = key_function(self.identity, adjudicator.settings)
        asked = {d.order: [key(r.image_hash(), r.prompt) for r in adjudicator.requests(d)] for d in disputes}
        found: dict[str, Generation] = self.cache.get_many(
            [k for keys in asked.values() for k in keys], settings=adjudicator.settings
        )
        return {
            order: [adjudicator.side(i, found[k]) for i, k in enumerate(keys)]
            for order, keys in asked.items()
            if all(k in found for k in keys)
        }

    def _refusal(self, family: str, candidates: list[Dispute], cases: list[Dispute]) -> str:
        named = ", ".join(d.key for d in candidates[:5]) + (" ..." if len(candidates) > 5 else "")
        lacking = []
        if candidates:
            lacking.append(f"{len(candidates)} suspect-reference candidate(s) ({named})")
        if cases:
            lacking.append(f"{len(cases)} of the adjudicator's calibration cases")
        why = self.problem or "the generation cache does not hold the adjudicator's verdicts on them"
        return (
            f"{family}: under the reader now, " + " and ".join(lacking) + " were never adjudicated by the run "
            f"({why}). Without the model they cannot be, and a candidate published as `wrong_answer` would call a "
            "reference the model may have shown wrong the model's mistake"
        )


def _blocked(
    calibration: AdjudicationCalibration, lacking: int, total: int, problem: str | None
) -> AdjudicationCalibration:
    """The calibration, blocked: `lacking` of its `total` cases were never asked (no candidate could be marked anyway);
    `problem`: why the cache could not be read, if it could not."""
    calibration.passes = False
    calibration.blocked_reason = (
        f"{lacking} of its {total} calibration cases under the reader now have no verdict the re-read could read "
        f"({problem or 'not in the generation cache'}); `rs publish` asks them"
    )
    return calibration


def restore(
    ctx: BuildContext,
    stores: Path,
    joined: Iterable[tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]],
    identity: str | None,
    cache_path: Path | None,
) -> AdjudicationReport:
    """The adjudication records of stores rebuilt from a samples repo (`rs.refilter.samples`), which publishes none:
    found again from `joined` (the rebuilt stores' items with their cleaned questions and samples, in order,
    `rs.refilter.reread._joined`) under the family's reader, their verdicts from the generation cache, into
    `stores/recovery`; `Unadjudicated` where that cannot be done."""
    config = ctx.family.config
    path = cache_path or ctx.cache_path
    problem = (
        None if path is not None and Path(path).is_file() else f"there is no generation cache at {path} (--cache)"
    )
    problem = problem or (None if identity else "the run recorded no engine identity (an older rs)")
    cache = GenerationCache(path) if problem is None else None
    try:
        reader = Reader(config, vocabulary_of(ctx.family, BuildPaths(stores)))
        suspects = Readjudication(config, reader, cache, identity, problem)
        for at, (cleaned, item, draws) in enumerate(joined):
            suspects.offer(at, qa_item(cleaned), cleaned["image_sha256"], item, draws)
        return suspects.adjudicate(stores / "recovery", ctx.family.name).report
    finally:
        if cache is not None:
            cache.close()
