"""The sampling stage with the tiny model through the real vLLM engine: answers, cache, judge, crash safety."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("vllm")

from checkout import ROOT  # noqa: E402
from family_yaml import tiny_family  # noqa: E402
from faults import cache_rows, meanwhile  # noqa: E402

from rs.context import BuildContext
from rs.engines.replay import ReplayEngine  # noqa: E402
from rs.families import load_families  # noqa: E402
from rs.pipeline.route import decide  # noqa: E402
from rs.pipeline.sample.judge import LABELS, judgeable  # noqa: E402
from rs.pipeline.sample.stage import SampleStage
from rs.pipeline.stage import ensure
from rs.store import read_clean_rows, read_records  # noqa: E402


@pytest.fixture(scope="module")
def tiny_engine():
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from rs.engines.vllm import VLLMEngine
    from rs_demo.tiny_model import VLLM_ENGINE_KWARGS

    engine = VLLMEngine("rs:tiny-vlm", engine_args=dict(VLLM_ENGINE_KWARGS))
    yield engine
    engine.close()


def items(build: Path) -> list[dict]:
    return list(read_records(build / "items", "items"))


def test_family_sampled_with_images_verified_and_judged(tmp_path: Path, tiny_engine) -> None:
    family = load_families(tiny_family(tmp_path))["Tiny"]
    ctx = BuildContext(
        family,
        tmp_path / "build",
        tmp_path / "cache.sqlite",
        progress=False,
        engine_factory=lambda f: (tiny_engine, tiny_engine),
    )
    report = ensure(SampleStage(), ctx)
    rows = list(read_clean_rows(ctx.paths.clean))
    results = items(ctx.paths.root)
    assert [r["key"] for r in results] == [q.key for row in rows for q in row.qa]
    assert report.items == len(results) == report.sampling_engine_calls
    assert all(
        r["model"] and r["prompt_tokens"] > 16 and r["completion_tokens"] > 0 for r in results
    )  # image tokens in the prompt
    assert all(r["prompt"].endswith("\nAnswer the question using a single word or phrase.") for r in results)
    assert {r["judge"] for r in results if r["judge"] is not None} <= set(LABELS)
    judged = [r for r in results if r["judge"] is not None]
    assert (
        len(judged)
        == report.judged
        == sum(1 for r in results if r["final"] and not r["verified"] and judgeable(r["final"]))
    )
    assert report.contradicted == sum(r["contradicts"] for r in results)
    assert all(not r["verified"] for r in results if r["contradicts"])
    cal = report.calibration
    for name in ("positive", "easy", "hard", "certain"):
        assert sum(cal.verdicts[name].values()) == getattr(cal, name).total, name
    assert cal.easy.total > 0 and cal.certain.total == sum(1 for r in judged if r["contradicts"])

    # a warm cache: the same stage again makes zero engine calls and gives the same results
    ctx.paths.sample_report.unlink()
    again = ensure(SampleStage(), ctx)
    assert again.sampling_engine_calls == 0 and again.judge_engine_calls == 0
    assert items(ctx.paths.root) == results
    for counts in (
        "verdicts",
        "contradicted_verdicts",
        "prompt_reasoning",
    ):  # the same bytes whatever order answers came in
        assert (
            list(again.to_dict()[counts]) == sorted(report.to_dict()[counts])
            and again.to_dict()[counts] == report.to_dict()[counts]
        )

    # changing the verifier never re-runs the model
    exact = load_families(tiny_family(tmp_path, verifier={"name": "exact"}))["Tiny"]
    ctx2 = BuildContext(
        exact,
        tmp_path / "build",
        tmp_path / "cache.sqlite",
        progress=False,
        engine_factory=lambda f: (tiny_engine, tiny_engine),
    )
    assert ensure(SampleStage(), ctx2).sampling_engine_calls == 0


def test_judge_requests_join_the_sampling_stream(tmp_path: Path, tiny_engine, monkeypatch) -> None:
    """A rejection's judge request enters the engine while questions are still being answered."""
    from rs.engines.vllm import VLLMStream

    entered: list[str] = []
    submit = VLLMStream.submit

    def logged(stream, tag, request):
        entered.append("judge" if stream.settings.choices else "sample")
        submit(stream, tag, request)

    monkeypatch.setattr(VLLMStream, "submit", logged)
    monkeypatch.setattr(tiny_engine, "in_flight", 6)  # fewer than the items: answers finish while others wait to go in
    family = load_families(tiny_family(tmp_path, num_images=12, batch=4))["Tiny"]
    ctx = BuildContext(
        family,
        tmp_path / "build",
        tmp_path / "cache.sqlite",
        progress=False,
        engine_factory=lambda f: (tiny_engine, tiny_engine),
    )
    report = ensure(SampleStage(), ctx)
    calibration = report.judge_requests - report.judged  # asked after answering, once the run's answers are all in
    judged_while_sampling = entered[: len(entered) - calibration]
    assert report.judged > 0 and entered.count("sample") == report.items
    assert judged_while_sampling.index("judge") < max(i for i, kind in enumerate(entered) if kind == "sample")


def test_truncated_outputs_are_rejected_with_their_reason(tmp_path: Path, tiny_engine) -> None:
    family = load_families(tiny_family(tmp_path, num_images=2, max_tokens=1))["Tiny"]
    ctx = BuildContext(
        family,
        tmp_path / "build",
        tmp_path / "cache.sqlite",
        progress=False,
        engine_factory=lambda f: (tiny_engine, tiny_engine),
    )
    report = ensure(SampleStage(), ctx)
    results = items(ctx.paths.root)
    assert results and all(r["finish_reason"] == "length" and r["final"] is None for r in results)
    assert report.no_final_answer == len(results) and report.judged == 0
    assert {decide(r, True).reason for r in results} == {"no_final_answer"}


