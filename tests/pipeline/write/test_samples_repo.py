"""The samples and RL repos, question types and `rs refilter`, on a family whose answers are known (the replay engine).

Six questions about six images, typed by rules over their form; every question is sampled (`difficulty`), so every
one has a pass rate. One build is published once; the refilter test re-routes the same stores.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
from family_yaml import DROP, REPLAY, family_yaml, merged
from replay_family import differ_by_the_source_alone, publish_in, write_family

from rs.cli.main import main as rs_main
from rs.families import load_families
from rs.pipeline.route import RouteFilter
from rs.pipeline.write.samples import LAYOUT, rl_numbers, samples_numbers

BLOCKS = {
    "judge": {"enabled": False},
    "recovery": {"samples": 2, "temperature": 0.7, "cut_off": True, "difficulty": {"samples": 2, "rl": {}}},
    "question_types": {
        "rules": [{"type": "count", "pattern": "^how many"}, {"type": "exist", "pattern": "^is there"}]
    },
    "publish": {"samples": True},
}

DISAGREES = "<think>\nI count carefully and conclude 7.\n</think>\n\n2"
"""A right final answer whose reasoning concludes another value: in the nothink split only (the family's rule)."""

# question, reference, greedy answer (None: cut off; a full text when it starts with <think>), the two samples
CASES = [
    ("How many shapes?", "2", "2", ["2", "5"]),  # accepted; pass rate 0.5: for RL
    ("How many triangles?", "4", "6", ["6", "4"]),  # recovered by sample 1: pass rate 0.5: for RL
    ("Is there a circle?", "yes", "banana", ["banana", "banana"]),  # undecided, never recovered: pass rate 0
    ("How many circles?", "3", None, ["3", "3"]),  # cut off, recovered: pass rate 1
    ("How many squares?", "1", "1", ["1", "1"]),  # accepted, always right: pass rate 1
    ("What colour is the sky?", "2", DISAGREES, ["2", "2"]),  # accepted, reasoning disagrees; type `other`
]


def _family(tmp_path: Path):
    return write_family(tmp_path, CASES, **BLOCKS)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("shapes")
    family = _family(tmp_path)
    outcome = publish_in(tmp_path, family)
    return tmp_path, family, outcome


def _fresh(built) -> str:
    """A datasets cache of this module's own: in ~/.cache, `datasets` may serve an earlier run's table under the same hash."""
    return str(built[0] / "hf-datasets")


def _question(row: dict) -> str:
    return row["question"].split("\n")[0]


def test_samples_repo_holds_every_generation_and_its_card_is_measured_from_its_files(built) -> None:
    _, family, outcome = built
    repo = Path(outcome.where["samples"])
    assert repo.name == "Shapes_RS_samples"
    rows = list(datasets.load_dataset(str(repo), split="train", cache_dir=_fresh(built)))
    by_q = {_question(r): r for r in rows}
    assert len(rows) == len(CASES)  # one row per question, its image once
    assert all(len(r["generations"]) == 3 for r in rows)  # greedy + 2 samples
    triangles = by_q["How many triangles?"]
    assert [g["kind"] for g in triangles["generations"]] == ["greedy", "sample", "sample"]
    assert [(g["final"], g["reader"], g["accepted"]) for g in triangles["generations"]] == [
        ("6", "certain", False),
        ("6", "certain", False),
        ("4", "accepted", True),
    ]
    assert [g["sampled_for"] for g in triangles["generations"]] == [None, "rejected", "rejected"]
    assert [(g["temperature"], g["seed"]) for g in triangles["generations"]] == [(0.0, 0), (0.7, 0), (0.7, 1)]
    assert (triangles["accepted"], triangles["accepted_by"], triangles["published"], triangles["greedy_accepted"]) == (
        True,
        "recovery",
        2,
        False,
    )
    assert (triangles["pass_rate"], triangles["passed"], triangles["k"]) == (0.5, 1, 2)
    assert 0 < triangles["pass_rate_low"] < 0.5 < triangles["pass_rate_high"] < 1
    circle = by_q["Is there a circle?"]
    assert (circle["accepted"], circle["reason"], circle["published"], circle["question_type"]) == (
        False,
        "wrong_answer",
        None,
        "exist",
    )
    assert circle["generations"][0]["reader"] == "undecided"
    assert by_q["How many circles?"]["generations"][0]["reader"] is None  # cut off: no final answer
    assert rows[0]["image"].size == (16, 16)
    # since layout 3: what rebuilding the stores from this repo alone takes (`rs refilter --from-samples`)
    assert [r["row"] for r in rows] == list(range(len(CASES))) and circle["item"]["question"] == "Is there a circle?"
    assert (circle["item"]["answer"], circle["item"]["key"], circle["model_revision"]) == ("yes", circle["key"], None)
    run = json.loads((repo / "rs" / "run.json").read_text())
    assert run["layout"] == LAYOUT and run["sample"]["items"] == len(CASES) and run["sample"]["seconds"] == 0
    assert run["sample"]["inputs"]["answers"]["literal"] is False and run["recovery"]["samples"] == 12

    # every number the card states, recomputed here from the loaded rows, is the one stored beside the card and shown on it
    stored = json.loads((repo / "rs" / "numbers.json").read_text())
    assert stored == samples_numbers(repo / "data")
    generations = [g for r in rows for g in r["generations"]]
    assert stored["rows"] == len(rows) and stored["generations"] == len(generations) == 18
    assert stored["images"] == len({r["image_sha256"] for r in rows})
    assert stored["accepted"] == sum(r["accepted"] for r in rows) == 5
    assert stored["reader"] == dict(sorted(Counter(g["reader"] or "no_final_answer" for g in generations).items()))
    assert stored["kinds"] == {"greedy": 6, "sample": 12}
    assert stored["sampled_for"] == dict(
        sorted(Counter(g["sampled_for"] for g in generations if g["sampled_for"]).items())
    )
    assert stored["accepted_by"] == dict(sorted(Counter(r["accepted_by"] for r in rows if r["accepted"]).items()))
    card = (repo / "README.md").read_text()
    assert "## This repo's numbers" in card
    assert (
        f"{stored['rows']} questions over {stored['images']} images, with {stored['generations']} generations" in card
    )
    for outcome_, count in stored["reader"].items():
        assert f"| `{outcome_}` | {count} |" in card


def test_rl_repo_loads_into_trls_grpo_layout_with_every_question_strictly_between(built) -> None:
    trl_data = pytest.importorskip("trl.data_utils")
    _, family, outcome = built
    repo = Path(outcome.where["rl"])
    ds = datasets.load_dataset(str(repo), split="train", cache_dir=_fresh(built))
    rows = list(ds)
    assert sorted(_question(r) for r in rows) == ["How many shapes?", "How many triangles?"]  # 0 < p < 1
    assert all(0 < r["pass_rate"] < 1 and r["pass_rate_low"] <= r["pass_rate"] <= r["pass_rate_high"] for r in rows)
    assert {r["solution"] for r in rows} == {"2", "4"}
    for (
        row
    ) in rows:  # what GRPOTrainer does with a row of a vision dataset: conversational prompt, the image put first
        assert trl_data.is_conversational(row)
        messages = trl_data.prepare_multimodal_messages(row["prompt"], images=row["images"])
        assert [part["type"] for part in messages[0]["content"]] == ["image", "text"]
        assert messages[0]["content"][0]["image"].size == (16, 16)
    stored = json.loads((repo / "rs" / "numbers.json").read_text())
    assert stored == rl_numbers(repo / "data")
    assert stored["rows"] == len(rows) and stored["pass_rates"]["(0.25, 0.5]"] == 2 and stored["k"] == {"2": 2}
    assert outcome.report.splits["rl"].qa == len(rows)


def test_question_types_on_the_cards(built) -> None:
    _, _, outcome = built
    types = outcome.report.question_types
    assert set(types["types"]) == {"count", "exist", "other"}
    count = types["types"]["count"]
    assert (count["answered"], count["accepted"], count["recovered"], count["sampled_rejected"]) == (4, 4, 2, 2)
    assert (count["recovery_rate"], count["measured"], count["sometimes"]) == (1.0, 4, 2)
    assert types["types"]["exist"]["accept_rate"] == 0.0
    assert types["most_failed"] == ["exist"]
    rejected = (Path(outcome.where["rejected"]) / "README.md").read_text()
    assert (
        "## By question type" in rejected
        and "**The types the model fails most** (lowest accept rate): `exist`" in rejected
    )
    think = (Path(outcome.where["think"]) / "README.md").read_text()
    assert "| count | 4 | 4 | 100.0% | 2 | 100.0% | 4 |" in think


REFILTER = ["--no-think-needs-agreeing-reasoning", "--rl-min", "0.4", "--rl-max", "0.6"]
"""The routing `rs refilter` changes in these tests."""


@pytest.fixture(scope="module")
def refiltered(built) -> Path:
    """The build re-routed once by `rs refilter` (`REFILTER`); the repos' folder."""
    tmp_path, _, _ = built
    out = tmp_path / "refiltered"
    code = rs_main(
        [
            "refilter",
            "Shapes",
            "--config",
            str(tmp_path / "families.yaml"),
            "--out",
            str(out),
            *REFILTER,
            "--build-dir",
            str(tmp_path / "build"),
            "--cache",
            str(tmp_path / "no-cache.sqlite"),
        ]
    )
    assert code == 0
    return out / "local"


def test_refilter_rebuilds_the_splits_from_the_stores_with_no_engine(built, refiltered) -> None:
    tmp_path, family, first = built
    repos = refiltered
    # no engine: the stages were found done (an engine would raise NoStoredAnswers); the reasoning rule changed the think split
    think = [
        qa["question"].split("\n")[0]
        for row in datasets.load_dataset(
            str(repos / "Shapes_RS_think"), split="train", cache_dir=_fresh(built) + "-refiltered"
        )
        for qa in row["qa"]
    ]
    before = [
        qa["question"].split("\n")[0]
        for row in datasets.load_dataset(first.where["think"], split="train", cache_dir=_fresh(built))
        for qa in row["qa"]
    ]
    assert "What colour is the sky?" in think and "What colour is the sky?" not in before
    stats = json.loads((repos / "Shapes_RS_think" / "rs" / "stats.json").read_text())
    assert stats["filter"]["rl_bounds"] == [0.4, 0.6]
    card = (repos / "Shapes_RS_think" / "README.md").read_text()
    assert "**Re-filtered offline** (`rs refilter`)" in card and "kept in the think split" in card
    assert "strictly between 0.4 and 0.6" in (repos / "Shapes_RS_rl" / "README.md").read_text()


@pytest.mark.slow
def test_refilter_from_the_samples_repo_alone_gives_the_build_s_repos(built, refiltered, tmp_path: Path) -> None:
    """`python -m rs.refilter --from-samples` on the published samples repo, from a folder holding the families file
    alone (no source, no replay file: nothing can be cleaned or answered), into another build folder: the repos of the
    build-based refilter, byte for byte, but the sentence naming the samples repo; `rs audit` passes on them."""
    from rs.audit import audit

    build_tmp, _, first = built
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copyfile(build_tmp / "families.yaml", bare / "families.yaml")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "rs.refilter",
            "Shapes",
            "--config",
            "families.yaml",
            "--out",
            str(tmp_path / "out"),
            *REFILTER,
            "--build-dir",
            str(tmp_path / "build"),
            "--cache",
            str(tmp_path / "none.sqlite"),
            "--from-samples",
            first.where["samples"],
        ],
        cwd=bare,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "re-filtered offline from the samples repo Shapes_RS_samples, no model call" in run.stdout
    rebuilt = tmp_path / "out" / "local"
    differ_by_the_source_alone(refiltered, rebuilt, "Shapes_RS_samples", local=True)
    assert (tmp_path / "build" / "Shapes" / "from-samples" / "items").is_dir() and not (
        tmp_path / "none.sqlite"
    ).exists()
    for repo in sorted(rebuilt.iterdir()):
        if not repo.name.startswith("."):
            assert (result := audit(repo)).ok, result.render()


