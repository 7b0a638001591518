"""Stage 2: every question answered by the VLM, verified, and the rejections re-examined by the judge.

Items stream from the cleaned rows in chunks: a chunk is answered (through the generation cache),
verified, its verifier rejections that have a final answer are judged (also cached), and its
results are written to the items store. The judge is then calibrated (`rs.calibration`) on
deterministic samples of the run's answers; only a judge that passes may promote, and never over
a rejection the verifier knows is certain (`Verifier.contradicts`).
Routing into the three splits happens later (`rs.route`), from the items store and calibration.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Iterable, Iterator

from rs.engines import sampling_settings
from rs.engines.base import Engine, Generation, Request
from rs.engines.cached import CachedEngine
from rs.families.schema import FamilyConfig
from rs.calibration import Answered, Calibration, CalibrationCases, CalibrationSampler, calibrate, question_kind
from rs.judge import Judge, JudgeCase, judgeable
from rs.prompt import sampling_request
from rs.sources.base import QAItem, Row
from rs.store import ITEMS, ParquetStreamWriter
from rs.engines.cache import GenerationCache
from rs.verifiers import Verifier, get_verifier

logger = logging.getLogger(__name__)


@dataclass
class _Pending:
    row: int
    item: QAItem
    request: Request


@dataclass
class SampleReport:
    """What the sampling stage did (`sample.json`): answers, verification, the judge and its calibration."""

    fingerprint: str | None = None
    """The configuration the stage ran under (`rs.stages`); None for a shard or a stage run directly."""
    items: int = 0
    verified: int = 0
    contradicted: int = 0
    """Rejections the verifier knows are wrong: no judge verdict can promote them."""
    judged: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    contradicted_verdicts: Counter[str] = field(default_factory=Counter)
    """The judge's verdicts on the contradicted rejections: a measurement on real negatives."""
    no_final_answer: int = 0
    engine_errors: int = 0
    sampling_requests: int = 0
    sampling_engine_calls: int = 0
    judge_requests: int = 0
    judge_engine_calls: int = 0
    seconds: float = 0.0
    calibration: Calibration | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "calibration"}
        d["verdicts"] = dict(self.verdicts)
        d["contradicted_verdicts"] = dict(self.contradicted_verdicts)
        d["calibration"] = self.calibration.to_dict() if self.calibration else None
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SampleReport:
        calibration = data.get("calibration")
        return cls(**{**data, "verdicts": Counter(data["verdicts"]), "contradicted_verdicts": Counter(data["contradicted_verdicts"]),
                      "calibration": Calibration.from_dict(calibration) if calibration else None})

    @property
    def promotes(self) -> bool:
        """Whether this run's judge passed calibration and may promote rejections."""
        return bool(self.calibration and self.calibration.promotes)


@dataclass(frozen=True)
class Verification:
    """What the verifier says of one answer."""

    references: list[str]
    verified: bool
    contradicts: bool
    """A rejection the verifier knows is wrong (a different number, option, yes/no)."""
    case: JudgeCase | None
    """The judge case of a rejection with something to grade; None otherwise."""


