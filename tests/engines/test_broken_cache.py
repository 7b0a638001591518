"""A broken generation cache: truncated, emptied, damaged inside, or held locked by another process.

The cache is a real SQLite file from a real run, then truncated or overwritten in the middle; the
lock is held by a second real process. Each time the run stops with an error naming the file and
what to do, the file is left exactly as it was (never replaced by a new cache in silence), and once
the user does what the hint says the same publish gives the bytes of an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import faults
import pytest
from faults import assert_same_published, cache_keys, publish_family

import rs.engines.generation_cache
from rs.engines.cache_guard import CacheBroken, CacheLocked


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The families file, and the folder of Alpha published without a fault (its out/, build/ and cache.sqlite)."""
    return faults.reference(tmp_path_factory.mktemp("families"))


def truncate(path: Path) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size // 2)


def overwrite_a_page(path: Path) -> None:
    """Garbage over the second page (the table's first page), SQLite's header left as it was."""
    with open(path, "r+b") as fh:
        page = int.from_bytes(fh.read(18)[16:18], "big")
        fh.seek(page)
        fh.write(os.urandom(page))


def empty(path: Path) -> None:
    path.write_bytes(b"")


@pytest.mark.parametrize(
    "damage, says",
    [
        (truncate, r"it is truncated: [0-9,]+ bytes where its header says [0-9,]+"),
        (overwrite_a_page, r"SQLite reports database disk image is malformed"),
        (empty, r"the file is empty \(0 bytes\)"),
    ],
)
def test_a_broken_cache_is_named_left_as_it_is_and_a_new_one_starts_only_when_it_is_moved_aside(
    damage, says: str, reference, tmp_path: Path
) -> None:
    families, ref = reference
    cache = tmp_path / "cache.sqlite"
    shutil.copyfile(ref / "cache.sqlite", cache)
    damage(cache)
    broken = cache.read_bytes()

    with pytest.raises(
        CacheBroken, match=f"^the generation cache {cache} is damaged: {says}; rs will not start a new cache"
    ) as caught:
        publish_family(families, tmp_path)
    assert f"move it aside (mv {cache} {cache}.broken) and run the same command again" in caught.value.hint
    assert (
        "every sampling stage not finished yet" in caught.value.hint
        and "finished stages are kept" in caught.value.hint
    )
    assert cache.read_bytes() == broken  # nothing written over it, no new cache in its place
    build = tmp_path / "build" / "Alpha"
    assert (
        (build / "clean.json").exists() and not (build / "sample.json").exists() and not (build / "items.tmp").exists()
    )

    cache.rename(cache.with_name(cache.name + ".broken"))  # what the hint says
    publish_family(families, tmp_path)
    assert_same_published(ref / "out" / "tester", tmp_path / "out" / "tester")


HOLDER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")  # the write lock, held until this process is stopped
print("holding", flush=True)
time.sleep(600)
"""


def test_a_cache_another_process_keeps_locked_names_it_and_the_run_resumes_when_it_lets_go(
    reference, tmp_path: Path, monkeypatch
) -> None:
    families, ref = reference
    cache = tmp_path / "cache.sqlite"
    shutil.copyfile(ref / "cache.sqlite", cache)
    with closing(
        sqlite3.connect(cache, isolation_level=None)
    ) as db:  # half the answers are cached: the run has some to commit
        db.execute("DELETE FROM answers WHERE substr(key, 1, 1) < '8'")
    kept = cache_keys(cache)
    assert 0 < len(kept) < len(cache_keys(ref / "cache.sqlite"))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(cache)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        monkeypatch.setattr(rs.engines.generation_cache, "_BUSY_TIMEOUT_S", 1.0)
        started = time.monotonic()
        with pytest.raises(
            CacheLocked,
            match=f"^the generation cache {cache} stayed locked by another process for 1 s; "
            f"held by process {holder.pid} \\({sys.executable} -c ",
        ):
            publish_family(families, tmp_path)
        assert time.monotonic() - started < 10  # waited once, not again on the way out
    finally:
        holder.kill()
        holder.wait()
    assert cache_keys(cache) == kept  # nothing committed before is lost
    build = tmp_path / "build" / "Alpha"
    assert not (build / "sample.json").exists() and not (build / "items.tmp").exists()

    publish_family(families, tmp_path)  # the other process is gone: the same run goes through
    assert_same_published(ref / "out" / "tester", tmp_path / "out" / "tester")
    calls = {
        name: json.loads((path / "Alpha" / "stats.json").read_text())["run"]
        for name, path in (("ref", ref / "build"), ("rerun", tmp_path / "build"))
    }
    sent = {name: c["sampling_engine_calls"] + c["judge_engine_calls"] for name, c in calls.items()}
    assert sent["rerun"] == sent["ref"] - len(kept)  # the cached half was not asked again
