"""The clean and sample stages of a family's build, each resumable by fingerprint.

    build/<FAMILY>/
      clean/rows-*.parquet      cleaned rows, original image bytes      clean.json (report)
      exclusions.jsonl          every dropped source item with its reason
      items/items-*.parquet     one result per QA item (raw output kept) sample.json (report, calibration)

Each stage is skipped when its report exists with the same fingerprint (the configuration that
produced it), so a re-run after a crash redoes only unfinished stages, and the generation cache
makes a re-run of the sampling stage answer only what is missing. A stage writes into a `.tmp`
folder that replaces the store only when whole, and that is removed when the stage fails (a full
disk gets its room back); one process at a time writes a family's build (`rs.util.locks`). The `datasets` builder
(`builders/`) and the Ray path (`rs.distributed`) call these; `rs.pipeline.build` writes the splits on top.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol, TypeVar

from rs.context import BuildContext, BuildPaths
from rs.util import ledger
from rs.engines.generation_cache import GenerationCache
from rs.util.checksums import seal
from rs.pipeline.clean import POLICY_VERSION, Cleaner, CleaningReport, ExclusionWriter
from rs.pipeline.clean.decontam import versions as decontam_versions
from rs.pipeline.clean.nothing_kept import check_something_kept
from rs.util.disk import writing
from rs.families import Family
from rs.util.locks import clean_lock
from rs.util.progress import progress
from rs.prompt import Instructions
from rs.pipeline.recover import RecoveryReport, RecoveryStage
from rs.pipeline.sample import SampleReport, SampleStage
from rs.sources import open_source
from rs.records import Row
from rs.answers import Vocabulary
from rs.store import MAX_ANSWER_SET, read_clean_answers, read_clean_rows, read_records, write_clean_rows, write_json
from rs.verifiers import get_verifier
from rs.pipeline.versions import RECOVERY, ROUTE, sample_versions

logger = logging.getLogger(__name__)

def fingerprint(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


class _Report(Protocol):
    fingerprint: str | None

    def to_dict(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=_Report)


def read_report(path: Path, expected: str, kind: Callable[[dict[str, Any]], R]) -> R | None:
    """The stage report at `path` when it was written under the fingerprint `expected`, else None (run the stage)."""
    try:
        data = json.loads(path.read_text())
        if data.get("fingerprint") != expected:
            return None
        return kind(data)
    except (OSError, json.JSONDecodeError, AttributeError, KeyError, TypeError):
        return None  # missing, torn or of another version: the stage runs again


def replace_dir(tmp: Path, final: Path) -> None:
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)


@contextmanager
def scratch(*tmp: Path) -> Iterator[None]:
    """A stage's temporary outputs: cleared before it starts, removed if it fails, so that a failure leaves only the last complete state."""
    for path in tmp:
        _remove(path)
    try:
        yield
    except BaseException:
        for path in tmp:
            _remove(path)
        raise


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def clean_fingerprint(ctx: BuildContext) -> str:
    c = ctx.family.config
    return fingerprint({"source": asdict(c.source), "cleaning": asdict(c.cleaning), "instructions": asdict(Instructions.of(c)),
                        "limit": ctx.limit, "policy": POLICY_VERSION, **decontamination_fingerprint(c)})


def decontamination_fingerprint(c: Any) -> dict[str, Any]:
    """The family's decontamination block, its evaluation sets' sources and the methods' versions (nothing when off:
    a family without the block keeps the fingerprint it had)."""
    d = c.decontamination
    if d is None:
        return {}
    sets = {name: asdict(s.source) for name, s in getattr(d, "sets", {}).items()}
    return {"decontamination": {"config": asdict(d), "sets": sets, "versions": decontam_versions()}}


def ensure_clean(ctx: BuildContext) -> CleaningReport:
    """Stream the source through cleaning into the clean store, unless an identical one exists.

    Several processes (sampling shards) may call this at once: a file lock lets one clean while
    the others wait and then reuse its store.
    """
    paths, expected = ctx.paths, clean_fingerprint(ctx)
    report = read_report(paths.clean_report, expected, CleaningReport.from_dict)
    if not (report and ctx.intact(paths.clean, "", "", say=False)):
        with clean_lock(paths.root):
            report = read_report(paths.clean_report, expected, CleaningReport.from_dict)
            if not (report and ctx.intact(paths.clean, "the clean store", "the source")):
                report = _clean(ctx, expected)
    ledger.keep(f"{ctx.family.name}'s clean store ({report.rows:,} rows, {paths.clean})")
    return report


