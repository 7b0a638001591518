"""Publishing a family: build it if needed, stage the three repos exactly as on the Hub, render the cards, push.

The command is `rs publish FAMILY` / `python -m rs.publish FAMILY` (`rs.cli.publish`). Each repo holds `README.md` (the card), `data/train-*.parquet`, `images/example-*` (the examples'
original files) and `rs/stats.json` + `rs/examples.json` (+ `rs/overturns.json` when the judge promoted
answers into the split): what the card was rendered from, so that `--cards-only` works on a machine
that did not run the build.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from rs.pipeline.build import build_family
from rs.pipeline.publish.cards import figures
from rs.util import ledger
from rs.util.locks import publish_lock
from rs.pipeline.publish import local as local_publish
from rs.pipeline.publish.preflight import check_repo
from rs.pipeline.publish.targets import check_overlap, check_repo_paths
from rs.pipeline.publish.cards.decontam import pair_files
from rs.pipeline.route import RouteFilter
from rs.pipeline.write.samples import REPO_NUMBERS, RUN_FILE, run_record
from rs.pipeline.publish.cards.render import HUB_URL, attach_image_paths, card_numbers, check_card, render_card, select_examples, select_overturns
from rs.util.disk import writing
from rs.errors import UsageError
from rs.families import Family
from rs.hub import FileChange, PublishResult, publish_folder, resolve_token
from rs.pipeline.write.report import FamilyReport
from rs.util.sizes import parse_bytes
from rs.plan import plan_family
from rs.pipeline.sample.stage import current_sample_report
from rs.pipeline.stage import scratch
from rs.context import BuildContext, default_cache_path
from rs.store import write_json

logger = logging.getLogger("rs.pipeline.publish")

CARD_FILES = ("README.md", "images/*")


class EmptySplitError(UsageError):
    """A split with no rows, which `datasets.load_dataset` cannot load, on its way to the Hub."""


class MissingBuildError(UsageError, RuntimeError):
    """`--cards-only` without a build or a published repo to render from."""


def check_local_root(folder: Path, named: str, what: str = "the published repos") -> None:
    """Refuse a local target that cannot hold the repos (a file in the way, a folder not writable) before the build, not after it.

    `what`: what goes there, for the message (the build folder and the cache are checked the same way).
    """
    existing = folder
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{named} {folder}: {existing} is a file, not a folder: {what} cannot go there",
                         hint=f"give {named} a folder (it is created if it does not exist)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{named} {folder}: cannot write in {existing} (permission denied)",
                         hint=f"give {named} a folder you can write in")
    try:  # a read-only file system, or a place even root cannot write in, passes os.access
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise UsageError(f"{named} {folder}: cannot write in {existing} ({err.strerror})",
                         hint=f"give {named} a folder you can write in") from None


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _card_inputs_from_build(ctx: BuildContext, split: str) -> tuple[FamilyReport, list[dict[str, Any]], list[dict[str, str]]] | None:
    paths = ctx.paths
    if not paths.stats.exists() or not paths.split(split).exists():
        return None
    report = FamilyReport.from_dict(json.loads(paths.stats.read_text()), where=str(paths.stats))
    return report, select_examples(paths.split(split), split), select_overturns(paths.split(split), split)


def _inputs_from_published(published: Path, repo: Path) -> tuple[FamilyReport, list[dict[str, Any]], list[dict[str, str]]]:
    """The card inputs of a published repo, its example images linked into `repo`: `--cards-only` without a build here."""
    stats_file = published / "rs" / "stats.json"
    report = FamilyReport.from_dict(json.loads(stats_file.read_text()), where=str(stats_file))
    stored = json.loads((published / "rs" / "examples.json").read_text())
    overturns_file = published / "rs" / "overturns.json"
    overturns = json.loads(overturns_file.read_text()) if overturns_file.exists() else []
    for example in stored:
        _link_or_copy(published / example["image_path"], repo / example["image_path"])
    return report, stored, overturns


def _stage_inputs(ctx: BuildContext, split: str, repo: Path, *, cards_only: bool,
                  published: Path | None) -> tuple[FamilyReport, list[dict[str, Any]], list[dict[str, str]]]:
    """Lay the examples' images (and the data, unless cards only) into `repo`; returns what its card is rendered from.

    The build's own outputs come first; a cards-only run without them reads a published repo.
    """
    inputs = _card_inputs_from_build(ctx, split)
    if inputs is not None:
        report, examples, overturns = inputs
        for path, data in attach_image_paths(examples):
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_bytes(data)
        stored = [{k: v for k, v in e.items() if k != "image"} for e in examples]
        if not cards_only:
            for name in report.splits[split].files:
                _link_or_copy(ctx.paths.split(split) / name, repo / "data" / name)
        return report, stored, overturns
    if cards_only and published is not None and (published / "rs" / "stats.json").exists():
        return _inputs_from_published(published, repo)
    family = ctx.family
    raise MissingBuildError(
        f"no build of {family.name} in {ctx.paths.root} and no published repo to take its stats from; "
        f"run `python -m rs.publish {family.name}` without --cards-only first"
    )


def _draw_figures(report: FamilyReport, repo: Path) -> list[figures.Figure]:
    """Draw the card's figures into `repo`: the funnel always, token lengths only from an engine that counts tokens (not `replay`)."""
    drawn = [figures.funnel(report)]
    if any(lengths.total for lengths in report.lengths.values()):
        drawn.append(figures.lengths(report))
    for figure in drawn:
        (repo / figure.path).parent.mkdir(parents=True, exist_ok=True)
        (repo / figure.path).write_bytes(figure.png)
    return drawn


