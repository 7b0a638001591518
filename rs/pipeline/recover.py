"""Stage 3, recover (opt-in, `recovery:`): the rejected questions sampled again above temperature 0, and their pass rates.

After the greedy pass and its calibration, every item the routing rejects with a final answer (and,
with `cut_off`, those whose answer had none) is answered `k` more times: one request per item with
vLLM's `n` (the prompt and the image processed once), sample `i` seeded `seed + i`, each sample its
own cache entry, so a re-run or a raised `k` sends only the samples the cache lacks. Every sample is
read, verified and, when the verifier cannot decide, judged exactly as the greedy answer was, under
the greedy pass's calibration. With `difficulty.samples`, accepted items are sampled too, so that
every question gets a measured pass rate.

The stage writes one record per sampled item, in item order, with all its samples (`RECOVERY`), into
`build/<FAMILY>/recovery/` (`recovery.json` its report); routing (`rs.pipeline.route`) then accepts an item one of whose
samples it accepts (`accepted_by: recovery`).

With `recovery.suspects` (the default), the rejections whose greedy answer and every sample agree on one value the
reference is not near are then adjudicated by the same model shown the image, after its calibration
(`rs.pipeline.sample.adjudicate`), into `adjudication-*.parquet` beside the samples: routing rejects those it marks as
`suspect_reference`.
"""

from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Iterator

from rs.engines.base import Generation, Request, SamplingSettings
from rs.engines.generation_cache import GenerationCache
from rs.engines.machine import made_on_id, note
from rs.engines.ordered import InOrder
from rs.families.schema import FamilyConfig, RecoveryConfig
from rs.pipeline import route
from rs.pipeline.route import decide
from rs.pipeline.sample import SampleReport, SamplingPass, Verification, adjudicate
from rs.pipeline.sample.adjudicate import (
    ADJUDICATION,
    AdjudicationReport,
    AdjudicationSampler,
    Adjudicator,
    Dispute,
    adjudication_record,
    against,
    agreeing_value,
)
from rs.pipeline.sample.adjudicate import calibrate as calibrate_adjudicator
from rs.pipeline.sample.judge import JudgeCase
from rs.pipeline.sample.requests import sampling_request
from rs.pipeline.sample.stage import answered, sampling_pass
from rs.pipeline.stage import Store, StoredStage, current, fingerprint, plain, remove
from rs.records import RECOVERY, QAItem, Row, SampleRecord
from rs.store import ParquetStreamWriter, read_clean_rows, read_records
from rs.util.progress import progress

if TYPE_CHECKING:
    from rs.context import BuildContext

VERSION = "4"
"""What the recovery pass records of an item's samples: bump when a change records or judges some sample otherwise
(`rs.pipeline.versions`; 3: a judge that sees the image is asked about a sample with it; 4: each sample names the
machine that made it, `made_on`)."""

RETRIED_REASONS = ("wrong_answer", "judge_overruled", "judge_unsure", "judge_blocked", "judge_not_asked")
"""Rejections with a final answer: the recovery pass samples them again (`judge_not_asked` only in `rs refilter`'s
re-read, where the judge was not asked: whatever it would say but CORRECT, the item is sampled)."""
CUT_OFF_REASONS = ("no_final_answer", "degenerate_repetition")
"""Rejections without one: sampled again only with `recovery.cut_off`."""
SAMPLED_FOR = ("rejected", "cut_off", "difficulty")
"""Why an item is sampled (`samples_for`), in the order the cards list them."""


def recovery_settings(config: FamilyConfig, sampling: SamplingSettings) -> SamplingSettings:
    """The settings every sample is drawn with: the greedy pass's, at the recovery's temperature, top_p, seed and budget."""
    r = config.recovery
    assert r is not None
    return replace(
        sampling, temperature=r.temperature, top_p=r.top_p, seed=r.seed, max_tokens=r.max_tokens or sampling.max_tokens
    )


def samples_for(greedy: dict[str, Any], promotes: bool, recovery: RecoveryConfig) -> tuple[str | None, int]:
    """Why and how often an item is sampled: (`rejected` / `cut_off` / `difficulty`, k), or (None, 0)."""
    decision = decide(greedy, promotes)
    if decision.accepted:
        return ("difficulty", recovery.difficulty.samples) if recovery.difficulty.samples else (None, 0)
    if decision.reason in RETRIED_REASONS:
        return "rejected", recovery.samples
    if recovery.cut_off and decision.reason in CUT_OFF_REASONS:
        return "cut_off", recovery.samples
    return None, 0


