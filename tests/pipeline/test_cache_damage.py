"""Changed bytes inside a stored answer: SQLite's own checks pass, the answer's checksum does not.

The bytes are changed in the cache file itself, in place and at the same length (as a bad disk
sector or a stray write would), so SQLite reads the file as whole: once into still-valid JSON (a
different answer), once into JSON that no longer parses. Either way the run stops naming the item
and the command that forgets the answer; no split or repo is written. After that command the
same run asks for that one answer again and publishes what an undamaged run does, byte for byte.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pytest
from checkout import ROOT
from faults import assert_same_published, published_files, reference

from rs.engines.base import Generation
from rs.engines.generation_cache import CacheAnswerDamaged, GenerationCache
from rs.families import load_families
from rs.pipeline.publish.stage import publish

ITEM = "Alpha-4-1#0"
"""Answered right ("4"): the think split holds it. Its answer's JSON holds `"answer": "4"` once in the file."""


@pytest.fixture(scope="module")
def ref(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return reference(tmp_path_factory.mktemp("families"))


def change_in_place(cache: Path, old: bytes, new: bytes) -> None:
    assert len(old) == len(new)
    data = cache.read_bytes()
    assert data.count(old) == 1, data.count(old)
    cache.write_bytes(data.replace(old, new))


@pytest.mark.parametrize(
    "change",
    [(b'"answer": "4"', b'"answer": "9"'), (b'"answer": "4"', b'"answer": #4"')],
    ids=["still valid JSON", "broken JSON"],
)
def test_a_changed_answer_is_refused_naming_the_item_and_forgetting_it_resends_only_it(
    change, ref, tmp_path: Path
) -> None:
    families, reference_run = ref
    cache = tmp_path / "cache.sqlite"
    shutil.copy(reference_run / "cache.sqlite", cache)
    assert not Path(f"{cache}-wal").exists()  # every answer is in the main file
    change_in_place(cache, *change)
    with closing(sqlite3.connect(cache)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"  # SQLite sees nothing wrong

    family = load_families(families)["Alpha"]
    with pytest.raises(CacheAnswerDamaged) as refused:
        publish(family, out=tmp_path / "out", build_root=tmp_path / "build", cache_path=cache, progress=False)
    message = str(refused.value)
    assert f"the generation cache {cache} holds 1 damaged answer" in message and f"{ITEM} (cache key " in message
    assert published_files(tmp_path / "out") == [] and not (tmp_path / "build" / "Alpha" / "splits").exists()

    command = refused.value.hint.split("`")[1]
    assert command.startswith(f"rs cache forget --cache {cache} ")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    forgot = subprocess.run(
        [str(Path(os.sys.executable).with_name("rs")), *shlex.split(command)[1:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert forgot.returncode == 0 and "forgot 1 of the 1 answer named in" in forgot.stdout, forgot.stderr[-2000:]

    publish(family, out=tmp_path / "out", build_root=tmp_path / "build", cache_path=cache, progress=False)
    assert_same_published(reference_run / "out", tmp_path / "out")
    run = json.loads((tmp_path / "build" / "Alpha" / "stats.json").read_text())["run"]
    assert (
        run["sampling_engine_calls"] == 1
    )  # that answer alone was asked again (the replay engine's judge errors are never cached)


@pytest.mark.slow
def test_every_answer_is_stored_with_its_checksum_and_check_lists_the_damaged(tmp_path: Path) -> None:
    cache = tmp_path / "cache.sqlite"
    with GenerationCache(cache) as c:
        c.put_many(
            [
                ("k1", Generation("a", None, "a", "stop", max_tokens=8)),
                ("k2", Generation("b", None, "b", "stop", max_tokens=8)),
            ]
        )
        assert {k: g.answer for k, g in c.get_many(["k1", "k2"]).items()} == {"k1": "a", "k2": "b"}
        with (
            closing(sqlite3.connect(cache)) as db,
            db,
        ):  # k2's answer stored under k1: each is valid JSON, neither is its key's
            db.execute("UPDATE answers SET value = (SELECT value FROM answers WHERE key = 'k2') WHERE key = 'k1'")
        with pytest.raises(CacheAnswerDamaged) as refused:
            c.get_many(["k1", "k2"])
        assert refused.value.keys == ["k1"]
        assert list(c.damaged()) == ["k1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rs = str(Path(os.sys.executable).with_name("rs"))
    check = subprocess.run(
        [rs, "cache", "check", "--cache", str(cache)], env=env, capture_output=True, text=True, timeout=120
    )
    assert check.returncode == 1 and check.stdout.startswith("k1\n1 damaged answer of 2"), check.stdout + check.stderr
    subprocess.run(
        [rs, "cache", "forget", "--cache", str(cache), "k1"], env=env, check=True, capture_output=True, timeout=120
    )
    check = subprocess.run(
        [rs, "cache", "check", "--cache", str(cache)], env=env, capture_output=True, text=True, timeout=120
    )
    assert check.returncode == 0 and check.stdout.startswith("0 damaged answers of 1"), check.stdout + check.stderr


def test_a_cache_made_before_checksums_gets_the_column_and_its_answers_read(tmp_path: Path) -> None:
    cache = tmp_path / "old.sqlite"
    value = json.dumps(Generation("a", None, "a", "stop", max_tokens=8).to_dict())
    with closing(sqlite3.connect(cache)) as db, db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(
            "CREATE TABLE answers (key TEXT PRIMARY KEY, value TEXT NOT NULL, max_tokens INTEGER, finish TEXT NOT NULL, "
            "tokens INTEGER, created REAL NOT NULL) WITHOUT ROWID"
        )
        db.execute("INSERT INTO answers VALUES ('old', ?, 8, 'stop', NULL, 0)", (value,))
        db.execute("INSERT INTO answers VALUES ('torn', '{\"text\": ', 8, 'stop', NULL, 0)")
    with GenerationCache(cache) as c:
        assert c.get("old").answer == "a"
        with pytest.raises(CacheAnswerDamaged):  # no checksum to check, but it does not parse: damaged all the same
            c.get("torn")
        c.put_many([("new", Generation("b", None, "b", "stop", max_tokens=8))])
        assert c.get("new").answer == "b"
