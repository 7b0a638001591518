"""A committed answer is never lost in silence: the cache's write-ahead log deleted after a kill.

A process commits 100 answers in batches of 10 and is killed (SIGKILL: no close, no last checkpoint);
its `-wal` file is deleted. The checkpoints every `CHECKPOINT_ANSWERS` answers bound the loss; the
count kept beside the cache (`<cache>.committed`) says how many were lost when it is opened again;
asked again, they are counted back, and the next open says nothing.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from pathlib import Path

from rs.engines.base import Generation
from rs.engines.generation_cache import CHECKPOINT_ANSWERS, GenerationCache

WRITER = """
import os, signal, sys
from rs.engines.base import Generation
from rs.engines.generation_cache import GenerationCache
cache = GenerationCache(sys.argv[1])
for batch in range(10):
    cache.put_many([(f"k{batch}-{i}", Generation.from_text(f"answer {batch} {i}", finish_reason="stop", max_tokens=10))
                    for i in range(10)])
os.kill(os.getpid(), signal.SIGKILL)
"""


def answers(keys: list[str]) -> list[tuple[str, Generation]]:
    return [
        (key, Generation.from_text(f"answer {key[1:].replace('-', ' ')}", finish_reason="stop", max_tokens=10))
        for key in keys
    ]


def test_a_lost_write_ahead_log_is_reported_with_the_count_and_its_answers_asked_again(tmp_path: Path, caplog) -> None:
    path = tmp_path / "cache.sqlite"
    killed = subprocess.run([sys.executable, "-c", WRITER, str(path)], capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (tmp_path / "cache.sqlite.committed").read_text() == "100\n"
    (tmp_path / "cache.sqlite-wal").unlink()

    with caplog.at_level(logging.WARNING), GenerationCache(path) as cache:
        held = len(cache)
        assert 100 - held == cache.lost <= CHECKPOINT_ANSWERS + 10 and cache.lost > 0  # bounded by the checkpoints
        said = [r.getMessage() for r in caplog.records]
        assert said == [
            f"the generation cache {path} holds {held} answers, {cache.lost} fewer than the 100 committed to it: its "
            f"write-ahead log (cache.sqlite-wal) was lost (deleted, or the cache copied without it); those answers "
            "are asked again"
        ]
        missing = [f"k{b}-{i}" for b in range(10) for i in range(10) if cache.get(f"k{b}-{i}") is None]
        assert len(missing) == cache.lost
        cache.put_many(answers(missing))  # asked again
    caplog.clear()
    with caplog.at_level(logging.WARNING), GenerationCache(path) as cache:
        assert len(cache) == 100 and cache.lost == 0 and not caplog.records
        assert cache.forget(["k0-0", "k0-1"]) == 2
    assert (tmp_path / "cache.sqlite.committed").read_text() == "98\n"
    with GenerationCache(path) as cache:
        assert cache.lost == 0 and len(cache) == 98


def test_a_new_cache_does_not_inherit_the_count_of_a_deleted_one(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    with GenerationCache(path) as cache:
        cache.put_many(answers(["k1-1", "k1-2"]))
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with GenerationCache(path) as cache:
        assert cache.lost == 0 and len(cache) == 0
