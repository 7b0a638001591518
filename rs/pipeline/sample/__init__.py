"""Stage 2: every question answered by the VLM, verified, and the rejections re-examined by the judge.

Items stream from the cleaned rows into the engine (through the generation cache); each answer
is verified as it arrives, a verifier rejection with a final answer goes straight back into the
same engine as a judge request (also cached), and the records are written to the items store in
item order. The judge is then calibrated (`rs.pipeline.sample.calibration`) on
deterministic samples of the run's answers; only a judge that passes may promote, and never over
a rejection the verifier knows is certain (`Verifier.contradicts`).
Routing into the three splits happens later (`rs.pipeline.route`), from the items store and calibration.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from rs.answers import Grader, Vocabulary
from rs.engines.base import Engine, Generation, Request, SamplingSettings
from rs.engines.cached_engine import CachedEngine
from rs.engines.factory import sampling_settings
from rs.engines.generation_cache import CacheAnswerDamaged, GenerationCache
from rs.engines.machine import made_on_id, note
from rs.engines.ordered import InOrder
from rs.engines.reasoning import ReasoningFormat
from rs.families.schema import FamilyConfig
from rs.pipeline.sample.blind import BlindPass, BlindReport
from rs.pipeline.sample.blind import sample_settings as blind_sample_settings
from rs.pipeline.sample.calibration import (
    Answered,
    Calibration,
    CalibrationCases,
    CalibrationSampler,
    ImageSource,
    asked,
    calibrate,
    question_kind,
)
from rs.pipeline.sample.judge import Judge, JudgeCase, judgeable
from rs.pipeline.sample.requests import sampling_request
from rs.prompt import Instructions
from rs.records import ITEMS, ItemRecord, QAItem, Row
from rs.store import ParquetStreamWriter
from rs.util.progress import progress
from rs.verifiers import Verifier, get_verifier

logger = logging.getLogger(__name__)

VERSION = "7"
"""The stage's version: bump when a change of this stage records some answer otherwise, so an older report is re-run
(from the cache) rather than reused (`rs.pipeline.versions`; 2: certain rejections, hard negatives, the evidence gate; 3: a
literal family's answers read as written; 4: the accepted answers whose reasoning could not be compared are counted,
`reasoning_unchecked`; 5: the judge's cases carry the question's image, `judge.sees_image`; 6: the no-image pass, `blind:`;
7: each record names the machine that made its answer, `made_on`)."""


class _Slot:
    """One item on its way through the stage: its request, then its record (with, maybe, the judge's verdict)."""

    __slots__ = ("row", "item", "request", "record")

    def __init__(self, row: int, item: QAItem, request: Request):
        self.row, self.item, self.request = row, item, request
        self.record: ItemRecord


@dataclass
class SampleReport:
    """What the sampling stage did (`sample.json`): answers, verification, the judge and its calibration."""

    fingerprint: str | None = None
    """The configuration the stage ran under (`rs.pipeline.stage.ensure`); None for a shard or a pass run directly."""
    items: int = 0
    verified: int = 0
    contradicted: int = 0
    """Rejections the verifier knows are wrong: no judge verdict can promote them."""
    undecided: int = 0
    """Answers the verifier could not decide (neither accepted nor certainly wrong): the judge's."""
    reasoning_disagrees: int = 0
    """Accepted answers whose reasoning concludes another value of the answer's kind (`reasoning_agrees` False)."""
    reasoning_unchecked: int = 0
    """Accepted answers whose reasoning could not be compared with them (`reasoning_agrees` None: a free-text answer, no
    reasoning, or no value of the answer's kind stated in it): the card must not count them as checked."""
    judged: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    contradicted_verdicts: Counter[str] = field(default_factory=Counter)
    """The judge's verdicts on the contradicted rejections: a measurement on real negatives."""
    no_final_answer: int = 0
    """Answers with nothing to score: cut at `max_tokens` or the reasoning never closed (loops are counted apart)."""
    engine_errors: int = 0
    endings: Counter[str] = field(default_factory=Counter)
    """How each answer ended (`rs.engines.base.ENDINGS`): stop, length, repetition, thinking_budget, error."""
    loop_tokens_saved: int = 0
    """Tokens loop detection saved: for each answer it ended, what was left of its `max_tokens`."""
    budgeted_answered: int = 0
    """Answers whose reasoning the thinking budget cut that still gave a final answer."""
    multiple_choice_items: int = 0
    """Questions with options, asked with the family's multiple-choice instruction."""
    prompt_reasoning: Counter[str] = field(default_factory=Counter)
    """Where the rendered prompts left the reasoning (`open`, `closed`, `none`; `unknown` where the engine cannot tell)."""
    judge_prompt_reasoning: Counter[str] = field(default_factory=Counter)
    """The same for the judge's requests."""
    sampling_requests: int = 0
    sampling_engine_calls: int = 0
    judge_requests: int = 0
    judge_engine_calls: int = 0
    seconds: float = 0.0
    calibration: Calibration | None = None
    identities: dict[str, str | None] | None = None
    """The engines' cache identities (`rs.engines.cached_engine.identity_key`: `sampler`, `judge`): `rs refilter` finds this
    run's answers and verdicts in the generation cache with them, with no engine. None in a report of an older rs."""
    blind: BlindReport | None = None
    """The no-image pass (`blind:`, `rs.pipeline.sample.blind`); None when off."""
    machines: dict[str, Any] = field(default_factory=dict)
    """The records of the machines that made the items' answers and the no-image pass's, by id (`rs.engines.machine`):
    the provenance names them (`rs.pipeline.write.made_on`), and a samples repo carries them in its `rs/run.json`."""
    inputs: dict[str, Any] | None = None
    """What the stage's fingerprint was computed from (`rs.pipeline.sample.stage.sample_inputs`): `rs refilter` compares it with the
    family's settings now to tell a reader changed since the run (answers re-read) from answers that are not this
    family's any more (refused)."""

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("calibration", "blind")}
        # in a fixed order: verdicts arrive in the order the engine finishes them
        for name in (
            "verdicts",
            "contradicted_verdicts",
            "prompt_reasoning",
            "judge_prompt_reasoning",
            "endings",
            "machines",
        ):
            d[name] = dict(sorted(getattr(self, name).items()))
        d["calibration"] = self.calibration.to_dict() if self.calibration else None
        d["blind"] = self.blind.to_dict() if self.blind is not None else None
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SampleReport:
        calibration, blind = data.get("calibration"), data.get("blind")
        return cls(
            **{
                **data,
                "verdicts": Counter(data["verdicts"]),
                "contradicted_verdicts": Counter(data["contradicted_verdicts"]),
                "prompt_reasoning": Counter(data["prompt_reasoning"]),
                "judge_prompt_reasoning": Counter(data["judge_prompt_reasoning"]),
                "endings": Counter(data.get("endings") or {}),
                "calibration": Calibration.from_dict(calibration) if calibration else None,
                "blind": BlindReport.from_dict(blind) if blind else None,
            }
        )

    @property
    def promotes(self) -> bool:
        """Whether this run's judge passed calibration and may promote rejections."""
        return bool(self.calibration and self.calibration.promotes)


