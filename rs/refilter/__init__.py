"""`rs refilter`'s library: the answers a run stored, made ready to route again with no engine.

Three sources, tried in this order by `prepare`:

1. the family's build, when its stores are current for the family's settings: routed as they are;
2. the family's build, when only the reader changed since the run (`rs.refilter.reread`): every stored answer graded
   again into `<build>/reread/`, undecided answers with no stored or cached verdict routed `judge_not_asked`;
3. a published samples repo (`--from-samples REPO`, `rs.refilter.samples`): the stores written back from it into
   `<build>/from-samples/`, then 1 or 2 on them, without the build.

Nothing here samples, judges or cleans: what would need the model is refused (`NotRereadable`) or counted and left to
`rs publish`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rs.context import BuildContext
from rs.pipeline.recover import current_recovery_report
from rs.pipeline.route import routes_for
from rs.pipeline.sample.stage import current_sample_report
from rs.refilter.reread import FOLDER as REREAD_FOLDER
from rs.refilter.reread import NotRereadable, Reread, basis, reread
from rs.refilter.samples import SamplesRepoError, rebuild
from rs.refilter.verify import check_outcomes

__all__ = ["NotRereadable", "Prepared", "Reread", "SamplesRepoError", "prepare"]


@dataclass
class Prepared:
    """The stores a refilter routes, and what the cards say of them."""

    stores: Path | None
    """The folder of the stores (`BuildContext.stores`); None: the family's build, as it is."""
    refiltered: dict[str, Any] | None
    """`BuildContext.refiltered`: `source` (the samples repo, or None: the build) and `reread` (`Reread.to_dict`, or None)."""
    reread: Reread | None = None


def prepare(
    ctx: BuildContext,
    *,
    from_samples: str | None = None,
    cache_path: Path | None = None,
    command: str = "",
    token: str | None = None,
) -> Prepared:
    """The stores `ctx`'s family is re-filtered from, with no engine: its build's (or those rebuilt from `from_samples`),
    re-read under the current reader when only the reader changed since the run. `command`: what asks the judge about
    what a re-read could not decide (`rs publish ...`)."""
    source = None
    if from_samples is not None:
        stores, source = rebuild(ctx, from_samples, token=token, cache_path=cache_path)
        ctx = dataclasses.replace(ctx, stores=stores)
    sampled = current_sample_report(ctx)
    if sampled is not None and (
        ctx.family.config.recovery is None or current_recovery_report(ctx, sampled) is not None
    ):
        if source is not None:  # routed as they are: the repo's reader outcomes must be the reader's
            check_outcomes(ctx, source["repo"])
        return Prepared(ctx.stores, {"source": source, "reread": None} if source is not None else None)
    basis(ctx)  # refused before the build's lock is taken (nor its folder made)
    with ctx.lock():
        found = basis(ctx)
        summary = reread(
            ctx, found, cache_path=cache_path, routes=routes_for(ctx, found.sampled.promotes), command=command
        )
    return Prepared(ctx.paths.root / REREAD_FOLDER, {"source": source, "reread": summary.to_dict()}, summary)
