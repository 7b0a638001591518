"""Row groups the dataset viewer can read: sized from the rows actually written, checked after writing."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from family_yaml import MINIMAL, family_yaml

from rs.context import BuildContext
from rs.families import load_families
from rs.pipeline.build import build_family
from rs.pipeline.clean.stage import CleanStage
from rs.pipeline.stage import ensure
from rs.pipeline.write.splits import RowGroupTooLarge, check_row_groups
from rs.store import read_clean_rows

FAMILY = family_yaml(
    "Long",
    MINIMAL,
    source={"seed": 2, "num_images": 24, "questions_per_image": 3, "style": "mixed"},
    instruction=" Answer briefly.",
    model={"id": "replayed/model"},
    engine={"kind": "replay", "replay_path": "replay.jsonl"},
    judge={"enabled": False},
    shard={"row_group_bytes": "2MB", "row_group_margin": 0.2},
    card={"pretty_name": "Long", "citation": "c"},
)
LIMIT = 2 * 1000 * 1000


def test_rows_with_long_reasoning_stay_under_the_row_group_limit(tmp_path: Path) -> None:
    (tmp_path / "families.yaml").write_text(FAMILY)
    family = load_families(tmp_path / "families.yaml")["Long"]
    ctx = BuildContext(family, tmp_path / "build", tmp_path / "cache.sqlite", progress=False)
    ensure(CleanStage(), ctx)
    rng = random.Random(0)
    lines = []
    for row in read_clean_rows(ctx.paths.clean):
        for q in row.qa:  # right answers after 20-60 KB of reasoning: every row lands in the accepted splits
            thought = "".join(rng.choices(string.ascii_letters + " ", k=rng.randint(20_000, 60_000)))
            lines.append(json.dumps({"key": q.key, "text": f"<think>{thought}</think>{q.answer}"}))
    (tmp_path / "replay.jsonl").write_text("\n".join(lines))
    report = build_family(ctx)

    sizes = {}
    for split in ("think", "nothink", "rejected"):
        files = sorted(ctx.paths.split(split).glob("*.parquet"))
        groups = [
            pq.ParquetFile(f).metadata.row_group(i)
            for f in files
            for i in range(pq.ParquetFile(f).metadata.num_row_groups)
        ]
        sizes[split] = [g.total_byte_size for g in groups]
        assert all(size <= LIMIT for size in sizes[split]), (split, sizes[split])
        assert sum(g.num_rows for g in groups) == report.splits[split].rows
    # the reasoning split needs several groups (rows of about 250 KB), each filled close to the target: 0.8 x 2 MB
    assert len(sizes["think"]) >= 3 and max(sizes["think"]) > 0.6 * 0.8 * LIMIT, sizes["think"]
    assert len(sizes["think"]) > len(sizes["nothink"])  # the same rows without their reasoning fit in fewer
    print({split: (len(s), max(s, default=0)) for split, s in sizes.items()})


def test_a_row_group_over_the_limit_is_an_error_that_names_it(tmp_path: Path) -> None:
    path = tmp_path / "train-00000-of-00001.parquet"
    rng = random.Random(1)
    table = pa.table({"text": ["".join(rng.choices(string.ascii_letters, k=1000)) for _ in range(200)]})
    pq.write_table(table, path, row_group_size=100)  # two groups of about 100 KB each
    assert 100_000 < check_row_groups([path], limit=200_000) <= 200_000
    with pytest.raises(
        RowGroupTooLarge,
        match=r"train-00000-of-00001\.parquet: row group 0 holds [0-9,]+ bytes uncompressed "
        r"\(100 rows\), over shard\.row_group_bytes \(50,000\)",
    ):
        check_row_groups([path], limit=50_000)