def test_refilter_from_a_hub_samples_repo(built, refiltered, hub, tmp_path: Path) -> None:  # noqa: F811
    """The samples repo read from the Hub by its id (`huggingface_hub.snapshot_download`, against the test Hub)."""
    from huggingface_hub import HfApi

    _, _, first = built
    api = HfApi()
    api.create_repo("rs-test/Shapes_RS_samples", repo_type="dataset")
    api.upload_folder(repo_id="rs-test/Shapes_RS_samples", repo_type="dataset", folder_path=first.where["samples"])
    code = rs_main(
        [
            "refilter",
            "Shapes",
            "--config",
            str(built[0] / "families.yaml"),
            "--out",
            str(tmp_path / "out"),
            *REFILTER,
            "--build-dir",
            str(tmp_path / "build"),
            "--cache",
            str(tmp_path / "none.sqlite"),
            "--from-samples",
            "rs-test/Shapes_RS_samples",
        ]
    )
    assert code == 0
    differ_by_the_source_alone(refiltered, tmp_path / "out" / "local", "rs-test/Shapes_RS_samples", local=False)


def test_refilter_refuses_a_samples_repo_without_its_run_record(built, tmp_path: Path) -> None:
    """A samples repo of layout 1 (no `rs/run.json`): refused, saying what it lacks, before anything is written."""
    build_tmp, _, first = built
    old = tmp_path / "Shapes_RS_samples"
    shutil.copytree(first.where["samples"], old)
    (old / "rs" / "run.json").unlink()
    with pytest.raises(Exception) as raised:
        rs_main(
            [
                "refilter",
                "Shapes",
                "--config",
                str(build_tmp / "families.yaml"),
                "--out",
                str(tmp_path / "out"),
                "--build-dir",
                str(tmp_path / "build"),
                "--from-samples",
                str(old),
            ]
        )
    assert raised.value.exit_code == 2 and "no rs/run.json" in str(raised.value) and "layout 1" in str(raised.value)
    assert not (tmp_path / "out").exists() and not (tmp_path / "build" / "Shapes" / "from-samples").exists()


