"""What the flat-memory changes must keep: the stores read back whole and in order one row group at a time, and the
replay engine answering from its on-disk index exactly as it did from a dictionary (the memory itself is measured by
bench/build.py, not here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from rs.engines.base import Request, SamplingSettings
from rs.engines.replay import ReplayEngine, ReplayError
from rs.store import ParquetStreamWriter, read_records

SCHEMA = pa.schema([("n", pa.int64()), ("text", pa.string())])


def test_a_store_of_several_files_and_row_groups_reads_back_in_order(tmp_path: Path) -> None:
    with ParquetStreamWriter(tmp_path, "items", SCHEMA, group_rows=3, file_bytes=40) as writer:
        for n in range(20):
            writer.write({"n": n, "text": f"t{n}"}, size=10)
    assert len(writer.files) > 2  # several files, each of more than one row group
    assert [r["n"] for r in read_records(tmp_path, "items", batch_rows=2)] == list(range(20))
    assert list(read_records(tmp_path, "items", columns=["text"]))[:2] == [{"text": "t0"}, {"text": "t1"}]


def test_an_empty_store_reads_nothing(tmp_path: Path) -> None:
    with ParquetStreamWriter(tmp_path, "items", SCHEMA):
        pass
    assert list(read_records(tmp_path, "items")) == []


def _replay(path: Path, lines: list[object]) -> ReplayEngine:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return ReplayEngine(path, model="replayed/model")


def test_replay_answers_by_key_then_by_prompt_and_a_repeated_key_keeps_its_last_line(tmp_path: Path) -> None:
    engine = _replay(
        tmp_path / "replay.jsonl",
        [
            {"key": "a#0", "text": "first"},
            "",
            {"key": "b#0", "text": "bee"},
            {"key": "a#0", "text": "second"},
            {"prompt": "Is the judge asked?", "text": "CORRECT"},
        ],
    )
    try:
        asked = [
            Request("q", item_key="a#0"),
            Request("q", item_key="b#0"),
            Request("Is the judge asked?"),
            Request("q", item_key="missing#0"),
        ]
        a, b, judged, missing = engine.generate(asked, SamplingSettings())
        assert (a.text, b.text, judged.text) == ("second", "bee", "CORRECT")
        assert missing.error is not None and "missing#0" in missing.error and not missing.cacheable
    finally:
        engine.close()


KILLED_WHILE_OPEN = """
import sys, time
from rs.engines.replay import ReplayEngine
engine = ReplayEngine(sys.argv[1], model="replayed/model")
print("open", flush=True)
time.sleep(60)
"""


def test_the_replay_index_leaves_nothing_behind_even_when_its_process_is_killed(tmp_path: Path) -> None:
    """The index is SQLite's private temporary database: a file SQLite removes as soon as it opens it (on disk past a few
    MB of page cache), so a run killed with the engine open leaves nothing in the temporary directory (a named folder
    was left there before)."""
    replay, tmp = tmp_path / "replay.jsonl", tmp_path / "tmp"
    tmp.mkdir()
    replay.write_text("".join(json.dumps({"key": f"item-{n}#0", "text": "x"}) + "\n" for n in range(1000)))
    env = {**os.environ, "TMPDIR": str(tmp), "SQLITE_TMPDIR": str(tmp)}
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WHILE_OPEN, str(replay)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline() == "open\n"
        assert os.listdir(tmp) == []
    finally:
        child.kill()
        child.wait()
    assert os.listdir(tmp) == []


def test_a_bad_replay_line_is_named_and_leaves_no_index_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    with pytest.raises(ReplayError, match=r"replay\.jsonl:2: each line needs a string `text`"):
        _replay(tmp_path / "replay.jsonl", [{"key": "a#0", "text": "x"}, {"key": "b#0"}])
    assert os.listdir(tmp_path / "tmp") == []
