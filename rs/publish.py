"""`python -m rs.publish FAMILY`: build the family if needed, render the cards, publish the three repos.

    python -m rs.publish TinyCLEVR                 # local folder (the embedded default: no GPU, network or token)
    python -m rs.publish CLEVRMath                 # the Hub: {namespace}/CLEVRMath_RS_think, ..._RS_nothink, ..._rejected
    python -m rs.publish CLEVRMath --out DIR       # a local folder laid out exactly as the Hub repos
    python -m rs.publish CLEVRMath --cards-only    # re-render and publish the three cards, nothing else
    python -m rs.publish CLEVRMath --dry-run       # what would be added, changed and deleted, with sizes

Each repo holds `README.md` (the card), `data/train-*.parquet`, `images/example-*` (the examples'
original files) and `rs/stats.json` + `rs/examples.json` (+ `rs/overturns.json` when the judge promoted
answers into the split): what the card was rendered from, so that `--cards-only` works on a machine
that did not run the build.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

from rs import cli
from rs.build import BuildContext, build_family, default_cache_path
from rs.cards import attach_image_paths, check_card, render_card, select_examples, select_overturns
from rs.families import Family, get_family
from rs.hub import FileChange, MissingTokenError, PublishError, PublishResult, format_plan, publish_folder
from rs.schema import SPLITS
from rs.store import write_json

logger = logging.getLogger("rs.publish")

CARD_FILES = ("README.md", "images/*")


class MissingBuildError(RuntimeError):
    """`--cards-only` without a build or a published repo to render from."""


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _card_inputs_from_build(ctx: BuildContext, split: str) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, str]]] | None:
    paths = ctx.paths
    if not paths.stats.exists() or not paths.split(split).exists():
        return None
    stats = json.loads(paths.stats.read_text())
    return stats, select_examples(paths.split(split), split), select_overturns(paths.split(split), split)


def stage_repo(ctx: BuildContext, split: str, staging: Path, *, cards_only: bool, published: Path | None = None) -> Path:
    """Lay out one repo exactly as on the Hub under `staging`; returns the repo folder."""
    family = ctx.family
    repo = staging / family.repo_name(split)
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "rs").mkdir(parents=True)
    inputs = _card_inputs_from_build(ctx, split)
    if inputs is not None:
        stats, examples, overturns = inputs
        for path, data in attach_image_paths(examples):
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_bytes(data)
        stored = [{k: v for k, v in e.items() if k != "image"} for e in examples]
        if not cards_only:
            for name in stats["splits"][split]["files"]:
                _link_or_copy(ctx.paths.split(split) / name, repo / "data" / name)
    elif cards_only and published is not None and (published / "rs" / "stats.json").exists():
        stats = json.loads((published / "rs" / "stats.json").read_text())
        stored = json.loads((published / "rs" / "examples.json").read_text())
        overturns_file = published / "rs" / "overturns.json"
        overturns = json.loads(overturns_file.read_text()) if overturns_file.exists() else []
        for example in stored:
            _link_or_copy(published / example["image_path"], repo / example["image_path"])
    else:
        raise MissingBuildError(
            f"no build of {family.name} in {ctx.paths.root} and no published repo to take its stats from; "
            f"run `python -m rs.publish {family.name}` without --cards-only first"
        )
    stats = {k: v for k, v in stats.items() if k != "run"}  # timings and engine calls differ from run to run
    write_json(repo / "rs" / "stats.json", stats)
    write_json(repo / "rs" / "examples.json", stored)
    if overturns:
        write_json(repo / "rs" / "overturns.json", overturns)
    c = family.config
    text = render_card(stats, dataclasses.asdict(c.card), c.instruction, split, c.publish.namespace, stored, overturns)
    (repo / "README.md").write_text(text, encoding="utf-8")
    if not cards_only:
        check_card(text, repo)
    return repo


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


def sync_local(repo: Path, target: Path, *, only: tuple[str, ...] | None, dry_run: bool) -> PublishResult:
    """The local target: make `target` identical to the staged repo (within `only`), touching only what differs."""
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
    if not dry_run:
        for change in changes:
            dst = target / change.path
            if change.action in ("add", "change"):
                dst.parent.mkdir(parents=True, exist_ok=True)
                tmp = dst.with_name(dst.name + ".tmp")
                shutil.copyfile(local[change.path], tmp)
                os.replace(tmp, dst)
            elif change.action == "delete":
                dst.unlink()
    return PublishResult(repo_id=target.as_posix(), changes=changes, commit_url=None)


def _download_card_inputs(repo_id: str, folder: Path, token: str | None) -> Path | None:
    """What a card is rendered from (rs/stats.json, rs/examples.json, rs/overturns.json, the example images), from a published repo."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    try:
        snapshot_download(repo_id, repo_type="dataset", allow_patterns=["rs/*", "images/*"], local_dir=folder, token=token)
    except (RepositoryNotFoundError, HfHubHTTPError) as err:
        logger.warning("could not read the card inputs of %s: %s", repo_id, err)
        return None
    return folder


