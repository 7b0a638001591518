"""`rs refilter` under a stricter reader, with no engine: the stored answers re-read, from the build and from its samples repo.

The family's reading is made stricter for real: `answers: {literal: true}` reads an answer as written, so "two" for the
reference 2 is no longer accepted by the verifier but left undecided, for the judge. One build is made under the
lenient reading (after a `--limit 2` trial under the strict one, whose verdicts and samples are in the cache, as an
earlier run's would be); `rs refilter` then re-reads it under the strict one with the replay file and the source moved
away (no engine can be made, nothing can be cleaned) and the cache counted (it gains nothing).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest
from family_yaml import REPLAY, family_yaml
from replay_family import differ_by_the_source_alone, write_family

from rs.audit import audit
from rs.cli.main import main as rs_main
from rs.engines.generation_cache import GenerationCache
from rs.families import load_families
from rs.pipeline.publish.stage import publish
from rs.pipeline.sample.judge import Judge, JudgeCase

pytestmark = pytest.mark.slow

BLOCKS = {
    "judge": {
        "calibration_samples": 1,
        "min_calibration_cases": 1,
        "min_negative_agreement": 0.0,
        "min_positive_agreement": 0.0,
    },
    "recovery": {"samples": 2, "temperature": 0.7},
    "publish": {"samples": True},
}
STRICT = {**BLOCKS, "answers": {"literal": True}}
INSTRUCTION = "\nAnswer the question using a single word or phrase."

# question, reference, greedy answer, the two samples at 0.7. The first two images are the strict trial's.
CASES = [
    ("How many shapes?", "2", "two", ["2", "two"]),  # strict: undecided; the trial's judge said CORRECT (cached)
    ("How many circles?", "3", "three", ["three", "3"]),  # strict: undecided, judged UNSURE in the trial (cached); its
    # samples are the trial's (cached): recovered by sample 1
    (
        "Is there a circle?",
        "yes",
        "banana",
        ["banana", "yes"],
    ),  # undecided either way: the run's judge said WRONG (stored)
    (
        "How many triangles?",
        "4",
        "four",
        ["4", "four"],
    ),  # strict: undecided, never judged, never sampled: judge_not_asked
    ("How many squares?", "1", "1", ["1", "1"]),  # accepted either way (the run's one calibration positive)
]
VERDICTS = {("How many shapes?", "2", "two"): "CORRECT", ("Is there a circle?", "yes", "banana"): "WRONG"}


@contextlib.contextmanager
def _moved_away(*paths: Path):
    """Paths renamed for the duration: with the replay file gone no engine can be made, with the source nothing cleaned."""
    for path in paths:
        path.rename(path.with_name(path.name + ".away"))
    try:
        yield
    finally:
        for path in paths:
            path.with_name(path.name + ".away").rename(path)


def _refilter(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = rs_main(["refilter", "Shapes", *argv])
    return code, out.getvalue()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("strict")
    family = write_family(tmp, CASES, **BLOCKS)
    (tmp / "strict.yaml").write_text(family_yaml("Shapes", REPLAY, **STRICT))
    judge = Judge(None, family.config.judge)  # type: ignore[arg-type]
    with open(tmp / "answers.jsonl", "a") as fh:  # the judge's verdicts, replayed by their exact prompt
        for (question, reference, candidate), label in VERDICTS.items():
            fh.write(
                json.dumps(
                    {"prompt": judge.prompt(JudgeCase(question + INSTRUCTION, reference, candidate)), "text": label}
                )
                + "\n"
            )
    cache, build = tmp / "cache.sqlite", tmp / "build"
    strict = load_families(tmp / "strict.yaml")["Shapes"]
    publish(strict, out=tmp / "trial", build_root=build, cache_path=cache, progress=False, limit=2)
    first = publish(family, out=tmp / "out", build_root=build, cache_path=cache, progress=False)
    with GenerationCache(cache) as held:
        cached = len(held)
    manifests = {
        store: (build / "Shapes" / store / "SHA256SUMS").read_bytes() for store in ("clean", "items", "recovery")
    }
    common = ["--config", str(tmp / "strict.yaml"), "--cache", str(cache)]
    with _moved_away(tmp / "answers.jsonl", tmp / "data"):
        built = _refilter(*common, "--out", str(tmp / "from-build"), "--build-dir", str(build))
        from_samples = _refilter(
            *common,
            "--out",
            str(tmp / "from-samples"),
            "--build-dir",
            str(tmp / "elsewhere"),
            "--from-samples",
            first.where["samples"],
        )
    with GenerationCache(cache) as held:
        cached_after = len(held)
    return SimpleNamespace(
        tmp=tmp,
        build=build,
        cache=cache,
        first=first,
        built=built,
        from_samples=from_samples,
        cached=(cached, cached_after),
        manifests=manifests,
        stores_after={store: (build / "Shapes" / store / "SHA256SUMS").read_bytes() for store in manifests},
    )


def _by_question(repo: Path, cache_dir: Path) -> dict[str, dict]:
    rows = datasets.load_dataset(str(repo), split="train", cache_dir=str(cache_dir))
    return {qa["question"].split("\n")[0]: qa for row in rows for qa in row["qa"]}


def test_a_stricter_reader_rereads_the_stored_answers_with_no_engine(runs) -> None:
    code, printed = runs.built
    assert code == 0, printed
    assert runs.cached[0] == runs.cached[1]  # no engine call: the cache gained nothing
    assert runs.stores_after == runs.manifests  # the run's stores are untouched: the re-read is beside them
    local = runs.tmp / "from-build" / "local"
    nothink = _by_question(local / "Shapes_RS_nothink", runs.tmp / "hf")
    assert {q: qa["accepted_by"] for q, qa in nothink.items()} == {
        "How many shapes?": "judge",  # the cached verdict, under the run's calibration (it passed)
        "How many circles?": "recovery",  # a cached sample the strict reader accepts
        "Is there a circle?": "recovery",  # as in the run: the stored WRONG, then its stored sample
        "How many squares?": "verifier",
    }
    assert nothink["How many circles?"]["answer"] == "3" and nothink["How many circles?"]["greedy_answer"] == "three"
    rejected = _by_question(local / "Shapes_rejected", runs.tmp / "hf")
    assert {q: qa["reason"] for q, qa in rejected.items()} == {"How many triangles?": "judge_not_asked"}
    before = _by_question(Path(runs.first.where["nothink"]), runs.tmp / "hf")
    assert {q: qa["accepted_by"] for q, qa in before.items()} == {  # the lenient run accepted all but the circle
        "How many shapes?": "verifier",
        "How many circles?": "verifier",
        "Is there a circle?": "recovery",
        "How many triangles?": "verifier",
        "How many squares?": "verifier",
    }

    stats = json.loads((local / "Shapes_rejected" / "rs" / "stats.json").read_text())
    reread = stats["filter"]["reread"]
    assert reread["changed"] == [{"what": "answers.literal", "run": False, "now": True}]
    assert (reread["answers"], reread["outcomes_changed"], reread["questions"]) == (
        7,
        3,
        5,
    )  # 5 greedy, the circle's 2 samples
    assert reread["decisions"] == {"changed": 3, "accepted_to_rejected": 1, "rejected_to_accepted": 0, "other": 2}
    assert reread["verdicts"] == {
        "stores": 2,
        "cache": 3,
    }  # the circle's greedy and sample 0 (banana); the trial's three
    assert (reread["judge_not_asked"], reread["judge_not_asked_questions"], reread["questions_unjudged"]) == (1, 1, 1)
    assert (reread["samples_cached"], reread["samples_missing"], reread["questions_short"]) == (2, 2, 1)
    assert reread["cache"] is None and stats["totals"]["rejected_by_reason"]["judge_not_asked"] == 1

    card = (local / "Shapes_rejected" / "README.md").read_text()
    assert "**Re-read under a changed reader**: the run's 7 stored answers were graded again" in card
    assert "`answers.literal` `false` → `true`" in card and "This family's answers are transcriptions" in card
    assert (
        "**1 undecided answer (of 1 question) had no verdict**" in card
        and "1 question rests on such an answer and is rejected" in card
        and "- `judge_not_asked` — re-read offline" in card
    )
    assert (
        "judge_not_asked" not in (Path(runs.first.where["rejected"]) / "README.md").read_text()
    )  # listed only where it occurs
    assert (
        "1 undecided answer (of 1 question) without a judge verdict (1 question rejected as `judge_not_asked`, not as wrong); 2 samples"
        in printed
    )
    assert (
        f"rs publish Shapes --config {runs.tmp / 'strict.yaml'} --build-dir {runs.build} --cache {runs.cache}"
        in printed
    )

    samples = {
        r["question"].split("\n")[0]: r
        for r in datasets.load_dataset(str(local / "Shapes_RS_samples"), split="train", cache_dir=str(runs.tmp / "hf"))
    }
    triangles = samples["How many triangles?"]["generations"]
    assert [(g["final"], g["reader"], g["judge"], g["reason"]) for g in triangles] == [
        ("four", "undecided", None, "judge_not_asked")
    ]
    for repo in sorted(local.iterdir()):
        if not repo.name.startswith("."):
            result = audit(repo, build=runs.build / "Shapes" / "reread")
            assert result.ok, result.render()


def test_the_samples_repo_alone_rebuilds_the_same_bytes(runs) -> None:
    """From the lenient run's samples repo, with no build (another --build-dir), no replay file and no source: the same
    re-read, the same repos byte for byte, but the sentence and `filter.source` that name the samples repo."""
    code, printed = runs.from_samples
    assert code == 0, printed
    assert "re-filtered offline from the samples repo Shapes_RS_samples" in printed
    differing = differ_by_the_source_alone(
        runs.tmp / "from-build" / "local", runs.tmp / "from-samples" / "local", "Shapes_RS_samples", local=True
    )
    assert (
        len(differing) == 8
    )  # each of the four repos' card and stats: the data, the samples and their numbers are the same


def test_more_than_the_reader_changed_is_refused_with_what(runs) -> None:
    """Another instruction: the stored answers are not the family's any more. Refused before anything is written."""
    other = runs.tmp / "other.yaml"
    other.write_text(family_yaml("Shapes", REPLAY, **STRICT, instruction="\nAnswer the question using a single word."))
    with pytest.raises(Exception) as raised:
        _refilter(
            "--config",
            str(other),
            "--out",
            str(runs.tmp / "refused"),
            "--build-dir",
            str(runs.build),
            "--cache",
            str(runs.cache),
        )
    assert raised.value.exit_code == 2
    # the clean stage's fingerprint holds the instruction: the cleaned rows are not the family's now
    assert "holds no cleaned rows for the family's settings" in str(raised.value) and "calls no model" in str(
        raised.value
    )
    other.write_text(family_yaml("Shapes", REPLAY, **STRICT, sampling={"max_tokens": 64}))
    with pytest.raises(Exception) as raised:
        _refilter(
            "--config",
            str(other),
            "--out",
            str(runs.tmp / "refused"),
            "--build-dir",
            str(runs.build),
            "--cache",
            str(runs.cache),
        )
    assert "more than the reader changed: sampling.max_tokens" in str(raised.value) and raised.value.exit_code == 2
    assert not (runs.tmp / "refused").exists()


