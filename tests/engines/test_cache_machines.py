"""Where each answer was made: the machine record the engine's process stamps, stored beside the answer in the cache."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from rs.engines.base import Generation, Request, SamplingSettings
from rs.engines.cached_engine import CachedEngine
from rs.engines.generation_cache import GenerationCache
from rs.engines.machine import ENV, UNKNOWN, hardware, record


def _answer(text: str = "4") -> Generation:
    return Generation.from_text(f"<think>r</think>{text}", finish_reason="stop", completion_tokens=3, max_tokens=64)


def _downgrade(path: Path) -> None:
    """The cache as rs wrote it before it recorded machines: no `made_on` column, no `machines` table."""
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE answers DROP COLUMN made_on")
        db.execute("DROP TABLE machines")


def test_an_old_caches_answers_read_as_unknown_never_as_the_reading_machine(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    here = record({"engine": "demo"})
    with GenerationCache(path) as cache:
        cache.put_many([("old", _answer())])
    _downgrade(path)
    with GenerationCache(path) as cache:  # opened by this version: the column added, its rows NULL
        old = cache.get_many(["old"])["old"]
        assert old.made_on is None and old.answer == "4"
        cache.put_many([("new", Generation(**{**_answer("5").to_dict(), "made_on": here}))])
        assert cache.get_many(["new"])["new"].made_on == here
        assert cache.made_on(["old", "new", "absent"]) == {"old": None, "new": here["id"]}
    with GenerationCache(path) as cache:  # read back from the file, not this connection's memory
        assert cache.get_many(["new"])["new"].made_on == here
        stored = json.loads(cache._db.execute("SELECT value FROM answers WHERE key = 'new'").fetchone()[0])
        assert "made_on" not in stored  # beside the answer, not in its bytes: one answer, one checksum anywhere
    assert UNKNOWN == "unknown"


class _Echo:
    """An engine computed in this process: answers every prompt with its own text."""

    kind = "echo"

    def identity(self) -> dict[str, str]:
        return {"model": "echo"}

    def generate(self, requests, settings):
        return [Generation.from_text(r.prompt, finish_reason="stop", completion_tokens=1) for r in requests]

    def load(self) -> None:
        pass

    def close(self) -> None:
        pass


def _sample(path: Path, prompts: list[str]) -> dict[str, str]:
    with GenerationCache(path) as cache:
        runner = CachedEngine(_Echo(), cache, batch_size=4, progress=False)  # type: ignore[arg-type]
        settings = SamplingSettings(max_tokens=16)
        for request, _ in runner.run([Request(prompt=p) for p in prompts], settings):
            pass
        return {runner.key(Request(prompt=p), settings): p for p in prompts}


def test_two_machines_caches_merged_keep_each_answers_machine(tmp_path: Path, monkeypatch) -> None:
    """Shards sampled on two machines (named by `RS_MACHINE`), their caches merged: each answer keeps its machine."""
    monkeypatch.setenv(ENV, "machine-a")
    a = _sample(tmp_path / "a.sqlite", [f"q{i}" for i in range(5)])
    monkeypatch.setenv(ENV, "machine-b")
    b = _sample(tmp_path / "b.sqlite", [f"q{i}" for i in range(5, 8)])
    monkeypatch.delenv(ENV)
    from rs.cli.cache import main as cache_main

    assert cache_main(["merge", "--cache", str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite")]) == 0
    with GenerationCache(tmp_path / "a.sqlite") as merged, GenerationCache(tmp_path / "b.sqlite") as source:
        ids = merged.made_on([*a, *b])
        assert len(set(ids.values())) == 2 and None not in ids.values()
        names = {merged.machine(i)["hardware"]["name"] for i in ids.values()}
        assert names == {"machine-a", "machine-b"}
        assert {ids[k] for k in a} != {ids[k] for k in b}
        assert all(merged.machine(ids[k])["hardware"] == {"name": "machine-b"} for k in b)
        assert merged.machine(ids[next(iter(a))])["engine"] == {"engine": "echo", "model": "echo"}
        copied = merged._db.execute(
            "SELECT key, value, checksum FROM answers WHERE key IN (%s)" % ",".join("?" * len(b)), list(b)
        )
        held = source._db.execute("SELECT key, value, checksum FROM answers ORDER BY key").fetchall()
        assert sorted(copied) == held  # the same bytes and checksums as the machine wrote them


def test_the_hardware_record_names_no_host(monkeypatch) -> None:
    import socket

    monkeypatch.delenv(ENV, raising=False)
    hw = hardware()
    assert set(hw) == {"machine", "cpu", "gpus", "memory_gib"}
    assert socket.gethostname() not in json.dumps(hw)
    assert record({"engine": "x"})["machine"] == record({"engine": "y"})["machine"]  # one host, two engines
    assert record({"engine": "x"})["id"] != record({"engine": "y"})["id"]


@pytest.mark.parametrize("kind", ["openai", "replay"])
def test_an_engine_whose_answers_are_made_elsewhere_does_not_name_this_host(kind: str, monkeypatch) -> None:
    from rs.engines.machine import ELSEWHERE, machine_record

    engine = type("Remote", (), {"kind": kind, "computes_here": False, "identity": lambda self: {}})()
    monkeypatch.delenv(ENV, raising=False)
    assert machine_record(engine)["hardware"] == ELSEWHERE
    monkeypatch.setenv(ENV, "the-server")
    assert machine_record(engine)["hardware"] == {"name": "the-server"}
