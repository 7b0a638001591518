"""`rs audit` on a matrix of builds whose cards say different things, and on cards broken on purpose.

One small family with known answers (the replay engine: no model), published under every option that changes
what a card says: no recovery pass, recovery alone, recovery with `cut_off`, `difficulty` and pairs, reasoning
that concludes another value kept in the think split, the judge passing and blocked, a `--limit` trial whose
rejected split is empty. Every repo of every build must pass the audit, against its files and its build's
stores; each of the three statements that were wrong once recovery was on, broken in a card, must fail it,
naming the number.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from replay_family import RECOVERY_CASES, answer_text, write_family

from rs.audit import Replay, audit
from rs.cli.main import main as rs_main
from rs.families import load_families
from rs.pipeline.publish.stage import publish

PASSING = {
    "calibration_samples": 4,
    "min_calibration_cases": 1,
    "min_negative_agreement": 0.0,
    "min_positive_agreement": 0.0,
}
BLOCKED = {"calibration_samples": 4}  # too few cases: the gate blocks it
OFF = {"enabled": False}
RECOVERY = {"samples": 2, "temperature": 0.7}

VARIANTS = {  # name -> (the family's blocks, --limit)
    "plain": ({"judge": OFF}, None),
    "recovery-blocked": ({"judge": BLOCKED, "recovery": RECOVERY}, None),
    "all-passing": (
        {"judge": PASSING, "recovery": {**RECOVERY, "cut_off": True, "difficulty": {"samples": 2}, "pairs": True}},
        None,
    ),
    "kept-in-think": (
        {"judge": OFF, "answers": {"think_needs_agreeing_reasoning": False}, "recovery": {**RECOVERY, "pairs": True}},
        None,
    ),
    "trial-empty-rejected": ({"judge": BLOCKED, "recovery": {**RECOVERY, "difficulty": {"samples": 2}}}, 1),
    "judge-sees-image": ({"judge": {**PASSING, "sees_image": True}, "recovery": RECOVERY}, None),
}


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, tuple[Path, dict[str, Path]]]:
    """Each variant built and published once: its folder and its repos by split."""
    out = {}
    for name, (blocks, limit) in VARIANTS.items():
        folder = tmp_path_factory.mktemp(name)
        family = write_family(folder, RECOVERY_CASES, **blocks)
        outcome = publish(
            family,
            out=folder / "out",
            build_root=folder / "build",
            cache_path=folder / "cache.sqlite",
            progress=False,
            limit=limit,
        )
        out[name] = (folder, {split: Path(where) for split, where in outcome.where.items()})
    return out


def _replay(folder: Path, n: int, **kwargs) -> Replay:
    """`--replay n` of the build in `folder`: its families file and its generation cache."""
    return Replay(n, config=folder / "families.yaml", cache=folder / "cache.sqlite", **kwargs)


def _build_dir(folder: Path) -> Path:
    return next(p.parent for p in (folder / "build").rglob("stats.json"))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_repo_of_every_build_passes_the_audit(builds, variant: str) -> None:
    folder, repos = builds[variant]
    for split, repo in repos.items():
        result = audit(repo, build=_build_dir(folder), replay=_replay(folder, 10))
        assert result.ok, result.render()
        assert result.checked > 40, result.render()  # the card's statements were found and compared, not skipped


def test_the_matrix_says_what_it_is_meant_to(builds) -> None:
    """The variants do reach the branches they are there for (else the audit above would pass on less)."""
    cards = {name: (repos["think"] / "README.md").read_text() for name, (_, repos) in builds.items()}
    assert "in a second pass that sees the item's image with the question" in cards["judge-sees-image"]
    assert (
        "in a text-only pass" in cards["all-passing"] and "item's image with the question" not in cards["all-passing"]
    )
    assert "## Recovery" not in cards["plain"] and "The judge pass was switched off" in cards["plain"]
    assert (
        "It did not pass on this run" in cards["recovery-blocked"] and "It passed on this run" in cards["all-passing"]
    )
    assert (
        "1 accepted answer had reasoning that concluded another value, kept out of the think split"
        in cards["all-passing"]
    )
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
    repo = _broken(
        repos,
        tmp_path,
        "think",
        r"the judge called none of them `CORRECT`",
        "the judge called 1 of them `CORRECT`: 0 are in the rejected split with reason `judge_overruled`, and 1 was later "
        "recovered",
    )
    assert rs_main(["audit", str(repo), "--build", str(_build_dir(folder))]) == 1
    printed = capsys.readouterr().out
    assert "certain rejections the judge called CORRECT is 1, the files hold 0" in printed and "README.md:" in printed


def test_a_schema_note_that_leaves_out_recovery_fails(builds, tmp_path: Path) -> None:
    """The second statement: the think/nothink schema note said `accepted_by` is `verifier` or `judge`."""
    _, repos = builds["all-passing"]
    for split in ("think", "nothink"):
        repo = _broken(
            repos, tmp_path / split, split, r"  - `accepted_by`: .*", "  - `accepted_by`: `verifier` or `judge`"
        )
        result = audit(repo)
        assert not result.ok and any("accepted_by" in f.what and f.stated == ["recovery"] for f in result.findings), (
            result.render()
        )


def test_a_count_of_reasoning_that_concludes_another_value_counting_greedy_answers_only_fails(
    builds, tmp_path: Path
) -> None:
    """The third statement: the count left out the recovered answers whose reasoning concludes another value, which routing
    also keeps out of the think split; the audit holds it against the nothink QA the think split lacks."""
    _, repos = builds["all-passing"]
    repo = _broken(
        repos,
        tmp_path,
        "nothink",
        r"1 accepted answer had reasoning that concluded another value",
        "none of the 2 answers compared had reasoning that concluded another value",
    )
    result = audit(repo)
    found = {f.what: (f.stated, f.truth) for f in result.findings}
    assert found.get("accepted answers whose reasoning concludes another value (nothink QA - think QA)") == (0, 1), (
        result.render()
    )


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
    assert p["model"] == {
        "id": "some-org/some-vlm",
        "revision": None,
        "weights_sha256": None,
        "note": "no revision pinned (model.revision): a rebuild loads whatever the Hub holds then",
    }
    assert p["engine"] == {"kind": "replay"}
    assert p["passes"]["greedy"]["sampling_params"]["temperature"] == 0.0
    assert p["passes"]["judge"]["sampling_params"]["structured_outputs"] == {"choice": ["CORRECT", "WRONG", "UNSURE"]}
    assert {k: p["passes"]["recovery"]["sampling_params"][k] for k in ("temperature", "n", "seed")} == {
        "temperature": 0.7,
        "n": 2,
        "seed": 0,
    }
    assert p["passes"]["recovery"]["difficulty_n"] == 2
    assert p["seeds"] == {"source": None, "greedy": 0, "recovery": 0}
    assert p["hardware"]["machine"] and re.fullmatch(
        r"python -m rs\.publish Shapes --config \S*families\.yaml", p["command"]
    )
    assert (
        p["hardware"]["gpus"] == [] and "torch_threads" not in p["hardware"]
    )  # the replay engine computes nothing here
    card = (repos["think"] / "README.md").read_text()
    assert "## Reproducing this dataset" in card and "`rs audit Shapes_RS_think`" in card
    assert '- recovery: `{"max_tokens": ' in card and f"{p['command']}\n" in card
    trial = json.loads((builds["trial-empty-rejected"][1]["think"] / "rs" / "stats.json").read_text())
    assert trial["provenance"]["command"].startswith("python -m rs.publish Shapes --config ")
    assert trial["provenance"]["command"].endswith("families.yaml --limit 1")


def test_a_replay_family_publishes_its_build_without_torch_and_a_model_engine_names_its_devices(
    tmp_path: Path,
) -> None:
    """A family whose answers come from a file, built, publishes again (the report and cards made anew) without importing
    torch, vLLM or transformers: no model computed its answers here, so no device is named (torch alone costs a second a
    run; a fresh build imports it anyway, through `datasets`' streaming). An engine that computes here names them."""
    import subprocess
    import sys

    from checkout import ROOT

    from rs.pipeline.write.provenance import hardware

    family = write_family(tmp_path, RECOVERY_CASES, judge=OFF)
    paths = {"build_root": tmp_path / "build", "cache_path": tmp_path / "cache.sqlite"}
    publish(family, out=tmp_path / "first", progress=False, **paths)
    argv = ["Shapes", "--config", str(tmp_path / "families.yaml"), "--out", str(tmp_path / "again")]
    argv += ["--build-dir", str(paths["build_root"]), "--cache", str(paths["cache_path"])]
    script = (
        "import sys\nfrom rs.cli.publish import main\nassert main(sys.argv[1:]) == 0\n"
        "print('loaded:', sorted(m for m in ('torch', 'transformers', 'vllm') if m in sys.modules))"
    )
    run = subprocess.run([sys.executable, "-c", script, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.rstrip().endswith("loaded: []"), run.stdout[-2000:]
    assert "torch_threads" in hardware(devices=True) and "torch_threads" not in hardware(devices=False)


def test_the_judge_pass_is_recorded_for_a_model_whose_reasoning_vllms_parser_reads() -> None:
    """A build holds no tokenizer, which a vLLM reasoning parser needs for its markers: the record names the parser."""
    import dataclasses

    from rs.engines.factory import sampling_settings
    from rs.families import get_family
    from rs.pipeline.write.provenance import passes

    config = get_family("TinyCLEVR").config
    qwen = dataclasses.replace(
        config,
        model=dataclasses.replace(config.model, reasoning=dataclasses.replace(config.model.reasoning, parser="qwen3")),
    )
    recorded = passes(qwen)["judge"]
    assert recorded["close_reasoning"] == "the markers of vLLM's 'qwen3' reasoning parser"
    assert recorded["sampling_params"] == passes(config)["judge"]["sampling_params"]
    assert sampling_settings(qwen).temperature == recorded["sampling_params"]["temperature"] == 0.0


# --- --replay: published questions re-derived from the run's generation cache, and asked again of the engine ----------


def _copies(repos: dict[str, Path], tmp_path: Path) -> dict[str, Path]:
    """The family's repos copied side by side (so that one can be edited)."""
    for repo in repos.values():
        shutil.copytree(repo, tmp_path / "local" / repo.name)
    return {split: tmp_path / "local" / repo.name for split, repo in repos.items()}


def _cache_key(folder: Path, repo: Path, question: str, sample: int | None = None) -> str:
    """The generation cache's key of the greedy answer to `question` of `repo`, or of its recovery sample `sample`
    (rebuilt as the run built it)."""
    from rs.engines.cached_engine import cache_key, identity_key
    from rs.engines.factory import engines_for, sampling_settings
    from rs.pipeline.recover import recovery_settings

    family = load_families(folder / "families.yaml")["Shapes"]
    row = next(
        r
        for r in pq.read_table(next((repo / "data").glob("*.parquet"))).to_pylist()
        if any(qa["question"].startswith(question) for qa in r["qa"])
    )
    prompt = next(qa["question"] for qa in row["qa"] if qa["question"].startswith(question))
    sampler, _ = engines_for(family)
    settings = sampling_settings(family)
    if sample is not None:
        settings = recovery_settings(family.config, settings)
    return cache_key(identity_key(sampler), settings, row["image_sha256"], prompt, sample or 0)


def _rewrite(cache: Path, key: str, answer: str) -> None:
    """The cached answer of `key` made to say `answer`, its checksum written anew (as if the model had said it)."""
    import sqlite3

    from rs.engines.generation_cache import answer_checksum

    with sqlite3.connect(cache) as db:
        (value,) = db.execute("SELECT value FROM answers WHERE key = ?", (key,)).fetchone()
        stored = json.loads(value)
        stored.update(text=answer_text(answer), reasoning=f"I count carefully and conclude {answer}.", answer=answer)
        value = json.dumps(stored, ensure_ascii=False)
        db.execute(
            "UPDATE answers SET value = ?, checksum = ? WHERE key = ?", (value, answer_checksum(key, value), key)
        )


def test_replay_re_derives_every_kind_of_question_and_asks_the_engine_again(builds) -> None:
    """Through the replay engine the answers are the cache's: every question agrees, counted per group."""
    folder, repos = builds["recovery-blocked"]
    result = audit(repos["think"], build=_build_dir(folder), replay=_replay(folder, 10, engine=True))
    assert result.ok, result.render()
    notes = "\n".join(result.notes)
    assert (
        "--replay 10: 5 questions (think 2, recovered 2, rejected 1) re-derived from the generation cache" in notes
    ), notes
    assert "5 of 5 published byte for byte as their cached answers make them" in notes, notes
    assert (
        "the same 5 questions sent to the replay engine of some-org/some-vlm fresh (no cache read or written)" in notes
    ), notes
    assert "recovered   2: final answers 2/2 identical, texts 2/2 byte-identical, routing 2/2 identical" in notes, (
        notes
    )
    assert "all   5: final answers 5/5 identical, texts 5/5 byte-identical, routing 5/5 identical" in notes, notes
    few = audit(repos["think"], build=_build_dir(folder), replay=_replay(folder, 3))
    assert few.ok and "--replay 3: 3 questions (think 1, recovered 1, rejected 1)" in few.notes[0], few.render()


def test_replay_names_a_published_answer_its_cached_answer_does_not_make(builds, tmp_path: Path) -> None:
    folder, repos = builds["recovery-blocked"]
    copies = _copies(repos, tmp_path)
    shard = next((copies["nothink"] / "data").glob("*.parquet"))
    table = pq.read_table(shard)
    rows = table.to_pylist()
    assert rows[0]["qa"][0]["question"].startswith("How many shapes?") and rows[0]["qa"][0]["answer"] == "2"
    rows[0]["qa"][0]["answer"] = "3"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    result = audit(copies["think"], build=_build_dir(folder), replay=_replay(folder, 10))
    replayed = [f for f in result.findings if f.source == "the cache re-derives"]
    assert [(f.what.split(" of ")[0], f.where, f.stated, f.truth) for f in replayed] == [
        ("answer", "Shapes_RS_nothink/data row 0, qa 0", "3", "2")
    ], result.render()
    assert "Shapes_RS_nothink/data row 0, qa 0: answer of 'How many shapes?" in result.render()


def test_replay_names_a_changed_cache_entry_and_a_missing_one(builds, tmp_path: Path) -> None:
    import sqlite3

    from rs.engines.generation_cache import GenerationCache

    folder, repos = builds["recovery-blocked"]
    cache = tmp_path / "cache.sqlite"
    with GenerationCache(folder / "cache.sqlite"):  # checkpointed on close: the copy holds every answer
        pass
    shutil.copy(folder / "cache.sqlite", cache)
    asked = Replay(10, config=folder / "families.yaml", cache=cache)
    # "Is there a circle?" was recovered by its sample 1 (yes); made to say no, nothing recovers it: it is re-derived rejected
    _rewrite(cache, _cache_key(folder, repos["think"], "Is there a circle?", sample=1), "no")
    changed = audit(repos["think"], build=_build_dir(folder), replay=asked)
    said = [str(f) for f in changed.findings]
    assert len(said) == 3 and all("'Is there a circle?\\nAnswer the question" in line for line in said), (
        changed.render()
    )
    assert said[0].startswith("Shapes_RS_think/data row 1, qa 0: ") and said[0].endswith(
        "in the think repo is 'an entry (accepted_by recovery)', the cache re-derives 'absent'"
    )
    assert said[1].startswith("Shapes_RS_nothink/data row 2, qa 0: ") and said[1].endswith(
        "in the nothink repo is 'an entry (accepted_by recovery)', the cache re-derives 'absent'"
    )
    assert said[2].startswith("Shapes_rejected/data: ") and said[2].endswith(
        "in the rejected repo is 'absent', the cache re-derives 'an entry (reason judge_unsure)'"
    )

    # the greedy answer to "How many squares?" (1, accepted) made to say 7: the judge would be asked what the run never
    # asked it, so the rest is missing, and the greedy answer is named beside it
    shutil.copy(folder / "cache.sqlite", cache)
    _rewrite(cache, _cache_key(folder, repos["think"], "How many squares?"), "7")
    changed = audit(repos["think"], build=_build_dir(folder), replay=asked)
    said = [str(f) for f in changed.findings]
    assert (
        len(said) == 2
        and "Shapes_RS_nothink/data row 3, qa 0: the greedy answer (answer) of 'How many squares?" in said[0]
    )
    assert said[0].endswith("is '1', the cache re-derives '7'") and said[1].endswith(
        "the judge's verdict is not in the generation cache: nothing re-derived, nothing compared"
    ), changed.render()

    # an answer the cache does not hold is said, and fails: nothing was compared
    shutil.copy(folder / "cache.sqlite", cache)
    with GenerationCache(cache) as opened:
        assert opened.forget([_cache_key(folder, repos["think"], "How many shapes?")]) == 1
    missing = audit(repos["think"], build=_build_dir(folder), replay=asked)
    lines = [str(f) for f in missing.findings]
    assert lines[:1] == [
        f"{cache}: 'How many shapes?\\nAnswer the question using a single word or phrase.' (image "
        f"{lines[0].split('(image ')[1][:12]}): the greedy answer is not in the generation cache: nothing "
        "re-derived, nothing compared"
    ], missing.render()
    # and where the answers were made cannot be counted from that cache (`rs.audit.made_on`)
    assert len(lines) == 2 and "the cache lacks 1 of the build's answers (item " in lines[1], lines
    assert "4 of 5 published byte for byte" in missing.notes[0] and "1 not whole in the cache" in missing.notes[0]

    # nor is one whose bytes changed without their checksum: named as damaged, never read
    shutil.copy(folder / "cache.sqlite", cache)
    with sqlite3.connect(cache) as db:
        db.execute(
            "UPDATE answers SET value = replace(value, 'conclude 1', 'conclude 7') WHERE key = ?",
            (_cache_key(folder, repos["think"], "How many squares?"),),
        )
    damaged = audit(repos["think"], build=_build_dir(folder), replay=asked)
    assert [str(f).split("): ", 1)[1] for f in damaged.findings] == [
        "the greedy answer is damaged in the generation cache (its bytes fail their checksum): nothing re-derived, nothing compared"
    ], damaged.render()


def test_replay_needs_the_runs_cache_and_its_families_file(builds, tmp_path: Path, capsys) -> None:
    from rs.cli import run

    folder, repos = builds["plain"]
    build = str(_build_dir(folder))
    for argv, said in (
        (
            ["--cache", str(tmp_path / "nowhere.sqlite"), "--config", str(folder / "families.yaml")],
            f"error: --replay: no generation cache at {tmp_path / 'nowhere.sqlite'}",
        ),
        (
            [
                "--cache",
                str(folder / "cache.sqlite"),
                "--config",
                str(builds["recovery-blocked"][0] / "families.yaml"),
            ],
            f"error: --replay: the build {build} is not Shapes as {builds['recovery-blocked'][0] / 'families.yaml'} defines it: its "
            "sampling stage (sample.json) was made under another model, engine, sampling, judge, verifier or rs version",
        ),
        (["--replay", "0", "--engine"], "error: --engine goes with --replay N (and --build DIR)"),
    ):
        with pytest.raises(SystemExit) as exit_:
            run(lambda: rs_main(["audit", str(repos["think"]), "--build", build, "--replay", "3", *argv]))
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.startswith(said), err
    assert (
        rs_main(
            [
                "audit",
                str(repos["think"]),
                "--build",
                build,
                "--replay",
                "3",
                "--cache",
                str(folder / "cache.sqlite"),
                "--config",
                str(folder / "families.yaml"),
            ]
        )
        == 0
    )
    assert "3 of 3 published byte for byte" in capsys.readouterr().out


def test_under_batch_invariance_a_text_the_engine_gives_otherwise_is_a_finding() -> None:
    """Off GPU vLLM refuses the mode (tests/engines/test_batch_invariant.py), so no engine here answers in it: the rule itself."""
    from rs.audit.checkers import Audit
    from rs.audit.replay import Derived, Pick, _agreement

    pick = Pick("think", "ab" * 32, "How many shapes?")
    cached = [Derived(pick, texts=["<think>2</think>2"], answer="2", routing=(True, True, False, "verifier", None))]
    fresh = [Derived(pick, texts=["<think>two</think>2"], answer="2", routing=(True, True, False, "verifier", None))]
    for invariant in (False, True):
        a = Audit(None, None, None, {})  # type: ignore[arg-type]
        _agreement(a, 1, cached, fresh, {}, invariant=invariant, engine="the vllm engine of m")
        assert "think   1: final answers 1/1 identical, texts 0/1 byte-identical, routing 1/1 identical" in a.notes[0]
        assert [f.what for f in a.findings] == (
            ["the answers' texts of 'How many shapes?' (image abababababab) in batch-invariant mode"]
            if invariant
            else []
        )


def test_replay_looks_a_separate_judge_models_verdicts_up_under_its_own_identity(tmp_path: Path, family) -> None:
    """A judge model apart from the sampler: its verdicts are cached under its engine's identity, and found there."""
    outcome = publish(
        family(RECOVERY_CASES, judge={**PASSING, "model": {"id": "other-org/judge"}}, recovery=RECOVERY),
        out=tmp_path / "out",
        build_root=tmp_path / "build",
        cache_path=tmp_path / "cache.sqlite",
        progress=False,
    )
    stats = json.loads((Path(outcome.where["think"]) / "rs" / "stats.json").read_text())
    assert stats["provenance"]["judge_model"]["id"] == "other-org/judge" and stats["judge"]["judged"] > 0
    result = audit(Path(outcome.where["think"]), build=_build_dir(tmp_path), replay=_replay(tmp_path, 10, engine=True))
    assert result.ok and "5 of 5 published byte for byte" in result.notes[0], result.render()
    assert "all   5: final answers 5/5 identical, texts 5/5 byte-identical, routing 5/5 identical" in result.notes[1]


@contextlib.contextmanager
def _read_only(folder: Path):
    """`folder` read-only for this process: a read-only bind mount for root (whom a mode does not stop), else its mode."""
    import os
    import subprocess

    if os.geteuid() == 0:
        done = subprocess.run(
            f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder}",
            shell=True,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"a read-only folder for root needs `mount --bind`: {done.stderr.strip()}")
        try:
            yield
        finally:
            subprocess.run(["umount", str(folder)], check=True)
    else:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)


def test_replay_with_a_read_only_cache_or_build(builds, tmp_path: Path, capsys) -> None:
    """A read-only cache folder: refused with what to do (exit 2), never `sqlite3.OperationalError`; a read-only build:
    audited all the same (the audit's log goes to the temporary directory, it writes nothing in the build)."""
    from rs.cli import run
    from rs.engines.generation_cache import GenerationCache

    folder, repos = builds["plain"]
    with GenerationCache(folder / "cache.sqlite"):  # checkpointed on close: the copy holds every answer
        pass
    (tmp_path / "cache").mkdir()
    shutil.copy(folder / "cache.sqlite", tmp_path / "cache" / "cache.sqlite")
    shutil.copytree(_build_dir(folder), tmp_path / "build")
    config = ["--config", str(folder / "families.yaml")]
    with _read_only(tmp_path / "cache"):
        argv = ["audit", str(repos["think"]), "--build", str(tmp_path / "build"), "--replay", "3", *config]
        with pytest.raises(SystemExit) as exit_:
            run(lambda: rs_main([*argv, "--cache", str(tmp_path / "cache" / "cache.sqlite")]))
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.startswith(
            f"error: --replay: the generation cache {tmp_path / 'cache' / 'cache.sqlite'} cannot be opened: "
            f"{tmp_path / 'cache'} is read-only"
        ), err
        assert "hint: copy the cache to a folder you can write" in err
    with _read_only(tmp_path / "build"):
        argv = ["audit", str(repos["think"]), "--build", str(tmp_path / "build"), "--replay", "3", *config]
        assert rs_main([*argv, "--cache", str(tmp_path / "cache" / "cache.sqlite")]) == 0
        assert "3 of 3 published byte for byte" in capsys.readouterr().out