@dataclass(frozen=True)
class Verification:
    """What the verifier says of one answer."""

    generation: Generation
    """The answer as the family's reasoning format reads it (`rs.engines.reasoning`)."""
    references: list[str]
    verified: bool
    contradicts: bool
    """A rejection the verifier knows is wrong (a different number, option, yes/no)."""
    reasoning_agrees: bool | None
    """For an accepted answer: whether the reasoning's last value of its kind is the answer; None when not told."""
    case: JudgeCase | None
    """The judge case of a rejection with something to grade; None otherwise."""


def item_record(row: int, item: QAItem, request: Request, v: Verification) -> ItemRecord:
    """The items store's record of one verified answer, its judge's label still to come (`rs audit --replay` re-derives
    published rows with it, as the stage wrote them)."""
    gen = v.generation
    return ItemRecord(
        row=row,
        key=item.key,
        image_sha256=request.image_sha256,
        prompt=request.prompt,
        reference=item.answer,
        references=v.references,
        text=gen.text,
        reasoning=gen.reasoning,
        final=gen.answer,
        finish_reason=gen.finish_reason,
        prompt_tokens=gen.prompt_tokens,
        completion_tokens=gen.completion_tokens,
        model=gen.model,
        model_revision=gen.model_revision,
        error=gen.error,
        verified=v.verified,
        contradicts=v.contradicts,
        judge=None,
        prompt_reasoning=gen.prompt_reasoning,
        reasoning_agrees=v.reasoning_agrees,
        ending=gen.ending,
        thinking_tokens=gen.thinking_tokens,
        made_on=made_on_id(gen),
    )


