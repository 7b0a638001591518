"""The sample stage: every cleaned question answered, verified and judged (`SamplingPass`) into the items store.

    build/<FAMILY>/items/items-*.parquet   one result per QA item (raw output kept)    sample.json (`SampleReport`)

It is reused while its fingerprint (`sample_inputs`: the cleaned rows, the model and how it is asked, the judge, the
reader, the versions of the code that decides) is the report's; a re-run answers from the generation cache, so
only what is missing is sent. `sample_shard` answers one slice of the family into the cache (one process per GPU).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import asdict
from itertools import islice
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Iterator

import rs.answers
import rs.answers.extract
import rs.engines.reasoning
import rs.pipeline.sample
import rs.pipeline.sample.blind
import rs.pipeline.sample.calibration
import rs.pipeline.sample.judge
import rs.prompt
import rs.verifiers.base
from rs.engines.generation_cache import GenerationCache
from rs.pipeline.clean.nothing_kept import check_something_kept
from rs.pipeline.clean.stage import CleanStage
from rs.pipeline.pieces import Piece, verifier_version
from rs.pipeline.sample import SampleReport, SamplingPass
from rs.pipeline.stage import Store, StoredStage, current, ensure, fingerprint, plain, scratch
from rs.prompt import Instructions
from rs.store import MAX_ANSWER_SET, clean_images, read_clean_answers, read_clean_rows
from rs.util.disk import writing
from rs.verifiers import get_verifier

if TYPE_CHECKING:
    from rs.answers import Vocabulary
    from rs.context import BuildContext, BuildPaths
    from rs.engines.base import Engine, Request, SamplingSettings
    from rs.families import Family
    from rs.pipeline.sample.calibration import ImageSource
    from rs.records import Row

logger = logging.getLogger(__name__)

SAMPLE_PIECES = (
    Piece("answers", rs.answers, "VERSION", ("answers/",)),
    Piece("extract", rs.answers.extract, "VERSION", ("answers/extract.py",)),
    Piece("reasoning", rs.engines.reasoning, "VERSION", ("engines/reasoning.py",)),
    Piece("prompt", rs.prompt, "VERSION", ("prompt.py", "pipeline/sample/requests.py")),
    Piece("verifiers", rs.verifiers.base, "VERSION", ("verifiers/__init__.py", "verifiers/base.py")),
    Piece("judge", rs.pipeline.sample.judge, "VERSION", ("pipeline/sample/judge.py", "templates/judge_prompt.jinja")),
    Piece("calibration", rs.pipeline.sample.calibration, "VERSION", ("pipeline/sample/calibration.py",)),
    Piece("sample", rs.pipeline.sample, "VERSION", ("pipeline/sample/__init__.py",)),
)
"""What the sample stage's fingerprint holds the versions of, besides the family's verifier's (`rs.pipeline.versions`
records them)."""


def sample_versions(verifier: object) -> dict[str, str]:
    """The versions the sample stage's fingerprint is built from, with `verifier`'s (`rs.pipeline.pieces.verifier_version`)."""
    return {**{piece.name: piece.version for piece in SAMPLE_PIECES}, "verifier": verifier_version(verifier)}


def answer_vocabulary(ctx: BuildContext) -> Vocabulary | None:
    """The family's closed set of answers: its `answers:` block, and the cleaned references when `closed_set`."""
    return vocabulary_of(ctx.family, ctx.paths)


def vocabulary_of(family: Family, paths: BuildPaths) -> Vocabulary | None:
    """`answer_vocabulary` of the build at `paths` (`rs audit --replay` reads a build it did not make)."""
    answers = family.config.answers
    if not answers.closed_set:
        return answers.vocabulary()
    references = read_clean_answers(paths.clean)
    if references is None:
        logger.warning(
            "%s: answers.closed_set is on but the cleaned references hold more than %d distinct answers: "
            "they are read as free text",
            family.name,
            MAX_ANSWER_SET,
        )
    return answers.vocabulary(references)


def sampling_pass(
    ctx: BuildContext, cache: GenerationCache, sampler: Engine, judge: Engine | None, *, progress: bool = False
) -> SamplingPass:
    """The family's sampling pass over `cache` with these engines, reading answers as the family's vocabulary says."""
    return SamplingPass(ctx.family.config, sampler, judge, cache, progress=progress, vocabulary=answer_vocabulary(ctx))


def calibration_images(ctx: BuildContext) -> ImageSource:
    """Where a judge that sees the image (`judge.sees_image`) gets its calibration cases' images: the clean store's, read
    in row order when the cases are asked (`rs.pipeline.sample.calibration.CalibrationCases.with_images`)."""
    clean = ctx.paths.clean
    return lambda hashes: clean_images(clean, hashes)


def sample_inputs(ctx: BuildContext) -> dict[str, Any]:
    """What the sample stage's results depend on: the cleaned items, the model and how it is asked, the judge, the
    reader (the verifier and the family's `answers:` block) and the versions of the code that decides (`SAMPLE_PIECES`)."""
    c = ctx.family.config
    verifier = get_verifier(c.verifier.name, **c.verifier.params)
    # only where the pass is on: a family without it keeps the fingerprint it had
    blind = {"blind": {**asdict(c.blind), "version": rs.pipeline.sample.blind.VERSION}} if c.blind is not None else {}
    return plain(
        {
            **blind,
            "clean": CleanStage().fingerprint(ctx),
            "model": asdict(c.model),
            "engine": asdict(c.engine),
            "sampling": asdict(c.sampling),
            "judge": asdict(c.judge),
            "verifier": asdict(c.verifier),
            "answers": asdict(c.answers),
            "instructions": asdict(Instructions.of(c)),
            "versions": sample_versions(verifier),
        }
    )