def test_raising_max_tokens_sends_only_the_answers_it_cut_off(tmp_path: Path, tiny_engine) -> None:
    runs = iter(range(10))

    def sampled(max_tokens: int, cache: str) -> tuple[object, list[dict]]:
        (run := tmp_path / f"run-{next(runs)}").mkdir()
        family = load_families(tiny_family(run, num_images=6, max_tokens=max_tokens))["Tiny"]
        ctx = BuildContext(
            family,
            run / "build",
            tmp_path / cache,
            progress=False,
            engine_factory=lambda f: (tiny_engine, tiny_engine),
        )
        return ensure(SampleStage(), ctx), items(ctx.paths.root)

    short_report, short = sampled(6, "cache.sqlite")
    cut = sum(r["finish_reason"] == "length" for r in short)
    assert 0 < cut < len(short), "the tiny model's answers should run both shorter and longer than 6 tokens"
    raised, longer = sampled(32, "cache.sqlite")
    assert raised.sampling_engine_calls == cut  # the answers that stopped within 6 tokens are the same under 32
    assert raised.judge_engine_calls <= raised.judged  # judge answers of unchanged rejections come from the cache
    fresh, cold = sampled(32, "cold.sqlite")
    assert fresh.sampling_engine_calls == len(cold) and longer == cold  # what a run at 32 from scratch gives
    lowered, again = sampled(6, "cache.sqlite")
    assert lowered.sampling_engine_calls == 0 and lowered.judge_engine_calls == 0
    assert [(r["key"], r["final"], r["finish_reason"], r["completion_tokens"]) for r in again] == [
        (r["key"], r["final"], r["finish_reason"], r["completion_tokens"]) for r in short
    ]


def test_always_correct_judge_is_blocked_by_negative_calibration(tmp_path: Path) -> None:
    """A judge that calls everything CORRECT (a random-weights judge can) must promote nothing."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    family = load_families(tiny_family(tmp_path, num_images=8))["Tiny"]
    replay_file = tmp_path / "replay.jsonl"
    from rs.pipeline.clean.stage import CleanStage
    from rs.pipeline.stage import ensure

    ctx = BuildContext(family, tmp_path / "build", tmp_path / "cache.sqlite", progress=False)
    ensure(CleanStage(), ctx)
    lines = []
    for n, row in enumerate(read_clean_rows(ctx.paths.clean)):
        for q in row.qa:  # half right, half wrong: the judge is asked about the wrong ones
            text = f"<think>counting</think>{q.answer}" if (n + q.turn) % 2 else "<think>counting</think>purple"
            lines.append(json.dumps({"key": q.key, "text": text}))
    replay_file.write_text("\n".join(lines))
    from rs.engines.vllm import VLLMEngine
    from rs_demo.tiny_model import VLLM_ENGINE_KWARGS, tiny_vlm_path

    judge = VLLMEngine(str(tiny_vlm_path(favour="CORRECT")), engine_args=dict(VLLM_ENGINE_KWARGS))
    try:
        ctx.engine_factory = lambda f: (ReplayEngine(replay_file, model="replayed"), judge)
        report = ensure(SampleStage(), ctx)
    finally:
        judge.close()
    cal = report.calibration
    assert report.verdicts == {"CORRECT": report.judged} and report.judged > 0
    assert cal.hard.agreed == 0 and cal.hard.total >= 4 and cal.easy.agreed == 0
    assert cal.positive.agreed == cal.positive.total == 8
    assert cal.promotes is False and cal.blocked_reason.startswith("on hard negatives the judge called")
    reasons = {decide(r, cal.promotes).reason for r in items(ctx.paths.root) if not r["verified"]}
    assert reasons == {"judge_blocked"}


def test_sigkill_mid_run_then_rerun_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    families = tiny_family(tmp_path, num_images=12, batch=4, max_tokens=24)
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}

    def command(build: str, cache: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "rs.sample",
            "Tiny",
            "--config",
            str(families),
            "--build-dir",
            str(tmp_path / build),
            "--cache",
            str(tmp_path / cache),
        ]

    victim = subprocess.Popen(
        command("build", "cache.sqlite"),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    while cache_rows(tmp_path / "cache.sqlite") < 8 and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert victim.poll() is None, (
        "the run finished before it could be killed: " + victim.stdout.read().decode()[-2000:]
    )
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    done_before = cache_rows(tmp_path / "cache.sqlite")
    assert not (tmp_path / "build" / "Tiny" / "sample.json").exists()

    with meanwhile(
        command("ref", "ref.sqlite"), cwd=ROOT, env=env
    ) as reference:  # an uninterrupted run, beside the re-run
        rerun = subprocess.run(
            command("build", "cache.sqlite"), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-2000:]
        report = json.loads(rerun.stdout.strip().splitlines()[-1])
        _, said = reference.communicate(timeout=300)
    assert reference.returncode == 0, said[-2000:]

    resumed, uninterrupted = items(tmp_path / "build" / "Tiny"), items(tmp_path / "ref" / "Tiny")
    assert resumed == uninterrupted  # nothing lost, nothing duplicated, same answers
    assert len({r["key"] for r in resumed}) == len(resumed)
    total = cache_rows(tmp_path / "ref.sqlite")
    assert cache_rows(tmp_path / "cache.sqlite") == total
    # the re-run sent exactly what was missing: every request is answered once over both runs
    assert report["sampling_engine_calls"] + report["judge_engine_calls"] == total - done_before
