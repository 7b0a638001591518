"""How every answer ends, on the real engine: loop detection, the thinking budget, and what a setting change re-sends.

The tiny model's answers are noise, so each sampling request is shaped by a regular expression per item (vLLM's
structured outputs), as in `tests/engines/test_reasoning.py`: a `loop` item writes a one-word reasoning and then repeats
"red cube " past `max_tokens`, a `budget` item reasons in free words until the engine closes its reasoning at the
thinking budget and then answers yes or no, a `plain` item reasons for two words and answers. The engine, vLLM's
loop detection and thinking budget, the cache and the stage are all real: the counts below are exact.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("vllm")

from family_yaml import TINY, write_families  # noqa: E402

from rs.context import BuildContext
from rs.engines.vllm import VLLMEngine, VLLMStream  # noqa: E402
from rs.families import load_families  # noqa: E402
from rs.pipeline.publish.stage import publish  # noqa: E402
from rs.pipeline.sample.stage import SampleStage
from rs.pipeline.stage import ensure
from rs.store import read_records  # noqa: E402
from rs_demo.tiny_model import VLLM_ENGINE_KWARGS, tiny_vlm_path  # noqa: E402

MAX_TOKENS = 64
BUDGET = 6
SHAPES = ("loop", "budget", "plain")
REGEX = {
    "loop": r"[a-z]{2,3}</think>\n\n(red cube ){40}",
    "budget": r"[a-z ]*</think>\n\n(yes|no)",
    "plain": r"[a-z]{2,3}</think>\n\n(yes|no|[0-9])",
}

LOOPS_ON = {"min_pattern_size": 4, "max_pattern_size": 128, "min_count": 4}


def shape_of(key: str) -> str:
    return SHAPES[int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(SHAPES)]


class ShapedStream(VLLMStream):
    """vLLM's stream with each sampling request's output shaped by its item; loop detection and budget as configured."""

    only: str | None = None

    def params(self, request: Any) -> Any:
        from vllm.sampling_params import StructuredOutputsParams

        params = super().params(request).clone()
        params.structured_outputs = StructuredOutputsParams(regex=REGEX[self.only or shape_of(request.item_key)])
        return params


class ShapedEngine(VLLMEngine):
    only: str | None = None
    """Shape every request so (the budget test: a forced reasoning end must be one the regex allows)."""

    def open_stream(self, settings: Any, *, window: int | None = None) -> ShapedStream:
        stream = ShapedStream(self, settings, window=window or self.in_flight)
        stream.only = self.only
        return stream


@pytest.fixture(scope="module", autouse=True)
def _in_process() -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"


@pytest.fixture(scope="module")
def engine() -> Any:
    engine = ShapedEngine(
        str(tiny_vlm_path(template="prefill")),
        engine_args=dict(VLLM_ENGINE_KWARGS),
        reasoning_markers=("<think>", "</think>"),
    )
    yield engine
    engine.close()


def family(tmp_path: Path, *, loops: dict | None = LOOPS_ON, budget: Any = None, max_tokens: int = MAX_TOKENS) -> Any:
    path = write_families(
        tmp_path,
        "Loops",
        TINY,
        source={"style": "clevr"},
        model={"id": str(tiny_vlm_path(template="prefill")), "reasoning": {"parser": "tags"}},
        sampling={"max_tokens": max_tokens, "repetition_detection": loops, "thinking_token_budget": budget},
        judge={"enabled": False},
        publish={"namespace": "local", "target": "local"},
        card={"pretty_name": "Loops"},
    )
    return load_families(path)["Loops"]


def sample(tmp_path: Path, engine: Any, **settings: Any) -> tuple[Any, list[dict[str, Any]]]:
    ctx = BuildContext(
        family(tmp_path, **settings),
        tmp_path / "build",
        tmp_path / "cache.sqlite",
        progress=False,
        engine_factory=lambda f: (engine, engine),
    )
    report = ensure(SampleStage(), ctx)
    return report, list(read_records(ctx.paths.items, "items"))


def by_shape(items: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    shapes: dict[str, list[dict[str, Any]]] = {s: [] for s in SHAPES}
    for item in items:
        shapes[shape_of(item["key"])].append(item)
    return shapes


def test_loops_end_early_and_a_loop_setting_change_resends_only_what_it_ends(tmp_path: Path, engine: Any) -> None:
    engine.only = None
    report, items = sample(tmp_path, engine)
    shapes = by_shape(items)
    assert shapes["loop"] and shapes["plain"], "both shapes should occur"
    looped = [i for i in items if i["ending"] == "repetition"]  # the loops, and free reasoning that fell into one
    assert {i["ending"] for i in shapes["loop"]} == {"repetition"} and {i["ending"] for i in shapes["plain"]} == {
        "stop"
    }
    assert all(i["completion_tokens"] < MAX_TOKENS and i["final"] is None for i in looped)
    assert report.endings["repetition"] == len(looped) and sum(report.endings.values()) == len(items)
    assert report.loop_tokens_saved == sum(MAX_TOKENS - i["completion_tokens"] for i in looped) > 0
    assert report.no_final_answer == sum(i["final"] is None for i in items) - len(looped)
    assert report.sampling_engine_calls == len(items)

    # loop detection off: only the answers it ended are asked again, and now run to max_tokens
    report, items = sample(tmp_path, engine, loops=None)
    assert report.sampling_engine_calls == len(looped)
    assert {i["ending"] for i in by_shape(items)["loop"]} == {"length"}
    assert report.endings["repetition"] == 0
    # on again: the cached loops' tokens say it would end them, so only they are asked again
    report, items = sample(tmp_path, engine)
    assert report.sampling_engine_calls == len(looped)
    assert {i["ending"] for i in by_shape(items)["loop"]} == {"repetition"}
    # a setting that ends nothing here (20 repeats): only the answers the old one ended are asked again
    report, items = sample(tmp_path, engine, loops={**LOOPS_ON, "min_count": 20})
    assert report.sampling_engine_calls == len(looped)
    # raising max_tokens re-sends only answers cut at max_tokens: here the loops the last setting let run
    report, items = sample(tmp_path, engine, loops={**LOOPS_ON, "min_count": 20}, max_tokens=MAX_TOKENS + 16)
    assert report.sampling_engine_calls == sum(i["finish_reason"] == "length" for i in items) == len(looped)


def test_loops_reach_the_summary_and_cards_apart_from_no_final_answer(tmp_path: Path, engine: Any) -> None:
    engine.only = None
    outcome = publish(
        family(tmp_path),
        out=tmp_path / "out",
        build_root=tmp_path / "build",
        cache_path=tmp_path / "cache.sqlite",
        progress=False,
        engine_factory=lambda f: (engine, engine),
    )
    report = outcome.report
    items = list(read_records(tmp_path / "build" / "Loops" / "items", "items"))
    looped = sum(i["ending"] == "repetition" for i in items)
    assert report.totals.rejected_by_reason["degenerate_repetition"] == looped > 0
    assert report.totals.rejected_by_reason["no_final_answer"] == sum(i["final"] is None for i in items) - looped
    assert report.endings.counts["repetition"] == looped
    assert report.lengths["rejected"].loops == looped
    saved = sum(MAX_TOKENS - i["completion_tokens"] for i in items if i["ending"] == "repetition")
    assert report.endings.loop_tokens_saved == saved
    card = (Path(outcome.where["rejected"]) / "README.md").read_text()
    assert f"`repetition` {looped}" in card and f"saved {saved} tokens" in card
    assert "`degenerate_repetition` — " in card
    from rs.cli.publish import summary

    text = summary(family(tmp_path), outcome, dry_run=False)
    assert f"degenerate_repetition {looped}" in text and f"loop detection saved {saved:,} tokens" in text


def test_the_budget_cuts_the_reasoning_and_the_answer_after_it_is_read(tmp_path: Path, engine: Any) -> None:
    engine.only = "budget"  # free words until the engine closes the reasoning, then yes or no
    report, items = sample(tmp_path, engine, budget=BUDGET)
    assert {i["ending"] for i in items} == {"thinking_budget"}
    assert all(i["thinking_tokens"] == BUDGET and i["final"] in ("yes", "no") for i in items)
    assert report.budgeted_answered == len(items) and report.no_final_answer == 0
    # a larger budget re-sends every answer the old one cut; a loop setting that ends none of them re-sends nothing
    report, items = sample(tmp_path, engine, budget=BUDGET + 4)
    assert report.sampling_engine_calls == len(items)
    assert all(i["thinking_tokens"] == BUDGET + 4 for i in items)
    report, items = sample(tmp_path, engine, budget=BUDGET + 4, loops=None)
    assert report.sampling_engine_calls == 0
    outcome = publish(
        family(tmp_path, budget=BUDGET + 4, loops=None),
        out=tmp_path / "out",
        build_root=tmp_path / "build",
        cache_path=tmp_path / "cache.sqlite",
        progress=False,
        engine_factory=lambda f: (engine, engine),
    )
    card = (Path(outcome.where["think"]) / "README.md").read_text()
    assert f"The reasoning was cut at {BUDGET + 4} tokens (`thinking_token_budget`) in {len(items)} answers" in card
    accepted = outcome.report.totals.accepted
    if accepted:  # the tiny model's yes/no is right for some
        assert "`budgeted`" in card


def test_plan_reports_the_endings_and_projects_the_hours_with_and_without_loop_detection(
    tmp_path: Path, engine: Any
) -> None:
    from rs.plan import plan_family

    engine.only = None
    plan = plan_family(
        family(tmp_path),
        sample_images=2,
        limit=4,
        build_root=tmp_path / "build",
        cache_path=tmp_path / "cache.sqlite",
        tokens_per_second=100.0,
        engine_factory=lambda f: (engine, engine),
        progress=False,
    )
    p = plan.projection
    items = list(read_records(tmp_path / "build" / "plan" / "Loops" / "limit-4" / "items", "items"))
    looped = [i for i in items if i["ending"] == "repetition"]
    assert looped and p.endings["repetition"] == len(looped) and sum(p.endings.values()) == len(items)
    assert p.loop_tokens_saved == sum(MAX_TOKENS - i["completion_tokens"] for i in looped)
    with_, without = p.family_tokens(), p.family_tokens(without_loop_detection=True)
    assert without - with_ == pytest.approx(p.family_qa * p.loop_tokens_saved / p.answered)
    text = plan.render()
    assert f"loop detection ended {len(looped)} of {len(items)}" in text
    assert (
        f"without loop detection (every loop run to max_tokens, same throughput): {without / 100 / 3600:,.2f} hours"
        in text
    )