def stage_repo(ctx: BuildContext, split: str, staging: Path, *, cards_only: bool, published: Path | None = None,
               local: bool = False) -> Path:
    """Lay out one repo exactly as on the Hub under `staging`; returns the repo folder.

    `local`: for a local target, where the card links its siblings relatively.
    """
    family = ctx.family
    repo = staging / family.repo_name(split)
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "rs").mkdir(parents=True)
    report, stored, overturns = _stage_inputs(ctx, split, repo, cards_only=cards_only, published=published)
    report = report.published()  # timings and engine calls differ from run to run
    write_json(repo / "rs" / "stats.json", report.to_dict())
    write_json(repo / "rs" / "examples.json", stored)
    if overturns:
        write_json(repo / "rs" / "overturns.json", overturns)
    c = family.config
    drawn = _draw_figures(report, repo)
    for path, data in pair_files(report.cleaning.decontamination):  # the decontamination section's example pairs
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    numbers = _repo_numbers(ctx, split, repo, published)
    if numbers is not None:
        write_json(repo / "rs" / "numbers.json", numbers)
    if split == "samples":  # what rebuilding the stores from this repo takes besides its rows (`rs refilter --from-samples`)
        if ctx.paths.sample_report.exists():
            write_json(repo / RUN_FILE, run_record(ctx.paths.root))
        elif published is not None and (published / RUN_FILE).exists():
            _link_or_copy(published / RUN_FILE, repo / RUN_FILE)
    text = render_card(report, dataclasses.asdict(c.card), split, c.publish.namespace, stored, overturns,
                       local=local, figures=drawn, numbers=numbers)
    (repo / "README.md").write_text(text, encoding="utf-8")
    if not cards_only:
        check_card(text, repo)
    return repo


def _repo_numbers(ctx: BuildContext, split: str, repo: Path, published: Path | None) -> dict[str, Any] | None:
    """The numbers a samples or RL card states of the repo's files: computed from them (the build's split folder holds
    the same files), or for a cards-only run without a build, the published repo's `rs/numbers.json`."""
    if ctx.paths.split(split).exists():
        return card_numbers(split, ctx.paths.split(split))
    stored = published / "rs" / "numbers.json" if published is not None else None
    if stored is not None and stored.exists():
        return json.loads(stored.read_text())
    if split not in REPO_NUMBERS:
        return None
    raise MissingBuildError(f"no build of {ctx.family.name} in {ctx.paths.root} and no published numbers of "
                            f"{ctx.family.repo_name(split)} to render its card from; run `python -m rs.publish "
                            f"{ctx.family.name}` without --cards-only first")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: Path) -> dict[str, Path]:
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*")) if p.is_file()} if folder.exists() else {}


