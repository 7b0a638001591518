"""A family sampled on two machines (shards, their caches merged) publishes where its answers were made (its greedy
answers, its no-image answers and its recovery samples), and the audit counts them again from the stores and from the
cache. The machines are named by `RS_MACHINE` (`rs.engines.machine`):
the engine and the pipeline run as they do on two hosts."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Iterator

import pytest
from faults import engine_kinds_installed
from replay_family import RECOVERY_CASES, write_family

from rs.audit import Replay, audit
from rs.cli.cache import main as cache_main
from rs.cli.sample import main as sample_main
from rs.engines.machine import ENV
from rs.pipeline.publish.stage import publish
from rs.store import read_clean_rows, read_records

BLOCKS = {
    "engine": {"kind": "blind_replay"},
    "judge": {"calibration_samples": 4, "min_calibration_cases": 1, "min_negative_agreement": 0.0, "sees_image": True},
    "recovery": {"samples": 2, "temperature": 0.7, "cut_off": True, "difficulty": {"samples": 2}},
    "blind": {"samples": 1},
    "publish": {"samples": True},
}
"""The judge on, a recovery pass whose samples are made where the whole family runs, and a no-image pass (each
question asked without its image at temperature 0 and once at the recovery's), which each shard asks of its rows; a samples repo too. The
replay engine is refused with a no-image pass: `blind_replay` (tests/plugins/rs_faults.py) replays the answers given
with the image and gives one of its own without (the judge sees the image, so that its requests are replayed too)."""


@pytest.fixture(scope="module", autouse=True)
def blind_replay() -> Iterator[None]:
    """The engine kind `blind_replay` registered for the module's tests (the families file names it)."""
    with engine_kinds_installed():
        yield


CACHE_CHECK = "where the answers were made (the generation cache)"
STORES_CHECK = "where the answers were made (stores)"


@pytest.fixture(scope="module")
def two_machines(tmp_path_factory) -> dict:
    """Shard 0 sampled on machine-a, shard 1 on machine-b, each into its own build and cache; the caches merged on
    machine-c, which runs the whole family (its recovery samples made there) and publishes it."""
    tmp = tmp_path_factory.mktemp("two-machines")
    family = write_family(tmp, RECOVERY_CASES, **BLOCKS)
    config = str(tmp / "families.yaml")
    patch = pytest.MonkeyPatch()
    try:
        for shard, name in enumerate(("machine-a", "machine-b")):
            patch.setenv(ENV, name)
            where = ["--build-dir", str(tmp / name / "build"), "--cache", str(tmp / name / "cache.sqlite")]
            assert sample_main(["Shapes", "--config", config, *where, "--shard", f"{shard}/2"]) == 0
        patch.setenv(ENV, "machine-c")
        merged = tmp / "merged.sqlite"
        sources = [str(tmp / name / "cache.sqlite") for name in ("machine-a", "machine-b")]
        assert cache_main(["merge", "--cache", str(merged), *sources]) == 0
        outcome = publish(family, out=tmp / "out", build_root=tmp / "build", cache_path=merged, progress=False)
    finally:
        patch.undo()
    build = next(p.parent for p in (tmp / "build").rglob("stats.json"))
    return {"tmp": tmp, "repos": {s: Path(w) for s, w in outcome.where.items()}, "build": build, "cache": merged}


def _provenance(repo: Path) -> list[dict]:
    return json.loads((repo / "rs" / "stats.json").read_text())["provenance"]["made_on"]


def _no_image(build: Path) -> list[dict]:
    """The build's no-image records (`blind-*.parquet` beside the items), one per question."""
    return list(read_records(build / "items", "blind"))


def _audit(run: dict, *, cache: bool = True):
    replay = Replay(0, config=run["tmp"] / "families.yaml", cache=run["cache"] if cache else None)
    return audit(run["repos"]["think"], build=run["build"], replay=replay)


def test_the_provenance_names_both_machines_with_the_answers_each_made(two_machines) -> None:
    run = two_machines
    rows = list(read_clean_rows(run["build"] / "clean"))
    greedy = [sum(len(r.qa) for i, r in enumerate(rows) if i % 2 == s) for s in (0, 1)]
    no_image = [sum(len(b["answers"]) for b in _no_image(run["build"]) if b["row"] % 2 == s) for s in (0, 1)]
    assert no_image == [2 * n for n in greedy] and all(greedy)  # the temperature-0 answer and one sample a question
    stats = json.loads((run["repos"]["think"] / "rs" / "stats.json").read_text())
    assert stats["blind"]["answers"] == sum(no_image)
    made_on = stats["provenance"]["made_on"]
    by_name = {m["hardware"].get("name"): m for m in made_on}
    assert set(by_name) == {"machine-a", "machine-b", "machine-c"}
    # each shard's machine made its questions' greedy answers and their no-image answers
    assert [by_name["machine-a"]["answers"], by_name["machine-b"]["answers"]] == [
        g + n for g, n in zip(greedy, no_image)
    ]
    assert by_name["machine-c"]["answers"] == stats["recovery"]["samples"] > 0  # made where the whole stage ran
    assert all(m["engine"]["engine"] == "blind_replay" and len(m["id"]) == 12 for m in made_on)
    card = (run["repos"]["think"] / "README.md").read_text()
    line = next(line for line in card.splitlines() if line.startswith("Where the answers were made"))
    assert "every question's greedy answer, every answer to it without its image (each rotation and sample" in line
    for m in made_on:
        assert f"`{m['id']}` {m['answers']} (the machine named {m['hardware']['name']})" in line
    for repo in run["repos"].values():  # every card of the family says it, and every one audits clean
        assert _provenance(repo) == made_on
    result = _audit(run)
    assert result.ok, result.render()


def test_the_audit_catches_an_edited_count(two_machines, tmp_path: Path) -> None:
    """One answer moved from machine-a to machine-b in the stats and the card alike (their sum and their text agree):
    the build's stores and the cache say otherwise."""
    import shutil

    run = dict(two_machines)
    out = tmp_path / "out"
    shutil.copytree(run["repos"]["think"].parent, out)
    run["repos"] = {s: out / p.name for s, p in run["repos"].items()}
    made_on = _provenance(run["repos"]["think"])
    a, b = (next(m for m in made_on if m["hardware"]["name"] == n) for n in ("machine-a", "machine-b"))
    for repo in run["repos"].values():
        stats_path, card_path = repo / "rs" / "stats.json", repo / "README.md"
        stats = json.loads(stats_path.read_text())
        for m in stats["provenance"]["made_on"]:
            m["answers"] += {a["id"]: -1, b["id"]: 1}.get(m["id"], 0)
        stats_path.write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n")
        card = card_path.read_text()
        for m, change in ((a, -1), (b, 1)):
            card = card.replace(f"`{m['id']}` {m['answers']} (", f"`{m['id']}` {m['answers'] + change} (")
        card_path.write_text(card)
    found = {f.what for f in _audit(run).findings}
    assert {CACHE_CHECK, STORES_CHECK} <= found, found
    assert CACHE_CHECK not in {f.what for f in _audit(run, cache=False).findings}  # without --cache: the stores alone


def test_the_audit_counts_from_the_cache_itself(two_machines, tmp_path: Path) -> None:
    """A cache whose answers of one machine lost their machine: the stores still agree with the card, the cache does not."""
    import shutil

    run = dict(two_machines)
    run["cache"] = tmp_path / "cache.sqlite"
    shutil.copy(two_machines["cache"], run["cache"])
    a = next(m for m in _provenance(run["repos"]["think"]) if m["hardware"]["name"] == "machine-a")
    with sqlite3.connect(run["cache"]) as db:  # machine-a's answers, as a cache of an older rs holds them
        assert db.execute("UPDATE answers SET made_on = NULL WHERE made_on = ?", (a["id"],)).rowcount >= a["answers"]
    findings = _audit(run).findings
    assert [f.what for f in findings] == [CACHE_CHECK], [str(f) for f in findings]
    assert findings[0].truth.get("unknown") == a["answers"] and a["id"] not in findings[0].truth


def _no_image_key(run: dict, row: int) -> str:
    """The generation cache's key of the temperature-0 no-image answer to the first question of clean row `row`: the
    prompt it was asked with the image, no image (`rs.pipeline.sample.blind`), keyed as the run keyed it."""
    from rs.engines.cached_engine import cache_key
    from rs.engines.factory import sampling_settings
    from rs.families import load_families

    family = load_families(run["tmp"] / "families.yaml")["Shapes"]
    identity = json.loads((run["build"] / "sample.json").read_text())["identities"]["sampler"]
    item = next(i for i in read_records(run["build"] / "items", "items") if i["row"] == row)
    return cache_key(identity, sampling_settings(family), "", item["prompt"])


def test_the_audit_catches_a_moved_no_image_answer(two_machines, tmp_path: Path) -> None:
    """One no-image answer of machine-a's shard recorded as machine-b's in the cache: the stores and the card agree, the
    cache does not, by that one answer."""
    import shutil

    run = dict(two_machines)
    run["cache"] = tmp_path / "cache.sqlite"
    shutil.copy(two_machines["cache"], run["cache"])
    made_on = _provenance(run["repos"]["think"])
    a, b = (next(m for m in made_on if m["hardware"]["name"] == n) for n in ("machine-a", "machine-b"))
    key = _no_image_key(run, 0)  # row 0: shard 0, machine-a's
    with sqlite3.connect(run["cache"]) as db:
        assert db.execute("SELECT made_on FROM answers WHERE key = ?", (key,)).fetchall() == [(a["id"],)]
        db.execute("UPDATE answers SET made_on = ? WHERE key = ?", (b["id"], key))
    findings = _audit(run).findings
    assert [f.what for f in findings] == [CACHE_CHECK], [str(f) for f in findings]
    truth = findings[0].truth
    assert (truth[a["id"]], truth[b["id"]]) == (a["answers"] - 1, b["answers"] + 1), truth


def test_the_audit_catches_a_no_image_answer_moved_in_the_stores(two_machines, tmp_path: Path) -> None:
    """The build's no-image store with one answer of machine-a's recorded as machine-b's (sealed again): the card and
    the cache agree, the stores do not."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from rs.pipeline.sample.blind import BLIND
    from rs.util.checksums import seal

    run = dict(two_machines)
    run["build"] = tmp_path / "build"
    shutil.copytree(two_machines["build"], run["build"])
    made_on = _provenance(run["repos"]["think"])
    a, b = (next(m for m in made_on if m["hardware"]["name"] == n) for n in ("machine-a", "machine-b"))
    (path,) = sorted((run["build"] / "items").glob("blind-*.parquet"))
    records = pq.read_table(path).to_pylist()
    first = next(r for r in records if r["made_on"] and r["made_on"][0] == a["id"])
    first["made_on"][0] = b["id"]
    pq.write_table(pa.Table.from_pylist(records, schema=BLIND), path)
    seal(run["build"] / "items")
    found = {f.what: f for f in _audit(run, cache=False).findings}
    assert set(found) == {STORES_CHECK}, [str(f) for f in found.values()]
    truth = found[STORES_CHECK].truth
    assert (truth[a["id"]], truth[b["id"]]) == (a["answers"] - 1, b["answers"] + 1), truth


def test_the_samples_repo_gives_back_where_the_no_image_answers_were_made(two_machines, tmp_path: Path) -> None:
    """`rs refilter --from-samples`: the no-image records rebuilt from the samples repo alone name each answer's machine
    as the build's do, and the repos rebuilt from them list the same machines with the same counts."""
    from rs.cli.main import main as rs_main

    run = two_machines
    out, build = tmp_path / "out", tmp_path / "build"
    argv = ["--config", str(run["tmp"] / "families.yaml"), "--cache", str(run["cache"]), "--out", str(out)]
    samples = str(run["repos"]["samples"])
    assert rs_main(["refilter", "Shapes", *argv, "--build-dir", str(build), "--from-samples", samples]) == 0
    built = _no_image(run["build"])
    assert _no_image(build / "Shapes" / "from-samples") == built and all(b["made_on"] for b in built)
    rebuilt = next(out.rglob(f"{run['repos']['think'].name}/rs/stats.json"))
    assert json.loads(rebuilt.read_text())["provenance"]["made_on"] == _provenance(run["repos"]["think"])


def test_a_family_built_from_an_old_cache_publishes_its_answers_as_unknown(two_machines, tmp_path: Path) -> None:
    """The same answers in a cache written before rs recorded machines: `unknown`, not the machine that builds."""
    import shutil

    cache = tmp_path / "old.sqlite"
    shutil.copy(two_machines["cache"], cache)
    with sqlite3.connect(cache) as db:
        db.execute("ALTER TABLE answers DROP COLUMN made_on")
        db.execute("DROP TABLE machines")
    family = write_family(tmp_path / "family", RECOVERY_CASES, **BLOCKS)
    outcome = publish(family, out=tmp_path / "out", build_root=tmp_path / "build", cache_path=cache, progress=False)
    think = Path(outcome.where["think"])
    stats = json.loads((think / "rs" / "stats.json").read_text())
    assert stats["provenance"]["made_on"] == [
        {
            "id": "unknown",
            "answers": stats["totals"]["answered"] + stats["recovery"]["samples"] + stats["blind"]["answers"],
        }
    ]
    assert "(cached before rs recorded where)." in (think / "README.md").read_text()


def test_the_command_counts_from_the_cache_with_the_build_only(two_machines, capsys) -> None:
    from rs.cli import run as run_command
    from rs.cli.main import main as rs_main

    run = two_machines
    think, config = str(run["repos"]["think"]), str(run["tmp"] / "families.yaml")
    assert (
        rs_main(["audit", think, "--build", str(run["build"]), "--cache", str(run["cache"]), "--config", config]) == 0
    )
    assert "all agree" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        run_command(lambda: rs_main(["audit", think, "--cache", str(run["cache"])]))
    assert exit_.value.code == 2 and "--cache goes with --build DIR" in capsys.readouterr().err
