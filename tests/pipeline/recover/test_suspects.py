"""Suspect references (`recovery.suspects`) on a family whose answers and adjudications are known (the replay engine).

Eight questions: three accepted (the adjudicator's wrong-reference calibration cases are made of them), three that a
sample recovers from a certainly wrong greedy answer (its right-reference cases), one whose reference is planted wrong
(the model says 3 every time, the reference 2: the candidate) and one the model answers in several ways (no candidate).
The adjudicator's replies are written for the requests the recover stage itself declares (`RecoverStage.requests`):
an adjudicator that reads the image (it picks the true value) marks the planted one; one that always picks answer A
(a position, not the image) is blocked by its calibration and marks nothing.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import datasets
import pytest

from rs.audit import audit
from rs.audit.replay import Replay
from rs.cli.main import main as rs_main
from rs.cli.publish import summary
from rs.context import BuildContext
from rs.families import load_families
from rs.pipeline.publish.stage import publish
from rs.pipeline.recover import RecoverStage
from rs.pipeline.sample.stage import SampleStage
from rs.pipeline.stage import ensure
from rs.store import read_records

pytestmark = pytest.mark.slow

JUDGE = {"enabled": False, "calibration_samples": 3, "min_calibration_cases": 2}
LENIENT = {**JUDGE, "min_negative_agreement": 0.3, "min_positive_agreement": 0.3}
"""Two cases of each kind, all agreed, have a 95% Wilson lower bound of 34%: these thresholds let so few pass."""
RECOVERY = {"samples": 2, "temperature": 0.7, "pairs": True, "difficulty": {"samples": 2, "rl": {}}}

CASES = [
    ("How many shapes?", "2", "2", ["2", "2"]),
    ("How many squares?", "1", "1", ["1", "1"]),
    ("How many stars?", "5", "5", ["5", "5"]),
    ("How many triangles?", "4", "6", ["6", "4"]),
    ("How many circles?", "3", "7", ["3", "7"]),
    ("How many hearts?", "8", "9", ["8", "8"]),
    ("How many dots?", "2", "3", ["3", "3"]),  # the planted wrong reference: there are 3 dots
    ("How many lines?", "4", "5", ["5", "6"]),  # wrong, but not always the same way: no candidate
]
TRUTH = {q: ("3" if q == "How many dots?" else a) for q, a, _, _ in CASES}
_FENCED = re.compile(r"Answer A:\n(`{3,})\n(.*?)\n\1\n\nAnswer B:\n(`{3,})\n(.*?)\n\3\n", re.DOTALL)


def adjudications(tmp_path: Path, family, blocks: dict, reply) -> int:
    """Build the family's greedy and recovery samples, then append to its replay file a reply (`reply(question, A, B)`)
    to every adjudication request the recover stage declares; returns how many."""
    ctx = BuildContext(family, tmp_path / "pre-build", tmp_path / "pre-cache.sqlite", progress=False)
    sampled = ensure(SampleStage(), ctx)
    ensure(RecoverStage(sampled), ctx)
    lines = []
    for _, request in RecoverStage(sampled).requests(ctx):
        if not request.prompt.startswith("Look at the image"):
            continue
        question = next(q for q in TRUTH if q in request.prompt)
        a, b = (m := _FENCED.search(request.prompt)).group(2), m.group(4)
        lines.append(json.dumps({"prompt": request.prompt, "text": reply(question, a, b)}))
    with open(tmp_path / "answers.jsonl", "a") as fh:
        fh.write("\n".join(lines) + "\n")
    return len(lines)


def sees_the_image(question: str, a: str, b: str) -> str:
    return "A" if a == TRUTH[question] else "B"


def published(tmp_path: Path, family, judge: dict, reply, **blocks):
    fam = family(CASES, judge=judge, recovery=RECOVERY, **blocks)
    asked = adjudications(tmp_path, fam, judge, reply)
    fam = load_families(tmp_path / "families.yaml")["Shapes"]  # its replay file now holds the replies
    outcome = publish(
        fam,
        out=tmp_path / "out",
        build_root=tmp_path / "build",
        cache_path=tmp_path / "cache.sqlite",
        progress=False,
    )
    repos = {split: Path(where) for split, where in outcome.where.items()}
    return outcome, repos, asked


def rows(repo: Path) -> list[dict]:
    return list(datasets.load_dataset(str(repo), split="train"))


def test_an_adjudicator_that_reads_the_image_marks_the_planted_reference_and_nothing_else(
    tmp_path: Path, family
) -> None:
    outcome, repos, asked = published(tmp_path, family, LENIENT, sees_the_image)
    # the candidate and 3 + 3 calibration cases, each in both orders
    assert asked == 2 * 7

    rejected = {qa["question"].split("\n")[0]: qa for row in rows(repos["rejected"]) for qa in row["qa"]}
    assert {q: qa["reason"] for q, qa in rejected.items()} == {
        "How many dots?": "suspect_reference",
        "How many lines?": "wrong_answer",
    }
    dots = rejected["How many dots?"]
    assert (dots["answer"], dots["wrong_vlm"]) == ("2", "3")
    assert dots["suspect"] == {"agreeing": "3", "samples": ["3", "3"], "verdicts": ["other", "other"]}
    assert rejected["How many lines?"]["suspect"] is None

    # never in a pair, in either role; not in the RL repo
    pairs = rows(repos["pairs"])
    assert pairs and not any("How many dots?" in p["question"] for p in pairs)
    assert not any("How many dots?" in r["question"] for r in rows(repos["rl"]))

    adjudication = json.loads((tmp_path / "build" / "Shapes" / "recovery.json").read_text())["adjudication"]
    assert (adjudication["candidates"], adjudication["against"], adjudication["suspects"]) == (1, 1, 1)
    cal = adjudication["calibration"]
    assert cal["passes"] and cal["blocked_reason"] is None
    assert (cal["wrong_reference"]["agreed"], cal["wrong_reference"]["total"]) == (3, 3)
    assert (cal["right_reference"]["agreed"], cal["right_reference"]["total"]) == (3, 3)
    assert outcome.report.totals.rejected_by_reason["suspect_reference"] == 1
    assert outcome.report.totals.rejected_by_reason["wrong_answer"] == 1

    card = (repos["rejected"] / "README.md").read_text()
    assert "**Suspect references.** 1 of the 2 rejections is a suspect reference (`suspect_reference`)." in card
    assert "| How many dots?<br>Answer the question using a single word or phrase. | 2 | 3 |" in card
    assert "It passed, so the candidates it sided against are marked" in card
    assert (
        "  suspect references: 1 marked of 1 candidates (1 sided against the reference in both orders; 14 adjudication "
        "requests); the adjudicator passed its calibration"
    ) in summary(load_families(tmp_path / "families.yaml")["Shapes"], outcome, dry_run=False).splitlines()

    # `rs audit` recomputes the count from the rejected rows, and finds a card that says otherwise
    clean = audit(repos["rejected"])
    assert not clean.findings, clean.findings
    readme = repos["rejected"] / "README.md"
    readme.write_text(card.replace("**Suspect references.** 1 of the 2", "**Suspect references.** 2 of the 2"))
    found = audit(repos["rejected"]).findings
    # its own check, and the card rendered again from the repo's files (rs.audit.rerender), both name it
    assert ("`suspect_reference` rejections", 2, 1) in [(f.what, f.stated, f.truth) for f in found]
    assert len(found) == 2 and all("Suspect references" in str(f.stated) for f in found if f.truth != 1)
    readme.write_text(card)

    # the candidate's record: the value the model kept giving, in item order
    records = list(read_records(tmp_path / "build" / "Shapes" / "recovery", "adjudication"))
    assert [(r["key"], r["agreeing"], r["against"], r["suspect"]) for r in records] == [("6#0", "3", True, True)]


def test_an_adjudicator_that_picks_a_position_is_blocked_and_marks_nothing(tmp_path: Path, family) -> None:
    outcome, repos, _ = published(tmp_path, family, LENIENT, lambda q, a, b: "A")
    rejected = {qa["question"].split("\n")[0]: qa for row in rows(repos["rejected"]) for qa in row["qa"]}
    assert rejected["How many dots?"]["reason"] == "wrong_answer" and rejected["How many dots?"]["suspect"] is None
    adjudication = json.loads((tmp_path / "build" / "Shapes" / "recovery.json").read_text())["adjudication"]
    assert (adjudication["candidates"], adjudication["against"], adjudication["suspects"]) == (1, 0, 0)
    cal = adjudication["calibration"]
    assert not cal["passes"]
    assert cal["blocked_reason"].startswith("on wrong references the adjudicator sided against only 0 of 3")
    assert outcome.report.totals.rejected_by_reason["suspect_reference"] == 0
    card = (repos["rejected"] / "README.md").read_text()
    assert "**Suspect references.** 0 of the 2 rejections are suspect references" in card
    assert f"**It did not pass on this run and marked nothing**: {cal['blocked_reason']}." in card
    lines = summary(load_families(tmp_path / "families.yaml")["Shapes"], outcome, dry_run=False).splitlines()
    at = lines.index(
        "  suspect references: 0 marked of 1 candidates (0 sided against the reference in both orders; 14 adjudication "
        f"requests); the adjudicator is BLOCKED, it marks nothing: {cal['blocked_reason']}"
    )
    assert lines[at - 1] == (
        "  adjudicator calibration: wrong references sided against 0/3 [0.0%, 56.1%], "
        "right references left alone 3/3 [43.9%, 100.0%]"
    )


def test_too_few_calibration_cases_block_it_even_when_it_is_right(tmp_path: Path, family) -> None:
    strict = {**LENIENT, "min_calibration_cases": 4}
    outcome, repos, _ = published(tmp_path, family, strict, sees_the_image)
    adjudication = json.loads((tmp_path / "build" / "Shapes" / "recovery.json").read_text())["adjudication"]
    assert (adjudication["against"], adjudication["suspects"]) == (1, 0)
    assert adjudication["calibration"]["blocked_reason"] == (
        "too few calibration cases to trust the adjudicator: 3 wrong references (accepted questions shown a wrong "
        "value as their reference), at least 4 needed; too few calibration cases to trust the adjudicator: 3 right "
        "references (questions the model recovered to their reference), at least 4 needed"
    )
    assert outcome.report.totals.rejected_by_reason["suspect_reference"] == 0


def test_without_suspects_nothing_is_adjudicated(tmp_path: Path, family) -> None:
    fam = family(CASES, judge=LENIENT, recovery={**RECOVERY, "suspects": False})
    ctx = BuildContext(fam, tmp_path / "build", tmp_path / "cache.sqlite", progress=False)
    sampled = ensure(SampleStage(), ctx)
    report = ensure(RecoverStage(sampled), ctx)
    assert report.adjudication is None
    assert not any(r.prompt.startswith("Look at the image") for _, r in RecoverStage(sampled).requests(ctx))


@pytest.mark.parametrize("min_cases", [2, 4])
def test_replay_re_derives_the_suspect_from_the_cached_adjudications(tmp_path: Path, family, min_cases: int) -> None:
    """`rs audit --replay`: the candidate's two adjudications are read from the cache under the keys the run asked them
    with and routed under the run's gate, so the published `suspect_reference` (and its evidence) is what they make;
    where the run's adjudicator was blocked (too few cases: 4), the same verdicts mark nothing, as in the run."""
    outcome, repos, _ = published(tmp_path, family, {**LENIENT, "min_calibration_cases": min_cases}, sees_the_image)
    marked = outcome.report.totals.rejected_by_reason["suspect_reference"]
    assert marked == (1 if min_cases == 2 else 0)
    replay = Replay(20, config=tmp_path / "families.yaml", cache=tmp_path / "cache.sqlite")
    result = audit(repos["rejected"], build=tmp_path / "build" / "Shapes", replay=replay)
    assert not result.findings, result.findings
    note = next(n for n in result.notes if n.startswith("--replay 20:"))
    assert "8 questions (think 3, recovered 3, rejected 2)" in note and ": 8 of 8 published byte for byte" in note