def test_refilter_refuses_a_family_with_no_stored_answers(tmp_path: Path, capsys) -> None:
    _family(tmp_path)
    with pytest.raises(Exception) as raised:
        rs_main(
            [
                "refilter",
                "Shapes",
                "--config",
                str(tmp_path / "families.yaml"),
                "--out",
                str(tmp_path / "out"),
                "--judge",
                "never",
                "--build-dir",
                str(tmp_path / "build"),
                "--cache",
                str(tmp_path / "cache.sqlite"),
            ]
        )
    assert "calls no model" in str(raised.value) and raised.value.exit_code == 2
    assert (
        not (tmp_path / "out").exists() and not (tmp_path / "build").exists()
    )  # refused before anything ran, cleaning too


def test_rl_without_difficulty_samples_is_refused_at_its_line(tmp_path: Path) -> None:
    from rs.families.loader import FamilyConfigError

    (tmp_path / "families.yaml").write_text(
        family_yaml("Shapes", REPLAY, **merged(BLOCKS, {"recovery": {"difficulty": {"samples": DROP}}}))
    )
    with pytest.raises(FamilyConfigError, match=r"families.yaml:\d+: .*rl.*difficulty.samples"):
        load_families(tmp_path / "families.yaml")
    rules = [{"type": "count", "pattern": "^how many"}, {"type": "exist", "pattern": "(is there"}]
    (tmp_path / "families.yaml").write_text(
        family_yaml("Shapes", REPLAY, **{**BLOCKS, "question_types": {"rules": rules}})
    )
    with pytest.raises(FamilyConfigError, match=r"pattern.*no regular expression"):
        load_families(tmp_path / "families.yaml")