DECIDING = ("row", "key", "error", "ending", "final", "verified", "judge", "contradicts")
"""The items store's columns that decide whether the pass samples an item (`samples_for`, `rs.pipeline.route.decide`)."""


def walk(
    rows: Iterable[Row], items: Iterator[dict[str, Any]], promotes: bool, recovery: RecoveryConfig
) -> Iterator[tuple[int, Row, QAItem, dict[str, Any], str | None, int]]:
    """Every item, in item order, with its greedy record and why and how often it is sampled (`samples_for`):
    (row index, row, item, greedy record, why or None, k).

    `items`: the greedy pass's records (their `DECIDING` columns at least), beside their cleaned `rows`."""
    for index, row in enumerate(rows):
        for qa in row.qa:
            greedy = next(items, None)
            if greedy is None or greedy["row"] != index or greedy["key"] != qa.key:
                raise RuntimeError(
                    f"the items store does not match the cleaned rows at row {index}; rebuild the family"
                )
            why, k = samples_for(greedy, promotes, recovery)
            yield index, row, qa, greedy, why, k


def to_sample(
    rows: Iterable[Row], items: Iterator[dict[str, Any]], promotes: bool, recovery: RecoveryConfig
) -> Iterator[tuple[int, Row, QAItem, str, int]]:
    """The items the pass samples, in item order: (row index, row, item, why, k) (`walk`)."""
    for index, row, qa, _, why, k in walk(rows, items, promotes, recovery):
        if why is not None:
            yield index, row, qa, why, k


def sample_record(sample: int, seed: int, v: Verification) -> SampleRecord:
    """The recovery store's record of one verified sample, its judge's label still to come."""
    gen = v.generation
    return SampleRecord(
        sample=sample,
        seed=seed,
        text=gen.text,
        reasoning=gen.reasoning,
        final=gen.answer,
        finish_reason=gen.finish_reason,
        ending=gen.ending,
        completion_tokens=gen.completion_tokens,
        thinking_tokens=gen.thinking_tokens,
        error=gen.error,
        verified=v.verified,
        contradicts=v.contradicts,
        judge=None,
        reasoning_agrees=v.reasoning_agrees,
        made_on=made_on_id(gen),
    )


def sample_case(v: Verification) -> JudgeCase | None:
    """What the judge is asked of a sample: only an undecided one; a sample the verifier knows is wrong stays wrong
    whatever the verdict."""
    return v.case if not v.contradicts else None


@dataclass
class RecoveryReport:
    """What the recovery pass did (`recovery.json`)."""

    fingerprint: str | None = None
    items: Counter[str] = field(default_factory=Counter)
    """Items sampled, by why: `rejected` (a wrong final answer), `cut_off` (none), `difficulty` (accepted)."""
    samples: int = 0
    verified: int = 0
    contradicted: int = 0
    undecided: int = 0
    no_final_answer: int = 0
    engine_errors: int = 0
    endings: Counter[str] = field(default_factory=Counter)
    judged: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    sampling_requests: int = 0
    sampling_engine_calls: int = 0
    """Samples the engine drew (the rest came from the cache); requests carry several (`n`)."""
    judge_requests: int = 0
    judge_engine_calls: int = 0
    seconds: float = 0.0
    inputs: dict[str, Any] | None = None
    """What the pass's fingerprint was computed from (`recovery_inputs`), for `rs refilter`."""
    machines: dict[str, Any] = field(default_factory=dict)
    """The records of the machines that made the samples, by id (as `rs.pipeline.sample.SampleReport.machines`)."""
    adjudication: AdjudicationReport | None = None
    """The suspect references (`recovery.suspects`): candidates, verdicts, the adjudicator's calibration; None when off."""

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        for name in ("items", "endings", "verdicts", "machines"):
            d[name] = dict(sorted(getattr(self, name).items()))
        d["adjudication"] = self.adjudication.to_dict() if self.adjudication is not None else None
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecoveryReport:
        adjudication = data.get("adjudication")
        return cls(
            **{
                **data,
                **{k: Counter(data[k]) for k in ("items", "endings", "verdicts")},
                "adjudication": AdjudicationReport.from_dict(adjudication) if adjudication else None,
            }
        )