def _refilter(tmp_path: Path, monkeypatch, cache: Path) -> int:
    """`rs refilter` of the build after an rs upgrade that bumped the verifiers' shared rules: the reader changed, so
    the stored answers are re-read (`rs.refilter.reread`), with no engine."""
    import rs.verifiers.base

    monkeypatch.setattr(rs.verifiers.base, "VERSION", f"{rs.verifiers.base.VERSION}-bumped")
    argv = ["--config", str(tmp_path / "families.yaml"), "--build-dir", str(tmp_path / "build")]
    return rs_main(["refilter", "Shapes", *argv, "--out", str(tmp_path / "refiltered"), "--cache", str(cache)])


def test_refilter_rereads_the_suspect_with_its_evidence_and_its_counts(tmp_path: Path, family, monkeypatch) -> None:
    """The re-read finds the candidate and the calibration cases again under the reader now, takes the adjudicator's
    verdicts from the cache, and keeps the suspect: its reason, its evidence, its record, the counts."""
    outcome, _, _ = published(tmp_path, family, LENIENT, sees_the_image)
    assert _refilter(tmp_path, monkeypatch, tmp_path / "cache.sqlite") == 0
    repos = {split: tmp_path / "refiltered" / "local" / Path(where).name for split, where in outcome.where.items()}
    rejected = {qa["question"].split("\n")[0]: qa for row in rows(repos["rejected"]) for qa in row["qa"]}
    assert {q: qa["reason"] for q, qa in rejected.items()} == {
        "How many dots?": "suspect_reference",
        "How many lines?": "wrong_answer",
    }
    assert rejected["How many dots?"]["suspect"] == {
        "agreeing": "3",
        "samples": ["3", "3"],
        "verdicts": ["other", "other"],
    }
    assert not any("How many dots?" in p["question"] for p in rows(repos["pairs"]))
    stats = json.loads((repos["think"] / "rs" / "stats.json").read_text())
    assert stats["filter"]["reread"]["decisions"]["changed"] == 0
    assert stats["totals"]["rejected_by_reason"]["suspect_reference"] == 1
    assert stats["totals"]["rejected_by_reason"]["wrong_answer"] == 1
    reread = tmp_path / "build" / "Shapes" / "reread"
    adjudication = json.loads((reread / "recovery.json").read_text())["adjudication"]
    assert (adjudication["candidates"], adjudication["against"], adjudication["suspects"]) == (1, 1, 1)
    assert adjudication["calibration"]["passes"] and adjudication["requests"] == 2 * 7
    records = list(read_records(reread / "recovery", "adjudication"))
    assert [(r["key"], r["agreeing"], r["verdicts"], r["suspect"]) for r in records] == [
        ("6#0", "3", ["other", "other"], True)
    ]


