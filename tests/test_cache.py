"""The generation cache on its own: key look-ups, and several processes opening one new file at once."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from rs.engines.cache import GenerationCache
from rs.engines.base import Generation


def test_present_reads_keys_only_and_skips_transient_failures(tmp_path: Path) -> None:
    answered = Generation.from_text("<think>a</think>4", finish_reason="stop")
    transient = Generation.failed("timeout", cacheable=False)
    keys = [f"{i:064x}" for i in range(1200)]  # over two SQLite parameter chunks
    with GenerationCache(tmp_path / "generations.sqlite") as cache:
        assert cache.put_many([(k, answered) for k in keys[::3]] + [(keys[1], transient)]) == 400
        asked = [*keys, keys[0], "not-a-key"]  # a key twice, an unknown key
        assert cache.present(asked) == set(keys[::3]) == set(cache.get_many(asked))
        assert cache.present([]) == set()


def _open_and_write(path: str, barrier, worker: int) -> str | None:
    barrier.wait()
    try:
        with GenerationCache(path) as cache:
            cache.put_many([(f"{worker}", Generation.from_text("4", finish_reason="stop"))])
        return None
    except Exception as error:  # noqa: BLE001 - reported to the parent
        return repr(error)


def test_workers_opening_a_new_cache_at_once_all_succeed(tmp_path: Path) -> None:
    # Shard workers started together race to switch a new file to WAL mode; SQLite's busy
    # timeout does not cover that switch (this failed about one round in five before the retry).
    context = multiprocessing.get_context("spawn")
    workers = 6
    with context.Manager() as manager, context.Pool(workers) as pool:
        for round_ in range(15):
            path = str(tmp_path / f"round-{round_}.sqlite")
            barrier = manager.Barrier(workers)
            errors = pool.starmap(_open_and_write, [(path, barrier, w) for w in range(workers)])
            assert errors == [None] * workers, f"round {round_}: {errors}"
            with GenerationCache(path) as cache:
                assert len(cache) == workers
