"""The clean stage: the family's source streamed through the `Cleaner` into the clean store, reused while current.

    build/<FAMILY>/clean/rows-*.parquet   the cleaned rows, original image bytes     clean.json (`CleaningReport`)
    build/<FAMILY>/exclusions.jsonl       every dropped source item with its reason

Several processes (sampling shards, `rs sample --shard`) may find the clean store missing at once: one cleans while the
others wait for their turn (`rs.util.locks.clean_lock`), then find its report and reuse the store.
"""

from __future__ import annotations

import logging
import time
from contextlib import AbstractContextManager
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Iterator

from rs.pipeline.clean import POLICY_VERSION, Cleaner, CleaningReport, ExclusionWriter
from rs.pipeline.clean.decontam import versions as decontam_versions
from rs.pipeline.stage import Store, StoredStage, fingerprint, scratch
from rs.prompt import Instructions
from rs.records import Row
from rs.sources import open_source
from rs.store import write_clean_rows
from rs.util.locks import clean_lock
from rs.util.progress import progress
from rs.util.text import counted

if TYPE_CHECKING:
    from rs.context import BuildContext
    from rs.engines.base import Request

logger = logging.getLogger(__name__)

SPILLED = "rs-group-*"
"""A killed cleaning's spilled images in the build folder (`rs.pipeline.clean.group`): only one cleans at a time."""


def decontamination_fingerprint(c: Any) -> dict[str, Any]:
    """The family's decontamination block, its evaluation sets' sources and the methods' versions (nothing when off:
    a family without the block keeps the fingerprint it had)."""
    d = c.decontamination
    if d is None:
        return {}
    sets = {name: asdict(s.source) for name, s in getattr(d, "sets", {}).items()}
    return {"decontamination": {"config": asdict(d), "sets": sets, "versions": decontam_versions()}}


class CleanStage(StoredStage[CleaningReport]):
    """Source records -> clean rows (one image, its QA); every drop with its reason."""

    name: ClassVar[str] = "clean"
    store: ClassVar[Store[CleaningReport]] = Store(
        "clean",
        "clean_report",
        "the clean store",
        "the source",
        CleaningReport.from_dict,
        beside=("exclusions.jsonl",),
    )

    def fingerprint(self, ctx: BuildContext) -> str:
        """The source, the cleaning and instructions, the `--limit`, the cleaning policy, the decontamination, and the
        row-group target a row must fit (`rs.pipeline.clean.row_size`)."""
        c = ctx.family.config
        return fingerprint(
            {
                "source": asdict(c.source),
                "cleaning": asdict(c.cleaning),
                "instructions": asdict(Instructions.of(c)),
                "limit": ctx.limit,
                "policy": POLICY_VERSION,
                "row_group_target": c.shard.row_group_target(),
                **decontamination_fingerprint(c),
            }
        )

    def requests(self, ctx: BuildContext) -> Iterator[tuple[str, Request]]:
        return iter(())  # cleaning asks no model

    def turn(self, ctx: BuildContext) -> AbstractContextManager[None]:
        return clean_lock(ctx.paths.root)

    def run(self, ctx: BuildContext) -> CleaningReport:
        """Stream the source through cleaning into `clean.tmp` and `exclusions.jsonl.tmp`."""
        paths = ctx.paths
        start = time.perf_counter()
        source = open_source(ctx.family)
        with scratch(*paths.root.glob(SPILLED)), ExclusionWriter(paths.root / "exclusions.jsonl.tmp") as exclusions:
            cleaner = Cleaner(
                ctx.family.config,
                source.provenance(),
                exclusions=exclusions,
                work_dir=paths.root,
                base_dir=ctx.family.path.parent,
            )
            with progress(ctx.limit, "cleaning", unit="row", enabled=ctx.progress) as bar:
                write_clean_rows(_counted(cleaner.rows(source, limit=ctx.limit), bar), self.store.tmp(paths))
        report = cleaner.report
        report.seconds = time.perf_counter() - start
        logger.info(
            "%s: cleaned %d source QA into %s (%d kept, %d dropped)",
            ctx.family.name,
            report.source_items,
            counted(report.rows, "row"),
            report.kept_items,
            report.dropped_items,
        )
        return report

    def kept(self, ctx: BuildContext, report: CleaningReport) -> str:
        return f"{ctx.family.name}'s clean store ({counted(report.rows, 'row')}, {ctx.paths.clean})"


def _counted(rows: Iterable[Row], bar: Any) -> Iterator[Row]:
    for row in rows:
        yield row
        bar.update()