def test_refilter_refuses_a_candidate_it_cannot_adjudicate(tmp_path: Path, family, monkeypatch) -> None:
    """With no generation cache, the adjudicator's verdicts cannot be had without the model: the re-read refuses,
    naming the candidate and `rs publish`, rather than publish the planted reference's question as the model's mistake."""
    published(tmp_path, family, LENIENT, sees_the_image)
    with pytest.raises(Exception) as raised:
        _refilter(tmp_path, monkeypatch, tmp_path / "no-cache.sqlite")
    assert raised.value.exit_code == 2
    assert "1 suspect-reference candidate(s) (6#0)" in str(raised.value) and "rs publish Shapes" in raised.value.hint
    assert not (tmp_path / "refiltered").exists()


def test_refilter_measures_the_adjudicator_again_and_respects_its_gate(tmp_path: Path, family, monkeypatch) -> None:
    """Too few calibration cases (4 needed, 3 found): the re-read's calibration, measured again from the cached verdicts,
    blocks as the run's did, and the candidate stays `wrong_answer`, its verdicts recorded."""
    outcome, _, _ = published(tmp_path, family, {**LENIENT, "min_calibration_cases": 4}, sees_the_image)
    assert _refilter(tmp_path, monkeypatch, tmp_path / "cache.sqlite") == 0
    run = json.loads((tmp_path / "build" / "Shapes" / "recovery.json").read_text())["adjudication"]
    reread = json.loads((tmp_path / "build" / "Shapes" / "reread" / "recovery.json").read_text())["adjudication"]
    assert reread["calibration"] == run["calibration"] and not reread["calibration"]["passes"]
    assert (reread["candidates"], reread["against"], reread["suspects"]) == (1, 1, 0)
    think = tmp_path / "refiltered" / "local" / Path(outcome.where["think"]).name
    stats = json.loads((think / "rs" / "stats.json").read_text())
    assert stats["totals"]["rejected_by_reason"]["suspect_reference"] == 0
    assert stats["filter"]["reread"]["decisions"]["changed"] == 0


