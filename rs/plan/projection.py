"""`rs plan --limit N`: the first N images answered for real, and the whole family projected from them.

The plan runs the run's own stages (cleaning, sampling and judging, the recovery pass) on N images, in a build folder
of its own and through the shared generation cache, so the full run reuses every answer; from what they took it
projects the family's output tokens, truncation, accept rate, GPU-hours and, with a `recovery:` block, the pass's.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from rs.context import BuildContext, default_cache_path
from rs.families import Family
from rs.families.schema import JudgeConfig
from rs.pipeline.clean import CleaningReport
from rs.pipeline.clean.stage import CleanStage
from rs.pipeline.recover import RecoverStage, RecoveryReport
from rs.pipeline.route import decide, in_rl_bounds, outcomes, routes_for
from rs.pipeline.sample import SampleReport
from rs.pipeline.sample.stage import SampleStage
from rs.pipeline.stage import ensure
from rs.plan.report import PlanReport, Projection, RecoveryProjection
from rs.store import read_records


def project(
    family: Family,
    limit: int,
    build_root: Path | None,
    cache_path: Path | None,
    tokens_per_second: float | None,
    engine_factory: Any,
    progress: bool,
    plan: PlanReport,
) -> Projection:
    """Answer the first `limit` images for real (and run the recovery pass on them), in `build_root/plan` and through the
    generation cache the full run reads, and project the whole family from what they took."""
    root = Path(build_root or "build") / "plan"
    ctx = BuildContext(
        family, root, cache_path or default_cache_path(), limit=limit, progress=progress, engine_factory=engine_factory
    )
    with ctx.passes():
        return _projected(ctx, family, tokens_per_second, plan)


def _projected(ctx: BuildContext, family: Family, tokens_per_second: float | None, plan: PlanReport) -> Projection:
    clean = ensure(CleanStage(), ctx)
    plan.overlap = clean
    ctx.paths.sample_report.unlink(missing_ok=True)  # the plan measures this run, even over a warm cache
    report: SampleReport = ensure(SampleStage(), ctx)
    columns = ["error", "final", "verified", "contradicts", "judge", "completion_tokens", "finish_reason", "ending"]
    items = list(read_records(ctx.paths.items, "items", columns=columns))
    answered = [i for i in items if i["error"] is None]
    tokens = [i["completion_tokens"] for i in answered if i["completion_tokens"] is not None]
    accepted = sum(decide(i, report.promotes).accepted for i in items)
    family_qa = _family_questions(clean, plan.source_records)
    measured = _measured_throughput(report, tokens, len(items)) if tokens_per_second is None else None
    judge_max = _judge_max_tokens(family.config.judge)
    calibration = report.judge_requests - report.judged
    recovery = _project_recovery(ctx, report, items) if family.config.recovery is not None else None
    return Projection(
        images=ctx.limit or 0,
        answered=len(answered),
        completion_tokens=tokens,
        truncated=sum(i["finish_reason"] == "length" for i in answered),
        accepted=accepted,
        judged=report.judged,
        judge_max_tokens=judge_max,
        calibration_requests=max(0, calibration),
        sent=report.sampling_engine_calls + report.judge_engine_calls,
        seconds=report.seconds,
        family_qa=family_qa,
        tokens_per_second=tokens_per_second or measured,
        measured=tokens_per_second is None and measured is not None,
        endings=dict(sorted(Counter(i["ending"] for i in answered).items())),
        loop_tokens_saved=report.loop_tokens_saved,
        loop_detection=family.config.sampling.repetition_detection is not None,
        recovery=recovery,
        blind=_blind(report),
        model_loads=ctx.engines_made,
    )


def _blind(report: SampleReport) -> dict[str, int] | None:
    """What the no-image pass asked on the plan's questions (`rs.pipeline.sample.blind`), as `Projection.blind` keeps it."""
    b = report.blind
    if b is None:
        return None
    return {
        "questions": b.questions,
        "requests": b.requests,
        "sent": b.engine_calls,
        "prompt_tokens": b.prompt_tokens,
        "completion_tokens": b.completion_tokens,
    }


def _judge_max_tokens(judge: JudgeConfig) -> int:
    """The most tokens one verdict may take: its label, and a think-then-label judge's reasoning budget."""
    return judge.max_tokens + (judge.think_budget if judge.mode == "think_then_label" else 0)


def _family_questions(clean: CleaningReport, source_records: int | None) -> int | None:
    """The questions the whole family will answer: the source's records times the sample's questions kept per record."""
    if source_records is None:
        return None
    per_record = clean.source_items / clean.source_records if clean.source_records else 0
    kept = clean.kept_items / clean.source_items if clean.source_items else 0
    return round(source_records * per_record * kept)


def _measured_throughput(report: SampleReport, tokens: list[int], items: int) -> float | None:
    """The answers sent this time over the stage's time, the model's load included: a lower bound of the engine's output
    tokens per second; None when nothing was sent."""
    if not (report.sampling_engine_calls and report.seconds):
        return None
    return sum(tokens) * report.sampling_engine_calls / max(1, items) / report.seconds


def _project_recovery(ctx: BuildContext, sampled: SampleReport, items: list[dict[str, Any]]) -> RecoveryProjection:
    """Run the recovery pass on the plan's images, as the full run will (through the same cache), and measure it."""
    recovery = ctx.family.config.recovery
    assert recovery is not None
    ctx.paths.recovery_report.unlink(missing_ok=True)  # measure this run, even over a warm cache
    report: RecoveryReport | None = ensure(RecoverStage(sampled), ctx)
    assert report is not None
    tokens, difficulty = [], 0
    for r in read_records(ctx.paths.recovery, "recovery", columns=["why", "samples"]):
        drawn = [s["completion_tokens"] for s in r["samples"] if s["completion_tokens"] is not None]
        tokens += drawn
        difficulty += sum(drawn) if r["why"] == "difficulty" else 0
    blocked = sum(decide(i, sampled.promotes).reason == "judge_blocked" for i in items)
    routes = routes_for(ctx, sampled.promotes)
    rl = (
        sum(
            in_rl_bounds(result, routes.rl_bounds, keeps_blind=routes.rl_keeps_blind)
            for _, result in outcomes(ctx.paths.root, routes)
        )
        if routes.rl_bounds is not None
        else None
    )
    return RecoveryProjection(
        k=recovery.samples,
        temperature=recovery.temperature,
        items=len(items),
        sampled=dict(report.items),
        samples=report.samples,
        completion_tokens=tokens,
        judged=report.judged,
        sent=report.sampling_engine_calls + report.judge_engine_calls,
        seconds=report.seconds,
        blocked=blocked,
        difficulty_tokens=difficulty,
        rl=rl,
        rl_bounds=routes.rl_bounds,
        adjudication=_adjudication(report, ctx.family.config.judge.calibration_samples),
    )


def _adjudication(report: RecoveryReport, samples: int) -> dict[str, int] | None:
    """What the suspect references' adjudication asked on the plan's images (`rs.plan.report.RecoveryProjection`)."""
    a = report.adjudication
    if a is None:
        return None
    cal = a.calibration
    cases = cal.wrong_reference.total + cal.right_reference.total if cal is not None else 0
    return {
        "candidates": a.candidates,
        "cases": cases,
        "requests": a.requests,
        "sent": a.engine_calls,
        "most_cases": 2 * samples,
    }
