"""The write stage: the family's splits (`rs.pipeline.write.splits`), then its report, `stats.json` (`rs.pipeline.write.stats`).

stats.json goes before the splits are written and comes back after the last one, so a build stopped in between is never
taken for a complete one (`--cards-only` reads it). The splits are kept while their fingerprint is the one they were
written under; the report is made again every time, from the stages' reports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Iterator

from rs.pipeline.route import Routing, routes_for
from rs.pipeline.write.report import FamilyReport
from rs.pipeline.write.splits import splits_fingerprint, write_splits
from rs.pipeline.write.stats import family_report
from rs.store import write_json
from rs.util.disk import writing

if TYPE_CHECKING:
    from rs.context import BuildContext
    from rs.engines.base import Request
    from rs.pipeline.clean import CleaningReport
    from rs.pipeline.recover import RecoveryReport
    from rs.pipeline.sample import SampleReport


class WriteStage:
    """The splits' parquet files, the opt-in repos' (pairs, samples, RL) and the family report."""

    name: ClassVar[str] = "write"

    def __init__(
        self, clean: CleaningReport, sampled: SampleReport, recovered: RecoveryReport | None, routing: Routing
    ):
        """The reports of the stages before it: what the splits are written from, and what the family report says."""
        self.clean, self.sampled, self.recovered, self.routing = clean, sampled, recovered, routing

    def fingerprint(self, ctx: BuildContext) -> str:
        """The splits' (`splits_fingerprint`): the report is made again every time."""
        return splits_fingerprint(ctx, self.sampled, self.recovered)

    def requests(self, ctx: BuildContext) -> Iterator[tuple[str, Request]]:
        return iter(())  # writing asks no model

    def run(self, ctx: BuildContext) -> FamilyReport:
        """Write the splits (or keep those written under the same fingerprint), then stats.json; returns the family report."""
        routing = self.routing
        qa = {
            "think": routing.accepted - routing.kept_out_of_think,
            "nothink": routing.accepted,
            "rejected": routing.rejected,
            "pairs": routing.pairs.pairs if routing.pairs else 0,
            "samples": routing.accepted + routing.rejected,
            "rl": routing.rl,
        }
        ctx.paths.stats.unlink(missing_ok=True)
        splits = write_splits(ctx, self.fingerprint(ctx), qa, routes_for(ctx, self.sampled.promotes))
        report = family_report(ctx, self.clean, self.sampled, splits, routing, self.recovered)
        with writing("stats.json", ctx.paths.stats):
            write_json(ctx.paths.stats, report.to_dict())
        return report
