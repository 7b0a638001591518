"""A family sampled on two machines (shards, their caches merged) publishes where its answers were made, and the audit
counts them again from the stores and from the cache. The machines are named by `RS_MACHINE` (`rs.engines.machine`):
the engine and the pipeline run as they do on two hosts."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from replay_family import RECOVERY_CASES, write_family

from rs.audit import Replay, audit
from rs.cli.cache import main as cache_main
from rs.cli.sample import main as sample_main
from rs.engines.machine import ENV
from rs.pipeline.publish.stage import publish
from rs.store import read_clean_rows

BLOCKS = {
    "judge": {"calibration_samples": 4, "min_calibration_cases": 1, "min_negative_agreement": 0.0},
    "recovery": {"samples": 2, "temperature": 0.7, "cut_off": True, "difficulty": {"samples": 2}},
}
"""The judge on, and a recovery pass whose samples are made where the whole family runs."""

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


def _audit(run: dict, *, cache: bool = True):
    replay = Replay(0, config=run["tmp"] / "families.yaml", cache=run["cache"] if cache else None)
    return audit(run["repos"]["think"], build=run["build"], replay=replay)


def test_the_provenance_names_both_machines_with_the_answers_each_made(two_machines) -> None:
    run = two_machines
    rows = list(read_clean_rows(run["build"] / "clean"))
    per_shard = [sum(len(r.qa) for i, r in enumerate(rows) if i % 2 == s) for s in (0, 1)]
    stats = json.loads((run["repos"]["think"] / "rs" / "stats.json").read_text())
    made_on = stats["provenance"]["made_on"]
    by_name = {m["hardware"].get("name"): m for m in made_on}
    assert set(by_name) == {"machine-a", "machine-b", "machine-c"}
    assert [by_name["machine-a"]["answers"], by_name["machine-b"]["answers"]] == per_shard and all(per_shard)
    assert by_name["machine-c"]["answers"] == stats["recovery"]["samples"] > 0  # made where the whole stage ran
    assert all(m["engine"]["engine"] == "replay" and len(m["id"]) == 12 for m in made_on)
    card = (run["repos"]["think"] / "README.md").read_text()
    line = next(line for line in card.splitlines() if line.startswith("Where the answers were made"))
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
        {"id": "unknown", "answers": stats["totals"]["answered"] + stats["recovery"]["samples"]}
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