def _in_scope(path: str, only: tuple[str, ...] | None) -> bool:
    import fnmatch

    return only is None or any(fnmatch.fnmatch(path, pattern) for pattern in only)


def plan_local(repo: Path, target: Path, *, only: tuple[str, ...] | None) -> list[FileChange]:
    """What publishing the staged `repo` to the local `target` adds, changes, keeps and deletes (within `only`)."""
    local, remote = _files(repo), _files(target)
    changes = []
    for path, src in local.items():
        if not _in_scope(path, only):
            continue
        if path not in remote:
            changes.append(FileChange(path, "add", src.stat().st_size))
        elif src.stat().st_size != remote[path].stat().st_size or _sha256(src) != _sha256(remote[path]):
            changes.append(FileChange(path, "change", src.stat().st_size))
        else:
            changes.append(FileChange(path, "unchanged", src.stat().st_size))
    changes += [FileChange(p, "delete", f.stat().st_size) for p, f in remote.items() if p not in local and _in_scope(p, only)]
    return changes


def sync_local(family: str, staged: dict[str, Path], root: Path, *, only: tuple[str, ...] | None, dry_run: bool,
               named: str) -> dict[str, PublishResult]:
    """The local target: make each `root/<repo>` identical to its staged repo (within `only`), all of them in one transaction.

    Each repo that changes is assembled whole beside the target and switched in (`rs.pipeline.publish.local`):
    a reader sees the old repo or the new one, a full disk or a refused folder changes nothing, and
    a run killed at any point is finished or undone by the next.
    """
    plans = {split: plan_local(repo, root / repo.name, only=only) for split, repo in staged.items()}
    results = {split: PublishResult(repo_id=(root / repo.name).as_posix(), changes=plans[split], commit_url=None)
               for split, repo in staged.items()}
    changing = [split for split, changes in plans.items() if any(ch.action != "unchanged" for ch in changes)]
    if dry_run or not changing:
        return results
    local_publish.check_writable(root, [root / staged[split].name for split in changing], named)
    txn = local_publish.transaction(root, family)
    try:
        for split in changing:
            repo = staged[split]
            with writing("the published repo", root / repo.name, flag=named):
                local_publish.assemble(repo, root / repo.name, plans[split], txn / "new" / repo.name)
        with writing("the publish journal", txn, flag=named):
            local_publish.commit(root, family, [staged[split].name for split in changing])
    except BaseException:
        local_publish.abandon(root, family)  # before the commit: the published repos are as they were
        raise
    ledger.keep(f"{family}'s repos published in {root}")
    return results


@contextmanager
def _locked_target(root: Path, family: str) -> Iterator[None]:
    """Hold the local target's publish lock, after finishing or undoing what a stopped publish left.

    The lock lives in the target, so a run that fails before it publishes anything into a folder
    it created removes the lock and that folder again: a failed first publish leaves no trace.
    """
    created = [folder for folder in (root / local_publish.CONTROL, root, *root.parents) if not folder.exists()]
    try:
        with publish_lock(root, family, local_publish.CONTROL):
            local_publish.recover(root, family)
            yield
    except BaseException:
        if created:
            (root / local_publish.CONTROL / f"{family}.lock").unlink(missing_ok=True)
            for folder in created:  # deepest first; one holding anything (a published repo) stays
                try:
                    folder.rmdir()
                except OSError:
                    break
        raise


def _download_card_inputs(repo_id: str, folder: Path, token: str | None) -> Path | None:
    """What a card is rendered from (rs/stats.json, rs/examples.json, rs/overturns.json, the example images), from a published repo."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled, RepositoryNotFoundError

    try:
        snapshot_download(repo_id, repo_type="dataset", allow_patterns=["rs/*", "images/*"], local_dir=folder, token=token)
    except (RepositoryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled) as err:  # offline: not cached
        logger.warning("could not read the card inputs of %s: %s", repo_id, err)
        return None
    return folder


def _check_trial_target(family: Family, limit: int | None, *, local: bool, dry_run: bool) -> None:
    """Refuse a `--limit` trial on its way to the Hub, where it would replace the whole family's repos."""
    if limit is not None and not local and not dry_run:
        namespace = family.config.publish.namespace
        raise UsageError(f"--limit {limit} builds a trial of {family.name} on its first {limit} images; published to the Hub "
                         f"it would replace {namespace}/{family.repo_name('think')} and its two siblings with it",
                         hint="publish the trial to a local folder (--out DIR) or see what would change (--dry-run); "
                              "publish to the Hub without --limit")


