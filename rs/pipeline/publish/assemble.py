"""Each repo of a family assembled in the build folder exactly as it will be published, before any target sees it.

A repo holds `README.md` (the card), `data/train-*.parquet` (hard links to the build's split), the card's images and
figures and what it was rendered from under `rs/` (`rs.pipeline.publish.cards.files`), and for the samples repo
`rs/run.json` (what `rs refilter --from-samples` needs besides its rows).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from rs.context import BuildContext
from rs.pipeline.publish.cards.files import write_card
from rs.pipeline.publish.cards.inputs import card_inputs, link_or_copy, repo_numbers
from rs.pipeline.publish.cards.render import check_card
from rs.pipeline.stage import scratch
from rs.pipeline.write.samples import RUN_FILE, run_record
from rs.store import write_json
from rs.util.disk import writing

if TYPE_CHECKING:
    from rs.pipeline.publish.targets import Target


def assemble_repo(
    ctx: BuildContext, split: str, into: Path, *, cards_only: bool, published: Path | None = None, local: bool = False
) -> Path:
    """Lay out the repo of `split` exactly as published under `into`; returns the repo folder.

    `published`: the repo as published, read for what a cards-only run without a build cannot take from the build.
    `local`: for a local target, where the card links its siblings relatively.
    """
    family = ctx.family
    repo = into / family.repo_name(split)
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "rs").mkdir(parents=True)
    inputs = card_inputs(ctx, split, repo, cards_only=cards_only, published=published)
    if not cards_only:  # the build's inputs, necessarily: a published repo is read for its card only
        for name in inputs.report.splits[split].files:
            link_or_copy(ctx.paths.split(split) / name, repo / "data" / name)
    numbers = repo_numbers(ctx, split, published)
    if (
        split == "samples"
    ):  # what rebuilding the stores from this repo takes besides its rows (`rs refilter --from-samples`)
        if ctx.paths.sample_report.exists():
            write_json(repo / RUN_FILE, run_record(ctx.paths.root))
        elif published is not None and (published / RUN_FILE).exists():
            link_or_copy(published / RUN_FILE, repo / RUN_FILE)
    text = write_card(repo, family, split, inputs, numbers, local=local)
    if not cards_only:
        check_card(text, repo)
    return repo


def assemble_repos(ctx: BuildContext, target: Target, *, cards_only: bool) -> dict[str, Path]:
    """Assemble every repo of the family in the build folder (`repos/`); a cards-only run without a build reads the
    published repos' card inputs from the target."""
    into = ctx.paths.root / "repos"
    assembled = {}
    for split in ctx.family.splits:
        repo_name = ctx.family.repo_name(split)
        published = target.published(ctx, split, needed=cards_only and not ctx.paths.stats.exists())
        with writing("the assembled repo", into / repo_name), scratch(into / repo_name):
            assembled[split] = assemble_repo(
                ctx, split, into, cards_only=cards_only, published=published, local=target.local
            )
    return assembled