def _clean(ctx: BuildContext, expected: str) -> CleaningReport:
    paths = ctx.paths
    tmp, exclusions_tmp = paths.root / "clean.tmp", paths.root / "exclusions.jsonl.tmp"
    start = time.perf_counter()
    source = open_source(ctx.family)
    spilled = list(paths.root.glob("rs-group-*"))  # a killed cleaning's spilled images (rs.pipeline.clean.group): only one cleans at a time
    with writing("the clean store", tmp), scratch(tmp, exclusions_tmp, *spilled):
        with ExclusionWriter(exclusions_tmp) as exclusions:
            cleaner = Cleaner(ctx.family.config, source.provenance(), exclusions=exclusions, work_dir=paths.root,
                              base_dir=ctx.family.path.parent)
            with progress(ctx.limit, "cleaning", unit="row", enabled=ctx.progress) as bar:
                write_clean_rows(_counted(cleaner.rows(source, limit=ctx.limit), bar), tmp)
        seal(tmp)
        replace_dir(tmp, paths.clean)
        os.replace(exclusions_tmp, paths.root / "exclusions.jsonl")
        report = cleaner.report
        report.fingerprint, report.seconds = expected, time.perf_counter() - start
        write_json(paths.clean_report, report.to_dict())
    logger.info("%s: cleaned %d source QA into %d rows (%d kept, %d dropped)", ctx.family.name, report.source_items,
                report.rows, report.kept_items, report.dropped_items)
    return report


def _counted(rows: Iterable[Row], bar: Any) -> Iterator[Row]:
    for row in rows:
        yield row
        bar.update()


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
        logger.warning("%s: answers.closed_set is on but the cleaned references hold more than %d distinct answers: "
                       "they are read as free text", family.name, MAX_ANSWER_SET)
    return answers.vocabulary(references)


def plain(data: Any) -> Any:
    """`data` as JSON reads it back (tuples as lists, keys as strings): what a report stores, and compares equal to it."""
    return json.loads(json.dumps(data, sort_keys=True, default=str))


def sample_inputs(ctx: BuildContext, clean: CleaningReport) -> dict[str, Any]:
    """What the sample stage's results depend on: the cleaned items, the model and how it is asked, the judge, the
    reader (the verifier and the family's `answers:` block) and the versions of the code that decides (`rs.pipeline.versions`)."""
    c = ctx.family.config
    verifier = get_verifier(c.verifier.name, **c.verifier.params)
    return plain({"clean": clean.fingerprint, "model": asdict(c.model), "engine": asdict(c.engine),
                  "sampling": asdict(c.sampling), "judge": asdict(c.judge), "verifier": asdict(c.verifier), "answers": asdict(c.answers),
                  "instructions": asdict(Instructions.of(c)), "versions": sample_versions(verifier)})


def sample_fingerprint(ctx: BuildContext, clean: CleaningReport) -> str:
    return fingerprint(sample_inputs(ctx, clean))


def ensure_sampled(ctx: BuildContext) -> SampleReport:
    """Answer, verify and judge every cleaned item, unless an identical sampling report exists."""
    with ctx.lock(), ctx.passes():
        clean = ensure_clean(ctx)
        check_something_kept(ctx.family.name, clean.kept_items, clean.dropped)  # before an engine starts for nothing
        paths, inputs = ctx.paths, sample_inputs(ctx, clean)
        expected = fingerprint(inputs)
        report = read_report(paths.sample_report, expected, SampleReport.from_dict)
        if not (report and ctx.intact(paths.items, "the items store", "the generation cache")):
            report = _sample(ctx, clean, inputs)
        ledger.keep(f"{ctx.family.name}'s answers, verified and judged ({report.items:,} in {paths.items})")
        return report


def _sample(ctx: BuildContext, clean: CleaningReport, inputs: dict[str, Any]) -> SampleReport:
    """Run the sampling stage into a new items store (the caller holds the build lock and the engines' scope)."""
    paths = ctx.paths
    sampler, judge = ctx.engines("greedy")
    tmp = paths.root / "items.tmp"
    with writing("the items store", tmp), scratch(tmp):
        with GenerationCache(ctx.cache_path) as cache:
            stage = SampleStage(ctx.family.config, sampler, judge, cache, progress=ctx.progress,
                                vocabulary=answer_vocabulary(ctx))
            report = stage.run(read_clean_rows(paths.clean), tmp, total=clean.kept_items)
        seal(tmp)
        replace_dir(tmp, paths.items)
        report.fingerprint, report.inputs = fingerprint(inputs), inputs
        write_json(paths.sample_report, report.to_dict())
    return report


def recovery_inputs(ctx: BuildContext, sampled: SampleReport) -> dict[str, Any]:
    """The recovery pass's results depend on the greedy pass (its items and calibration) and the recovery block."""
    recovery = ctx.family.config.recovery
    return plain({"sample": sampled.fingerprint, "promotes": sampled.promotes, "recovery": asdict(recovery) if recovery else None,
                  "versions": {piece.name: piece.version for piece in (RECOVERY, ROUTE)}})


def recovery_fingerprint(ctx: BuildContext, sampled: SampleReport) -> str:
    return fingerprint(recovery_inputs(ctx, sampled))