def test_route_filter_says_what_it_changed() -> None:
    from rs.pipeline.route import Routes

    routes = Routes(promotes=True, rl_bounds=(0.0, 1.0))
    assert RouteFilter().changes(routes) == ["nothing (the family's own routing)"]
    changed = RouteFilter(judge="never", rl_bounds=(0.1, 0.9))
    assert changed.apply(routes).promotes is False and changed.apply(routes).rl_bounds == (0.1, 0.9)
    assert changed.changes(routes)[0].startswith("the judge promotes nothing (the run's calibration let it promote)")


def test_clevr_type_rules_give_the_synthetic_scenes_their_own_types() -> None:
    """The rules CLEVR and TinyCLEVR share (families.yaml), over the question's form alone, against the type each
    synthetic question's generator recorded: every question typed as its generator made it."""
    from dataclasses import replace

    from rs.families import get_family
    from rs.pipeline.route import typer
    from rs.sources.synthetic import SyntheticSource

    rules_only = typer(replace(get_family("TinyCLEVR").config.question_types, source=False))
    items = [
        qa
        for record in SyntheticSource(seed=0, num_images=100, questions_per_image=4, style="mixed")
        for qa in record.qa
    ]
    assert len({qa.qtype for qa in items}) == 7
    assert [qa.qtype for qa in items] == [rules_only(qa.question, None) for qa in items]
    assert get_family("CLEVR").config.question_types == get_family("TinyCLEVR").config.question_types


