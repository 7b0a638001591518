"""Where the recovery pass sends each item, on a family whose answers are known (the replay engine): no model needed.

Five questions about five images, each meeting the recovery pass in another way: accepted greedily and sampled for
its difficulty, recovered by a sample, never recovered, cut off greedily and recovered (`cut_off`), always right.
"""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest

from rs.pipeline.publish.stage import publish

pytestmark = pytest.mark.slow

JUDGE = {"enabled": False}
RECOVERY = {"samples": 2, "temperature": 0.7, "cut_off": True, "difficulty": {"samples": 2}, "pairs": True}

# question, reference, greedy answer (None: cut off), the two samples at temperature 0.7
CASES = [
    (
        "How many shapes?",
        "2",
        "2",
        ["2", "5"],
    ),  # accepted; sampled for its difficulty: pass rate 0.5; a pair (sample 1 wrong)
    ("How many triangles?", "4", "6", ["6", "4"]),  # wrong (for certain), recovered by sample 1: pass rate 0.5; a pair
    (
        "Is there a circle?",
        "yes",
        "banana",
        ["banana", "banana"],
    ),  # undecided, no judge: wrong_answer; never recovered
    ("How many circles?", "3", None, ["3", "3"]),  # cut off; recovered (cut_off): pass rate 1, no wrong answer to pair
    ("How many squares?", "1", "1", ["1", "1"]),  # accepted, always right: pass rate 1, no pair
]


def test_every_way_through_the_recovery_pass(tmp_path: Path, family) -> None:
    outcome = publish(
        family(CASES, judge=JUDGE, recovery=RECOVERY),
        out=tmp_path / "out",
        build_root=tmp_path / "build",
        cache_path=tmp_path / "cache.sqlite",
        progress=False,
    )
    report, repos = outcome.report, {split: Path(where) for split, where in outcome.where.items()}

    nothink = {
        qa["question"].split("\n")[0]: qa
        for row in datasets.load_dataset(str(repos["nothink"]), split="train")
        for qa in row["qa"]
    }
    assert {
        q: (qa["accepted_by"], qa["sample"], qa["pass_rate"], qa["k"], qa["greedy_answer"])
        for q, qa in nothink.items()
    } == {
        "How many shapes?": ("verifier", None, 0.5, 2, None),
        "How many triangles?": ("recovery", 1, 0.5, 2, "6"),
        "How many circles?": ("recovery", 0, 1.0, 2, ""),
        "How many squares?": ("verifier", None, 1.0, 2, None),
    }
    assert nothink["How many triangles?"]["seed"] == 1 and nothink["How many triangles?"]["temperature"] == 0.7
    assert nothink["How many shapes?"]["seed"] == 0 and nothink["How many shapes?"]["temperature"] == 0.0
    rejected = [qa for row in datasets.load_dataset(str(repos["rejected"]), split="train") for qa in row["qa"]]
    assert [(qa["reason"], qa["wrong_vlm"], qa["pass_rate"], qa["k"]) for qa in rejected] == [
        ("wrong_answer", "banana", 0.0, 2)
    ]

    r = report.recovery
    assert report.totals.accepted_by == {"verifier": 2, "judge": 0, "recovery": 2} and report.totals.rejected == 1
    assert (r.greedy_accepted, r.recovered, r.still_rejected) == (2, 2, 1)
    assert list(r.sampled.items()) == [("rejected", 2), ("cut_off", 1), ("difficulty", 2)] and r.samples == 10
    assert (r.greedy_accept_rate, r.accept_rate) == (2 / 5, 4 / 5)
    assert r.pass_rates == {
        "greedy_accepted": [0, 0, 1, 0, 0, 1],
        "recovered": [0, 0, 1, 0, 0, 1],
        "rejected": [1, 0, 0, 0, 0, 0],
    }
    assert r.pairs["pairs"] == 2 and r.pairs["unpaired"] == {"no_wrong_answer": 2}

    pairs = datasets.load_dataset(str(repos["pairs"]), split="train")
    assert [
        (
            p["question"].split("\n")[0],
            p["chosen_answer"],
            p["chosen_from"],
            p["rejected_answer"],
            p["rejected_from"],
            p["rejected_sample"],
            p["rejected_reason"],
        )
        for p in pairs
    ] == [
        ("How many shapes?", "2", "greedy", "5", "sample", 1, "certain"),
        ("How many triangles?", "4", "sample", "6", "greedy", None, "certain"),
    ]
    card = (repos["think"] / "README.md").read_text()
    assert (
        "| accept rate, greedy pass (temperature 0) | 40.0% |" in card
        and "| accept rate after recovery | **80.0%** |" in card
    )
    assert "| (0.25, 0.5] | 1 | 1 | 0 |" in card and "| 1 | 1 | 1 | 0 |" in card and "| 0 | 0 | 0 | 1 |" in card
    assert (
        "Sampled: 2 rejected with a final answer, 1 cut off or looping, 2 accepted (for their pass rate); 10 samples in all. "
        "The verifier accepted 6 samples, found 2 certainly wrong and left 2 undecided."
    ) in card
    summary_card = (repos["pairs"] / "README.md").read_text()
    assert (
        "2 pairs over 2 images" in summary_card
        and "2 accepted questions with samples had no certainly wrong response" in summary_card
    )
