"""One story for defaults: a families file of one's own does not inherit the shipped `defaults:`; what its families
take from the built-in defaults where the shipped file says otherwise is said by `rs families validate` and `rs plan`,
key by key. And `rs plan`'s fit warning is what the run does: a prompt plus `max_tokens` over `max_model_len` is not
refused, its answer is cut where the context ends, after the number of tokens the plan names.

Before, such a family silently lost loop detection and the thinking budget, and `rs plan` said "DOES NOT FIT" for a run
that then started and published."""

from __future__ import annotations

from pathlib import Path

import pytest
from family_yaml import DEMO, TINY, VLLM_ARGS, family_yaml

from rs.families import get_family, load_families
from rs.plan import plan_family

ENGINE = {
    "batch_size": 64,
    "args": {
        "dtype": "float32",
        "max_model_len": 2048,
        "max_num_seqs": 16,
        "enforce_eager": True,
        "kv_cache_memory_bytes": 268435456,
        "tensor_parallel_size": None,
        "gpu_memory_utilization": None,
    },
}
"""TinyCLEVR's `engine:` block, as the README tells a user to copy it."""


def _own(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    return path


def test_validate_names_each_shipped_default_a_file_of_ones_own_does_not_take(tmp_path: Path, capsys) -> None:
    from rs.cli.families import main

    path = _own(tmp_path, family_yaml("MyShapes", DEMO, engine=ENGINE, sampling={"max_tokens": 64}))
    assert main(["--config", str(path), "validate"]) == 0
    (note,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  note: MyShapes:")]
    assert "mine.yaml has no `defaults:` block, so MyShapes takes the built-in defaults" in note
    assert (
        "sampling.repetition_detection: null (shipped {max_pattern_size: 128, min_count: 4, min_pattern_size: 4})"
        in note
    )
    assert "sampling.thinking_token_budget: null (shipped 7168)" in note
    assert "engine.args.limit_mm_per_prompt: unset (the engine's own default) (shipped {image: 1, video: 0})" in note
    assert "max_tokens" not in note and "max_model_len" not in note  # stated by the family: not the defaults'


def test_a_file_with_its_own_defaults_and_the_shipped_file_are_told_nothing(tmp_path: Path) -> None:
    from rs.families.loader import defaults_note

    text = "defaults:\n  sampling: {max_tokens: 64}\n" + family_yaml("MyShapes", DEMO, engine=ENGINE)
    assert defaults_note(load_families(_own(tmp_path, text))["MyShapes"]) is None
    assert defaults_note(get_family("TinyCLEVR")) is None


def test_rs_plan_says_it_too(tmp_path: Path) -> None:
    path = _own(tmp_path, family_yaml("MyShapes", DEMO, engine=ENGINE, sampling={"max_tokens": 64}))
    plan = plan_family(load_families(path)["MyShapes"], sample_images=1, count_tokens=False)
    assert any("sampling.thinking_token_budget: null (shipped 7168)" in note for note in plan.notes), plan.notes
    assert "sampling.thinking_token_budget: null (shipped 7168)" in plan.render()


@pytest.mark.slow
@pytest.mark.vllm
def test_the_plan_says_after_how_many_tokens_an_answer_is_cut_and_the_run_cuts_it_there(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    from rs.engines.base import Request, SamplingSettings
    from rs.engines.vllm import VLLMEngine
    from rs.plan import static
    from rs.plan.report import PlanReport
    from rs.prompt import Instructions, build_prompt

    def family(max_model_len: int):
        args = {**VLLM_ARGS, "max_model_len": max_model_len}
        source = {"num_images": 1, "questions_per_image": 1}
        path = _own(
            tmp_path, family_yaml("Cut", TINY, source=source, engine={"args": args}, sampling={"max_tokens": 64})
        )
        return load_families(path)["Cut"]

    (kind,) = plan_family(family(2048), sample_images=1).kinds
    prompt_tokens = max(kind.prompt_tokens)
    room = 3  # the tiny model says a few words (5 tokens here): the context ends before it is done
    cut = family(prompt_tokens + room)
    plan = plan_family(cut, sample_images=1)
    (warning,) = [w for w in plan.warnings if "exceed max_model_len" in w]
    assert f"the longest prompt's answer is cut after {room} tokens instead of max_tokens (64)" in warning
    assert f"answer is cut after {room} tokens" in plan.render()

    (row,) = static.sample_rows(cut, 1, PlanReport("Cut", "m", 64, None, {}))
    (item,) = row.qa
    engine = VLLMEngine("rs:tiny-vlm", engine_args=dict(cut.config.engine.args))
    try:
        request = Request(build_prompt(item.question, Instructions.of(cut.config).for_item(item)), image=row.image)
        (generation,) = engine.generate([request], SamplingSettings(max_tokens=64))
    finally:
        engine.close()
    assert generation.error is None and generation.prompt_tokens == prompt_tokens
    assert (generation.finish_reason, generation.completion_tokens) == ("length", room)
