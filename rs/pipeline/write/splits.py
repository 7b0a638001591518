"""The splits' parquet files, written by the `datasets` builder (`builders/`), each checked and sealed; kept while current.

    build/<FAMILY>/splits/<split>/train-NNNNN-of-NNNNN.parquet   one folder per split, sealed (`rs.util.checksums`)
    build/<FAMILY>/splits/splits.json                             their files and sizes, and the fingerprint they were written under

Splits written under the same fingerprint (`splits_fingerprint`) are kept: a re-run, a `--dry-run` or a publish resumed
after an upload failed does not rewrite gigabytes of parquet.
"""

from __future__ import annotations

import glob
import json
import logging
import os
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import pyarrow.parquet as pq

from rs.builders import builder_class
from rs.errors import RsError
from rs.pipeline.stage import fingerprint, replace_dir, scratch
from rs.pipeline.versions import ROUTE, splits_code_digest
from rs.pipeline.write.report import SplitSummary
from rs.store import write_json
from rs.util.checksums import seal
from rs.util.disk import writing
from rs.util.sizes import parse_bytes

if TYPE_CHECKING:
    from rs.context import BuildContext
    from rs.pipeline.recover import RecoveryReport
    from rs.pipeline.route import Routes
    from rs.pipeline.sample import SampleReport

logger = logging.getLogger(__name__)

MAX_ROW_GROUP_ROWS = 10_000
"""Rows per row group at most, however small the rows (the builder's `writer_batch_size`)."""


class RowGroupTooLarge(RsError, ValueError):
    """A written row group is over `shard.row_group_bytes`: the dataset viewer would refuse the file."""


def check_row_groups(files: Iterable[Path], limit: int) -> int:
    """The largest row group of `files` (uncompressed bytes, from the parquet metadata); raises if one is over `limit`."""
    largest = 0
    for path in files:
        meta = pq.ParquetFile(path).metadata
        for i in range(meta.num_row_groups):
            size = meta.row_group(i).total_byte_size
            if size > limit:
                raise RowGroupTooLarge(
                    f"{path}: row group {i} holds {size:,} bytes uncompressed ({meta.row_group(i).num_rows} rows), over "
                    f"shard.row_group_bytes ({limit:,}); raise shard.row_group_margin or lower shard.row_group_bytes in "
                    "families.yaml, then rebuild"
                )
            largest = max(largest, size)
    return largest


def write_split(ctx: BuildContext, split: str, qa_count: int, routes: Routes) -> SplitSummary:
    """Prepare one split with the datasets builder, its items routed by `routes`; returns its files and sizes."""
    out = ctx.paths.split(split)
    tmp = out.with_name(out.name + ".tmp")
    cls = builder_class(ctx.family.path)
    builder = cls(
        config_name=ctx.family.repo_name(split),
        dataset_name=ctx.family.repo_name(split),
        context=ctx,
        routes=routes,
        cache_dir=str(ctx.paths.root / "datasets-cache"),
        writer_batch_size=MAX_ROW_GROUP_ROWS,
    )
    with writing(f"the {split} split", tmp), scratch(tmp):
        builder.download_and_prepare(
            output_dir=str(tmp),
            file_format="parquet",
            max_shard_size=parse_bytes(ctx.family.config.shard.max_bytes),
            download_mode="force_redownload",
        )
        shards = sorted(tmp.glob("*.parquet"))
        names = [f"train-{i:05d}-of-{len(shards):05d}.parquet" for i in range(len(shards))]
        for shard, name in zip(shards, names):
            os.replace(shard, tmp / name)
        check_row_groups((tmp / n for n in names), parse_bytes(ctx.family.config.shard.row_group_bytes))
        info = builder.info.splits["train"]
        seal(tmp)
        replace_dir(tmp, out)
    for lock in out.parent.glob(f"{glob.escape(tmp.name)}*.lock"):  # the builder's file locks, released by now
        lock.unlink(missing_ok=True)
    return SplitSummary(
        repo=ctx.family.repo_name(split),
        rows=info.num_examples,
        qa=qa_count,
        shards=len(names),
        bytes=sum((out / n).stat().st_size for n in names),
        dataset_bytes=info.num_bytes,
        files=names,
    )


def write_splits(ctx: BuildContext, expected: str, qa: dict[str, int], routes: Routes) -> dict[str, SplitSummary]:
    """The family's splits as written under the fingerprint `expected`: kept when every file is still there, else written
    again (`qa`: each split's QA count), `splits.json` last, so that a stopped write is never taken for a complete one."""
    splits = written_splits(ctx, expected)
    if splits is not None:
        logger.info("%s: the splits are as this build would write them; kept", ctx.family.name)
        return splits
    ctx.paths.splits_report.unlink(missing_ok=True)
    splits = {split: write_split(ctx, split, qa[split], routes) for split in ctx.family.splits}
    with writing("splits.json", ctx.paths.splits_report):
        write_json(
            ctx.paths.splits_report, {"fingerprint": expected, "splits": {k: asdict(v) for k, v in splits.items()}}
        )
    return splits


def splits_fingerprint(ctx: BuildContext, sampled: SampleReport, recovered: RecoveryReport | None = None) -> str:
    """What the splits' bytes depend on: the sampled (and recovered) items and their routing (its version), the shard
    settings, the repo names, and the code and libraries that write them (`rs.pipeline.versions.SPLITS_CODE`: an edit elsewhere
    in `rs`, or a comment, rewrites nothing)."""
    extra: dict[str, Any] = {"recovery": recovered.fingerprint} if recovered is not None else {}
    c = ctx.family.config
    if c.question_types is not None:
        extra["question_types"] = asdict(c.question_types)
    if ctx.route_filter is not None:
        extra["filter"] = asdict(ctx.route_filter)
    if c.recovery is not None and c.recovery.difficulty.rl is not None:
        extra["rl"] = asdict(c.recovery.difficulty.rl)
    return fingerprint(
        {
            "sample": sampled.fingerprint,
            "promotes": sampled.promotes,
            "shard": asdict(ctx.family.config.shard),
            "repos": [ctx.family.repo_name(s) for s in ctx.family.splits],
            "route": ROUTE.version,
            "code": splits_code_digest(),
            **extra,
            "libraries": {d: library_version(d) for d in ("datasets", "pyarrow", "pillow")},
        }
    )


def library_version(dist: str) -> str | None:
    """The installed version of the distribution `dist`; None when it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def written_splits(ctx: BuildContext, expected: str) -> dict[str, SplitSummary] | None:
    """The splits of an earlier build with the same fingerprint, when every file it wrote is still there."""
    try:
        data = json.loads(ctx.paths.splits_report.read_text())
        if data.get("fingerprint") != expected:
            return None
        splits = {split: SplitSummary(**data["splits"][split]) for split in ctx.family.splits}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for split, summary in splits.items():
        try:
            size = sum((ctx.paths.split(split) / name).stat().st_size for name in summary.files)
        except OSError:  # a file gone
            return None
        if size != summary.bytes or not ctx.intact(ctx.paths.split(split), f"the {split} split", "the items store"):
            return None
    return splits