class _Draws:
    """One item's samples on their way: the request, then a record per sample."""

    __slots__ = ("row", "item", "prompt", "why", "k", "records", "greedy", "image_sha256", "at", "image")

    def __init__(
        self,
        row: int,
        item: QAItem,
        prompt: str,
        why: str,
        k: int,
        greedy: str | None,
        image_sha256: str,
        at: int,
        image: bytes | None = None,
    ):
        self.row, self.item, self.prompt, self.why, self.k = row, item, prompt, why, k
        self.greedy, self.image_sha256, self.at, self.image = greedy, image_sha256, at, image
        """The greedy answer's final answer; the image's hash; the item's position in the items store; the image's
        bytes (held only for a judge that sees the image, `judge.sees_image`)."""
        self.records: dict[int, SampleRecord] = {}


class RecoveryPass:
    """The recover stage's work: samples the items the greedy pass rejected; writes one record per sampled item with its
    samples."""

    def __init__(self, config: FamilyConfig, greedy: SamplingPass, *, promotes: bool, progress: bool = True):
        """`greedy`: the family's sampling pass (its engines, cache, verifier, grader and judge: the samples are read
        and judged as the greedy answers were); `promotes`: whether the greedy pass's calibration lets the judge promote."""
        if config.recovery is None:
            raise ValueError("the family has no recovery block")
        self.config, self.recovery, self.greedy, self.promotes = config, config.recovery, greedy, promotes
        self.settings = recovery_settings(config, greedy.settings)
        self.report = RecoveryReport()
        self.progress = progress
        self.adjudicator: Adjudicator | None = None
        if self.recovery.suspects:
            runner = greedy.runner
            self.adjudicator = Adjudicator(
                runner,
                reasoning=config.model.reasoning,
                chat_template_kwargs=greedy.settings.chat_template_kwargs,
                tokenizer=getattr(runner.engine, "tokenizer", None),
            )
        self._disputes = AdjudicationSampler(greedy.grader, greedy.calibration, config.judge.calibration_samples)
        self._candidates: list[Dispute] = []

    def draws(
        self, rows: Iterable[Row], items: Iterator[dict[str, Any]], *, offer: bool = False
    ) -> Iterator[tuple[int, QAItem, str, int, Request, str | None, int]]:
        """The items the pass samples (`to_sample`), in item order: (row index, item, why, k, request of its k samples,
        the greedy final answer, the item's position among all items); rows read without their image bytes key the same.
        With `offer` (and an adjudicator), the questions the verifier accepted greedily are offered to the adjudicator's
        calibration cases."""
        instructions, offering = self.greedy.instructions, offer and self.adjudicator is not None
        for at, (index, row, qa, greedy, why, k) in enumerate(walk(rows, items, self.promotes, self.recovery)):
            if offering and greedy["verified"] and greedy["error"] is None:
                prompt = sampling_request(qa, instructions, row.image_sha256).prompt
                self._disputes.offer_accepted(index, at, prompt, qa, greedy["final"], row.image_sha256)
            if why is not None:
                request = sampling_request(qa, instructions, row.image_sha256, row.image)
                yield index, qa, why, k, request, greedy["final"], at

    def sample_requests(self, rows: Iterable[Row], items: Iterator[dict[str, Any]]) -> Iterator[tuple[str, Request]]:
        """The requests `run` sends for the samples, one a sample, with their cache keys."""
        for _, _, _, k, request, _, _ in self.draws(rows, items):
            for i in range(k):
                one = request.one(i)
                yield self.greedy.runner.key(one, self.settings), one

    def judge_requests(self, rows: Iterable[Row], items: Iterator[dict[str, Any]]) -> Iterator[tuple[str, Request]]:
        """The judge's requests about the cached samples, with their cache keys: each sample read from the cache is
        verified as `run` verifies it. Every sample must be cached: one that is not raises."""
        asked = (
            (self.greedy.runner.key(one, self.settings), one, item)
            for _, item, _, k, request, _, _ in self.draws(rows, items)
            for one in map(request.one, range(k))
        )
        verified = self.greedy.cached(asked, self.settings, calibrating=False)
        yield from self.greedy.judge_keyed(filter(None, map(self.verdict_request, verified)))

    def verdict_request(self, v: Verification) -> Request | None:
        """The judge's request about a verified sample (`sample_case`), or None when the judge is not asked about it."""
        judge, case = self.greedy.judge, sample_case(v)
        return judge.request(case) if case is not None and judge is not None else None

    def collect_disputes(self, rows: Iterable[Row], items: Iterator[dict[str, Any]]) -> None:
        """Find the candidates and the calibration cases from the cached samples, as `run` finds them (each sample read
        from the cache is verified as `run` verifies it; every sample must be cached); rows may be read without images."""
        drawn = self.draws(rows, items, offer=True)
        while block := list(islice(drawn, 256)):
            asked = [
                (self.greedy.runner.key(one, self.settings), one, item)
                for _, item, _, k, request, _, _ in block
                for one in map(request.one, range(k))
            ]
            verified = self.greedy.cached(asked, self.settings, calibrating=False)
            for index, item, why, k, request, greedy, at in block:
                draws = _Draws(index, item, request.prompt, why, k, greedy, request.image_hash(), at)
                for i in range(k):
                    draws.records[i] = sample_record(i, self.settings.seed + i, next(verified))
                self._complete(draws)

    def adjudication_requests(
        self, rows: Iterable[Row], items: Iterator[dict[str, Any]]
    ) -> Iterator[tuple[str, Request]]:
        """The adjudicator's requests (the candidates', then with them the calibration cases', in `Dispute.order`), with
        their cache keys (`collect_disputes`)."""
        if self.adjudicator is None:
            return
        self.collect_disputes(rows, items)
        yield from self.adjudicator.keyed(self._disputes_in_order())

    def disputes_with_images(self, rows: Iterable[Row]) -> Iterator[Dispute]:
        """The disputes found (`run`'s samples, or `collect_disputes`), in the order they are asked, each with its image
        read from `rows` (the cleaned rows, in order, with their image bytes)."""
        pending = iter(self._disputes_in_order())
        dispute = next(pending, None)
        for index, row in enumerate(rows):
            while dispute is not None and dispute.row == index:
                yield replace(dispute, image=row.image)
                dispute = next(pending, None)
        if dispute is not None:
            raise RuntimeError(f"row {dispute.row} of a dispute is not in the cleaned rows; rebuild the family")

    def _units(
        self, rows: Iterable[Row], items: Iterator[dict[str, Any]]
    ) -> Iterator[tuple[_Draws, list[tuple[int, Request]]]]:
        for index, qa, why, k, request, greedy, at in self.draws(rows, items, offer=True):
            self.report.items[why] += 1
            judge = self.greedy.judge
            image = request.image if judge is not None and judge.sees_image else None
            draws = _Draws(index, qa, request.prompt, why, k, greedy, request.image_hash(), at, image)
            yield draws, [(i, request.one(i)) for i in range(k)]

    def _complete(self, draws: _Draws) -> None:
        """An item whose k samples are all in: a candidate (`agreeing_value`), or a calibration case when a sample the
        verifier accepted recovered it from a certainly wrong greedy answer."""
        if self.adjudicator is None or draws.why != "rejected":
            return
        samples = [draws.records[i] for i in range(draws.k)]
        item, references = draws.item, draws.item.all_references()
        finals = [s.final if s.error is None else None for s in samples]
        agreeing = agreeing_value(self.greedy.grader, item, references, draws.greedy, finals)
        if agreeing is not None:
            self._candidates.append(
                Dispute(draws.row, draws.at, item.key, draws.prompt, item.answer, agreeing, draws.image_sha256)
            )
        elif any(s.verified for s in samples):
            self._disputes.offer_recovered(draws.row, draws.at, draws.prompt, item, draws.greedy, draws.image_sha256)

    def _disputes_in_order(self) -> list[Dispute]:
        """The candidates and the calibration cases, in the order they are asked (`Dispute.order`)."""
        return sorted(self._candidates + self._disputes.cases(), key=lambda d: d.order)

    def run(
        self,
        rows: Iterable[Row],
        items: Iterator[dict[str, Any]],
        out_dir: str | Path,
        *,
        total: int | None = None,
        images: Callable[[], Iterable[Row]] | None = None,
    ) -> RecoveryReport:
        """Sample every item the greedy pass rejected (`items`: its records, in item order, beside their cleaned `rows`);
        then, with an adjudicator, adjudicate the candidates and the calibration cases, their images read again from
        `images()` (the cleaned rows, in order), into `adjudication-*.parquet` beside the samples."""
        start = time.perf_counter()
        runner, judge = self.greedy.runner, self.greedy.judge
        streams: list[Any] = [runner.stream(self.settings)]
        answered: list[Any] = [self._answered]
        if judge is not None:
            streams.append(judge.runner.stream(judge.settings))
            answered.append(self._judged)
        calls = (
            runner.stats.requests,
            runner.stats.engine_calls,
            *((judge.runner.stats.requests, judge.runner.stats.engine_calls) if judge else (0, 0)),
        )
        core = InOrder(streams, answered, batch=max(1, self.config.engine.batch_size // max(1, self.recovery.samples)))
        with (
            ParquetStreamWriter(out_dir, "recovery", RECOVERY, group_rows=2_000, group_bytes=32 << 20) as writer,
            progress(total, "recovering", unit="item", enabled=self.progress) as bar,
        ):
            for draws in core.run(self._units(rows, items)):
                samples = [vars(draws.records[i]) for i in range(draws.k)]
                writer.write(
                    {"row": draws.row, "key": draws.item.key, "why": draws.why, "k": draws.k, "samples": samples},
                    size=sum(len(r["text"]) for r in samples),
                )
                bar.update()
        self.report.sampling_requests = runner.stats.requests - calls[0]
        self.report.sampling_engine_calls = runner.stats.engine_calls - calls[1]
        if judge is not None:
            self.report.judge_requests = judge.runner.stats.requests - calls[2]
            self.report.judge_engine_calls = judge.runner.stats.engine_calls - calls[3]
        if self.adjudicator is not None and images is not None:  # after the samples' counts: it uses the same runner
            self.report.adjudication = self._adjudicate(images(), out_dir)
        self.report.seconds = time.perf_counter() - start
        return self.report

    def _adjudicate(self, rows: Iterable[Row], out_dir: str | Path) -> AdjudicationReport:
        """Ask the adjudicator about every dispute, with its image; calibrate it; write the candidates' records."""
        adjudicator = self.adjudicator
        assert adjudicator is not None
        report, runner = AdjudicationReport(), adjudicator.runner
        calls = (runner.stats.requests, runner.stats.engine_calls)
        candidates: list[tuple[Dispute, list[str]]] = []
        cases: list[tuple[Dispute, list[str]]] = []
        for dispute, sides in adjudicator.verdicts(self.disputes_with_images(rows)):
            (cases if dispute.truth is not None else candidates).append((replace(dispute, image=None), sides))
        calibration = calibrate_adjudicator(cases, self.config.judge)
        verdicts: Counter[str] = Counter()
        with ParquetStreamWriter(out_dir, "adjudication", ADJUDICATION) as writer:
            for dispute, sides in candidates:
                marked = against(sides)
                verdicts.update(sides)
                report.against += marked
                report.suspects += marked and calibration.passes
                writer.write(adjudication_record(dispute, sides, calibration.passes))
        report.candidates, report.calibration, report.verdicts = len(candidates), calibration, dict(verdicts)
        report.requests = runner.stats.requests - calls[0]
        report.engine_calls = runner.stats.engine_calls - calls[1]
        return report

    def _answered(self, draws: _Draws, sample: int, gen: Generation) -> list[tuple[int, Request]]:
        asked = Request(
            prompt=draws.prompt, image=draws.image, image_sha256=draws.image_sha256, item_key=draws.item.key
        )
        v = self.greedy.verify(draws.item, asked, gen, calibrating=False)
        gen, report = v.generation, self.report
        answered = gen.error is None and gen.answer is not None
        report.samples += 1
        report.verified += v.verified
        report.contradicted += v.contradicts
        report.undecided += answered and not v.verified and not v.contradicts
        report.engine_errors += gen.error is not None
        report.no_final_answer += gen.error is None and gen.answer is None and gen.ending != "repetition"
        report.endings[gen.ending] += 1
        draws.records[sample] = sample_record(sample, self.settings.seed + sample, v)
        note(report.machines, gen)
        if len(draws.records) == draws.k:
            self._complete(draws)
        request = self.verdict_request(v)
        return [(sample, request)] if request is not None else []

    def _judged(self, draws: _Draws, sample: int, generation: Generation) -> list[Any]:
        judge = self.greedy.judge
        assert judge is not None
        label, _ = judge.verdict(generation)
        draws.records[sample].judge = label
        self.report.judged += 1
        self.report.verdicts[label] += 1
        return []


def recovery_inputs(ctx: BuildContext, sampled: SampleReport) -> dict[str, Any]:
    """The recovery pass's results depend on the greedy pass (its items and calibration) and the recovery block."""
    recovery = ctx.family.config.recovery
    return plain(
        {
            "sample": sampled.fingerprint,
            "promotes": sampled.promotes,
            "recovery": asdict(recovery) if recovery else None,
            "versions": {"recovery": VERSION, "route": route.VERSION, "adjudicate": adjudicate.VERSION},
            "judge": asdict(ctx.family.config.judge) if recovery and recovery.suspects else None,
        }
    )


class RecoverStage(StoredStage[RecoveryReport | None]):
    """(opt-in) The questions the greedy pass rejected sampled again above temperature 0; None without a `recovery:` block."""

    name: ClassVar[str] = "recover"
    store: ClassVar[Store[RecoveryReport]] = Store(
        "recovery", "recovery_report", "the recovery store", "the generation cache", RecoveryReport.from_dict
    )

    def __init__(self, sampled: SampleReport):
        """`sampled`: the sample stage's report (its fingerprint, and whether its calibration lets the judge promote)."""
        self.sampled = sampled

    def fingerprint(self, ctx: BuildContext) -> str | None:
        """None without a `recovery:` block: nothing to keep."""
        return fingerprint(recovery_inputs(ctx, self.sampled)) if ctx.family.config.recovery is not None else None

    def requests(self, ctx: BuildContext) -> Iterator[tuple[str, Request]]:
        """Every sample's request, then, once the cache holds every sample, the judge's (about the samples the verifier
        can neither accept nor know wrong)."""
        if ctx.family.config.recovery is None:
            return
        with ctx.passes(), GenerationCache(ctx.cache_path) as cache:
            recovery = self._pass(ctx, cache, "requests", progress=False)
            yield from recovery.sample_requests(*self._stores(ctx, images=False))
            if not answered(recovery.sample_requests(*self._stores(ctx, images=False)), cache, recovery.settings):
                return
            if recovery.greedy.judge is not None:
                yield from recovery.judge_requests(*self._stores(ctx, images=False))
            yield from recovery.adjudication_requests(*self._stores(ctx, images=False))

    @contextmanager
    def hold(self, ctx: BuildContext) -> Iterator[None]:
        """The build's lock and the engines' scope (the greedy pass's engines, when it ran in the same scope)."""
        with ctx.lock(), ctx.passes():
            yield

    def run(self, ctx: BuildContext) -> RecoveryReport | None:
        """Sample the items the greedy pass rejected into `recovery.tmp` (the build's lock and the engines' scope held);
        without a `recovery:` block, an old recovery store is removed (it no longer describes the build)."""
        paths = ctx.paths
        if ctx.family.config.recovery is None:
            remove(paths.recovery)
            paths.recovery_report.unlink(missing_ok=True)
            return None
        with GenerationCache(ctx.cache_path) as cache:
            report = self._pass(ctx, cache, "recovery", progress=ctx.progress).run(
                *self._stores(ctx), self.store.tmp(paths), images=lambda: read_clean_rows(paths.clean)
            )
        report.inputs = recovery_inputs(ctx, self.sampled)
        return report

    def kept(self, ctx: BuildContext, report: RecoveryReport | None) -> str:
        assert report is not None
        return f"{ctx.family.name}'s recovery pass ({report.samples:,} samples in {ctx.paths.recovery})"

    def _pass(self, ctx: BuildContext, cache: GenerationCache, purpose: str, *, progress: bool) -> RecoveryPass:
        greedy = sampling_pass(ctx, cache, *ctx.engines(purpose))
        return RecoveryPass(ctx.family.config, greedy, promotes=self.sampled.promotes, progress=progress)

    @staticmethod
    def _stores(ctx: BuildContext, *, images: bool = True) -> tuple[Iterator[Row], Iterator[dict[str, Any]]]:
        """The cleaned rows and the greedy pass's records (their `DECIDING` columns) the pass reads."""
        return read_clean_rows(ctx.paths.clean, images=images), read_records(
            ctx.paths.items, "items", columns=list(DECIDING)
        )


def current_recovery_report(ctx: BuildContext, sampled: SampleReport) -> RecoveryReport | None:
    """The recovery report when it is current for `sampled`; None when the family has none or it must run."""
    return current(RecoverStage(sampled), ctx)