def _forget_the_calibration(tmp_path: Path) -> None:
    """The adjudicator's verdicts on its calibration cases removed from the run's cache (the candidate's kept)."""
    fam = load_families(tmp_path / "families.yaml")["Shapes"]
    ctx = BuildContext(fam, tmp_path / "build" / "Shapes", tmp_path / "cache.sqlite", progress=False)
    sampled = ensure(SampleStage(), ctx)
    keys = [
        key
        for key, request in RecoverStage(sampled).requests(ctx)
        if request.prompt.startswith("Look at the image") and "How many dots?" not in request.prompt
    ]
    assert len(keys) == 2 * 6
    with sqlite3.connect(tmp_path / "cache.sqlite") as db:
        db.executemany("DELETE FROM answers WHERE key = ?", [(k,) for k in keys])


def test_refilter_refuses_when_the_calibration_was_never_asked(tmp_path: Path, family, monkeypatch) -> None:
    """The candidate's verdicts are cached and side against its reference, but the calibration cases' are not (here
    removed from the cache): the gate cannot be measured, so the mark cannot be decided, and the re-read refuses."""
    published(tmp_path, family, LENIENT, sees_the_image)
    _forget_the_calibration(tmp_path)
    with pytest.raises(Exception) as raised:
        _refilter(tmp_path, monkeypatch, tmp_path / "cache.sqlite")
    said = str(raised.value)
    assert "under the reader now, 6 of the adjudicator's calibration cases were never adjudicated by the run" in said
    assert "candidate" not in said.split(" were never")[0] and "rs publish Shapes" in raised.value.hint