def test_a_bumped_verifiers_version_rereads_and_changes_no_decision(runs, monkeypatch, tmp_path: Path) -> None:
    """The verifiers' shared rules at another `VERSION` (`rs/pipeline/versions.py`: what an rs upgrade that bumped it brings) with
    the family's own reading: the build is stale for the reader, so it is re-read; the same reading decides the same."""
    import rs.verifiers.base

    run, bumped = rs.verifiers.base.VERSION, f"{rs.verifiers.base.VERSION}-bumped"
    monkeypatch.setattr(rs.verifiers.base, "VERSION", bumped)
    code, printed = _refilter(
        "--config",
        str(runs.tmp / "families.yaml"),
        "--out",
        str(tmp_path / "out"),
        "--build-dir",
        str(runs.build),
        "--cache",
        str(runs.cache),
    )
    assert code == 0, printed
    reread = json.loads((tmp_path / "out" / "local" / "Shapes_RS_think" / "rs" / "stats.json").read_text())["filter"][
        "reread"
    ]
    assert reread["changed"] == [{"what": "versions.verifiers", "run": run, "now": bumped}]
    assert (reread["outcomes_changed"], reread["decisions"]["changed"], reread["judge_not_asked"]) == (0, 0, 0)
    assert reread["reader"]["verifiers"] == bumped
    for split in ("think", "nothink", "rejected", "samples"):
        name = Path(runs.first.where[split]).name
        for data in (Path(runs.first.where[split]) / "data").glob("*.parquet"):
            assert data.read_bytes() == (tmp_path / "out" / "local" / name / "data" / data.name).read_bytes()


