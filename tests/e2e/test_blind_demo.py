"""The no-image pass in `make demo` (TinyCLEVR turns `blind:` on): every split records each question's no-image answer,
every card states the share right without the image, `rs audit` checks those numbers against the rows, and a number
edited in the stats or a mark flipped in the rows is a finding."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rs.audit import audit

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SPLITS = ("TinyCLEVR_RS_think", "TinyCLEVR_RS_nothink", "TinyCLEVR_rejected")


def _qa(repo: Path) -> list[dict]:
    return [
        qa
        for shard in sorted((repo / "data").glob("*.parquet"))
        for row in pq.read_table(shard).to_pylist()
        for qa in row["qa"]
    ]


def test_every_split_records_the_no_image_answer_and_every_card_the_share(tinyclevr_published) -> None:
    local = tinyclevr_published.work / "out" / "local"
    stats = json.loads((local / "TinyCLEVR_RS_think" / "rs" / "stats.json").read_text())
    blind = stats["blind"]
    assert blind["settings"]["rotations"] == 4 and blind["questions"] == stats["totals"]["answered"]
    assert blind["types"] and sum(t["questions"] for t in blind["types"].values()) == blind["questions"]
    for name in SPLITS:
        qa = _qa(local / name)
        assert qa and all(
            set(q["blind"]) == {"answer", "right", "passed", "k", "marked"} and q["blind"]["k"] >= 1 for q in qa
        )
        # a multiple-choice question is asked in up to 4 rotations, any other once (no samples in the demo)
        assert all(q["blind"]["k"] == 1 or re.search(r"\n[A-J]\. [^\n]+\n", q["question"]) for q in qa)
    marked = sum(
        q["blind"]["marked"] for name in ("TinyCLEVR_RS_nothink", "TinyCLEVR_rejected") for q in _qa(local / name)
    )
    assert marked == blind["marked"]
    for name in (*SPLITS, "TinyCLEVR_RS_pairs"):
        card = (local / name / "README.md").read_text()
        assert f"**Right without the image.** {blind['marked']} of the {blind['questions']} questions answered" in card
        assert audit(local / name).ok


def test_an_edited_no_image_number_fails_the_audit(tinyclevr_published, tmp_path: Path) -> None:
    local = tmp_path / "local"
    shutil.copytree(tinyclevr_published.work / "out" / "local", local)
    repo = local / "TinyCLEVR_RS_think"
    stats_file = repo / "rs" / "stats.json"
    stats = json.loads(stats_file.read_text())
    stats["blind"]["right"] += 1
    stats_file.write_text(json.dumps(stats, indent=2))
    result = audit(repo)
    assert not result.ok and "blind.right" in result.render()

    # a mark flipped in the rejected split's rows: the counts the cards state no longer hold
    rejected = local / "TinyCLEVR_rejected"
    shard = next((rejected / "data").glob("*.parquet"))
    table = pq.read_table(shard)
    rows = table.to_pylist()
    rows[0]["qa"][0]["blind"]["marked"] = not rows[0]["qa"][0]["blind"]["marked"]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    result = audit(rejected)
    assert not result.ok and "right without the image" in result.render()
