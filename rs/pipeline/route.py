"""After the clean and sample stages (and the recovery pass): route each answered item to its splits, row by row.

Routing is a pure function of an item's result, its recovery samples and the run's calibration,
applied while a split is written: building a second split reads the same stores and never re-runs
the model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from rs.splits_schema import think_response
from rs.store import read_clean_rows, read_records

if TYPE_CHECKING:
    from rs.context import BuildContext
    from rs.families.schema import FamilyConfig

VERSION = "3"
"""Which split an answered item goes to: bump when a change routes some item otherwise (`rs.pipeline.versions`; 2: the recovery
pass's samples; 3: a certain rejection keeps `wrong_answer` whatever the judge said, but CORRECT: `judge_overruled`)."""


NOT_ASKED = "NOT_ASKED"
"""The judge label of an undecided answer the judge was never asked about: `rs refilter` re-read it under a changed reader,
with no engine, and no verdict on exactly that question, reference and candidate was stored or cached. It is routed
`judge_not_asked`: neither accepted nor taken for a certain rejection, until `rs publish` asks the judge."""


@dataclass(frozen=True)
class Decision:
    accepted: bool
    by: str | None = None
    """`verifier`, `judge` or `recovery` when accepted."""
    reason: str | None = None
    """One of `rs.splits_schema.REJECT_REASONS` when rejected."""


def decide(item: dict[str, Any], judge_promotes: bool) -> Decision:
    """The fate of one answer (the greedy one, or a recovery sample): its record in the items or recovery store."""
    if item["error"] is not None:
        return Decision(False, reason="engine_error")
    if item.get("ending") == "repetition":  # loop detection ended it: a loop, not an answer that was merely long
        return Decision(False, reason="degenerate_repetition")
    if item["final"] is None:
        return Decision(False, reason="no_final_answer")
    if item["verified"]:
        return Decision(True, by="verifier")
    verdict = item["judge"]
    if item["contradicts"] and verdict != "CORRECT":  # the verifier is certain: an UNSURE or WRONG judge decided nothing
        return Decision(False, reason="wrong_answer")
    if verdict == NOT_ASKED:
        return Decision(False, reason="judge_not_asked")
    if verdict == "CORRECT":
        if item["contradicts"]:
            return Decision(False, reason="judge_overruled")
        return Decision(True, by="judge") if judge_promotes else Decision(False, reason="judge_blocked")
    if verdict == "UNSURE":
        return Decision(False, reason="judge_unsure")
    return Decision(False, reason="wrong_answer")


def certainly_wrong(answer: dict[str, Any], judge_promotes: bool) -> bool:
    """A final answer known to be wrong: the verifier's certain rejection, or a calibrated judge's WRONG.

    Only such an answer is the rejected side of a preference pair: an undecided one may be right."""
    if decide(answer, judge_promotes).accepted or answer["final"] is None or answer["error"] is not None:
        return False
    return bool(answer["contradicts"]) or (judge_promotes and answer["judge"] == "WRONG")


@dataclass(frozen=True)
class Routes:
    """What routing needs besides the stores: the calibration's verdict and the family's rules."""

    promotes: bool
    """Whether the judge passed calibration and may promote."""
    needs_agreeing_reasoning: bool = True
    """An accepted item whose reasoning concludes another value is in the nothink split only."""
    recovery: bool = False
    """The build has a recovery pass: its store is read and its columns published."""
    greedy_temperature: float = 0.0
    greedy_seed: int = 0
    recovery_temperature: float | None = None
    rl_bounds: tuple[float, float] | None = None
    """The pass rates the RL repo keeps, strictly between (`recovery.difficulty.rl`); None: no RL repo."""


def routes_of(config: FamilyConfig, promotes: bool) -> Routes:
    """A family's routing rules, given its calibration's verdict."""
    recovery = config.recovery
    rl = recovery.difficulty.rl if recovery else None
    return Routes(promotes, config.answers.think_needs_agreeing_reasoning, recovery=recovery is not None,
                  greedy_temperature=config.sampling.temperature, greedy_seed=config.sampling.seed,
                  recovery_temperature=recovery.temperature if recovery else None,
                  rl_bounds=(rl.min_pass_rate, rl.max_pass_rate) if rl else None)


JUDGE_POLICIES = ("calibrated", "never")
"""`rs refilter --judge`: the judge promotes as its calibration allows (the run's rule), or never."""


@dataclass(frozen=True)
class RouteFilter:
    """Routing settings changed after the run (`rs refilter`): applied to the stored answers, with no engine."""

    judge: str = "calibrated"
    """One of `JUDGE_POLICIES`."""
    think_needs_agreeing_reasoning: bool | None = None
    """None: the family's setting."""
    rl_bounds: tuple[float, float] | None = None
    """None: the family's `recovery.difficulty.rl` bounds."""

    def apply(self, routes: Routes) -> Routes:
        """The family's routes under this filter."""
        return replace(
            routes, promotes=routes.promotes and self.judge != "never",
            needs_agreeing_reasoning=routes.needs_agreeing_reasoning if self.think_needs_agreeing_reasoning is None
            else self.think_needs_agreeing_reasoning,
            rl_bounds=self.rl_bounds if self.rl_bounds is not None and routes.rl_bounds is not None else routes.rl_bounds)

    def changes(self, routes: Routes) -> list[str]:
        """What this filter changes of the family's `routes`, in words (the cards say it)."""
        after, out = self.apply(routes), []
        if self.judge == "never":
            out.append("the judge promotes nothing" + (" (the run's calibration let it promote)" if routes.promotes else
                                                     " (as in the run: its calibration did not let it promote)"))
        if after.needs_agreeing_reasoning != routes.needs_agreeing_reasoning:
            out.append("an accepted answer whose reasoning concludes another value is "
                       + ("kept out of the think split" if after.needs_agreeing_reasoning else "kept in the think split"))
        if after.rl_bounds != routes.rl_bounds:
            out.append(f"the RL repo keeps pass rates strictly between {after.rl_bounds[0]} and {after.rl_bounds[1]} "
                       f"(the family: {routes.rl_bounds[0]} and {routes.rl_bounds[1]})")
        return out or ["nothing (the family's own routing)"]


@dataclass(frozen=True)
class Outcome:
    """An item's fate after both passes."""

    decision: Decision
    greedy: Decision
    answer: dict[str, Any]
    """The answer it is published with: the greedy one, or the recovered sample."""
    samples: list[dict[str, Any]] | None = None
    """Its recovery samples, when it was sampled."""
    passed: int = 0
    """Samples accepted."""
    why: str | None = None
    """Why it was sampled (`rs.pipeline.recover.SAMPLED_FOR`), when it was."""

    @property
    def pass_rate(self) -> float | None:
        return self.passed / len(self.samples) if self.samples else None

    @property
    def k(self) -> int | None:
        return len(self.samples) if self.samples else None

    @property
    def recovered(self) -> bool:
        return self.decision.by == "recovery"


def outcome(item: dict[str, Any], draws: dict[str, Any] | None, promotes: bool) -> Outcome:
    """The greedy decision, then (for a rejected item) the first accepted sample; a sample whose reasoning agrees with
    its answer is preferred, so that the recovered answer can go to the think split."""
    greedy = decide(item, promotes)
    if draws is None:
        return Outcome(greedy, greedy, item)
    samples, why = draws["samples"], draws.get("why")
    accepted = [s for s in samples if decide(s, promotes).accepted]
    if greedy.accepted or not accepted:
        return Outcome(greedy, greedy, item, samples, len(accepted), why)
    chosen = next((s for s in accepted if s["reasoning_agrees"] is not False), accepted[0])
    return Outcome(Decision(True, by="recovery"), greedy, chosen, samples, len(accepted), why)


def kept_out_of_think(answer: dict[str, Any], needs_agreeing_reasoning: bool) -> bool:
    """An accepted answer whose reasoning concludes another value (`reasoning_agrees` False), when the family asks for
    reasoning that agrees: it is in the nothink split only."""
    return needs_agreeing_reasoning and answer.get("reasoning_agrees") is False


def qa_entry(split: str, item: dict[str, Any], result: Outcome, routes: Routes) -> dict[str, Any] | None:
    """The QA entry `split` (think, nothink or rejected) publishes of an item, or None when the split has none of it."""
    decision, answer = result.decision, result.answer
    if split == "rejected":
        if decision.accepted:
            return None
        qa = {"question": item["prompt"], "answer": item["reference"], "wrong_vlm": item["final"] or "", "reason": decision.reason}
        return {**qa, "pass_rate": result.pass_rate, "k": result.k} if routes.recovery else qa
    if not decision.accepted or split == "think" and kept_out_of_think(answer, routes.needs_agreeing_reasoning):
        return None
    if split == "nothink":
        qa = {"question": item["prompt"], "answer": answer["final"], "reference": item["reference"], "accepted_by": decision.by}
    else:
        qa = {
            "question": item["prompt"], "reasoning": answer["reasoning"] or "", "answer": answer["final"],
            "response": think_response(answer["reasoning"], answer["final"]), "reference": item["reference"],
            "accepted_by": decision.by, "budgeted": answer.get("ending") == "thinking_budget",
        }
    return {**qa, **_provenance(item, result, routes)} if routes.recovery else qa


def _provenance(item: dict[str, Any], result: Outcome, routes: Routes) -> dict[str, Any]:
    """Which answer an accepted row carries (the greedy one, or recovery sample `sample`) and what was measured."""
    recovered = result.recovered
    return {
        "sample": result.answer["sample"] if recovered else None,
        "temperature": routes.recovery_temperature if recovered else routes.greedy_temperature,
        "seed": result.answer["seed"] if recovered else routes.greedy_seed,
        "greedy_answer": (item["final"] or "") if recovered else None,
        "pass_rate": result.pass_rate, "k": result.k,
    }


def outcomes(build_dir: str | Path, routes: Routes, *, columns: list[str] | None = None) -> Iterator[tuple[dict[str, Any], Outcome]]:
    """Every item of the items store with its outcome, in item order (the recovery store joined by row and key)."""
    build_dir = Path(build_dir)
    draws = read_records(build_dir / "recovery", "recovery") if routes.recovery else iter(())
    pending = next(draws, None)
    for item in read_records(build_dir / "items", "items", columns=columns):
        mine = None
        if pending is not None and pending["row"] == item["row"] and pending["key"] == item["key"]:
            mine, pending = pending, next(draws, None)
        yield item, outcome(item, mine, routes.promotes)
    if pending is not None:
        raise RuntimeError(f"the recovery store of {build_dir} has items the items store lacks (row {pending['row']}); "
                           "rebuild the family")


def split_rows(build_dir: str | Path, split: str, routes: Routes) -> Iterator[dict[str, Any]]:
    """The rows of one of the three splits: the cleaned rows joined, in order, with their items' outcomes (one row per
    image; the pairs are `rs.pipeline.write.pairs.pair_rows`)."""
    for row, results in joined(build_dir, routes):
        qa = [entry for item, result in results if (entry := qa_entry(split, item, result, routes)) is not None]
        if qa:
            yield {"image": {"bytes": row.image, "path": None}, "qa": qa, "clean_meta": row.clean_meta, "image_sha256": row.image_sha256}


def joined(build_dir: str | Path, routes: Routes) -> Iterator[tuple[Any, list[tuple[dict[str, Any], Outcome]]]]:
    """Each cleaned row with its items and their outcomes."""
    build_dir = Path(build_dir)
    results = outcomes(build_dir, routes)
    current = next(results, None)
    for index, row in enumerate(read_clean_rows(build_dir / "clean")):
        mine = []
        for _ in row.qa:
            if current is None or current[0]["row"] != index:
                raise RuntimeError(f"the items store of {build_dir} does not match its cleaned rows at row {index}; rebuild the family")
            mine.append(current)
            current = next(results, None)
        yield row, mine
    if current is not None:
        raise RuntimeError(f"the items store of {build_dir} has results past its cleaned rows; rebuild the family")


def routes_for(ctx: BuildContext, promotes: bool) -> Routes:
    """How the build `ctx` routes its items, given the calibration's verdict: the family's rules, under its `route_filter`
    (`rs refilter`) when it has one."""
    routes = routes_of(ctx.family.config, promotes)
    return ctx.route_filter.apply(routes) if ctx.route_filter is not None else routes
