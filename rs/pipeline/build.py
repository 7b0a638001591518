"""A family's build: the stages run in their order (`rs.pipeline.STAGES`), each through `rs.pipeline.stage.ensure`.

    clean -> sample -> recover -> route -> write

Each stage reuses what a run before it kept when it is current, so a build resumes where it stopped; publishing
(`rs.pipeline.publish`) builds the family with this first.
"""

from __future__ import annotations

from rs.context import BuildContext
from rs.pipeline.clean.stage import CleanStage
from rs.pipeline.recover import RecoverStage, RecoveryReport
from rs.pipeline.route import RouteStage
from rs.pipeline.sample import SampleReport
from rs.pipeline.sample.stage import SampleStage
from rs.pipeline.stage import ensure
from rs.pipeline.write.report import FamilyReport
from rs.pipeline.write.stage import WriteStage


def build_family(ctx: BuildContext) -> FamilyReport:
    """Clean, sample, recover, route and write the splits and stats.json; returns the family's report."""
    with ctx.lock():
        clean = ensure(CleanStage(), ctx)
        sampled, recovered = ensure_passes(ctx)
        routing = ensure(RouteStage(sampled.promotes), ctx)
        return ensure(WriteStage(clean, sampled, recovered, routing), ctx)


def ensure_passes(ctx: BuildContext) -> tuple[SampleReport, RecoveryReport | None]:
    """The sample stage (answers and judge), then the recover stage, on the one engine per model the run loads; the
    engines are closed after the last pass, whatever happens (the splits need no model)."""
    with ctx.passes():
        sampled = ensure(SampleStage(), ctx)
        return sampled, ensure(RecoverStage(sampled), ctx)
