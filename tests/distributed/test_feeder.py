"""A replica's engine feeder serves every pass of a run on one engine: requests of several sampling settings at once,
each answered under its own, and an engine that raises fails only what was in flight in it (no Ray, no model)."""

from __future__ import annotations

import threading
from typing import Sequence

import pytest

from rs.distributed.replica import MAX_CONSECUTIVE_FAILURES, EngineFeeder
from rs.engines.base import Generation, Request, SamplingSettings

SPEC = {"engine": {"batch_size": 2}, "model": {"id": "fake"}}
GREEDY = SamplingSettings(max_tokens=8)
JUDGE = SamplingSettings(max_tokens=4, choices=("yes", "no"), chat_template_kwargs={"enable_thinking": False})


class Echo:
    """An engine that answers each prompt with the prompt and the settings' max_tokens; raises on a prompt "boom"."""

    kind = "echo"

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []  # (max_tokens, requests) of each generate call
        self.closed = False

    def generate(self, requests: Sequence[Request], settings: SamplingSettings) -> list[Generation]:
        self.calls.append((settings.max_tokens, len(requests)))
        if any(r.prompt == "boom" for r in requests):
            raise RuntimeError("engine down")
        return [Generation.from_text(f"{r.prompt}/{settings.max_tokens}", finish_reason="stop") for r in requests]

    def close(self) -> None:
        self.closed = True


def test_one_engine_serves_every_pass_each_under_its_settings() -> None:
    engine = Echo()
    feeder = EngineFeeder(SPEC, engine, replace=lambda: pytest.fail("no engine failed"))
    # two passes at once (the sampling step's and the judge's settings), from two threads as Ray calls a replica
    results: dict[str, list[str]] = {}

    def ask(name: str, settings: SamplingSettings) -> None:
        futures = feeder.answer([Request(prompt=f"{name}{i}") for i in range(5)], settings)
        results[name] = [f.result(timeout=30).text for f in futures]

    threads = [threading.Thread(target=ask, args=args) for args in (("q", GREEDY), ("j", JUDGE))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {"q": [f"q{i}/8" for i in range(5)], "j": [f"j{i}/4" for i in range(5)]}
    # every engine call held one pass's requests only, at most the batch size
    assert {tokens for tokens, _ in engine.calls} == {8, 4} and all(n <= 2 for _, n in engine.calls)
    assert sum(n for _, n in engine.calls) == 10


def test_an_engine_that_raises_fails_what_was_in_it_and_is_replaced() -> None:
    engines = [Echo()]

    def replace() -> Echo:
        engines.append(Echo())
        return engines[-1]

    feeder = EngineFeeder(SPEC, engines[0], replace=replace)
    failed = feeder.answer([Request(prompt="boom"), Request(prompt="beside")], GREEDY)
    for future in failed:
        with pytest.raises(RuntimeError, match="engine down"):
            future.result(timeout=30)
    # the next pass goes on, on a new engine
    assert [f.result(timeout=30).text for f in feeder.answer([Request(prompt="next")], JUDGE)] == ["next/4"]
    assert len(engines) == 2 and engines[0].closed and feeder.dead is None

    # an engine failing again and again with no answer between: the feeder stops, and says so
    for _ in range(MAX_CONSECUTIVE_FAILURES):
        for future in feeder.answer([Request(prompt="boom")], GREEDY):
            with pytest.raises(RuntimeError):
                future.result(timeout=30)
    with pytest.raises(RuntimeError, match="failed 3 times in a row"):
        feeder.answer([Request(prompt="later")], GREEDY)
