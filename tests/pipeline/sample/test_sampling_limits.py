"""Loop detection and the thinking budget without an engine: the family keys, the repeat profile against vLLM's own
check, and which cached answers another setting may reuse."""

from __future__ import annotations

import dataclasses
import random
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import ROOT

from rs.engines.base import Generation, SamplingSettings, loop_would_end, repeat_profile
from rs.engines.generation_cache import GenerationCache
from rs.families import FamilyConfigError, load_families

FAMILY = """\
families:
  F:
    source: {{kind: synthetic, num_images: 2}}
    instruction: "\\nAnswer."
    verifier: {{name: alnum}}
    model: {{id: "rs:tiny-vlm", reasoning: {{parser: {parser}}}}}
    sampling: {sampling}
    card: {{pretty_name: F, description: d, license: apache-2.0, citation: c}}
"""


def write(tmp_path: Path, sampling: str, parser: str = "tags") -> Path:
    path = tmp_path / "families.yaml"
    path.write_text(FAMILY.format(sampling=sampling, parser=parser))
    return path


def test_the_keys_load_and_bad_values_are_refused_at_their_line(tmp_path: Path) -> None:
    family = load_families(
        write(
            tmp_path,
            "{repetition_detection: {min_pattern_size: 2, max_pattern_size: 8, min_count: 3}, "
            "thinking_token_budget: 100}",
        )
    )["F"]
    assert family.config.sampling.repetition_detection.as_tuple() == (2, 8, 3)
    assert family.config.sampling.thinking_token_budget == 100
    with pytest.raises(
        FamilyConfigError,
        match=r"families.yaml:7: families.F.sampling.repetition_detection.min_count: must be at least 2",
    ):
        load_families(write(tmp_path, "{repetition_detection: {min_count: 1}}"))
    with pytest.raises(
        FamilyConfigError, match=r"sampling.repetition_detection.max_pattern_size: must be at least 16"
    ):
        load_families(write(tmp_path, "{repetition_detection: {min_pattern_size: 16, max_pattern_size: 8}}"))
    with pytest.raises(FamilyConfigError, match=r"sampling.thinking_token_budget: the model does not reason"):
        load_families(write(tmp_path, "{thinking_token_budget: 10}", parser="none"))
    assert (
        load_families(write(tmp_path, "{repetition_detection: null, thinking_token_budget: null}"))[
            "F"
        ].config.sampling.repetition_detection
        is None
    )


@pytest.mark.slow
@pytest.mark.vllm
def test_validate_checks_them_against_the_installed_vllm(tmp_path: Path) -> None:
    vllm = pytest.importorskip("vllm")
    from rs.engines.vllm import VLLMEngine

    family = load_families(write(tmp_path, "{repetition_detection: {min_count: 3}}"))["F"]
    assert VLLMEngine.check_sampling(family.config.sampling) is None

    @dataclasses.dataclass
    class Renamed:  # a key the installed vLLM's RepetitionDetectionParams does not have
        max_pattern_size: int = 8
        min_repeats: int = 3

    sampling = dataclasses.replace(family.config.sampling, repetition_detection=Renamed())
    key, problem = VLLMEngine.check_sampling(sampling)
    assert key == "repetition_detection" and f"vLLM {vllm.__version__}'s RepetitionDetectionParams takes" in problem
    assert "not min_repeats" in problem
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rs.families",
            "validate",
            "--config",
            str(write(tmp_path, "{thinking_token_budget: 64}")),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0 and done.stdout.startswith("ok:") and "INFO" not in done.stdout
    assert "Triton" not in done.stderr and "INFO" not in done.stderr, (
        done.stderr
    )  # vLLM's import notices are not validate's


@pytest.mark.vllm
def test_the_repeat_profile_says_exactly_when_vllms_check_would_end_an_output() -> None:
    pytest.importorskip("vllm")
    from vllm.sampling_params import RepetitionDetectionParams
    from vllm.v1.core.sched.utils import check_sequence_repetition

    rng = random.Random(0)
    fired = 0
    for _ in range(1500):
        tokens = [rng.randint(0, 5) for _ in range(rng.randint(1, 100))]
        if rng.random() < 0.5:  # a loop somewhere, then something else
            pattern = tokens[: rng.randint(1, 8)]
            tokens += pattern * rng.randint(1, 6) + [rng.randint(0, 5) for _ in range(rng.randint(0, 5))]
        low = rng.randint(1, 6)
        setting = (low, low + rng.randint(0, 10), rng.randint(2, 5))
        params = RepetitionDetectionParams(
            min_pattern_size=setting[0], max_pattern_size=setting[1], min_count=setting[2]
        )
        vllm_fires = any(check_sequence_repetition(tokens[:end], params) for end in range(1, len(tokens) + 1))
        assert loop_would_end(repeat_profile(tokens, stopped=False), setting) == vllm_fires, (tokens, setting)
        fired += vllm_fires
    assert 100 < fired < 1400  # both outcomes were tried
    assert loop_would_end(None, (4, 128, 4)) is None and loop_would_end([1], (4, 129, 4)) is None  # cannot tell


def made(finish: str, *, loop=None, budget=None, thinking=None, cut=False, repeats=None, tokens=10) -> Generation:
    return Generation(
        text="t",
        reasoning=None,
        answer=None if finish == "repetition" else "a",
        finish_reason=finish,
        completion_tokens=tokens,
        max_tokens=64,
        repetition_detection=loop,
        thinking_token_budget=budget,
        thinking_tokens=thinking,
        budget_cut=cut,
        repeats=repeats,
    )


def test_another_setting_reuses_only_the_answers_it_would_leave_as_they_are(tmp_path: Path) -> None:
    on, strict = (4, 128, 4), (4, 128, 2)
    with GenerationCache(tmp_path / "cache.sqlite") as cache:
        cache.put_many(
            [
                ("looped", made("repetition", loop=on, repeats=[1, 1, 1, 4])),  # ended by `on`
                (
                    "repeats-twice",
                    made("stop", loop=on, repeats=[1, 1, 1, 1, 2]),
                ),  # a 5-token pattern twice: `strict` ends it
                ("plain", made("stop", loop=on, repeats=[1])),
                ("unknown", made("stop", loop=on, repeats=None)),  # an engine without tokens
                ("cut", made("stop", budget=8, thinking=8, cut=True)),
                ("short", made("stop", budget=8, thinking=5)),
            ]
        )
        keys = ["looped", "repeats-twice", "plain", "unknown", "cut", "short"]

        def reused(**settings: object) -> set[str]:
            return cache.present(keys, settings=SamplingSettings(max_tokens=64, **settings))

        assert reused(repetition_detection=on) == {"looped", "repeats-twice", "plain", "unknown"}
        # off: what `on` ended is asked again; what it left alone is the same without it
        assert reused() == {"repeats-twice", "plain", "unknown", "short"}
        # stricter: the profile says which it would end; an unknown profile cannot say
        assert reused(repetition_detection=strict) == {"plain"}
        # budgets: one the old budget cut only under that budget; a reasoning of 5 tokens under any budget above 5
        assert reused(thinking_token_budget=8) == {"cut", "short"}
        assert reused(thinking_token_budget=6) == {"short"}
        assert reused(thinking_token_budget=5) == set()