class Reader:
    """What decides an answer's reader outcome (accepted, certain, undecided) and whether the judge is asked about it:
    the family's verifier and its answers' reading (`rs.answers`), with no engine. The sampling stage grades every
    answer with it; `rs refilter` grades the stored answers again with it when the reader changed since the run."""

    def __init__(self, config: FamilyConfig, vocabulary: Vocabulary | None = None):
        """`vocabulary`: the family's closed set of answers (`rs.pipeline.sample.stage.answer_vocabulary`); by default the one its
        `answers:` block writes, without the terms a closed set derives from the cleaned references."""
        self.verifier: Verifier = get_verifier(config.verifier.name, **config.verifier.params)
        self.grader = Grader(
            self.verifier,
            vocabulary if vocabulary is not None else config.answers.vocabulary(),
            literal=config.answers.literal,
        )

    def grade(
        self,
        item: QAItem,
        prompt: str,
        gen: Generation,
        *,
        image_sha256: str | None = None,
        image: bytes | None = None,
    ) -> Verification:
        """Grade one answer already read (`gen.answer` its final answer, `gen.reasoning` its reasoning): the verifier's
        outcome, whether the reasoning agrees, and the judge case when the judge should see it (with the question's
        image, `image_sha256` and the bytes where read: a judge that sees the image is asked with it)."""
        references = item.all_references()
        answered = gen.answer is not None and gen.error is None
        grade = self.grader.grade(gen.answer, references, item=item) if answered else None
        verified = grade is not None and grade.accepted
        contradicts = grade is not None and grade.certain
        agrees = self.grader.reasoning_agrees(gen.reasoning, grade, references, item=item) if verified else None
        if not answered or not gen.answer:
            return Verification(gen, references, verified, contradicts, agrees, None)
        judged = not verified and judgeable(gen.answer) and self._consensus(item, references)
        return Verification(
            gen,
            references,
            verified,
            contradicts,
            agrees,
            JudgeCase(prompt, item.answer, gen.answer, item.key, image_sha256, image) if judged else None,
        )

    def _consensus(self, item: QAItem, references: list[str]) -> bool:
        """Whether the official answer the judge is shown is one the verifier accepts against the annotators' votes.

        With several annotators (VQA) it is only the most frequent answer: when too few agree for the verifier to
        accept it ("sale" from 2 of 10), a judge would only find the candidate equal to one opinion and echo it
        CORRECT, undoing the verifier's threshold. Such an item is not judged."""
        return not item.references or self.grader.grade(item.answer, references, item=item).accepted


def questions(rows: Iterable[Row], instructions: Instructions) -> Iterator[tuple[int, QAItem, Request]]:
    """Every question of `rows` with its request, in item order (one image's questions one after the other: vLLM's prefix
    and image caches hit): what the sampling pass asks, and what `rs.distributed` keys from rows read without their
    image bytes."""
    for index, row in enumerate(rows):
        for item in row.qa:
            yield index, item, sampling_request(item, instructions, row.image_sha256, row.image)


