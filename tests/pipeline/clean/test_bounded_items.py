"""One bad item never blocks a family: text past the bounds and a row too large to publish are dropped in cleaning
with reasons of their own, recorded and counted, and the rest of the family is built."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image
from replay_family import write_family

from rs.context import BuildContext
from rs.pipeline.build import build_family
from rs.pipeline.clean.base import RECORDED_CHARS
from rs.pipeline.clean.filters import MAX_ANSWER_CHARS, MAX_QUESTION_CHARS
from rs.pipeline.clean.stage import CleanStage
from rs.pipeline.stage import ensure

CASES = [
    ("How many shapes?", "2", "2", []),
    ("How many triangles? " + "very " * 200_000 + "long", "4", "4", []),  # a million characters
    ("How many circles?", "3" * (MAX_ANSWER_CHARS + 1), "3", []),
    ("How many squares?", "1", "1", []),
    ("Is there a circle?", "yes", "yes", []),
]


def _exclusions(ctx: BuildContext) -> list[dict]:
    return [json.loads(line) for line in (ctx.paths.root / "exclusions.jsonl").read_text().splitlines()]


def test_a_question_or_answer_past_its_bound_is_dropped_with_its_own_reason(tmp_path: Path) -> None:
    family = write_family(tmp_path, CASES, judge={"enabled": False})
    ctx = BuildContext(family, tmp_path / "build", tmp_path / "cache.sqlite", progress=False)
    report = ensure(CleanStage(), ctx)
    assert report.dropped == {"question_too_long": 1, "answer_too_long": 1}
    assert report.steps["required_fields"].dropped == {"question_too_long": 1, "answer_too_long": 1}
    assert report.kept_items == 3
    (long,) = [e for e in _exclusions(ctx) if e["reason"] == "question_too_long"]
    assert long["key"] == "1#0" and len(CASES[1][0]) > MAX_QUESTION_CHARS
    assert len(long["question"]) < RECORDED_CHARS + 100 and "characters, cut at" in long["question"]


def _noise_png(side: int) -> bytes:
    rng = random.Random(side)
    image = Image.frombytes("RGB", (side, side), bytes(rng.getrandbits(8) for _ in range(side * side * 3)))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def test_a_row_too_large_to_publish_is_excluded_and_the_family_is_built(tmp_path: Path) -> None:
    """One image larger than a row group (row_group_bytes 200KB): before, the write refused the family's rejected split
    (RowGroupTooLarge) after sampling; now cleaning drops that row as `row_too_large` and the four others publish."""
    cases = [(q, a, g, s) for q, a, g, s in CASES if len(q) < 100 and len(a) < 100] + [
        ("How many stars?", "0", "0", [])
    ]
    family = write_family(tmp_path, cases, judge={"enabled": False}, shard={"row_group_bytes": "200KB"})
    data = tmp_path / "data" / "shapes.parquet"
    table = pq.read_table(data).to_pylist()
    big = _noise_png(300)
    assert len(big) > 200_000
    table[1]["image"] = {"bytes": big, "path": None}
    pq.write_table(pa.Table.from_pylist(table), data)
    ctx = BuildContext(family, tmp_path / "build", tmp_path / "cache.sqlite", progress=False)
    report = build_family(ctx)
    assert sum(report.splits[split].rows for split in ("nothink", "rejected")) == len(cases) - 1
    (excluded,) = [e for e in _exclusions(ctx) if e["reason"] == "row_too_large"]
    assert excluded["key"] == "1#0" and excluded["step"] == "row_size"
    assert "over 80,000" in excluded["detail"]  # half of 200 KB less its 20% margin
    assert json.loads(ctx.paths.clean_report.read_text())["dropped"] == {"row_too_large": 1}


def test_a_row_within_its_share_is_kept(tmp_path: Path) -> None:
    family = write_family(tmp_path, CASES[:1], judge={"enabled": False}, shard={"row_group_bytes": "200KB"})
    ctx = BuildContext(family, tmp_path / "build", tmp_path / "cache.sqlite", progress=False)
    report = ensure(CleanStage(), ctx)
    assert report.kept_items == 1 and report.steps["row_size"].seen == 1 and not report.dropped
