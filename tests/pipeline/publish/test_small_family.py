"""A small family from local files, built and published in the suite: its cards show the duplicate rules and the empty splits.

The answers are replayed (every one wrong), so the accepted splits are empty: what `datasets` does with them,
what the command and the cards say, and that a publish to the Hub refuses them unless asked.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from family_yaml import REPLAY, family_yaml
from PIL import Image

from rs.families import load_families
from rs.pipeline.publish.repo_check import EmptySplitError
from rs.pipeline.publish.stage import publish
from rs.splits_schema import features

# (image, question, answer): a duplicate written differently on A, a conflicting one on B (purple, then yellow)
RECORDS = [
    ("A", "What color is the square?", "purple"),
    ("A", "what color is the square ?", "purple"),
    ("A", "How many shapes?", "2"),
    ("B", "What color is the square?", "purple"),
    ("B", "What  color is the square ? ", "yellow"),
    ("B", "Is there a circle?", "yes"),
    ("C", "How many shapes?", "3"),
]


def _image(name: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (16, 16), {"A": (200, 0, 0), "B": (0, 200, 0), "C": (0, 0, 200)}[name]).save(out, "PNG")
    return out.getvalue()


@pytest.fixture()
def family(tmp_path: Path):
    (tmp_path / "data").mkdir()
    rows = [{"image": {"bytes": _image(i), "path": None}, "question": q, "answer": a} for i, q, a in RECORDS]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data" / "shapes.parquet")
    with open(tmp_path / "answers.jsonl", "w") as fh:  # every answer wrong
        for n in range(len(RECORDS)):
            fh.write(json.dumps({"key": f"{n}#0", "text": "<think>\nI look at it.\n</think>\n\nbanana"}) + "\n")
    (tmp_path / "families.yaml").write_text(
        family_yaml("SmallShapes", REPLAY, judge={"enabled": False}, card={"pretty_name": "Small Shapes"})
    )
    return load_families(tmp_path / "families.yaml")["SmallShapes"]


@pytest.mark.slow
def test_duplicates_and_empty_splits_are_decided_on_purpose_and_shown_on_the_cards(
    family, tmp_path: Path, capsys
) -> None:
    from rs.cli.publish import main

    paths = ["--build-dir", str(tmp_path / "build"), "--cache", str(tmp_path / "cache.sqlite")]
    assert main(["SmallShapes", "--config", str(family.path), "--out", str(tmp_path / "out"), *paths]) == 0
    said = capsys.readouterr().out
    assert "SmallShapes: 7 source QA, 3 dropped by cleaning, 0 accepted" in said
    assert (
        "warning: SmallShapes_RS_think is empty: datasets.load_dataset cannot load a split with no rows (streaming=True reads "
        "it as empty); to the Hub it is published only with --allow-empty"
    ) in said
    stats = json.loads((tmp_path / "build" / "SmallShapes" / "stats.json").read_text())
    assert stats["cleaning"]["dropped"] == {"conflicting_duplicate": 2, "duplicate_qa": 1}
    exclusions = [
        json.loads(line) for line in (tmp_path / "build" / "SmallShapes" / "exclusions.jsonl").read_text().splitlines()
    ]
    assert sorted((e["reason"], e["answer"]) for e in exclusions) == [
        ("conflicting_duplicate", "purple"),
        ("conflicting_duplicate", "yellow"),
        ("duplicate_qa", "purple"),
    ]

    repos = tmp_path / "out" / "local"
    rejected = (repos / "SmallShapes_rejected" / "README.md").read_text()
    assert "when its copies give different answers the ground truth is in doubt, and every copy is dropped" in rejected
    assert "`conflicting_duplicate` 2, `duplicate_qa` 1" in rejected
    for split, name in (("think", "SmallShapes_RS_think"), ("nothink", "SmallShapes_RS_nothink")):
        card = (repos / name / "README.md").read_text()
        assert "**This split is empty in this build**: no accepted question." in card
        assert "the publisher's own local parquet files (not on the Hub)" in card
        with pytest.raises(ValueError, match="corresponds to no data"):  # what the card says datasets does
            datasets.load_dataset(str(repos / name), split="train")
        stream = datasets.load_dataset(str(repos / name), split="train", streaming=True)
        assert list(stream) == [] and stream.features == features(split)
    for card in repos.rglob("README.md"):  # a card meant for the Hub names no path of this machine
        assert str(tmp_path) not in card.read_text() and "shapes.parquet" not in card.read_text()
    assert "(one per image; 4 records repeated an image already seen and were merged into its row)" in rejected

    family.config.publish.target = "hub"  # the same build on its way to the Hub: refused before anything is uploaded
    with pytest.raises(
        EmptySplitError, match=r"SmallShapes_RS_think, SmallShapes_RS_nothink would have no rows"
    ) as err:
        publish(
            family,
            build_root=tmp_path / "build",
            cache_path=tmp_path / "cache.sqlite",
            progress=False,
            token="hf_test",
            allow_empty=False,
        )
    assert "--allow-empty" in err.value.hint and err.value.exit_code == 2


def test_reasoning_that_concludes_otherwise_stays_out_of_the_think_split(family, tmp_path: Path, capsys) -> None:
    """Only the final answer is verified; the reasoning's own conclusion (its last count) is checked against it."""
    from rs.cli.publish import main

    answers = {
        2: "<think>\nThere are 3 shapes.\n</think>\n\n2",  # right answer, reasoning that counts 3
        6: "<think>\nI count 3 shapes.\n</think>\n\n3",
    }  # right answer, reasoning that agrees
    with open(tmp_path / "answers.jsonl", "w") as fh:
        for n in range(len(RECORDS)):
            fh.write(
                json.dumps({"key": f"{n}#0", "text": answers.get(n, "<think>\nI look.\n</think>\n\nbanana")}) + "\n"
            )
    paths = ["--build-dir", str(tmp_path / "build"), "--cache", str(tmp_path / "cache.sqlite")]
    assert main(["SmallShapes", "--config", str(family.path), "--out", str(tmp_path / "out"), *paths]) == 0
    assert "2 accepted (2 by the verifier" in capsys.readouterr().out
    repos = tmp_path / "out" / "local"
    think = datasets.load_dataset(str(repos / "SmallShapes_RS_think"), split="train")
    nothink = datasets.load_dataset(str(repos / "SmallShapes_RS_nothink"), split="train")
    assert [qa["answer"] for row in think for qa in row["qa"]] == ["3"]
    assert sorted(qa["answer"] for row in nothink for qa in row["qa"]) == ["2", "3"]
    card = (repos / "SmallShapes_RS_think" / "README.md").read_text()
    assert (
        "Only the final answer is verified: the reasoning is not, beyond one check. The last value of the answer's kind "
        "that the reasoning states is its conclusion;"
    ) in card
    assert (
        "; 1 accepted answer had reasoning that concluded another value, kept out of the think split (in the nothink split only)."
        in card
    )