class SamplingPass:
    """The sampling stage's work (`rs.pipeline.sample.stage`): answers, verifies and judges a family's items; writes one
    result record per QA item. The recovery pass (`rs.pipeline.recover`) reads and judges its samples with it."""

    def __init__(
        self,
        config: FamilyConfig,
        sampler: Engine,
        judge_engine: Engine | None,
        cache: GenerationCache,
        *,
        progress: bool = True,
        vocabulary: Vocabulary | None = None,
    ):
        """`vocabulary`: the family's closed set of answers (`rs.pipeline.sample.stage.answer_vocabulary`); by default the one its
        `answers:` block writes, without the terms a closed set derives from the cleaned references."""
        self.config = config
        self.reader = Reader(config, vocabulary)
        self.verifier: Verifier = self.reader.verifier
        self.grader = self.reader.grader
        self.settings = sampling_settings(config)
        self.instructions = Instructions.of(config)
        self.reasoning = ReasoningFormat(
            config.model.reasoning,
            tokenizer=getattr(sampler, "tokenizer", None),
            chat_template_kwargs=self.settings.chat_template_kwargs,
        )
        self.reasoning.check()
        batch = config.engine.batch_size
        self.runner = CachedEngine(sampler, cache, batch_size=batch, progress=progress)
        self.judge = None
        if config.judge.enabled and judge_engine is not None:
            self.judge = Judge(
                CachedEngine(judge_engine, cache, batch_size=batch, progress=False),
                config.judge,
                reasoning=(config.judge.model or config.model).reasoning,
                chat_template_kwargs=self.settings.chat_template_kwargs,
                tokenizer=getattr(judge_engine, "tokenizer", None),
            )
            self.judge.reasoning.check()
        letters = config.cleaning.step("multiple_choice").letters
        self.calibration = CalibrationSampler(
            self.verifier, config.judge.calibration_samples, letters=letters, grader=self.grader
        )
        self.blind: BlindPass | None = None
        if config.blind is not None:
            self.blind = BlindPass(
                config.blind,
                self.instructions,
                letters,
                self.runner,
                self.settings,
                blind_sample_settings(config, self.settings),
                progress=progress,
            )
        self.report = SampleReport()
        self.progress = progress

    def _slots(self, rows: Iterable[Row]) -> Iterator[_Slot]:
        multiple_choice = self.instructions.multiple_choice
        for index, item, request in questions(rows, self.instructions):
            self.report.multiple_choice_items += multiple_choice is not None and bool(item.options)
            yield _Slot(index, item, request)

    def run(
        self,
        rows: Iterable[Row],
        items_dir: str | Path,
        *,
        total: int | None = None,
        blind_rows: Callable[[], Iterable[Row]] | None = None,
        images: ImageSource | None = None,
    ) -> SampleReport:
        """Answer, verify and judge every item of `rows`; write one record per item, in item order; then, with the
        no-image pass (`blind:`), ask every question of `blind_rows()` (the same rows, their images not needed) without
        its image into `blind-*.parquet` beside the items; then calibrate the judge, a judge that sees the image
        (`judge.sees_image`) with its cases' images read again from `images` (the clean store's, `rs.store.clean_images`).

        Answers and verdicts share one stream of requests (`rs.engines.ordered.InOrder`): a rejection's judge
        request joins the engine as soon as its answer is verified, beside the questions still being
        answered, so the engine never waits between answering and judging. Records leave in item order
        whatever order the engine finishes in, so the items store does not depend on timing.
        """
        start = time.perf_counter()
        streams: list[Any] = [self.runner.stream(self.settings)]
        answered: list[Any] = [self._answered]
        if self.judge is not None:
            streams.append(self.judge.runner.stream(self.judge.settings))
            answered.append(self._judged)
        core = InOrder(streams, answered, batch=self.config.engine.batch_size)
        with (
            ParquetStreamWriter(items_dir, "items", ITEMS, group_rows=10_000, group_bytes=32 << 20) as writer,
            progress(total, "sampling", enabled=self.progress) as bar,
        ):
            try:
                for slot in core.run((slot, [(None, slot.request)]) for slot in self._slots(rows)):
                    record = slot.record
                    writer.write(vars(record), size=len(record.text) + len(record.prompt))
                    bar.update()
                    bar.set_postfix(
                        cached=self.runner.stats.cache_hits,
                        sent=self.runner.stats.engine_calls,
                        judged=self.report.judged,
                        refresh=False,
                    )
            except BaseException:
                self._stopped(bar)
                raise
        if self.blind is not None and blind_rows is not None:  # before the counts: it uses the same runner
            self.report.blind = self.blind.write(blind_rows(), self.blind_grade, items_dir, total=total)
        self.report.calibration = self._calibrate(images)
        self.report.identities = {
            "sampler": self.runner.identity_key,
            "judge": self.judge.runner.identity_key if self.judge is not None else None,
        }
        stats, blind = self.runner.stats, self.report.blind
        self.report.sampling_requests = stats.requests - (blind.requests if blind else 0)
        self.report.sampling_engine_calls = stats.engine_calls - (blind.engine_calls if blind else 0)
        if self.judge:
            self.report.judge_requests = self.judge.runner.stats.requests
            self.report.judge_engine_calls = self.judge.runner.stats.engine_calls
        self.report.seconds = time.perf_counter() - start
        return self.report

    def _stopped(self, bar: Any) -> None:
        """A stopped run's last progress line counts what the cache keeps (its answers, from the cache or committed now),
        not the records written in item order, which go with the unfinished store (a stop showed `0/174` with 51 kept)."""
        stats, judged = self.runner.stats, self.judge.runner.stats.committed if self.judge is not None else 0
        answers = stats.cache_hits + stats.committed
        bar.n = min(answers, bar.total) if bar.total else answers
        bar.set_postfix(committed=stats.committed + judged, answers=stats.committed, verdicts=judged, refresh=False)

    def _answered(self, slot: _Slot, _: object, gen: Generation) -> list[tuple[None, Request]]:
        """Verify one answer into its record; the judge's request, when the judge should see it."""
        v = self.verify(slot.item, slot.request, gen)
        gen = v.generation
        self.report.items += 1
        self.report.prompt_reasoning[gen.prompt_reasoning or "unknown"] += gen.error is None
        self.report.verified += v.verified
        self.report.contradicted += v.contradicts
        self.report.reasoning_disagrees += v.reasoning_agrees is False
        self.report.reasoning_unchecked += v.verified and v.reasoning_agrees is None
        self.report.undecided += gen.error is None and gen.answer is not None and not v.verified and not v.contradicts
        self.report.engine_errors += gen.error is not None
        ending = gen.ending
        self.report.endings[ending] += 1
        self.report.no_final_answer += gen.error is None and gen.answer is None and ending != "repetition"
        if ending == "repetition" and gen.max_tokens is not None and gen.completion_tokens is not None:
            self.report.loop_tokens_saved += max(0, gen.max_tokens - gen.completion_tokens)
        self.report.budgeted_answered += ending == "thinking_budget" and gen.answer is not None and gen.error is None
        slot.record = item_record(slot.row, slot.item, slot.request, v)
        note(self.report.machines, gen)
        request = self.verdict_request(v)
        return [(None, request)] if request is not None else []

    def _judged(self, slot: _Slot, _: object, generation: Generation) -> list[Any]:
        slot.record.judge = self.judged(slot.record, generation)
        return []

    def judged(self, record: ItemRecord, generation: Generation) -> str:
        """The judge's label of an answer's record (its verdict `generation`), counted."""
        assert self.judge is not None
        label, read = self.judge.verdict(generation)
        self.report.judge_prompt_reasoning[read.prompt_reasoning or "unknown"] += read.error is None
        self.report.verdicts[label] += 1
        self.report.judged += 1
        if record.contradicts:
            self.report.contradicted_verdicts[label] += 1
        return label

    def verify(self, item: QAItem, request: Request, gen: Generation, *, calibrating: bool = True) -> Verification:
        """Verify one answer to `request` and (with `calibrating`) offer it to the calibration samples; the judge's case
        of a rejection carries the request's image (its hash, and its bytes where they were read), the calibration's
        its hash only (`rs.pipeline.sample.calibration.CalibrationCases`).

        `rs.distributed` verifies with this too, so both paths judge and calibrate on the same cases; the recovery
        pass's samples (`rs.pipeline.recover`) are verified with it, and not offered: the judge is calibrated on greedy answers.
        """
        seen = self.judge is not None and self.judge.sees_image  # the bytes held only for a judge that sees them
        prompt, image_sha256, image = (
            request.prompt,
            request.image_hash() or None,
            (request.image or None) if seen else None,
        )
        v = self.reader.grade(item, prompt, self.reasoning.read(gen), image_sha256=image_sha256, image=image)
        answer = v.generation.answer
        if calibrating and answer and v.generation.error is None:
            case = JudgeCase(prompt, item.answer, answer, item.key, image_sha256)  # its image read again when asked
            self.calibration.offer(
                Answered(case, tuple(v.references), item.options, question_kind(item), item.qtype), v.verified
            )
        return v

    def blind_grade(self, item: QAItem, request: Request, gen: Generation) -> Verification:
        """A no-image answer read and verified like any answer, offered to no calibration (`rs.pipeline.sample.blind`); its
        machine's record kept with the items' (`SampleReport.machines`)."""
        note(self.report.machines, gen)
        return self.verify(item, request, gen, calibrating=False)

    def blind_requests(self, rows: Iterable[Row]) -> Iterator[tuple[str, Request, SamplingSettings]]:
        """The no-image pass's requests about `rows`' questions, with their cache keys and settings (none when off)."""
        if self.blind is not None:
            yield from self.blind.keyed(rows)

    def verdict_request(self, v: Verification) -> Request | None:
        """The judge's request about a verified answer (`verify`), or None when the judge is not asked about it."""
        return self.judge.request(v.case) if v.case is not None and self.judge is not None else None

    def calibration_cases(self) -> CalibrationCases:
        """The judge's calibration cases, from what `verify` saw."""
        return self.calibration.cases()

    def question_requests(self, rows: Iterable[Row]) -> Iterator[tuple[str, Request]]:
        """The requests `run` sends about `rows`' questions, with their cache keys (rows read without their image bytes
        key the same: the image's hash is in the row)."""
        for _, _, request in questions(rows, self.instructions):
            yield self.runner.key(request, self.settings), request

    def judge_requests(self, rows: Iterable[Row]) -> Iterator[tuple[str, Request]]:
        """The judge's requests about the cached answers to `rows`' questions, with their cache keys: each answer read from
        the cache is verified (and offered to the calibration samples) as `run` verifies it. Every answer must be cached:
        one that is not raises."""
        asked = (
            (self.runner.key(request, self.settings), request, item)
            for _, item, request in questions(rows, self.instructions)
        )
        yield from self.judge_keyed(
            filter(None, map(self.verdict_request, self.cached(asked, self.settings, calibrating=True)))
        )

    def calibration_requests(self, images: ImageSource | None = None) -> Iterator[tuple[str, Request]]:
        """The judge's requests about the calibration cases of the answers verified so far (`judge_requests`: all of them);
        a judge that sees the image gets each with its image's bytes read from `images`, in row order (`asked`), or,
        without `images`, with its image's hash only: listed for its key, not to be sent."""
        judge = self.judge
        assert judge is not None
        yield from self.judge_keyed(judge.request(case) for _, case in asked(judge, self.calibration_cases(), images))

    def judge_keyed(self, requests: Iterable[Request]) -> Iterator[tuple[str, Request]]:
        """The judge's `requests`, each with its cache key."""
        judge = self.judge
        assert judge is not None
        for request in requests:
            yield judge.runner.key(request, judge.settings), request

    def cached(
        self,
        asked: Iterable[tuple[str, Request, QAItem]],
        settings: SamplingSettings,
        *,
        calibrating: bool,
        chunk: int = 1024,
    ) -> Iterator[Verification]:
        """The cached answers of `asked` (key, request, item) under `settings`, each verified (`verify`); an answer the
        cache lacks raises: it vanished since it was cached (`rs.distributed` asks once every answer is)."""
        iterator = iter(asked)
        while block := list(islice(iterator, chunk)):
            try:
                generations = self.runner.cache.get_many((key for key, _, _ in block), settings=settings)
            except CacheAnswerDamaged as err:
                raise err.naming({key: request.item_key for key, request, _ in block}) from None
            for key, request, item in block:
                if (gen := generations.get(key)) is None:
                    raise RuntimeError(
                        f"the answer to {item.key} (sample {request.sample}) vanished from the cache during the run"
                    )
                yield self.verify(item, request, gen, calibrating=calibrating)

    def _calibrate(self, images: ImageSource | None) -> Calibration | None:
        if self.judge is None:
            return None
        return calibrate(
            self.judge,
            self.calibration_cases(),
            dict(self.report.contradicted_verdicts),
            images=images,
            show_progress=self.progress,
        )
