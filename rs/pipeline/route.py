"""Stage 4, route: each answered item to its splits (think, nothink, rejected, the pairs, the RL repo), with its reason.

Routing is a pure function of an item's result, its recovery samples and the run's calibration,
applied while a split is written: building a second split reads the same stores and never re-runs
the model. The route stage itself (`RouteStage`) stores nothing: it counts where every item goes (`Routing`, what the
cards say of it), by question type too (`question_types:`), in one pass over the stores.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator

from rs.pipeline.clean.row_size import ROW_SHARE
from rs.pipeline.sample.blind import published as blind_published
from rs.pipeline.stage import BuildError
from rs.splits import REJECT_REASONS, think_response
from rs.store import read_clean_rows, read_records

if TYPE_CHECKING:
    from rs.context import BuildContext, BuildPaths
    from rs.engines.base import Request
    from rs.families.schema import FamilyConfig, QuestionTypesConfig

VERSION = "7"
"""Which split an answered item goes to: bump when a change routes some item otherwise (`rs.pipeline.versions`; 2: the recovery
pass's samples; 3: a certain rejection keeps `wrong_answer` whatever the judge said, but CORRECT: `judge_overruled`; 4: a candidate the
calibrated adjudicator sides against its reference is `suspect_reference`; 5: with `blind.rl: false`, the RL repo leaves
out the questions the no-image pass marked; 6: an answer too large for its row's part of a row group is `answer_too_large`;
7: the no-image answer counts in it, and is not published with `answer_too_large`; a preference pair's rejected side
is the first certainly wrong answer that fits the pair's row, `pair_fits`)."""

SUSPECT_EXAMPLES = 5
"""How many `suspect_reference` rejections the rejected card shows."""
SUSPECT_REFERENCE = "suspect_reference"
"""The reason of a rejection whose answers all agree on another value than the reference's, which the adjudicator,
passing its calibration, found the image supports in both orders (`rs.pipeline.sample.adjudicate`): the reference may
be what is wrong. Never in a preference pair, nor in the RL repo."""


ANSWER_TOO_LARGE = "answer_too_large"
"""The reason of an item whose published answers (the model's own text, its no-image answer included) would not fit its
row's part of a row group (`Routes.answer_bytes`): rejected with its question and reference and no answer, so that the
write never fails the family."""


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
    """One of `rs.splits.REJECT_REASONS` when rejected."""


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
    if (
        item["contradicts"] and verdict != "CORRECT"
    ):  # the verifier is certain: an UNSURE or WRONG judge decided nothing
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
    blind: bool = False
    """The build has a no-image pass (`blind:`): its records are read and every split publishes them."""
    rl_keeps_blind: bool = True
    """The RL repo keeps the questions the no-image pass marked (`blind.rl`)."""
    answer_bytes: int | None = None
    """Bytes of the model's text the published answers of one row may hold together: the row-group target less the part
    cleaning leaves an image and its questions (`rs.pipeline.clean.row_size`), shared equally by the row's questions;
    an answer over its share is rejected `answer_too_large`. None: unbounded."""


def answer_bytes_of(config: FamilyConfig) -> int:
    """`Routes.answer_bytes` of a family: what cleaning's row-size budget leaves of the row-group target."""
    target = config.shard.row_group_target()
    return target - max(1, int(target * ROW_SHARE))


def routes_of(config: FamilyConfig, promotes: bool) -> Routes:
    """A family's routing rules, given its calibration's verdict."""
    recovery = config.recovery
    rl = recovery.difficulty.rl if recovery else None
    return Routes(
        promotes,
        config.answers.think_needs_agreeing_reasoning,
        recovery=recovery is not None,
        greedy_temperature=config.sampling.temperature,
        greedy_seed=config.sampling.seed,
        recovery_temperature=recovery.temperature if recovery else None,
        rl_bounds=(rl.min_pass_rate, rl.max_pass_rate) if rl else None,
        blind=config.blind is not None,
        rl_keeps_blind=config.blind is None or config.blind.rl,
        answer_bytes=answer_bytes_of(config),
    )


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
    rl_keeps_blind: bool | None = None
    """Whether the RL repo keeps the questions the no-image pass marked; None: the family's `blind.rl`."""

    def apply(self, routes: Routes) -> Routes:
        """The family's routes under this filter."""
        return replace(
            routes,
            promotes=routes.promotes and self.judge != "never",
            needs_agreeing_reasoning=routes.needs_agreeing_reasoning
            if self.think_needs_agreeing_reasoning is None
            else self.think_needs_agreeing_reasoning,
            rl_bounds=self.rl_bounds
            if self.rl_bounds is not None and routes.rl_bounds is not None
            else routes.rl_bounds,
            rl_keeps_blind=routes.rl_keeps_blind if self.rl_keeps_blind is None else self.rl_keeps_blind,
        )

    def changes(self, routes: Routes) -> list[str]:
        """What this filter changes of the family's `routes`, in words (the cards say it)."""
        after, out = self.apply(routes), []
        if self.judge == "never":
            out.append(
                "the judge promotes nothing"
                + (
                    " (the run's calibration let it promote)"
                    if routes.promotes
                    else " (as in the run: its calibration did not let it promote)"
                )
            )
        if after.needs_agreeing_reasoning != routes.needs_agreeing_reasoning:
            out.append(
                "an accepted answer whose reasoning concludes another value is "
                + ("kept out of the think split" if after.needs_agreeing_reasoning else "kept in the think split")
            )
        if after.rl_bounds != routes.rl_bounds:
            out.append(
                f"the RL repo keeps pass rates strictly between {after.rl_bounds[0]} and {after.rl_bounds[1]} "
                f"(the family: {routes.rl_bounds[0]} and {routes.rl_bounds[1]})"
            )
        if after.rl_keeps_blind != routes.rl_keeps_blind:
            out.append(
                "the RL repo "
                + ("keeps" if after.rl_keeps_blind else "leaves out")
                + " the questions answered right without the image (the family: "
                + ("keeps them)" if routes.rl_keeps_blind else "leaves them out)")
            )
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
    adjudication: dict[str, Any] | None = None
    """Its adjudication record (`rs.pipeline.sample.adjudicate.ADJUDICATION`), when it was a candidate."""
    blind: dict[str, Any] | None = None
    """Its no-image record (`rs.pipeline.sample.blind.BLIND`), with a no-image pass."""

    @property
    def blind_marked(self) -> bool:
        """Marked by the no-image pass: right without the image (in every rotation)."""
        return bool(self.blind and self.blind["marked"])

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
    samples, why, adjudication = draws["samples"], draws.get("why"), draws.get("adjudication")
    accepted = [s for s in samples if decide(s, promotes).accepted]
    if greedy.accepted or not accepted:
        if not greedy.accepted and adjudication is not None and adjudication["suspect"]:
            return Outcome(Decision(False, reason=SUSPECT_REFERENCE), greedy, item, samples, 0, why, adjudication)
        return Outcome(greedy, greedy, item, samples, len(accepted), why, adjudication)
    chosen = next((s for s in accepted if s["reasoning_agrees"] is not False), accepted[0])
    return Outcome(Decision(True, by="recovery"), greedy, chosen, samples, len(accepted), why)


def published_bytes(item: dict[str, Any], result: Outcome) -> int:
    """The most bytes of the model's text an item puts in a row of one split: an accepted answer's reasoning and final
    answer twice (the think split's `reasoning`, `answer` and `response`) with the greedy answer a recovered one keeps;
    a rejected one's final answer (`wrong_vlm`); with a no-image pass, its no-image answer too (`blind.answer`, in
    every split)."""
    blind = len(blind_published(result.blind)["answer"].encode()) if result.blind is not None else 0
    if not result.decision.accepted:
        return len((item["final"] or "").encode()) + blind
    answer = result.answer
    own = len((answer["reasoning"] or "").encode()) + len((answer["final"] or "").encode())
    return 2 * own + (len((item["final"] or "").encode()) if result.recovered else 0) + blind


def bounded(item: dict[str, Any], result: Outcome, share: int | None) -> Outcome:
    """`result`, or a rejection `answer_too_large` when the item's published text is over `share` (its row's part of
    `Routes.answer_bytes`; None: unbounded)."""
    if share is None or published_bytes(item, result) <= share:
        return result
    return replace(result, decision=Decision(False, reason=ANSWER_TOO_LARGE))


def answer_share(routes: Routes, questions: int) -> int | None:
    """One question's part of `Routes.answer_bytes`, in a row of `questions` questions."""
    return None if routes.answer_bytes is None else routes.answer_bytes // max(1, questions)


def kept_out_of_think(answer: dict[str, Any], needs_agreeing_reasoning: bool) -> bool:
    """An accepted answer whose reasoning concludes another value (`reasoning_agrees` False), when the family asks for
    reasoning that agrees: it is in the nothink split only."""
    return needs_agreeing_reasoning and answer.get("reasoning_agrees") is False


def qa_entry(split: str, item: dict[str, Any], result: Outcome, routes: Routes) -> dict[str, Any] | None:
    """The QA entry `split` (think, nothink or rejected) publishes of an item, or None when the split has none of it;
    with a no-image pass, its `blind` column (`rs.splits_schema.BLIND`) last, its `answer` "" when `answer_too_large`."""
    qa = _qa_entry(split, item, result, routes)
    if qa is None or not routes.blind:
        return qa
    if result.blind is None:
        raise RuntimeError(f"{item['key']} has no no-image record; rebuild the family")
    blind = blind_published(result.blind)
    if result.decision.reason == ANSWER_TOO_LARGE:  # no model text at all; its measures stay
        blind["answer"] = ""
    return {**qa, "blind": blind}


def _qa_entry(split: str, item: dict[str, Any], result: Outcome, routes: Routes) -> dict[str, Any] | None:
    decision, answer = result.decision, result.answer
    if split == "rejected":
        if decision.accepted:
            return None
        qa = {
            "question": item["prompt"],
            "answer": item["reference"],
            "wrong_vlm": "" if decision.reason == ANSWER_TOO_LARGE else item["final"] or "",
            "reason": decision.reason,
        }
        if not routes.recovery:
            return qa
        return {**qa, "pass_rate": result.pass_rate, "k": result.k, "suspect": suspect_evidence(result)}
    if not decision.accepted or split == "think" and kept_out_of_think(answer, routes.needs_agreeing_reasoning):
        return None
    if split == "nothink":
        qa = {
            "question": item["prompt"],
            "answer": answer["final"],
            "reference": item["reference"],
            "accepted_by": decision.by,
        }
    else:
        qa = {
            "question": item["prompt"],
            "reasoning": answer["reasoning"] or "",
            "answer": answer["final"],
            "response": think_response(answer["reasoning"], answer["final"]),
            "reference": item["reference"],
            "accepted_by": decision.by,
            "budgeted": answer.get("ending") == "thinking_budget",
        }
    return {**qa, **_provenance(item, result, routes)} if routes.recovery else qa


def suspect_evidence(result: Outcome) -> dict[str, Any] | None:
    """A `suspect_reference` rejection's evidence (`rs.splits_schema.SUSPECT`); None for any other outcome."""
    if result.decision.reason != SUSPECT_REFERENCE or result.adjudication is None:
        return None
    return {
        "agreeing": result.adjudication["agreeing"],
        "samples": [s["final"] or "" for s in result.samples or ()],
        "verdicts": list(result.adjudication["verdicts"]),
    }


def _provenance(item: dict[str, Any], result: Outcome, routes: Routes) -> dict[str, Any]:
    """Which answer an accepted row carries (the greedy one, or recovery sample `sample`) and what was measured."""
    recovered = result.recovered
    return {
        "sample": result.answer["sample"] if recovered else None,
        "temperature": routes.recovery_temperature if recovered else routes.greedy_temperature,
        "seed": result.answer["seed"] if recovered else routes.greedy_seed,
        "greedy_answer": (item["final"] or "") if recovered else None,
        "pass_rate": result.pass_rate,
        "k": result.k,
    }


def outcomes(
    build_dir: str | Path, routes: Routes, *, columns: list[str] | None = None
) -> Iterator[tuple[dict[str, Any], Outcome]]:
    """Every item of the items store with its outcome, in item order (the recovery store joined by row and key), each
    bounded by its row's part of `Routes.answer_bytes` (`bounded`: the items of one row are held until the row is whole)."""
    held: list[tuple[dict[str, Any], Outcome]] = []
    for item, result in _unbounded_outcomes(Path(build_dir), routes, columns):
        if held and held[0][0]["row"] != item["row"]:
            yield from _bounded_row(held, routes)
            held = []
        held.append((item, result))
    yield from _bounded_row(held, routes)


def _bounded_row(
    held: list[tuple[dict[str, Any], Outcome]], routes: Routes
) -> Iterator[tuple[dict[str, Any], Outcome]]:
    share = answer_share(routes, len(held))
    for item, result in held:
        yield item, bounded(item, result, share)


def _unbounded_outcomes(
    build_dir: Path, routes: Routes, columns: list[str] | None
) -> Iterator[tuple[dict[str, Any], Outcome]]:
    draws = _adjudicated(build_dir / "recovery") if routes.recovery else iter(())
    blinds = read_records(build_dir / "items", "blind") if routes.blind else None
    pending = next(draws, None)
    for item in read_records(build_dir / "items", "items", columns=columns):
        mine = None
        if pending is not None and pending["row"] == item["row"] and pending["key"] == item["key"]:
            mine, pending = pending, next(draws, None)
        result = outcome(item, mine, routes.promotes)
        if blinds is not None:
            result = replace(result, blind=_blind_of(item, next(blinds, None), build_dir))
        yield item, result
    if blinds is not None and (extra := next(blinds, None)) is not None:
        raise RuntimeError(
            f"the no-image records of {build_dir / 'items'} name an item the items store lacks ({extra['key']}); "
            "rebuild the family"
        )
    if pending is not None:
        raise RuntimeError(
            f"the recovery store of {build_dir} has items the items store lacks (row {pending['row']}); "
            "rebuild the family"
        )


def _blind_of(item: dict[str, Any], record: dict[str, Any] | None, build_dir: Path) -> dict[str, Any]:
    """An item's no-image record (one per item, in item order), checked to be its own."""
    if record is None or record["row"] != item["row"] or record["key"] != item["key"]:
        raise RuntimeError(
            f"the no-image records of {build_dir / 'items'} do not match its items at {item['key']} "
            f"(row {item['row']}); rebuild the family"
        )
    return record


def _adjudicated(recovery: Path) -> Iterator[dict[str, Any]]:
    """The recovery store's records, each candidate's with its adjudication record (`adjudication-*.parquet`, in item
    order) as `adjudication`."""
    adjudicated = read_records(recovery, "adjudication")
    pending = next(adjudicated, None)
    for draws in read_records(recovery, "recovery"):
        if pending is not None and pending["row"] == draws["row"] and pending["key"] == draws["key"]:
            draws["adjudication"], pending = pending, next(adjudicated, None)
        yield draws
    if pending is not None:
        raise RuntimeError(
            f"the adjudication records of {recovery} name an item its samples lack (row {pending['row']}); "
            "rebuild the family"
        )


def split_rows(build_dir: str | Path, split: str, routes: Routes) -> Iterator[dict[str, Any]]:
    """The rows of one of the three splits: the cleaned rows joined, in order, with their items' outcomes (one row per
    image; the pairs are `rs.pipeline.write.pairs.pair_rows`)."""
    for row, results in joined(build_dir, routes):
        qa = [entry for item, result in results if (entry := qa_entry(split, item, result, routes)) is not None]
        if qa:
            yield {
                "image": {"bytes": row.image, "path": None},
                "qa": qa,
                "clean_meta": row.clean_meta,
                "image_sha256": row.image_sha256,
            }


def joined(build_dir: str | Path, routes: Routes) -> Iterator[tuple[Any, list[tuple[dict[str, Any], Outcome]]]]:
    """Each cleaned row with its items and their outcomes."""
    build_dir = Path(build_dir)
    results = outcomes(build_dir, routes)
    current = next(results, None)
    for index, row in enumerate(read_clean_rows(build_dir / "clean")):
        mine = []
        for _ in row.qa:
            if current is None or current[0]["row"] != index:
                raise RuntimeError(
                    f"the items store of {build_dir} does not match its cleaned rows at row {index}; rebuild the family"
                )
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


def in_rl_bounds(result: Outcome, bounds: tuple[float, float], *, keeps_blind: bool = True) -> bool:
    """A question for RL: measured, and its pass rate strictly within the bounds (`Routes.rl_bounds`); no suspect
    reference, and (unless `keeps_blind`, `Routes.rl_keeps_blind`) none the no-image pass marked."""
    rate = result.pass_rate
    if rate is None or not bounds[0] < rate < bounds[1] or result.decision.reason == SUSPECT_REFERENCE:
        return False
    return keeps_blind or not result.blind_marked


@dataclass(frozen=True)
class Pair:
    chosen: dict[str, Any]
    chosen_from: str
    """`greedy` or `sample`."""
    rejected: dict[str, Any]
    rejected_from: str
    rejected_reason: str
    """`certain` (the verifier knows it is wrong) or `judge` (a calibrated judge said WRONG)."""


def pair_bytes(chosen: dict[str, Any], rejected: dict[str, Any]) -> int:
    """The bytes of the model's text a pair's row publishes: each side's response (`think_response`) and final answer."""
    return sum(
        len(think_response(side["reasoning"], side["final"]).encode()) + len(side["final"].encode())
        for side in (chosen, rejected)
    )


def pair_fits(chosen: dict[str, Any], rejected: dict[str, Any], routes: Routes) -> bool:
    """Whether a pair's row holds its two responses within `Routes.answer_bytes`: a pairs row is one question, whose
    image and text cleaning has bounded, so the model's text may take all of the rest of a row group."""
    return routes.answer_bytes is None or pair_bytes(chosen, rejected) <= routes.answer_bytes


def _certainly_wrong(item: dict[str, Any], result: Outcome, routes: Routes) -> list[tuple[str, dict[str, Any]]]:
    """An accepted item's certainly wrong answers, in the order a pair takes them: a recovered item's greedy answer,
    then its samples; each with where it is from (`greedy` or `sample`)."""
    wrong = [("greedy", item)] if result.recovered else []
    wrong += [("sample", s) for s in result.samples or ()]
    return [(source, answer) for source, answer in wrong if certainly_wrong(answer, routes.promotes)]


def pair_of(item: dict[str, Any], result: Outcome, routes: Routes) -> Pair | None:
    """The preference pair one item makes, if any (`rs.pipeline.write.pairs`): its published answer, when its reasoning
    agrees with it, and the first of its greedy answer and samples that is certainly wrong and fits the pair's row
    (`pair_fits`: a wrong answer too large to publish beside the chosen one is passed over, not the pair failed)."""
    if not result.decision.accepted or result.answer.get("reasoning_agrees") is False:
        return None  # a suspect reference is rejected: in no pair, in neither role
    for source, answer in _certainly_wrong(item, result, routes):
        if pair_fits(result.answer, answer, routes):
            return Pair(
                result.answer,
                "sample" if result.recovered else "greedy",
                answer,
                source,
                "certain" if answer["contradicts"] else "judge",
            )
    return None


def unpaired_reason(item: dict[str, Any], result: Outcome, routes: Routes) -> str:
    """Why an accepted, sampled item makes no pair (`PairCounts.unpaired`): its reasoning concludes another value
    (`reasoning_disagrees`), none of its answers is certainly wrong (`no_wrong_answer`), or each that is would make a
    row over `Routes.answer_bytes` with the chosen one (`too_large`)."""
    if result.answer.get("reasoning_agrees") is False:
        return "reasoning_disagrees"
    return "too_large" if _certainly_wrong(item, result, routes) else "no_wrong_answer"


@dataclass
class PairCounts:
    """What the pairs card states: how many pairs, made of what; and the accepted questions that made none."""

    pairs: int = 0
    chosen_from: Counter[str] = field(default_factory=Counter)
    rejected_from: Counter[str] = field(default_factory=Counter)
    rejected_reason: Counter[str] = field(default_factory=Counter)
    images: int = 0
    unpaired: Counter[str] = field(default_factory=Counter)
    """Accepted questions without a pair (`unpaired_reason`): `no_wrong_answer` (none certainly wrong),
    `reasoning_disagrees`, `too_large` (every certainly wrong answer too large to publish beside the chosen one)."""
    _last_row: int = field(default=-1, repr=False)

    def add(self, item: dict[str, Any], result: Outcome, routes: Routes) -> bool:
        if not result.decision.accepted or result.samples is None:  # a recovered item was sampled too
            return False
        pair = pair_of(item, result, routes)
        if pair is None:
            self.unpaired[unpaired_reason(item, result, routes)] += 1
            return False
        self.pairs += 1
        self.images += item["row"] != self._last_row
        self._last_row = item["row"]
        self.chosen_from[pair.chosen_from] += 1
        self.rejected_from[pair.rejected_from] += 1
        self.rejected_reason[pair.rejected_reason] += 1
        return True

    def to_dict(self) -> dict[str, Any]:
        return {
            "pairs": self.pairs,
            "images": self.images,
            **{
                k: dict(sorted(getattr(self, k).items()))
                for k in ("chosen_from", "rejected_from", "rejected_reason", "unpaired")
            },
        }


# -- question types (`question_types:`) --------------------------------------------------------------------------------
# A question's type is the one its source records (`QAItem.qtype`: a `source.columns.qtype` column, the synthetic
# scenes' own), else the first rule whose pattern its question matches, else the family's default. The cards show,
# per type, the accept rate, the recovery rate and the spread of the pass rates, and name the types the model fails
# most (`rs.pipeline.write.stats`): an average accept rate hides a type the model cannot do.

Typer = Callable[[str, "str | None"], str]
"""(question as the source gave it, the type the source records) -> the question's type."""


def typer(config: QuestionTypesConfig) -> Typer:
    """The function that types a question under `config`."""
    rules = [(rule.type, re.compile(rule.pattern, re.IGNORECASE)) for rule in config.rules]

    def type_of(question: str, qtype: str | None) -> str:
        if config.source and qtype:
            return qtype
        return next((name for name, pattern in rules if pattern.search(question)), config.default)

    return type_of


def item_types(build_dir: str | Path, type_of: Typer) -> Iterator[tuple[int, str, str]]:
    """(row, key, type) of every cleaned QA item, in item order; reads the clean store's `qa` column only (no images)."""
    for index, row in enumerate(read_records(Path(build_dir) / "clean", "rows", columns=["qa"])):
        for qa in row["qa"]:
            yield index, qa["key"], type_of(qa["question"], qa["qtype"])


@dataclass
class TypeCounts:
    """What the cards say of one question type."""

    answered: int = 0
    accepted: int = 0
    greedy_accepted: int = 0
    recovered: int = 0
    sampled_rejected: int = 0
    """Questions the greedy pass rejected that were sampled (the recovery rate's denominator)."""
    pass_rates: list[float] = field(default_factory=list)

    def add(self, result: Outcome) -> None:
        self.answered += 1
        self.accepted += result.decision.accepted
        self.greedy_accepted += result.greedy.accepted
        self.recovered += result.recovered
        self.sampled_rejected += not result.greedy.accepted and result.samples is not None
        if result.pass_rate is not None:
            self.pass_rates.append(result.pass_rate)

    def to_dict(self) -> dict[str, Any]:
        rates = sorted(self.pass_rates)
        return {
            "answered": self.answered,
            "accepted": self.accepted,
            "greedy_accepted": self.greedy_accepted,
            "recovered": self.recovered,
            "sampled_rejected": self.sampled_rejected,
            "accept_rate": self.accepted / self.answered if self.answered else None,
            "recovery_rate": self.recovered / self.sampled_rejected if self.sampled_rejected else None,
            "measured": len(rates),
            "pass_rate_mean": sum(rates) / len(rates) if rates else None,
            "pass_rate_median": _median(rates),
            "pass_rate_min": rates[0] if rates else None,
            "pass_rate_max": rates[-1] if rates else None,
            "sometimes": sum(0 < r < 1 for r in rates),
        }


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


# -- the route stage: where every item goes, counted -------------------------------------------------------------------


@dataclass(frozen=True)
class Routing:
    """Where the routing sends a build's items: accepted by whom, rejected for which reason (the route stage's report)."""

    accepted_by: dict[str, int]
    rejected_by_reason: dict[str, int]
    tokens: dict[str, Counter[int]]
    """`accepted` / `rejected` -> answers per output length in tokens."""
    truncated: dict[str, int]
    """`accepted` / `rejected` -> answers that ran to `max_tokens`."""
    loop_tokens: dict[str, Counter[int]] = field(
        default_factory=lambda: {"accepted": Counter(), "rejected": Counter()}
    )
    """`accepted` / `rejected` -> answers loop detection ended, per output length."""
    budget_cuts: dict[str, int] = field(default_factory=lambda: {"accepted": 0, "rejected": 0})
    """`accepted` / `rejected` -> answers whose reasoning was cut at the thinking budget."""
    kept_out_of_think: int = 0
    """Accepted answers in the nothink split only: their reasoning concludes another value (`kept_out_of_think`)."""
    reasoning_disagrees: int = 0
    """Accepted answers as published (greedy or recovered) whose reasoning concludes another value, kept out of the think
    split or not: what the card counts (the sample stage's count sees the greedy answers only)."""
    pass_rates: dict[str, Counter[float]] | None = None
    """With a recovery pass: items per pass rate, by what they are (`greedy_accepted`, `recovered`, `rejected`); the
    cards bin them (`rs.pipeline.write.report.pass_rate_histogram`)."""
    pairs: PairCounts | None = None
    types: dict[str, TypeCounts] | None = None
    """With `question_types`: what the model made of each type."""
    rl: int = 0
    """Questions whose pass rate is within the RL repo's bounds (`routes.rl_bounds`)."""
    blind: dict[str, list[int]] | None = None
    """With a no-image pass: per question type (`""` where the questions are not typed) its questions, those marked
    (right without the image, in every rotation) and those right at temperature 0 (`rs.pipeline.sample.blind`)."""
    suspect_examples: list[dict[str, Any]] = field(default_factory=list)
    """The first `SUSPECT_EXAMPLES` `suspect_reference` rejections, in item order: `row`, `question` (the exact prompt),
    `reference`, `agreeing` (the value the model kept giving): what the rejected card shows."""
    verified_too_large: int = 0
    """Greedy answers the verifier accepted, rejected `answer_too_large` all the same: the card's verifier acceptances
    are the files' `accepted_by verifier` and these."""

    @property
    def accepted(self) -> int:
        return sum(self.accepted_by.values())

    @property
    def rejected(self) -> int:
        return sum(self.rejected_by_reason.values())


def _count_length(item: dict[str, Any], tokens: Counter[int], loop_tokens: Counter[int]) -> None:
    """Count a greedy answer's length in tokens (and apart, when loop detection ended it); an engine that counts none adds nothing."""
    if item["completion_tokens"] is not None:
        tokens[item["completion_tokens"]] += 1
        if item["ending"] == "repetition":
            loop_tokens[item["completion_tokens"]] += 1


def _pass_rate_group(result: Outcome) -> str:
    """Which pass-rate count an item counts in: accepted greedily, recovered by a sample, or still rejected."""
    return "greedy_accepted" if result.greedy.accepted else "recovered" if result.recovered else "rejected"


def _typed_outcomes(
    paths: BuildPaths, routes: Routes, columns: list[str], type_of: Typer | None
) -> Iterator[tuple[dict[str, Any], Outcome, str | None]]:
    """`outcomes`, each with its question's type (None without `question_types`)."""
    types = item_types(paths.root, type_of) if type_of is not None else None
    for item, result in outcomes(paths.root, routes, columns=columns):
        kind = None
        if types is not None:
            row, key, kind = next(types)
            if (row, key) != (item["row"], item["key"]):
                raise BuildError(
                    f"the items store of {paths.root} does not match its cleaned rows at row {item['row']}; "
                    "rebuild the family"
                )
        yield item, result, kind


def _tally_type(types: dict[str, TypeCounts], kind: str | None, result: Outcome, routes: Routes) -> bool:
    """Count an item under its question type (when typed); whether it is one for the RL repo."""
    if kind is not None:
        types.setdefault(kind, TypeCounts()).add(result)
    return routes.rl_bounds is not None and in_rl_bounds(result, routes.rl_bounds, keeps_blind=routes.rl_keeps_blind)


def route_items(paths: BuildPaths, routes: Routes, *, pairs: bool = False, type_of: Typer | None = None) -> Routing:
    """Count the routing of every sampled item (`outcomes`, as the splits are written)."""
    kept_out = disagrees = 0
    accepted_by: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    tokens: dict[str, Counter[int]] = {"accepted": Counter(), "rejected": Counter()}
    truncated = {"accepted": 0, "rejected": 0}
    loop_tokens: dict[str, Counter[int]] = {"accepted": Counter(), "rejected": Counter()}
    budget_cuts = {"accepted": 0, "rejected": 0}
    pass_rates: dict[str, Counter[float]] = {
        group: Counter() for group in ("greedy_accepted", "recovered", "rejected")
    }
    pair_counts = PairCounts() if pairs else None
    columns = [
        "row",
        "key",
        "error",
        "final",
        "verified",
        "contradicts",
        "judge",
        "completion_tokens",
        "finish_reason",
        "ending",
        "reasoning_agrees",
        "reasoning",
    ] + (["prompt", "reference"] if pairs or routes.recovery else [])
    types: dict[str, TypeCounts] = {}
    rl = 0
    examples: list[dict[str, Any]] = []
    blind: dict[str, list[int]] = {}
    verified_too_large = 0
    for item, result, kind in _typed_outcomes(paths, routes, columns, type_of):
        verified_too_large += result.decision.reason == ANSWER_TOO_LARGE and result.greedy.by == "verifier"
        rl += _tally_type(types, kind, result, routes)
        if result.blind is not None:
            counts = blind.setdefault(kind or "", [0, 0, 0])
            counts[0] += 1
            counts[1] += result.blind_marked
            counts[2] += bool(result.blind["right"] and result.blind["right"][0])
        decision = result.decision
        if decision.accepted:
            accepted_by[decision.by] += 1
            kept_out += kept_out_of_think(result.answer, routes.needs_agreeing_reasoning)
            disagrees += result.answer.get("reasoning_agrees") is False
        else:
            rejected[decision.reason] += 1
            if decision.reason == SUSPECT_REFERENCE and len(examples) < SUSPECT_EXAMPLES:
                evidence = suspect_evidence(result)
                assert evidence is not None
                examples.append(
                    {
                        "row": item["row"],
                        "question": item["prompt"],
                        "reference": item["reference"],
                        "agreeing": evidence["agreeing"],
                    }
                )
        side = "accepted" if result.greedy.accepted else "rejected"  # the greedy answers' lengths
        _count_length(item, tokens[side], loop_tokens[side])
        truncated[side] += item["completion_tokens"] is not None and item["finish_reason"] == "length"
        budget_cuts[side] += item["ending"] == "thinking_budget"
        if result.pass_rate is not None:
            pass_rates[_pass_rate_group(result)][result.pass_rate] += 1
        if pair_counts is not None:
            pair_counts.add(item, result, routes)
    by = ("verifier", "judge", "recovery") if routes.recovery else ("verifier", "judge")
    return Routing(
        {k: accepted_by[k] for k in by},
        {k: rejected[k] for k in REJECT_REASONS},
        tokens,
        truncated,
        loop_tokens,
        budget_cuts,
        kept_out,
        disagrees,
        pass_rates if routes.recovery else None,
        pair_counts,
        dict(sorted(types.items())) if type_of is not None else None,
        rl,
        dict(sorted(blind.items())) if routes.blind else None,
        examples,
        verified_too_large,
    )


class RouteStage:
    """Counts where the routing sends every answered item (`Routing`); keeps nothing: the splits route as they are written."""

    name: ClassVar[str] = "route"

    def __init__(self, promotes: bool):
        """`promotes`: whether the sample stage's calibration lets the judge promote (`SampleReport.promotes`)."""
        self.promotes = promotes

    def fingerprint(self, ctx: BuildContext) -> None:
        return None  # nothing stored: counted again each time, from the stores

    def requests(self, ctx: BuildContext) -> Iterator[tuple[str, Request]]:
        return iter(())  # routing asks no model

    def run(self, ctx: BuildContext) -> Routing:
        types = ctx.family.config.question_types
        return route_items(
            ctx.paths,
            routes_for(ctx, self.promotes),
            pairs="pairs" in ctx.family.splits,
            type_of=typer(types) if types is not None else None,
        )
