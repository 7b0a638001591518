"""What a repo's card is rendered from: the build's family report, examples and overturns, or a published repo's copies.

A repo keeps them beside its card (`rs/stats.json`, `rs/examples.json`, `rs/overturns.json`, `rs/numbers.json`, the
examples' images), so `--cards-only` renders the card again on a machine that did not run the build.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rs.context import BuildContext
from rs.errors import UsageError
from rs.pipeline.publish.cards.render import attach_image_paths, card_numbers, select_examples, select_overturns
from rs.pipeline.write.report import FamilyReport
from rs.pipeline.write.samples import REPO_NUMBERS
from rs.util import invocation


class MissingBuildError(UsageError, RuntimeError):
    """`--cards-only` without a build or a published repo to render from."""


@dataclass
class CardInputs:
    report: FamilyReport
    """The family report as the build wrote it (`FamilyReport.published()` leaves out what differs from run to run)."""
    examples: list[dict[str, Any]]
    """The examples as `rs/examples.json` stores them: their images are files of the repo (`image_path`), not bytes."""
    overturns: list[dict[str, str]]


def link_or_copy(src: Path, dst: Path) -> None:
    """Put `src` at `dst` (its folders made): a hard link, or a copy across file systems."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def card_inputs(ctx: BuildContext, split: str, repo: Path, *, cards_only: bool, published: Path | None) -> CardInputs:
    """What the card of `split` is rendered from, the examples' images laid into `repo`.

    The build's own outputs come first; a cards-only run without them reads the published repo `published`.
    """
    inputs = _from_build(ctx, split, repo)
    if inputs is not None:
        return inputs
    if cards_only and published is not None and (published / "rs" / "stats.json").exists():
        return _from_published(published, repo)
    family = ctx.family
    raise MissingBuildError(
        f"no build of {family.name} in {ctx.paths.root} and no published repo to take its stats from; "
        f"run `{invocation.command('publish', family.name, config=family.path)}` without --cards-only first"
    )


def _from_build(ctx: BuildContext, split: str, repo: Path) -> CardInputs | None:
    paths = ctx.paths
    if not paths.stats.exists() or not paths.split(split).exists():
        return None
    report = FamilyReport.from_dict(json.loads(paths.stats.read_text()), where=str(paths.stats))
    examples, overturns = select_examples(paths.split(split), split), select_overturns(paths.split(split), split)
    for path, data in attach_image_paths(examples):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    stored = [{k: v for k, v in e.items() if k != "image"} for e in examples]
    return CardInputs(report, stored, overturns)


def _from_published(published: Path, repo: Path) -> CardInputs:
    """The card inputs of a published repo, its example images linked into `repo`: `--cards-only` without a build here."""
    stats_file = published / "rs" / "stats.json"
    report = FamilyReport.from_dict(json.loads(stats_file.read_text()), where=str(stats_file))
    stored = json.loads((published / "rs" / "examples.json").read_text())
    overturns_file = published / "rs" / "overturns.json"
    overturns = json.loads(overturns_file.read_text()) if overturns_file.exists() else []
    for example in stored:
        link_or_copy(published / example["image_path"], repo / example["image_path"])
    return CardInputs(report, stored, overturns)


def repo_numbers(ctx: BuildContext, split: str, published: Path | None) -> dict[str, Any] | None:
    """The numbers a samples or RL card states of the repo's files: computed from them (the build's split folder holds
    the same files), or for a cards-only run without a build, the published repo's `rs/numbers.json`."""
    if ctx.paths.split(split).exists():
        return card_numbers(split, ctx.paths.split(split))
    stored = published / "rs" / "numbers.json" if published is not None else None
    if stored is not None and stored.exists():
        return json.loads(stored.read_text())
    if split not in REPO_NUMBERS:
        return None
    raise MissingBuildError(
        f"no build of {ctx.family.name} in {ctx.paths.root} and no published numbers of "
        f"{ctx.family.repo_name(split)} to render its card from; run "
        f"`{invocation.command('publish', ctx.family.name, config=ctx.family.path)}` without --cards-only first"
    )
