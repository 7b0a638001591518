"""`rs audit` on a matrix of builds whose cards say different things, and on cards broken on purpose.

One small family with known answers (the replay engine: no model), published under every option that changes
what a card says: no recovery pass, recovery alone, recovery with `cut_off`, `difficulty` and pairs, reasoning
that concludes another value kept in the think split, the judge passing and blocked, a `--limit` trial whose
rejected split is empty. Every repo of every build must pass the audit, against its files and its build's
stores; each of the three statements that were wrong once recovery was on, broken in a card, must fail it,
naming the number.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from rs.audit import audit
from rs.cli.main import main as rs_main
from rs.families import load_families
from rs.publish import publish

FAMILY = """\
families:
  Shapes:
    source: {kind: files, path: data/shapes.parquet, shape: flat}
    instruction: "\\nAnswer the question using a single word or phrase."
    verifier: {name: alnum}
    model: {id: "some-org/some-vlm"}
    engine: {kind: replay, replay_path: answers.jsonl}
    publish: {namespace: local, target: local}
    card: {pretty_name: Shapes, description: A few shapes., license: cc-by-4.0, citation: "@misc{s}"}
"""

PASSING = "judge: {calibration_samples: 4, min_calibration_cases: 1, min_negative_agreement: 0.0, min_positive_agreement: 0.0}"
BLOCKED = "judge: {calibration_samples: 4}"  # too few cases: the gate blocks it
OFF = "judge: {enabled: false}"

VARIANTS = {  # name -> (what the family adds, --limit)
    "plain": (OFF, None),
    "recovery-blocked": (BLOCKED + "\n    recovery: {samples: 2, temperature: 0.7}", None),
    "all-passing": (PASSING + "\n    recovery: {samples: 2, temperature: 0.7, cut_off: true, difficulty: {samples: 2}, pairs: true}", None),
    "kept-in-think": (OFF + "\n    answers: {think_needs_agreeing_reasoning: false}\n    recovery: {samples: 2, temperature: 0.7, pairs: true}", None),
    "trial-empty-rejected": (BLOCKED + "\n    recovery: {samples: 2, temperature: 0.7, difficulty: {samples: 2}}", 1),
}

# question, reference, greedy answer (None: cut off), the samples at temperature 0.7 (answer, or (answer, what the reasoning concludes))
CASES = [
    ("How many shapes?", "2", "2", ["2", "5"]),                 # accepted; with difficulty: pass rate 0.5
    ("How many triangles?", "4", "6", ["6", ("4", "6")]),        # certainly wrong; recovered by a sample whose reasoning says 6
    ("Is there a circle?", "yes", "banana", ["banana", "yes"]),  # undecided (the judge's); recovered by sample 1
    ("How many circles?", "3", None, ["3", "3"]),               # cut off; recovered with cut_off
    ("How many squares?", "1", "1", ["1", "1"]),                # accepted
]


def _image(n: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (16, 16), (40 * n, 200 - 30 * n, 90)).save(out, "PNG")
    return out.getvalue()


def _text(answer: str | tuple[str, str]) -> str:
    final, concluded = answer if isinstance(answer, tuple) else (answer, answer)
    return f"<think>\nI count carefully and conclude {concluded}.\n</think>\n\n{final}"


def _family(folder: Path, extra: str):
    (folder / "data").mkdir(parents=True)
    rows = [{"image": {"bytes": _image(n), "path": None}, "question": q, "answer": a} for n, (q, a, _, _) in enumerate(CASES)]
    pq.write_table(pa.Table.from_pylist(rows), folder / "data" / "shapes.parquet")
    with open(folder / "answers.jsonl", "w") as fh:
        for n, (_, _, greedy, samples) in enumerate(CASES):
            record = {"key": f"{n}#0", "text": _text(greedy)} if greedy else {"key": f"{n}#0", "text": "<think>\nI count one", "finish_reason": "length"}
            fh.write(json.dumps(record) + "\n")
            for i, answer in enumerate(samples):
                fh.write(json.dumps({"key": f"{n}#0", "sample": i, "temperature": 0.7, "text": _text(answer)}) + "\n")
    (folder / "families.yaml").write_text(FAMILY + f"    {extra}\n")
    return load_families(folder / "families.yaml")["Shapes"]


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, tuple[Path, dict[str, Path]]]:
    """Each variant built and published once: its folder and its repos by split."""
    out = {}
    for name, (extra, limit) in VARIANTS.items():
        folder = tmp_path_factory.mktemp(name)
        family = _family(folder, extra)
        outcome = publish(family, out=folder / "out", build_root=folder / "build", cache_path=folder / "cache.sqlite", progress=False,
                          limit=limit)
        out[name] = (folder, {split: Path(where) for split, where in outcome["where"].items()})
    return out


def _build_dir(folder: Path) -> Path:
    return next(p.parent for p in (folder / "build").rglob("stats.json"))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_repo_of_every_build_passes_the_audit(builds, variant: str) -> None:
    folder, repos = builds[variant]
    for split, repo in repos.items():
        result = audit(repo, build=_build_dir(folder), replay=10)
        assert result.ok, result.render()
        assert result.checked > 40, result.render()  # the card's statements were found and compared, not skipped


def test_the_matrix_says_what_it_is_meant_to(builds) -> None:
    """The variants do reach the branches they are there for (else the audit above would pass on less)."""
    cards = {name: (repos["think"] / "README.md").read_text() for name, (_, repos) in builds.items()}
    assert "## Recovery" not in cards["plain"] and "The judge pass was switched off" in cards["plain"]
    assert "It did not pass on this run" in cards["recovery-blocked"] and "It passed on this run" in cards["all-passing"]
    assert "1 accepted answer had reasoning that concluded another value, kept out of the think split" in cards["all-passing"]
    assert "kept in the think split all the same" in cards["kept-in-think"]
    assert "A trial build" in cards["trial-empty-rejected"]
    rejected = (builds["trial-empty-rejected"][1]["rejected"] / "README.md").read_text()
    assert "This split is empty in this build" in rejected


def _broken(repos: dict[str, Path], tmp_path: Path, split: str, old: str, new: str) -> Path:
    """A copy of the family's repos with one statement of `split`'s card rewritten."""
    copy = tmp_path / "local"
    for repo in repos.values():
        shutil.copytree(repo, copy / repo.name)
    card = copy / repos[split].name / "README.md"
    text = card.read_text()
    assert re.search(old, text), f"{old!r} is not on the card"
    card.write_text(re.sub(old, new, text, count=1))
    return copy / repos[split].name


def test_a_wrong_count_of_certain_rejections_the_judge_called_correct_fails(builds, tmp_path: Path, capsys) -> None:
    """The first statement: the card once counted the judge's CORRECT verdicts on certain rejections after recovery had
    moved some of them, so it said fewer than the stores hold."""
    folder, repos = builds["all-passing"]
    repo = _broken(repos, tmp_path, "think", r"the judge called none of them `CORRECT`",
                   "the judge called 1 of them `CORRECT`: 0 are in the rejected split with reason `judge_overruled`, and 1 was later "
                   "recovered")
    assert rs_main(["audit", str(repo), "--build", str(_build_dir(folder))]) == 1
    printed = capsys.readouterr().out
    assert "certain rejections the judge called CORRECT is 1, the files hold 0" in printed and "README.md:" in printed


def test_a_schema_note_that_leaves_out_recovery_fails(builds, tmp_path: Path) -> None:
    """The second statement: the think/nothink schema note said `accepted_by` is `verifier` or `judge`."""
    _, repos = builds["all-passing"]
    for split in ("think", "nothink"):
        repo = _broken(repos, tmp_path / split, split, r"  - `accepted_by`: .*", "  - `accepted_by`: `verifier` or `judge`")
        result = audit(repo)
        assert not result.ok and any("accepted_by" in f.what and f.stated == ["recovery"] for f in result.findings), result.render()


def test_a_count_of_reasoning_that_concludes_another_value_counting_greedy_answers_only_fails(builds, tmp_path: Path) -> None:
    """The third statement: the count left out the recovered answers whose reasoning concludes another value, which routing
    also keeps out of the think split; the audit holds it against the nothink QA the think split lacks."""
    _, repos = builds["all-passing"]
    repo = _broken(repos, tmp_path, "nothink", r"1 accepted answer had reasoning that concluded another value",
                   "none of the 2 answers compared had reasoning that concluded another value")
    result = audit(repo)
    found = {f.what: (f.stated, f.truth) for f in result.findings}
    assert found.get("accepted answers whose reasoning concludes another value (nothink QA - think QA)") == (0, 1), result.render()


def test_front_matter_and_stats_that_disagree_with_the_files_fail(builds, tmp_path: Path) -> None:
    _, repos = builds["recovery-blocked"]
    repo = _broken(repos, tmp_path, "rejected", r"num_examples: \d+", "num_examples: 7")
    stats = repo / "rs" / "stats.json"
    data = json.loads(stats.read_text())
    data["totals"]["rejected_by_reason"]["wrong_answer"] += 1
    stats.write_text(json.dumps(data))
    result = audit(repo)
    whats = {f.what for f in result.findings}
    assert "dataset_info.splits[train].num_examples" in whats and "totals.rejected_by_reason" in whats, result.render()


def test_a_target_that_is_not_a_repo_is_a_usage_error(tmp_path: Path, capsys) -> None:
    from rs.cli import run

    with pytest.raises(SystemExit) as exit_:
        run(lambda: rs_main(["audit", str(tmp_path / "nowhere")]))
    assert exit_.value.code == 2 and "no such folder" in capsys.readouterr().err


def test_every_repo_records_what_rebuilds_it(builds) -> None:
    """The provenance block: code, libraries, model, engine, each pass's SamplingParams, seeds, hardware, the command."""
    _, repos = builds["all-passing"]
    stats = json.loads((repos["think"] / "rs" / "stats.json").read_text())
    p = stats["provenance"]
    assert p["rs"]["version"] and len(p["rs"]["versions_digest"]) == 64
    assert p["libraries"]["datasets"] and "vllm" in p["libraries"] and "math-verify" in p["libraries"]
    assert p["model"] == {"id": "some-org/some-vlm", "revision": None, "weights_sha256": None,
                          "note": "no revision pinned (model.revision): a rebuild loads whatever the Hub holds then"}
    assert p["engine"] == {"kind": "replay"}
    assert p["passes"]["greedy"]["sampling_params"]["temperature"] == 0.0
    assert p["passes"]["judge"]["sampling_params"]["structured_outputs"] == {"choice": ["CORRECT", "WRONG", "UNSURE"]}
    assert {k: p["passes"]["recovery"]["sampling_params"][k] for k in ("temperature", "n", "seed")} == {"temperature": 0.7, "n": 2, "seed": 0}
    assert p["passes"]["recovery"]["difficulty_n"] == 2
    assert p["seeds"] == {"source": None, "greedy": 0, "recovery": 0}
    assert p["hardware"]["machine"] and ("gpus" in p["hardware"]) and p["command"] == "python -m rs.publish Shapes"
    card = (repos["think"] / "README.md").read_text()
    assert "## Reproducing this dataset" in card and "`rs audit Shapes_RS_think`" in card
    assert '- recovery: `{"max_tokens": ' in card and "python -m rs.publish Shapes\n" in card
    trial = json.loads((builds["trial-empty-rejected"][1]["think"] / "rs" / "stats.json").read_text())
    assert trial["provenance"]["command"] == "python -m rs.publish Shapes --limit 1"


def test_the_judge_pass_is_recorded_for_a_model_whose_reasoning_vllms_parser_reads() -> None:
    """A build holds no tokenizer, which a vLLM reasoning parser needs for its markers: the record names the parser."""
    import dataclasses

    from rs.engines import sampling_settings
    from rs.families import get_family
    from rs.provenance import passes

    config = get_family("TinyCLEVR").config
    qwen = dataclasses.replace(config, model=dataclasses.replace(config.model, reasoning=dataclasses.replace(config.model.reasoning,
                                                                                                          parser="qwen3")))
    recorded = passes(qwen)["judge"]
    assert recorded["close_reasoning"] == "the markers of vLLM's 'qwen3' reasoning parser"
    assert recorded["sampling_params"] == passes(config)["judge"]["sampling_params"]
    assert sampling_settings(qwen).temperature == recorded["sampling_params"]["temperature"] == 0.0