def _check_not_empty(ctx: BuildContext, report: FamilyReport | None, *, local: bool, allow_empty: bool) -> None:
    """Refuse a split with no rows on its way to the Hub unless allowed: `datasets` cannot load it."""
    family = ctx.family
    if report is not None and not local and not allow_empty and (empty := [s for s in family.splits if not report.splits[s].rows]):
        raise EmptySplitError(
            f"{', '.join(family.repo_name(s) for s in empty)} would have no rows: `datasets.load_dataset` refuses a split with "
            "no rows (\"Instruction 'train' corresponds to no data!\"), so nothing was published",
            hint=f"publish it anyway with --allow-empty (its card says it is empty and how to read it), or see why in "
                 f"{ctx.paths.stats}")


def _stage_all(ctx: BuildContext, staging: Path, root: Path, *, local: bool, cards_only: bool, token: str | None) -> dict[str, Path]:
    """Stage every split's repo under `staging`; a cards-only run without a build reads the published repos' card inputs."""
    family, c = ctx.family, ctx.family.config
    staged = {}
    for split in family.splits:
        repo_name = family.repo_name(split)
        published = root / repo_name if local else None
        if cards_only and not local and not ctx.paths.stats.exists():
            published = _download_card_inputs(f"{c.publish.namespace}/{repo_name}", ctx.paths.root / "published" / repo_name, token)
        with writing("the staged repo", staging / repo_name), scratch(staging / repo_name):
            staged[split] = stage_repo(ctx, split, staging, cards_only=cards_only, published=published, local=local)
    return staged


def _publish_to_hub(family: Family, staged: dict[str, Path], *, token: str | None, only: tuple[str, ...] | None, dry_run: bool,
                    progress: bool) -> dict[str, PublishResult]:
    """Upload each staged repo to its Hub repo (or, on a dry run, say what would change)."""
    c = family.config
    results = {}
    for split, repo in staged.items():
        repo_name = family.repo_name(split)
        results[split] = publish_folder(repo, f"{c.publish.namespace}/{repo_name}", token=token, private=c.publish.private,
                                        only=only, dry_run=dry_run, commit_message=f"rs: publish {repo_name}",
                                        files_per_commit=c.publish.files_per_commit, progress=progress)
        if not dry_run:
            ledger.keep(f"{c.publish.namespace}/{repo_name} published on the Hub")
    return results


@dataclasses.dataclass(frozen=True)
class _Target:
    """Where the repos go: a local folder (`--out` or `publish.local_dir`, repos under `root`) or the Hub."""

    local: bool
    folder: Path
    root: Path
    named: str  # the flag or setting that names the folder, for messages

    @classmethod
    def of(cls, family: Family, out: Path | None) -> _Target:
        c = family.config
        folder = Path(out if out is not None else c.publish.local_dir)
        return cls(local=out is not None or c.publish.target == "local", folder=folder, root=folder / c.publish.namespace,
                   named="--out" if out is not None else "publish.local_dir")

    def where(self, family: Family, split: str) -> str:
        """Where a split's repo is published: its folder, or its Hub page."""
        if self.local:
            return str(self.root / family.repo_name(split))
        return f"{HUB_URL}/{family.config.publish.namespace}/{family.repo_name(split)}"


def _preflight(family: Family, target: _Target, *, limit: int | None, dry_run: bool, token: str | None) -> str | None:
    """Refuse what would fail after a long build (an unwritable folder, a trial to the Hub, no token); returns the token to use."""
    if target.local:
        check_local_root(target.folder, target.named)
        check_repo_paths(family, target.root, target.named)
    _check_trial_target(family, limit, local=target.local, dry_run=dry_run)
    if not target.local and not dry_run:
        return resolve_token(token)
    return token