class SampleStage(StoredStage[SampleReport]):
    """Every question answered, read and verified; the rejections judged; the judge calibrated."""

    name: ClassVar[str] = "sample"
    store: ClassVar[Store[SampleReport]] = Store(
        "items", "sample_report", "the items store", "the generation cache", SampleReport.from_dict
    )

    def fingerprint(self, ctx: BuildContext) -> str:
        return fingerprint(sample_inputs(ctx))

    def requests(self, ctx: BuildContext) -> Iterator[tuple[str, Request]]:
        """Every question's request, then, once the cache holds every answer, the judge's (about the rejections worth
        judging, then the calibration cases): what they are depends on the answers."""
        with ctx.passes(), GenerationCache(ctx.cache_path) as cache:
            greedy = sampling_pass(ctx, cache, *ctx.engines("requests"))
            yield from greedy.question_requests(read_clean_rows(ctx.paths.clean, images=False))
            yield from (
                (key, r) for key, r, _ in greedy.blind_requests(read_clean_rows(ctx.paths.clean, images=False))
            )
            if greedy.judge is not None and answered(
                greedy.question_requests(read_clean_rows(ctx.paths.clean, images=False)), cache, greedy.settings
            ):
                yield from greedy.judge_requests(read_clean_rows(ctx.paths.clean, images=False))
                yield from greedy.calibration_requests()

    @contextmanager
    def hold(self, ctx: BuildContext) -> Iterator[None]:
        """The build's lock and the engines' scope; the clean store made current first, and something kept to sample."""
        with ctx.lock(), ctx.passes():
            clean = ensure(CleanStage(), ctx)
            check_something_kept(
                ctx.family.name, clean.kept_items, clean.dropped
            )  # before an engine starts for nothing
            yield

    def run(self, ctx: BuildContext) -> SampleReport:
        """Answer, verify and judge every cleaned item into `items.tmp` (the build's lock and the engines' scope held)."""
        clean = ensure(CleanStage(), ctx)  # current: `hold` made it so
        sampler, judge = ctx.engines("greedy")
        with GenerationCache(ctx.cache_path) as cache:
            greedy = sampling_pass(ctx, cache, sampler, judge, progress=ctx.progress)
            report = greedy.run(
                read_clean_rows(ctx.paths.clean),
                self.store.tmp(ctx.paths),
                total=clean.kept_items,
                blind_rows=lambda: read_clean_rows(ctx.paths.clean, images=False),
                images=calibration_images(ctx),
            )
        report.inputs = sample_inputs(ctx)
        return report

    def kept(self, ctx: BuildContext, report: SampleReport) -> str:
        return f"{ctx.family.name}'s answers, verified and judged ({report.items:,} in {ctx.paths.items})"


def answered(
    keyed: Iterable[tuple[str, Request]], cache: GenerationCache, settings: SamplingSettings, *, chunk: int = 4096
) -> bool:
    """Whether the cache answers every request of `keyed` under `settings` (its limits)."""
    iterator = iter(keyed)
    while block := list(islice(iterator, chunk)):
        if len(cache.present((key for key, _ in block), settings=settings)) < len({key for key, _ in block}):
            return False
    return True


def current_sample_report(ctx: BuildContext) -> SampleReport | None:
    """The sampling report of this family's build when it and the clean store are current, else None; runs nothing.

    A `--dry-run` builds only from a current report: writing the splits from it needs no model.
    """
    return current(SampleStage(), ctx) if current(CleanStage(), ctx) is not None else None


def sample_shard(ctx: BuildContext, shard: int, shards: int) -> SampleReport:
    """Answer and judge one of `shards` disjoint slices of the family (rows whose index % shards == shard), and ask the
    no-image pass's questions of it (`blind:`).

    Only the generation cache is the product: run one process per GPU (or machine with the cache
    on its local disk, merged later) over disjoint shards, then run the whole stage once more,
    which finds everything cached (the no-image answers too: without them the whole run would make them all, on its
    one machine). The slice's own results are kept under build/<FAMILY>/shards/.
    """
    if not 0 <= shard < shards:
        raise ValueError(f"shard {shard} is not in 0..{shards - 1}")
    with ctx.passes(), ctx.lock(shared=True):  # shards write disjoint folders; only a whole run excludes them
        clean = ensure(CleanStage(), ctx)
        check_something_kept(ctx.family.name, clean.kept_items, clean.dropped)
        sampler, judge = ctx.engines("shard")
        out = ctx.paths.root / "shards" / f"{shard:05d}-of-{shards:05d}"

        def rows(images: bool = True) -> Iterator[Row]:
            return (
                row
                for index, row in enumerate(read_clean_rows(ctx.paths.clean, images=images))
                if index % shards == shard
            )

        with writing("the shard's items", out), scratch(out), GenerationCache(ctx.cache_path) as cache:
            return sampling_pass(ctx, cache, sampler, judge, progress=ctx.progress).run(
                rows(), out, total=None, blind_rows=lambda: rows(images=False), images=calibration_images(ctx)
            )
