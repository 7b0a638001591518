"""The publish stage: build the family, assemble its repos and their cards, check them, hand them to the target."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rs.context import BuildContext, default_cache_path
from rs.families import Family
from rs.hub import PublishResult
from rs.pipeline.build import build_family
from rs.pipeline.publish.assemble import assemble_repos
from rs.pipeline.publish.cards.files import CARD_FILES
from rs.pipeline.publish.repo_check import check_not_empty, check_repo
from rs.pipeline.publish.targets import Target, target_for
from rs.pipeline.route import RouteFilter
from rs.pipeline.sample.stage import current_sample_report
from rs.pipeline.write.report import FamilyReport
from rs.util import ledger
from rs.util.sizes import parse_bytes
from rs.util.text import counted

if TYPE_CHECKING:
    from rs.engines.base import Request

__all__ = ["PublishReport", "PublishStage", "publish"]


@dataclass(frozen=True)
class PublishReport:
    """What a publish did (a dry run: would do), per split of the family."""

    family: str
    report: FamilyReport | None
    """The family report the repos were rendered from; None: a dry run of a family not built here, which builds nothing
    (`rs.plan` says what a run would do)."""
    results: dict[str, PublishResult]
    """Each split's changes, as its target compared them (and the commits, on the Hub)."""
    where: dict[str, str]
    """Where each split's repo is published: its folder, or its Hub page."""
    local: bool
    """Published to a local folder (no commits; the cards link their siblings relatively)."""
    seconds: float

    @property
    def built(self) -> bool:
        return self.report is not None


class PublishStage:
    """The publish stage: build the family (unless cards only), assemble its repos, check them, hand them to the target.

    Its product is the target's repos, not a folder of the build: nothing is stored to reuse (`fingerprint` is None),
    the target's diff decides what changes, and the stage asks no model anything (`requests` is empty).
    """

    name: ClassVar[str] = "publish"

    def __init__(
        self,
        target: Target,
        *,
        cards_only: bool = False,
        dry_run: bool = False,
        allow_empty: bool = True,
        sample: Callable[[BuildContext], Any] | None = None,
        progress: bool = True,
    ):
        self.target, self.cards_only, self.dry_run, self.allow_empty = target, cards_only, dry_run, allow_empty
        self.sample, self.progress = sample, progress

    def fingerprint(self, ctx: BuildContext) -> str | None:
        return None

    def requests(self, ctx: BuildContext) -> Iterator[tuple[str, Request]]:
        return iter(())

    def run(self, ctx: BuildContext) -> PublishReport:
        start = time.perf_counter()
        family, target = ctx.family, self.target
        target.check(ctx, dry_run=self.dry_run)
        if self.dry_run and not self.cards_only and current_sample_report(ctx) is None:
            # a dry run spends nothing: no model is loaded, nothing sampled or judged (the command says what a run would do)
            return PublishReport(family.name, None, {}, {}, target.local, time.perf_counter() - start)
        with ExitStack() as held:
            held.enter_context(
                ctx.lock()
            )  # one run of a family at a time: the build, the assembled repos and the upload
            held.enter_context(target.held(family, dry_run=self.dry_run))
            if self.sample is not None and not self.cards_only and not self.dry_run:
                self.sample(ctx)
            report, results = self._publish(ctx)
        if report is None:  # cards only: the report the cards were rendered from
            stats_file = ctx.paths.root / "repos" / family.repo_name("rejected") / "rs" / "stats.json"
            report = FamilyReport.from_dict(json.loads(stats_file.read_text()), where=str(stats_file))
        where = {split: target.where(family, split) for split in family.splits}
        return PublishReport(family.name, report, results, where, target.local, time.perf_counter() - start)

    def _publish(self, ctx: BuildContext) -> tuple[FamilyReport | None, dict[str, PublishResult]]:
        """Build (unless cards only), assemble, check and publish every repo; the caller holds the locks."""
        family, c = ctx.family, ctx.family.config
        report = None if self.cards_only else build_family(ctx)
        if report is not None:
            ledger.keep(
                f"{family.name}'s splits, ready to publish ("
                + ", ".join(f"{s.repo} {counted(s.rows, 'row')}" for s in report.splits.values())
                + f", in {ctx.paths.root / 'splits'})"
            )
        check_not_empty(ctx, report, local=self.target.local, allow_empty=self.allow_empty)
        assembled = assemble_repos(ctx, self.target, cards_only=self.cards_only)
        for repo in (
            assembled.values()
        ):  # all of them, before the first upload: a refused third repo leaves the first two untouched
            check_repo(
                repo, row_group_bytes=parse_bytes(c.shard.row_group_bytes), files_per_commit=c.publish.files_per_commit
            )
        results = self.target.publish(
            family,
            assembled,
            only=CARD_FILES if self.cards_only else None,
            dry_run=self.dry_run,
            progress=self.progress,
        )
        return report, results


def publish(
    family: Family,
    *,
    out: Path | None = None,
    cards_only: bool = False,
    dry_run: bool = False,
    limit: int | None = None,
    build_root: Path | None = None,
    cache_path: Path | None = None,
    progress: bool = True,
    token: str | None = None,
    engine_factory: Any = None,
    sample: Callable[[BuildContext], Any] | None = None,
    allow_empty: bool = True,
    route_filter: RouteFilter | None = None,
    stores: Path | None = None,
    refiltered: dict[str, Any] | None = None,
    force: bool = False,
) -> PublishReport:
    """Build (unless cards only), assemble and publish the family's repos to `out` or its `publish:` target.

    `allow_empty`: publish a split with no rows to the Hub (`datasets` cannot load it; the card says so); the command
    refuses one unless `--allow-empty`.

    `sample` runs the sampling stage first in another way (`rs.distributed.sample_on_ray`); the
    build then finds it done.

    `route_filter`: routing settings changed after the run (`rs refilter`); the cards say what changed. `stores`: the
    folder of the stores to publish from, when not the family's build (`rs.refilter.prepare`), and `refiltered` what the
    cards say of them. `force`: a `--limit` trial may replace a release published in the local folder.
    """
    ctx = BuildContext(
        family,
        Path(build_root or os.environ.get("RS_BUILD_DIR", "build")),
        cache_path or default_cache_path(),
        limit=limit,
        progress=progress,
        engine_factory=engine_factory,
        route_filter=route_filter,
        stores=stores,
        refiltered=refiltered,
    )
    stage = PublishStage(
        target_for(family, out, token=token, force=force),
        cards_only=cards_only,
        dry_run=dry_run,
        allow_empty=allow_empty,
        sample=sample,
        progress=progress,
    )
    return stage.run(ctx)