def _stage_and_publish(ctx: BuildContext, target: _Target, *, cards_only: bool, dry_run: bool, allow_empty: bool,
                       token: str | None, progress: bool) -> tuple[FamilyReport | None, dict[str, PublishResult]]:
    """Build (unless cards only), stage, check and publish every repo; the caller holds the locks.

    Returns the build's report (None when cards only) and each split's changes.
    """
    family, c = ctx.family, ctx.family.config
    report = None if cards_only else build_family(ctx)
    if report is not None:
        ledger.keep(f"{family.name}'s splits, ready to publish ("
                    + ", ".join(f"{s.repo} {s.rows:,} rows" for s in report.splits.values()) + f", in {ctx.paths.root / 'splits'})")
    _check_not_empty(ctx, report, local=target.local, allow_empty=allow_empty)
    only = CARD_FILES if cards_only else None
    staged = _stage_all(ctx, ctx.paths.root / "repos", target.root, local=target.local, cards_only=cards_only, token=token)
    for repo in staged.values():  # all three, before the first upload: a refused third repo leaves the first two untouched
        check_repo(repo, row_group_bytes=parse_bytes(c.shard.row_group_bytes), files_per_commit=c.publish.files_per_commit)
    if target.local:
        return report, sync_local(family.name, staged, target.root, only=only, dry_run=dry_run, named=target.named)
    return report, _publish_to_hub(family, staged, token=token, only=only, dry_run=dry_run, progress=progress)


def publish(family: Family, *, out: Path | None = None, cards_only: bool = False, dry_run: bool = False, limit: int | None = None,
            build_root: Path | None = None, cache_path: Path | None = None, progress: bool = True, token: str | None = None,
            engine_factory: Any = None, sample: Callable[[BuildContext], Any] | None = None, allow_empty: bool = True,
            route_filter: RouteFilter | None = None, stores: Path | None = None,
            refiltered: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build (unless cards only), stage and publish the three repos; returns a summary.

    `allow_empty`: publish a split with no rows to the Hub (`datasets` cannot load it; the card says so); the command
    refuses one unless `--allow-empty`.

    `sample` runs the sampling stage first in another way (`rs.distributed.sample_on_ray`); the
    build then finds it done.

    `route_filter`: routing settings changed after the run (`rs refilter`); the cards say what changed. `stores`: the
    folder of the stores to publish from, when not the family's build (`rs.refilter.prepare`), and `refiltered` what the
    cards say of them.
    """
    start = time.perf_counter()
    ctx = BuildContext(family, Path(build_root or os.environ.get("RS_BUILD_DIR", "build")), cache_path or default_cache_path(),
                       limit=limit, progress=progress, engine_factory=engine_factory, route_filter=route_filter,
                       stores=stores, refiltered=refiltered)
    target = _Target.of(family, out)
    check_overlap(target.folder if target.local else None, target.named, ctx.build_root, ctx.cache_path)
    token = _preflight(family, target, limit=limit, dry_run=dry_run, token=token)
    if dry_run and not cards_only and current_sample_report(ctx) is None:
        # a dry run spends nothing: no model is loaded, nothing sampled or judged; the plan says what a run would do
        projection = plan_family(family, limit=None, progress=False)
        return {"report": None, "results": {}, "where": {}, "local": target.local, "plan": projection,
                "seconds": time.perf_counter() - start}
    with ExitStack() as held:
        held.enter_context(ctx.lock())  # one run of a family at a time: the build, the staged repos and the upload
        if target.local and not dry_run:  # one publish into this folder at a time, and what a stopped one left dealt with first
            held.enter_context(_locked_target(target.root, family.name))
        if sample is not None and not cards_only and not dry_run:
            sample(ctx)
        report, results = _stage_and_publish(ctx, target, cards_only=cards_only, dry_run=dry_run, allow_empty=allow_empty,
                                             token=token, progress=progress)
    if report is None:
        stats_file = ctx.paths.root / "repos" / family.repo_name("rejected") / "rs" / "stats.json"
        report = FamilyReport.from_dict(json.loads(stats_file.read_text()), where=str(stats_file))
    where = {split: target.where(family, split) for split in family.splits}
    return {"report": report, "results": results, "where": where, "local": target.local, "seconds": time.perf_counter() - start}