def test_rs_publish_then_asks_the_judge_and_draws_the_samples(runs) -> None:
    """The command the refilter printed: a run under the strict reader, which asks the judge about "four" (the replay
    engine has no verdict for it: UNSURE) and draws the triangles' samples, one of which it accepts."""
    strict = load_families(runs.tmp / "strict.yaml")["Shapes"]
    outcome = publish(
        strict, out=runs.tmp / "strict-run", build_root=runs.build, cache_path=runs.cache, progress=False
    )
    totals = outcome.report.totals
    assert totals.rejected_by_reason["judge_not_asked"] == 0 and totals.accepted == 5
    assert totals.accepted_by == {"verifier": 1, "judge": 1, "recovery": 3}


def _forge(repo: Path, tmp_path: Path, change, *, question: str = "How many triangles?") -> Path:
    """A copy of the samples repo `repo` with one row's greedy generation changed by `change(row, generation)`."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    forged = tmp_path / "forged" / repo.name
    shutil.copytree(repo, forged)
    shard = next((forged / "data").glob("*.parquet"))
    table = pq.read_table(shard)
    rows = table.to_pylist()
    index = next(i for i, r in enumerate(rows) if r["question"].startswith(question))
    change(rows[index], rows[index]["generations"][0])
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    return forged


def test_a_forged_samples_repo_is_refused_naming_the_row(runs, tmp_path: Path, capsys) -> None:
    """An answer changed in a samples repo (the greedy "four" for 4 made "4", read as accepted) is not what the model
    said: the generation cache holds another text under its key, and nothing is rebuilt or published; an image whose
    bytes no longer hash to its `image_sha256` is refused too, naming the row."""
    from rs.cli import run

    def accepted(row: dict, g: dict) -> None:
        g["text"], g["final"], g["reader"] = g["text"].replace("four", "4"), "4", "accepted"

    def image(row: dict, g: dict) -> None:
        data = row["image"]["bytes"]
        row["image"]["bytes"] = data[:-1] + bytes([data[-1] ^ 1])

    source = Path(runs.first.where["samples"])
    common = ["--config", str(runs.tmp / "strict.yaml"), "--cache", str(runs.cache)]
    for change, said in (
        (
            accepted,
            "generation 0 (greedy): its text '<think>\\nI count carefully and conclude 4.\\n</think>\\n\\n4' is not "
            "what the model said",
        ),
        (image, "its image's bytes do not hash to its image_sha256"),
    ):
        forged = _forge(source, tmp_path / change.__name__, change)
        out = tmp_path / change.__name__ / "out"
        with _moved_away(runs.tmp / "answers.jsonl", runs.tmp / "data"), pytest.raises(SystemExit) as exit_:
            run(
                lambda: rs_main(
                    [
                        "refilter",
                        "Shapes",
                        *common,
                        "--out",
                        str(out),
                        "--build-dir",
                        str(tmp_path / change.__name__ / "build"),
                        "--from-samples",
                        str(forged),
                    ]
                )
            )
        err = capsys.readouterr().err
        assert exit_.value.code == 2, err
        assert "error: Shapes_RS_samples/data row 3 (question " in err and "'How many triangles?" in err, err
        assert said in err and "nothing was rebuilt from it" in err, err
        assert not out.exists()


@pytest.mark.parametrize(("store", "what"), [("clean", "cleaned rows"), ("items", "stored answers")])
def test_a_damaged_store_is_named_with_its_damage(runs, tmp_path: Path, store: str, what: str) -> None:
    """A byte changed in a store of the build: `rs refilter` (which rebuilds nothing) names the store and its damage,
    where it said the store "holds no cleaned rows" (or no stored answers)."""
    import shutil

    from rs.refilter import NotRereadable

    build = tmp_path / "build"
    shutil.copytree(runs.build, build)
    shard = sorted((build / "Shapes" / store).glob("*.parquet"))[0]
    data = bytearray(shard.read_bytes())
    data[100] ^= 1
    shard.write_bytes(bytes(data))
    common = ["--config", str(runs.tmp / "strict.yaml"), "--cache", str(runs.cache)]
    with _moved_away(runs.tmp / "answers.jsonl", runs.tmp / "data"), pytest.raises(NotRereadable) as raised:
        rs_main(["refilter", "Shapes", *common, "--out", str(tmp_path / "out"), "--build-dir", str(build)])
    assert str(raised.value) == (
        f"Shapes: the store of {what} {build / 'Shapes' / store} is damaged: {shard.name} does not match its "
        "checksum; `rs refilter` calls no model, so it cannot rebuild it"
    )


def test_a_samples_repo_whose_reader_outcome_was_changed_is_refused(runs, tmp_path: Path, capsys) -> None:
    """Refiltered under the run's own reader (the stores routed as they are), an answer whose `reader` was made
    `accepted` in the repo, its text left as the model said it ("banana" for yes), is refused naming the question."""
    from rs.cli import run

    def reader(row: dict, g: dict) -> None:
        g["reader"] = "accepted"

    forged = _forge(Path(runs.first.where["samples"]), tmp_path, reader, question="Is there a circle?")
    common = ["--config", str(runs.tmp / "families.yaml"), "--cache", str(runs.cache)]
    argv = [
        *common,
        "--out",
        str(tmp_path / "out"),
        "--build-dir",
        str(tmp_path / "build"),
        "--from-samples",
        str(forged),
    ]
    with _moved_away(runs.tmp / "answers.jsonl", runs.tmp / "data"), pytest.raises(SystemExit) as exit_:
        run(lambda: rs_main(["refilter", "Shapes", *argv]))
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert "error: Shapes_RS_samples: question " in err and "('Is there a circle?" in err, err
    assert (
        "its greedy answer 'banana' is `accepted` in the repo, but the reader, unchanged since the run, reads it "
        in err
    )
    assert "`undecided` against 'yes'" in err and not (tmp_path / "out").exists()
