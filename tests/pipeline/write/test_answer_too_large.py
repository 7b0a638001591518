"""One bad item never blocks a family, even when what makes its row too large is the model's own text: an answer whose
reasoning and answer would take more than its row's part of a row group is rejected `answer_too_large` (its question
and reference published, no answer), counted like every reason, and the family is written and passes its audit."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
from faults import engine_kinds_installed
from replay_family import publish_in, repos_of, write_family

from rs.audit import Replay, audit
from rs.pipeline.route import ANSWER_TOO_LARGE

LONG = "<think>\n" + "I count the squares one by one, again. " * 3_000 + "\n</think>\n\n1"
"""An answer of some 117 KB of reasoning: with `row_group_bytes` 200KB (a target of 160,000 bytes, of which cleaning
leaves the model 80,000), the think split would publish it twice in one row."""


def split_qa(repo: Path) -> list[dict]:
    """Every QA entry of a one-shard repo, in row order."""
    return [q for r in pq.read_table(next((repo / "data").glob("*.parquet"))).to_pylist() for q in r["qa"]]


CASES = [
    ("How many shapes?", "2", "2", []),
    ("How many squares?", "1", LONG, []),
    ("Is there a circle?", "yes", "no", []),
]


def test_a_row_pushed_over_its_row_group_by_the_answer_is_rejected_with_its_reason(tmp_path: Path) -> None:
    """Before, the think split's row group held 234,000 bytes, over `shard.row_group_bytes` (RowGroupTooLarge): the whole
    family failed after sampling. Now that item alone is rejected `answer_too_large`."""
    family = write_family(tmp_path, CASES, judge={"enabled": False}, shard={"row_group_bytes": "200KB"})
    repos = repos_of(publish_in(tmp_path, family))

    def qa(split: str) -> list[dict]:
        return split_qa(repos[split])

    assert [q["question"].split("\n")[0] for q in qa("think")] == ["How many shapes?"]
    (rejected,) = [q for q in qa("rejected") if q["reason"] == ANSWER_TOO_LARGE]
    assert rejected["question"].startswith("How many squares?") and rejected["answer"] == "1"
    assert rejected["wrong_vlm"] == ""
    assert [q["reason"] for q in qa("rejected")].count("wrong_answer") == 1
    assert f"`{ANSWER_TOO_LARGE}`" in (repos["rejected"] / "README.md").read_text()
    replay = Replay(10, config=tmp_path / "families.yaml", cache=tmp_path / "cache.sqlite")
    for split in ("think", "rejected"):  # the counts from the stores, and the rejection re-derived from the cache
        result = audit(repos[split], build=tmp_path / "build" / "Shapes", replay=replay)
        assert result.ok, result.render()
    assert "3 questions" in "\n".join(result.notes), result.notes


RAMBLING = "<think>\nI cannot see it.\n</think>\n\n" + " ".join(f"perhaps{i}" for i in range(25_000))
"""A no-image final answer of some 260 KB, over `row_group_bytes` (200KB) alone."""


def test_a_row_pushed_over_its_row_group_by_the_no_image_answer_is_rejected_with_its_reason(tmp_path: Path) -> None:
    """With `blind:`, every split's QA carries the no-image answer as well. Before, it was not counted: the question's
    right answer fitted, and its think row held the no-image answer, some 260,000 bytes (RowGroupTooLarge). Now the
    question is rejected `answer_too_large`, published with neither answer; its no-image measures stay."""
    with engine_kinds_installed():  # the engine kind `blind_replay` (tests/plugins/rs_faults.py)
        family = write_family(
            tmp_path,
            [CASES[0], ("How many squares?", "1", "1", []), CASES[2]],  # its answer small and right
            judge={"enabled": False},
            blind={},
            shard={"row_group_bytes": "200KB"},
            engine={"kind": "blind_replay", "replay_path": "answers.jsonl", "blind_path": "blind.jsonl"},
        )
        blind = ["3", RAMBLING, "yes"]  # answered without the image: wrong, rambling, right
        (tmp_path / "blind.jsonl").write_text(
            "".join(json.dumps({"key": f"{n}#0", "text": t}) + "\n" for n, t in enumerate(blind))
        )
        repos = repos_of(publish_in(tmp_path, family))

        def qa(split: str) -> list[dict]:
            return split_qa(repos[split])

        assert [q["question"].split("\n")[0] for q in qa("think")] == ["How many shapes?"]
        (rejected,) = [q for q in qa("rejected") if q["reason"] == ANSWER_TOO_LARGE]
        assert rejected["question"].startswith("How many squares?") and rejected["wrong_vlm"] == ""
        assert rejected["blind"] == {"answer": "", "right": False, "passed": 0, "k": 1, "marked": False}
        (circle,) = [q for q in qa("rejected") if q["reason"] == "wrong_answer"]
        assert circle["blind"] == {"answer": "yes", "right": True, "passed": 1, "k": 1, "marked": True}
        replay = Replay(10, config=tmp_path / "families.yaml", cache=tmp_path / "cache.sqlite")
        for split in ("think", "nothink", "rejected"):  # the no-image counts from the rows; each entry re-derived
            result = audit(repos[split], build=tmp_path / "build" / "Shapes", replay=replay)
            assert result.ok, result.render()