def test_plan_projects_the_rl_repo_and_its_cost(tmp_path: Path) -> None:
    from rs.plan import plan_family

    family = _family(tmp_path)
    plan = plan_family(
        family,
        sample_images=1,
        limit=len(CASES),
        build_root=tmp_path / "build",
        cache_path=tmp_path / "cache.sqlite",
        tokens_per_second=100.0,
        progress=False,
    )
    r = plan.projection.recovery
    assert (r.rl, r.rl_bounds, r.items) == (2, (0.0, 1.0), len(CASES))  # the shapes and the triangles: pass rate 0.5
    text = plan.render()
    assert f"RL repo (0.0 < pass rate < 1.0): 2 of {len(CASES)} questions of these images (33.3%)" in text
    assert "its cost, the samples of the accepted questions (difficulty):" in text


def test_audit_checks_the_samples_and_rl_cards_against_their_files(built, tmp_path: Path) -> None:
    """`rs audit` on every repo of the family passes; a number changed on the samples card, or a row dropped from the RL
    repo, is named."""
    import shutil

    from rs.audit import audit

    tmp, _, _ = built
    local = tmp / "out" / "local"
    for name in ("Shapes_RS_samples", "Shapes_RS_rl", "Shapes_RS_think", "Shapes_RS_nothink", "Shapes_rejected"):
        result = audit(local / name, build=tmp / "build" / "Shapes")
        assert result.ok, result.render()
    copy = tmp_path / "local"
    shutil.copytree(local, copy)
    card = copy / "Shapes_RS_samples" / "README.md"
    card.write_text(
        card.read_text().replace(
            "6 questions over 6 images, with 18 generations", "6 questions over 6 images, with 19 generations"
        )
    )
    findings = [str(f) for f in audit(copy / "Shapes_RS_samples").findings]
    assert len(findings) == 1 and "generations is 19, the files hold 18" in findings[0], findings
    rl = next((copy / "Shapes_RS_rl" / "data").glob("*.parquet"))
    table = pq.read_table(rl)
    pq.write_table(table.slice(0, table.num_rows - 1), rl)
    stated = {f.what for f in audit(copy / "Shapes_RS_rl").findings}
    assert {
        "questions",
        "numbers.rows",
        "RL questions = the samples repo's questions strictly between the bounds",
    } <= stated, stated