def test_refilter_without_the_calibration_goes_on_where_nothing_could_be_marked(
    tmp_path: Path, family, monkeypatch
) -> None:
    """An adjudicator that picks a position never sides against the candidate's reference: whatever the calibration,
    nothing could be marked, so the re-read goes on without it, its adjudicator blocked and saying why."""
    published(tmp_path, family, LENIENT, lambda q, a, b: "A")
    _forget_the_calibration(tmp_path)
    assert _refilter(tmp_path, monkeypatch, tmp_path / "cache.sqlite") == 0
    reread = json.loads((tmp_path / "build" / "Shapes" / "reread" / "recovery.json").read_text())["adjudication"]
    assert (reread["candidates"], reread["against"], reread["suspects"]) == (1, 0, 0)
    assert reread["calibration"]["blocked_reason"] == (
        "6 of its 6 calibration cases under the reader now have no verdict the re-read could read (not in the "
        "generation cache); `rs publish` asks them"
    )


def test_refilter_from_the_samples_repo_keeps_the_suspect(tmp_path: Path, family) -> None:
    """A samples repo publishes no adjudication: the stores rebuilt from it get the candidates' records again from the
    cache, so the suspect is routed as the run routed it (and, with no cache, the rebuild refuses)."""
    outcome, _, _ = published(tmp_path, family, LENIENT, sees_the_image, publish={"samples": True})
    argv = ["refilter", "Shapes", "--config", str(tmp_path / "families.yaml"), "--from-samples"]
    argv += [outcome.where["samples"], "--build-dir", str(tmp_path / "elsewhere")]
    assert rs_main([*argv, "--out", str(tmp_path / "refiltered"), "--cache", str(tmp_path / "cache.sqlite")]) == 0
    rejected = tmp_path / "refiltered" / "local" / Path(outcome.where["rejected"]).name
    reasons = {qa["question"].split("\n")[0]: (qa["reason"], qa["suspect"]) for r in rows(rejected) for qa in r["qa"]}
    assert reasons["How many dots?"] == (
        "suspect_reference",
        {"agreeing": "3", "samples": ["3", "3"], "verdicts": ["other", "other"]},
    )
    with pytest.raises(Exception) as raised:
        rs_main([*argv, "--out", str(tmp_path / "again"), "--cache", str(tmp_path / "no-cache.sqlite")])
    assert "1 suspect-reference candidate(s) (6#0)" in str(raised.value)
