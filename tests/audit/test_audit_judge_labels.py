"""`rs audit` holds the judge's label on each generation of a samples repo against the run: `--build` against the
build's items and recovery stores, `--replay` against the verdicts the cache re-derives. A label changed in a published
samples repo (two swapped, so that every count on its card still adds up) is named, exit 1: numbers disagree."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from family_yaml import ONE_WORD
from replay_family import RECOVERY_CASES, write_family

from rs.audit import Replay, audit
from rs.cli.main import main as rs_main
from rs.pipeline.publish.stage import publish
from rs.pipeline.sample.judge import Judge, JudgeCase

BLOCKS = {
    "judge": {
        "calibration_samples": 4,
        "min_calibration_cases": 1,
        "min_negative_agreement": 0.0,
        "min_positive_agreement": 0.0,
    },
    "recovery": {"samples": 2, "temperature": 0.7},
    "publish": {"samples": True},
}
VERDICTS = {("Is there a circle?", "yes", "banana"): "WRONG"}
"""The judge's verdicts, replayed by their exact prompt: the undecided greedy answer and its undecided sample."""


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> tuple[Path, Path]:
    """The family built and published with its samples repo: (its work folder, the samples repo)."""
    tmp = tmp_path_factory.mktemp("judged")
    family = write_family(tmp, RECOVERY_CASES, **BLOCKS)
    judge = Judge(None, family.config.judge)  # type: ignore[arg-type]
    with open(tmp / "answers.jsonl", "a") as fh:
        for (question, reference, candidate), label in VERDICTS.items():
            prompt = judge.prompt(JudgeCase(question + ONE_WORD, reference, candidate))
            fh.write(json.dumps({"prompt": prompt, "text": label}) + "\n")
    outcome = publish(
        family, out=tmp / "out", build_root=tmp / "build", cache_path=tmp / "cache.sqlite", progress=False
    )
    return tmp, Path(outcome.where["samples"])


def _swap_a_judge_label(repo: Path, tmp_path: Path) -> tuple[Path, int, str]:
    """A copy of the family's repos, in which the samples repo's first greedy generation the judge labelled and the
    first it did not swap labels; returns the samples copy, the labelled row and its label."""
    for sibling in repo.parent.iterdir():
        if not sibling.name.startswith("."):
            shutil.copytree(sibling, tmp_path / "local" / sibling.name)
    copy = tmp_path / "local" / repo.name
    shard = next((copy / "data").glob("*.parquet"))
    table = pq.read_table(shard)
    rows = table.to_pylist()
    labelled = next(i for i, r in enumerate(rows) if r["generations"][0]["judge"] is not None)
    other = next(i for i, r in enumerate(rows) if r["generations"][0]["judge"] is None)
    a, b = rows[labelled]["generations"][0], rows[other]["generations"][0]
    label = a["judge"]
    a["judge"], b["judge"] = b["judge"], a["judge"]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    return copy, labelled, label


def test_the_published_samples_repo_passes(published) -> None:
    tmp, samples = published
    build = tmp / "build" / "Shapes"
    replay = Replay(10, config=tmp / "families.yaml", cache=tmp / "cache.sqlite")
    result = audit(samples, build=build, replay=replay)
    assert result.ok, result.render()


def test_a_changed_judge_label_is_named_against_the_build_and_by_replay(published, tmp_path: Path) -> None:
    tmp, samples = published
    copy, row, label = _swap_a_judge_label(samples, tmp_path)
    build = tmp / "build" / "Shapes"
    result = audit(copy, build=build)
    found = {(f.where, f.what.split(" of ")[0]): (f.stated, f.truth) for f in result.findings}
    assert found[(f"{copy.name}/data row {row}", "the greedy generation's judge")] == (None, label), result.render()

    replay = Replay(10, config=tmp / "families.yaml", cache=tmp / "cache.sqlite")
    result = audit(copy, build=build, replay=replay)
    replayed = {f.where: (f.stated, f.truth) for f in result.findings if f.what.startswith("the judge's labels")}
    stated, truth = replayed[f"{copy.name}/data row {row}"]
    assert stated[0] is None and truth[0] == label, result.render()

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = rs_main(["audit", str(copy), "--build", str(build)])
    assert code == 1, err.getvalue()