def publish(family: Family, *, out: Path | None = None, cards_only: bool = False, dry_run: bool = False, limit: int | None = None,
            build_root: Path | None = None, cache_path: Path | None = None, progress: bool = True, token: str | None = None,
            engine_factory: Any = None, sample: Callable[[BuildContext], Any] | None = None) -> dict[str, Any]:
    """Build (unless cards only), stage and publish the three repos; returns a summary.

    `sample` runs the sampling stage first in another way (`rs.distributed.sample_on_ray`); the
    build then finds it done.
    """
    start = time.perf_counter()
    c = family.config
    ctx = BuildContext(family, Path(build_root or os.environ.get("RS_BUILD_DIR", "build")), cache_path or default_cache_path(),
                       limit=limit, progress=progress, engine_factory=engine_factory)
    local = out is not None or c.publish.target == "local"
    root = Path(out if out is not None else c.publish.local_dir) / c.publish.namespace
    if not local and not dry_run:
        from rs.hub import resolve_token

        token = resolve_token(token)  # fail before a long build, not after
    if sample is not None and not cards_only:
        sample(ctx)
    stats = None if cards_only else build_family(ctx)
    staging = ctx.paths.root / "repos"
    only = CARD_FILES if cards_only else None
    results = {}
    for split in SPLITS:
        repo_name = family.repo_name(split)
        published = root / repo_name if local else None
        if cards_only and not local and not ctx.paths.stats.exists():
            published = _download_card_inputs(f"{c.publish.namespace}/{repo_name}", ctx.paths.root / "published" / repo_name, token)
        repo = stage_repo(ctx, split, staging, cards_only=cards_only, published=published)
        if local:
            results[split] = sync_local(repo, root / repo_name, only=only, dry_run=dry_run)
        else:
            results[split] = publish_folder(repo, f"{c.publish.namespace}/{repo_name}", token=token, private=c.publish.private,
                                            only=only, dry_run=dry_run, commit_message=f"rs: publish {repo_name}")
    stats = stats or json.loads((staging / family.repo_name("rejected") / "rs" / "stats.json").read_text())
    where = {split: (str(root / family.repo_name(split)) if local else f"https://huggingface.co/datasets/{c.publish.namespace}/{family.repo_name(split)}")
             for split in SPLITS}
    return {"stats": stats, "results": results, "where": where, "local": local, "seconds": time.perf_counter() - start}


def summary(family: Family, outcome: dict[str, Any], *, dry_run: bool) -> str:
    stats, t = outcome["stats"], outcome["stats"]["totals"]
    cal = stats["judge"]["calibration"]
    from rs.cards import pct

    lines = [f"{family.name}: {t['source_qa']:,} source QA, {t['dropped_by_cleaning']:,} dropped by cleaning, "
             f"{t['accepted']:,} accepted ({t['accepted_by']['verifier']:,} by the verifier, {t['accepted_by']['judge']:,} by the judge), "
             f"{t['rejected']:,} rejected; accept rate {pct(t['accept_rate'])}"]
    reasons = ", ".join(f"{k} {v:,}" for k, v in t["rejected_by_reason"].items() if v)
    lines.append(f"  rejected by reason: {reasons or 'none'}")
    if cal:
        def check(name: str) -> str:
            c = cal[name]
            return f"{c['agreed']}/{c['total']} [{pct(c['low'])}, {pct(c['high'])}]" if c["total"] else "0/0"

        lines.append(f"  judge calibration: positives {check('positive')}, easy negatives {check('easy')}, "
                     f"hard negatives {check('hard')}, certain rejections {check('certain')}; "
                     + ("promotes" if cal["promotes"] else f"BLOCKED ({cal['blocked_reason']})"))
    for split in SPLITS:
        s = stats["splits"][split]
        result = outcome["results"][split]
        counts = {a: sum(1 for ch in result.changes if ch.action == a) for a in ("add", "change", "delete", "unchanged")}
        lines.append(f"  {s['repo']}: {s['rows']:,} rows, {s['qa']:,} QA, {s['shards']} shards -> {outcome['where'][split]} "
                     f"({counts['add']} added, {counts['change']} changed, {counts['delete']} deleted, {counts['unchanged']} unchanged)")
        if dry_run:
            lines.append(format_plan(result.changes))
    lines.append("  cards: " + ", ".join(f"{outcome['where'][s]}/README.md" for s in SPLITS) if outcome["local"] else "")
    lines.append(f"  done in {outcome['seconds']:.1f}s" + (" (dry run: nothing was changed)" if dry_run else ""))
    return "\n".join(line for line in lines if line)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m rs.publish", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("family")
    cli.add_config(parser)
    cli.add_out(parser)
    cli.add_cards_only(parser)
    cli.add_dry_run(parser)
    cli.add_limit(parser)
    cli.add_build_paths(parser)
    cli.add_ray(parser)
    args = parser.parse_args()
    if args.ray is not None and args.cards_only:
        parser.error("--cards-only samples nothing: drop --ray")
    if (code := cli.check_ray(parser, args)) is not None:
        return code
    family = get_family(args.family, args.config)
    sample, ray_errors = None, ()
    if args.ray is not None:
        from rs.distributed import RayPlanError, forwarded_env, sample_on_ray

        sample = functools.partial(sample_on_ray, address=args.ray or None, replicas=args.replicas,
                                   runtime_env={"env_vars": forwarded_env()})
        ray_errors = (RayPlanError, RuntimeError)  # RuntimeError: RayIncomplete, a failed pipeline
    try:
        outcome = publish(family, out=args.out, cards_only=args.cards_only, dry_run=args.dry_run, limit=args.limit,
                          build_root=args.build_dir, cache_path=args.cache, progress=sys.stderr.isatty(), sample=sample)
    except (MissingTokenError, MissingBuildError, PublishError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ray_errors as err:  # a plan Ray cannot run (2), or a Ray run that failed or is incomplete (1): its answers stay cached
        print(f"error: {err}", file=sys.stderr)
        return 2 if isinstance(err, ValueError) else 1
    print(summary(family, outcome, dry_run=args.dry_run))
    return 0


if __name__ == "__main__":
    cli.run(main)