def ensure_recovered(ctx: BuildContext, sampled: SampleReport) -> RecoveryReport | None:
    """Sample the rejected items again (`rs.pipeline.recover`), unless an identical recovery report exists; None without a
    `recovery:` block (an old recovery store is then removed: it no longer describes the build)."""
    paths = ctx.paths
    if ctx.family.config.recovery is None:
        _remove(paths.recovery)
        paths.recovery_report.unlink(missing_ok=True)
        return None
    with ctx.lock(), ctx.passes():
        inputs = recovery_inputs(ctx, sampled)
        expected = fingerprint(inputs)
        report = read_report(paths.recovery_report, expected, RecoveryReport.from_dict)
        if not (report and ctx.intact(paths.recovery, "the recovery store", "the generation cache")):
            report = _recover(ctx, sampled, inputs)
        ledger.keep(f"{ctx.family.name}'s recovery pass ({report.samples:,} samples in {paths.recovery})")
        return report


def _recover(ctx: BuildContext, sampled: SampleReport, inputs: dict[str, Any]) -> RecoveryReport:
    """Run the recovery pass into a new recovery store (the caller holds the build lock and the engines' scope)."""
    paths = ctx.paths
    sampler, judge = ctx.engines("recovery")
    tmp = paths.root / "recovery.tmp"
    with writing("the recovery store", tmp), scratch(tmp):
        with GenerationCache(ctx.cache_path) as cache:
            greedy = SampleStage(ctx.family.config, sampler, judge, cache, progress=False, vocabulary=answer_vocabulary(ctx))
            stage = RecoveryStage(ctx.family.config, greedy, promotes=sampled.promotes, progress=ctx.progress)
            report = stage.run(read_clean_rows(paths.clean), read_records(paths.items, "items"), tmp)
        seal(tmp)
        replace_dir(tmp, paths.recovery)
        report.fingerprint, report.inputs = fingerprint(inputs), inputs
        write_json(paths.recovery_report, report.to_dict())
    return report


def ensure_passes(ctx: BuildContext) -> tuple[SampleReport, RecoveryReport | None]:
    """The greedy pass (answers and judge), then the recovery pass, on the one engine per model the run loads; the
    engines are closed after the last pass, whatever happens (the splits need no model)."""
    with ctx.passes():
        sampled = ensure_sampled(ctx)
        return sampled, ensure_recovered(ctx, sampled)


def current_recovery_report(ctx: BuildContext, sampled: SampleReport) -> RecoveryReport | None:
    """The recovery report when it is current for `sampled`; None when the family has none or it must run."""
    if ctx.family.config.recovery is None:
        return None
    report = read_report(ctx.paths.recovery_report, recovery_fingerprint(ctx, sampled), RecoveryReport.from_dict)
    return report if report and ctx.intact(ctx.paths.recovery, "", "", say=False) else None


def current_sample_report(ctx: BuildContext) -> SampleReport | None:
    """The sampling report of this family's build when it is current (same fingerprints), else None; runs nothing.

    A `--dry-run` builds only from a current report: writing the splits from it needs no model.
    """
    clean = read_report(ctx.paths.clean_report, clean_fingerprint(ctx), CleaningReport.from_dict)
    if clean is None or not ctx.intact(ctx.paths.clean, "", "", say=False):
        return None
    report = read_report(ctx.paths.sample_report, sample_fingerprint(ctx, clean), SampleReport.from_dict)
    return report if report and ctx.intact(ctx.paths.items, "", "", say=False) else None


def sample_shard(ctx: BuildContext, shard: int, shards: int) -> SampleReport:
    """Answer and judge one of `shards` disjoint slices of the family (rows whose index % shards == shard).

    Only the generation cache is the product: run one process per GPU (or machine with the cache
    on its local disk, merged later) over disjoint shards, then run the whole stage once more,
    which finds everything cached. The slice's own results are kept under build/<FAMILY>/shards/.
    """
    if not 0 <= shard < shards:
        raise ValueError(f"shard {shard} is not in 0..{shards - 1}")
    with ctx.passes():
        return _sample_shard(ctx, shard, shards)


def _sample_shard(ctx: BuildContext, shard: int, shards: int) -> SampleReport:
    with ctx.lock(shared=True):  # shards write disjoint folders; only a whole run excludes them
        clean = ensure_clean(ctx)
        check_something_kept(ctx.family.name, clean.kept_items, clean.dropped)
        sampler, judge = ctx.engines("shard")
        out = ctx.paths.root / "shards" / f"{shard:05d}-of-{shards:05d}"
        rows = (row for index, row in enumerate(read_clean_rows(ctx.paths.clean)) if index % shards == shard)
        with writing("the shard's items", out), scratch(out), GenerationCache(ctx.cache_path) as cache:
            stage = SampleStage(ctx.family.config, sampler, judge, cache, progress=ctx.progress,
                                vocabulary=answer_vocabulary(ctx))
            return stage.run(rows, out, total=None)
