"""The generation cache on its own: key look-ups, and several processes opening one new file at once."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from rs.engines.base import Generation
from rs.engines.generation_cache import GenerationCache


def test_present_reads_keys_only_and_skips_transient_failures(tmp_path: Path) -> None:
    answered = Generation.from_text("<think>a</think>4", finish_reason="stop", completion_tokens=5, max_tokens=64)
    transient = Generation.failed("timeout", cacheable=False, max_tokens=64)
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
            cache.put_many([(f"{worker}", Generation.from_text("4", finish_reason="stop", max_tokens=8))])
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


def _made(finish: str, tokens: int | None, budget: int) -> Generation:
    if finish == "error":
        return Generation.failed("prompt too long", cacheable=True, max_tokens=budget)
    return Generation.from_text("<think>r</think>4", finish_reason=finish, completion_tokens=tokens, max_tokens=budget)


def test_an_answer_is_reused_under_every_budget_that_gives_the_same_output(tmp_path: Path) -> None:
    """Budgets only cut outputs short: what finished within one is the same under a larger one, cut under a smaller."""
    stored = {
        "stopped at 40 of 64": _made("stop", 40, 64),
        "stopped, length unknown": _made("stop", None, 64),
        "cut at 64": _made("length", 64, 64),
        "failed at 64": _made("error", None, 64),
    }
    reused_at = {  # budget -> the keys it reuses
        16: {"stopped at 40 of 64", "cut at 64"},
        40: {"stopped at 40 of 64", "cut at 64"},
        64: set(stored),
        128: {"stopped at 40 of 64", "stopped, length unknown"},  # the cut one must be asked again
    }
    with GenerationCache(tmp_path / "cache.sqlite") as cache:
        cache.put_many(stored.items())
        for budget, keys in reused_at.items():
            assert cache.present(stored, max_tokens=budget) == keys, budget
            found = cache.get_many(stored, max_tokens=budget)
            assert set(found) == keys, budget
            for key, generation in found.items():
                if (
                    generation.finish_reason == "length"
                ):  # cut at this budget: no final answer, tokens as this budget gives
                    assert generation.answer is None and generation.completion_tokens == min(budget, 64), (budget, key)
                else:
                    assert generation == stored[key], (budget, key)
        assert cache.get_many(stored, max_tokens=16)["stopped at 40 of 64"].completion_tokens == 16

        # asked again under a larger budget, the answer replaces the cut one; a smaller budget's never replaces it
        longer = _made("stop", 90, 128)
        cache.put_many([("cut at 64", longer), ("stopped at 40 of 64", _made("length", 8, 8))])
        assert cache.get("cut at 64", max_tokens=128) == longer
        assert cache.get("stopped at 40 of 64") == stored["stopped at 40 of 64"]
        assert len(cache) == len(stored)