class SampleStage:
    """Answers, verifies and judges a family's items; writes one result record per QA item."""

    def __init__(self, config: FamilyConfig, sampler: Engine, judge_engine: Engine | None, cache: GenerationCache, *, progress: bool = True):
        self.config = config
        self.verifier: Verifier = get_verifier(config.verifier.name, **config.verifier.params)
        self.settings = sampling_settings(config)
        batch = config.engine.batch_size
        self.runner = CachedEngine(sampler, cache, batch_size=batch, progress=progress)
        self.judge = None
        if config.judge.enabled and judge_engine is not None:
            self.judge = Judge(CachedEngine(judge_engine, cache, batch_size=batch, progress=False), config.judge)
        letters = config.cleaning.step("multiple_choice").letters
        self.calibration = CalibrationSampler(self.verifier, config.judge.calibration_samples, letters=letters)
        self.report = SampleReport()

    def _requests(self, rows: Iterable[Row], pending: list[_Pending]) -> Iterator[Request]:
        for index, row in enumerate(rows):
            for item in row.qa:
                request = sampling_request(item, self.config.instruction, row.image_sha256, row.image)
                pending.append(_Pending(index, item, request))
                yield request

    def run(self, rows: Iterable[Row], items_dir: str | Path, *, total: int | None = None) -> SampleReport:
        start = time.perf_counter()
        pending: list[_Pending] = []
        results = self.runner.run(self._requests(rows, pending), self.settings, desc="sampling", total=total)
        chunk_size = max(1, self.config.engine.batch_size)
        with ParquetStreamWriter(items_dir, "items", ITEMS, group_rows=10_000, group_bytes=32 << 20) as writer:
            while chunk := list(islice(results, chunk_size)):
                contexts, pending[: len(chunk)] = pending[: len(chunk)], []
                self._chunk(contexts, [g for _, g in chunk], writer)
        self.report.calibration = self._calibrate()
        stats = self.runner.stats
        self.report.sampling_requests, self.report.sampling_engine_calls = stats.requests, stats.engine_calls
        if self.judge:
            self.report.judge_requests = self.judge.runner.stats.requests
            self.report.judge_engine_calls = self.judge.runner.stats.engine_calls
        self.report.seconds = time.perf_counter() - start
        return self.report

    def _chunk(self, contexts: list[_Pending], generations: list[Generation], writer: ParquetStreamWriter) -> None:
        records = []
        to_judge: list[tuple[int, JudgeCase]] = []
        for i, (ctx, gen) in enumerate(zip(contexts, generations)):
            v = self.verify(ctx.item, ctx.request.prompt, gen)
            self.report.items += 1
            self.report.verified += v.verified
            self.report.contradicted += v.contradicts
            self.report.engine_errors += gen.error is not None
            self.report.no_final_answer += gen.error is None and gen.answer is None
            record = {
                "row": ctx.row, "key": ctx.item.key, "image_sha256": ctx.request.image_sha256, "prompt": ctx.request.prompt,
                "reference": ctx.item.answer, "references": v.references, "text": gen.text, "reasoning": gen.reasoning,
                "final": gen.answer, "finish_reason": gen.finish_reason, "prompt_tokens": gen.prompt_tokens,
                "completion_tokens": gen.completion_tokens, "model": gen.model, "model_revision": gen.model_revision,
                "error": gen.error, "verified": v.verified, "contradicts": v.contradicts, "judge": None,
            }
            records.append(record)
            if v.case is not None and self.judge is not None:
                to_judge.append((i, v.case))
        if to_judge:
            for (i, _), (_, label, _) in zip(to_judge, self.judge.verdicts([c for _, c in to_judge])):
                records[i]["judge"] = label
                self.report.verdicts[label] += 1
                self.report.judged += 1
                if records[i]["contradicts"]:
                    self.report.contradicted_verdicts[label] += 1
        for record in records:
            writer.write(record, size=len(record["text"]) + len(record["prompt"]))

    def verify(self, item: QAItem, prompt: str, gen: Generation) -> Verification:
        """Verify one answer and offer it to the calibration samples.

        `rs.distributed` verifies with this too, so both paths judge and calibrate on the same cases.
        """
        references = item.all_references()
        answered = gen.answer is not None and gen.error is None
        verified = answered and self.verifier.match(gen.answer, references, item=item)
        contradicts = answered and not verified and self.verifier.contradicts(gen.answer, references, item=item)
        if not answered or not gen.answer:
            return Verification(references, verified, contradicts, None)
        case = JudgeCase(prompt, item.answer, gen.answer, item.key)
        self.calibration.offer(Answered(case, tuple(references), item.options, question_kind(item), item.qtype), verified)
        judged = not verified and judgeable(gen.answer)
        return Verification(references, verified, contradicts, case if judged else None)

    def calibration_cases(self) -> CalibrationCases:
        """The judge's calibration cases, from what `verify` saw."""
        return self.calibration.cases()

    def _calibrate(self) -> Calibration | None:
        if self.judge is None:
            return None
        return calibrate(self.judge, self.calibration_cases(), dict(self.report.contradicted_verdicts))
