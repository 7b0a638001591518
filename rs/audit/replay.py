"""`rs audit REPO --build DIR --replay N [--engine]`: N published questions re-derived from what the model said.

From the cache (always): for N questions of the family's repos, a deterministic choice spread over what they
hold (accepted into the think split, accepted into the nothink split only, recovered, rejected), the exact
request the run sent is rebuilt from the build's cleaned item (the stored question is byte-identical to the
prompt; the sampling settings are the family's), looked up in the run's generation cache by the key the run
wrote it under, and its answer read, verified, judged (the judge's request looked up the same way), sampled
again by the recovery pass where the routing asks for it, and routed. Every entry the re-derivation gives each
split (think, nothink, rejected, pairs) must equal the published one column by column: a difference names the
repo, the row, the column and both values; a request the cache lacks is named too (nothing was compared).

Through the engine (`--engine`): the same requests sent to the family's engine fresh (neither read from the
cache nor written to it), and the agreement counted per group: final answers identical, texts byte-identical
to the cached ones, routing identical. A GPU (or a CPU) batches the replayed requests otherwise than the run
did, so an answer may differ in a near tie: that is measured, not failed; with `engine.batch_invariant` (vLLM's
batch-invariant mode) any text that differs is a finding.

The judge's calibration is the run's (`rs/stats.json`): a verdict on a few questions cannot re-measure it. So is the
suspect references' adjudicator's (the build's `recovery.json`): a replayed candidate (`rs.pipeline.sample.adjudicate`)
gets its two verdicts from the cache (or the engine) under the keys the recover stage asked them with, and is marked
`suspect_reference` only where the run's adjudicator passed its calibration.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from rs.audit.build import published_judge
from rs.audit.checkers import Audit, Finding
from rs.audit.repo import AuditUsageError
from rs.context import BuildContext, BuildPaths, default_cache_path
from rs.engines.base import Engine, Generation, Request, SamplingSettings
from rs.engines.cached_engine import cache_key, identity_key
from rs.engines.factory import engines_for
from rs.engines.generation_cache import CacheAnswerDamaged, GenerationCache
from rs.engines.stream import open_stream
from rs.families import Family, get_family
from rs.pipeline.clean import CleaningReport
from rs.pipeline.clean.stage import CleanStage
from rs.pipeline.recover import (
    RecoverStage,
    RecoveryPass,
    RecoveryReport,
    recovery_settings,
    sample_case,
    sample_record,
    samples_for,
)
from rs.pipeline.route import Routes, answer_share, bounded, outcome, qa_entry
from rs.pipeline.sample import SampleReport, SamplingPass, item_record
from rs.pipeline.sample.adjudicate import ORDERS, Adjudicator, Dispute, adjudication_record, agreeing_value
from rs.pipeline.sample.blind import add_answer
from rs.pipeline.sample.requests import sampling_request
from rs.pipeline.sample.stage import SampleStage, vocabulary_of
from rs.pipeline.stage import read_report
from rs.pipeline.write.pairs import pair_row
from rs.pipeline.write.samples import generation_share, published_text
from rs.store import read_clean_images, read_clean_rows

GROUPS = ("think", "nothink", "recovered", "rejected")
"""What a replayed question is, in the order the choice takes them: accepted (in the think split), accepted into the
nothink split only (its reasoning concludes another value), recovered by a sample, rejected."""

SPLITS = ("think", "nothink", "rejected", "pairs")
"""The repos whose entries a replay re-derives."""

FROM_CACHE = "the cache re-derives"

Fetch = Callable[[Sequence[Request], SamplingSettings], list[list[Generation | str]]]
"""Answers to requests: one list per request, one answer per sample it asks for (or why there is none)."""

NOT_CACHED = "is not in the generation cache"
DAMAGED = "is damaged in the generation cache (its bytes fail their checksum)"


@dataclass(frozen=True)
class Pick:
    group: str
    image_sha256: str
    question: str


@dataclass
class Derived:
    """One question as the run's answers make it, from the cache or the engine."""

    pick: Pick
    row: int = -1
    missing: list[str] = field(default_factory=list)
    """What could not be had, and why (`the greedy answer is not in the generation cache`): nothing is compared."""
    texts: list[str] = field(default_factory=list)
    """The answers' raw texts: the greedy one, then each recovery sample."""
    judges: list[str | None] = field(default_factory=list)
    """The judge's labels on them, as the samples repo publishes them (None where it was not asked)."""
    entries: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    greedy: str | None = None
    """The greedy answer's final answer, once read (compared on its own when the rest cannot be derived)."""
    answer: str | None = None
    """The final answer the question is published with (the greedy one, or the recovered sample's)."""
    routing: tuple[Any, ...] = ()
    """Which of the think, nothink and rejected splits hold it, accepted by whom, rejected why."""


def choose(family: Any, n: int) -> list[Pick]:
    """`n` questions of the family's readable repos, spread over `GROUPS`: each group's share is taken evenly along its
    rows (first, then every len/share-th), the shares dealt one at a time in the groups' order until `n` or none is left."""
    think, nothink, rejected = (family.of(s) for s in ("think", "nothink", "rejected"))
    in_think = (
        {(row["image_sha256"], qa["question"]) for row in think.rows for qa in row["qa"]}
        if think is not None
        else set()
    )
    groups: dict[str, list[Pick]] = {g: [] for g in GROUPS}
    if think is not None:
        groups["think"] = [
            Pick("think", r["image_sha256"], qa["question"])
            for r in think.rows
            for qa in r["qa"]
            if qa["accepted_by"] != "recovery"
        ]
    if nothink is not None:
        for r in nothink.rows:
            for qa in r["qa"]:
                key = (r["image_sha256"], qa["question"])
                if qa["accepted_by"] == "recovery":
                    groups["recovered"].append(Pick("recovered", *key))
                elif think is None or key not in in_think:
                    groups["nothink"].append(Pick("nothink", *key))
    if rejected is not None:
        groups["rejected"] = [
            Pick("rejected", r["image_sha256"], qa["question"]) for r in rejected.rows for qa in r["qa"]
        ]
    share = dict.fromkeys(GROUPS, 0)
    while sum(share.values()) < n and any(share[g] < len(groups[g]) for g in GROUPS):
        for g in GROUPS:
            if share[g] < len(groups[g]) and sum(share.values()) < n:
                share[g] += 1
    return [groups[g][j * len(groups[g]) // share[g]] for g in GROUPS for j in range(share[g])]


def check_build(family: Family, root: Path, limit: int | None) -> RecoveryReport | None:
    """Refuse a build made under another configuration of the family (or another rs) than the one given: its answers
    would be looked up under other keys, or read and routed by other rules. Returns its recovery report (None without
    a recovery pass): its adjudicator's calibration is the run's, as the judge's is."""
    ctx = BuildContext(family, root, limit=limit)
    problem, recovered = None, None
    clean = read_report(root / "clean.json", CleanStage().fingerprint(ctx), CleaningReport.from_dict)
    sampled = clean and read_report(root / "sample.json", SampleStage().fingerprint(ctx), SampleReport.from_dict)
    if not clean:
        problem = "its cleaning (clean.json) was made from another source or cleaning configuration"
    elif not sampled:
        problem = "its sampling stage (sample.json) was made under another model, engine, sampling, judge, verifier or rs version"
    elif family.config.recovery is not None and not (
        recovered := read_report(
            root / "recovery.json", RecoverStage(sampled).fingerprint(ctx), RecoveryReport.from_dict
        )
    ):
        problem = "its recovery pass (recovery.json) was made under another recovery block, or is missing"
    if problem:
        raise AuditUsageError(
            f"--replay: the build {root} is not {family.name} as {family.path} defines it: {problem}",
            hint="give --config the families file the run used (and this rs's version of it)",
        )
    return recovered


def _from_cache(cache: GenerationCache, identity: str) -> Fetch:
    """Answers as the run's cache holds them under the keys the run wrote them with (sample i: the seed + i key)."""

    def fetch(requests: Sequence[Request], settings: SamplingSettings) -> list[list[Generation | str]]:
        keys = [
            [cache_key(identity, settings, r.image_hash(), r.prompt, r.sample + i) for i in range(r.samples)]
            for r in requests
        ]
        wanted, damaged = [k for ks in keys for k in ks], set()
        while True:
            try:
                found = cache.get_many(wanted, settings=settings)
                break
            except CacheAnswerDamaged as err:  # named; the other answers are still read
                damaged.update(err.keys)
                wanted = [k for k in wanted if k not in damaged]
        return [[found.get(k) or (DAMAGED if k in damaged else NOT_CACHED) for k in ks] for ks in keys]

    return fetch


def _from_engine(engine: Engine) -> Fetch:
    """Answers the engine gives now: the requests sent as the run sent them (a question's samples in one request)."""

    def fetch(requests: Sequence[Request], settings: SamplingSettings) -> list[list[Generation | str]]:
        out: list[list[Generation | str]] = [["was not answered by the engine"] * r.samples for r in requests]
        if not requests:
            return out
        stream = open_stream(engine, settings, batch_size=len(requests))
        waiting = list(enumerate(requests))
        while waiting or stream.in_flight:
            while waiting and stream.in_flight < stream.window:
                index, request = waiting.pop(0)
                stream.submit(index, request)
            for index, generation in stream.poll(wait=True):
                generation.max_tokens = settings.max_tokens  # as the cache records them (`rs.engines.cached_engine`)
                generation.repetition_detection, generation.thinking_token_budget = (
                    settings.repetition_detection,
                    settings.thinking_token_budget,
                )
                out[index][generation.sample - requests[index].sample] = generation  # type: ignore[index]
        return out

    return fetch


@dataclass
class _Located:
    derived: Derived
    row: Any
    item: Any
    request: Request
    record: dict[str, Any] | None = None
    case: Any = None
    draws: dict[str, Any] | None = None


def _locate(picks: list[Pick], greedy: SamplingPass, paths: BuildPaths) -> tuple[list[_Located], list[Pick]]:
    """Each pick's cleaned item and the request the run sent for it (its image's hash: the cache key needs no more),
    from one pass over the clean store that reads no image."""
    wanted = {(p.image_sha256, p.question): p for p in picks}
    shas = {p.image_sha256 for p in picks}
    found: dict[Pick, _Located] = {}
    for index, row in enumerate(read_clean_rows(paths.clean, images=False)):
        if row.image_sha256 not in shas:
            continue
        for item in row.qa:
            request = sampling_request(item, greedy.instructions, row.image_sha256)
            pick = wanted.get((row.image_sha256, request.prompt))
            if pick is not None and pick not in found:
                found[pick] = _Located(Derived(pick, row=index), row, item, request)
    return [found[p] for p in picks if p in found], [p for p in picks if p not in found]


def derive(
    located: list[_Located],
    greedy: SamplingPass,
    routes: Routes,
    answers: Fetch,
    verdicts: Fetch,
    *,
    pairs: bool,
    adjudicates: bool = False,
) -> list[Derived]:
    """Read, verify, judge, sample again, adjudicate and route each located question as the run did: its answers (and
    the adjudicator's) from `answers`, the judge's from `verdicts`. `adjudicates`: whether the run's adjudicator passed
    its calibration (`recovery.json`; a few questions cannot re-measure it): only then is a candidate it sides against
    the reference in both orders marked, as in the run."""
    config, judge = greedy.config, greedy.judge
    for loc, (gen,) in zip(located, answers([loc.request for loc in located], greedy.settings)):
        if isinstance(gen, str):
            loc.derived.missing.append(f"the greedy answer {gen}")
            continue
        v = greedy.verify(loc.item, loc.request, gen, calibrating=False)
        loc.record, loc.case = vars(item_record(loc.derived.row, loc.item, loc.request, v)), v.case
        loc.derived.texts.append(v.generation.text)
        loc.derived.greedy = v.generation.answer
    live = [loc for loc in located if loc.record is not None]
    asked = [loc for loc in live if loc.case is not None and judge is not None]
    if asked:
        for loc, (gen,) in zip(asked, verdicts([judge.request(loc.case) for loc in asked], judge.settings)):
            if isinstance(gen, str):
                loc.derived.missing.append(f"the judge's verdict {gen}")
            else:
                loc.record["judge"] = judge.verdict(gen)[0]  # type: ignore[index]
    if config.recovery is not None:
        _recover(live, greedy, routes, answers, verdicts)
        if config.recovery.suspects:
            _adjudicate(live, greedy, routes, answers, adjudicates)
    for loc in located:
        d = loc.derived
        if d.missing:
            continue
        result = outcome(loc.record, loc.draws, routes.promotes)  # type: ignore[arg-type]
        if routes.blind:
            result = dataclasses.replace(result, blind=_blind(loc, greedy, answers))
            if d.missing:
                continue
        result = bounded(loc.record, result, answer_share(routes, len(loc.row.qa)))  # type: ignore[arg-type]
        d.entries = {split: qa_entry(split, loc.record, result, routes) for split in ("think", "nothink", "rejected")}  # type: ignore[arg-type]
        if pairs:
            row = pair_row(loc.row, loc.record, result, routes)  # type: ignore[arg-type]
            d.entries["pairs"] = {k: v for k, v in row.items() if k != "images"} if row is not None else None
        d.answer = result.answer["final"]
        d.routing = _routing(d.entries)
        d.judges = [published_judge(r) for r in (loc.record, *((loc.draws or {}).get("samples") or ()))]
    return [loc.derived for loc in located]


def _blind(loc: _Located, greedy: SamplingPass, answers: Fetch) -> dict[str, Any] | None:
    """A question's no-image record re-derived as the run made it (`rs.pipeline.sample.blind`): its requests' answers
    from `answers`, graded by the family's reader; None, and what is missing named, when one cannot be had."""
    blind = greedy.blind
    if blind is None:
        loc.derived.missing.append("the no-image pass, which the family's configuration does not have")
        return None
    asks, mark = blind.asks(loc.item), blind.marked(loc.item, loc.derived.row)
    for sampled, settings in ((False, blind.settings), (True, blind.sample_settings)):
        at = [i for i, ask in enumerate(asks) if ask.sampled == sampled]
        if not at:
            continue
        for i, (gen,) in zip(at, answers([asks[i].request for i in at], settings)):
            if isinstance(gen, str):
                loc.derived.missing.append(f"the no-image answer {gen}")
                return None
            add_answer(mark, i, asks[i], gen, greedy.blind_grade)
    return mark.record()


def _recover(live: list[_Located], greedy: SamplingPass, routes: Routes, answers: Fetch, verdicts: Fetch) -> None:
    """The recovery pass over the questions it samples: k samples in one request, each read and (undecided) judged."""
    config, judge = greedy.config, greedy.judge
    settings = recovery_settings(config, greedy.settings)
    sampled = []
    for loc in live:
        why, k = samples_for(loc.record, routes.promotes, config.recovery)  # type: ignore[arg-type]
        if why is not None and not loc.derived.missing:
            sampled.append((loc, why, k))
    outputs = answers([dataclasses.replace(loc.request, sample=0, samples=k) for loc, _, k in sampled], settings)
    asks = []
    for (loc, why, k), gens in zip(sampled, outputs):
        records = []
        for i, gen in enumerate(gens):
            if isinstance(gen, str):
                loc.derived.missing.append(f"recovery sample {i} {gen}")
                continue
            v = greedy.verify(loc.item, loc.request, gen, calibrating=False)
            records.append(vars(sample_record(i, settings.seed + i, v)))
            loc.derived.texts.append(v.generation.text)
            if (case := sample_case(v)) is not None and judge is not None:
                asks.append((loc, records[-1], judge.request(case)))
        loc.draws = {"samples": records, "why": why, "k": k}
    if asks:
        for (loc, record, _), (gen,) in zip(asks, verdicts([r for _, _, r in asks], judge.settings)):  # type: ignore[union-attr]
            if isinstance(gen, str):
                loc.derived.missing.append(f"the judge's verdict on recovery sample {record['sample']} {gen}")
            else:
                record["judge"] = judge.verdict(gen)[0]  # type: ignore[union-attr]


def _adjudicate(live: list[_Located], greedy: SamplingPass, routes: Routes, answers: Fetch, passes: bool) -> None:
    """The suspect references' adjudication of the sampled questions (`rs.pipeline.recover.RecoveryPass._complete`):
    a rejected question whose greedy answer and samples agree on a value the reference is not near is a candidate; the
    adjudicator's two verdicts on it (the requests the recover stage sent, under its keys) are read from `answers`, and
    its record (`rs.pipeline.sample.adjudicate.record`) joins its samples as the routing reads it."""
    adjudicator = RecoveryPass(greedy.config, greedy, promotes=routes.promotes, progress=False).adjudicator
    assert adjudicator is not None
    asked: list[tuple[_Located, Dispute]] = []
    for loc in live:
        draws = loc.draws
        if draws is None or draws["why"] != "rejected" or loc.derived.missing or loc.record is None:
            continue
        finals = [s["final"] if s["error"] is None else None for s in draws["samples"]]
        agreeing = agreeing_value(greedy.grader, loc.item, loc.item.all_references(), loc.record["final"], finals)
        if agreeing is not None:
            request = loc.request
            dispute = Dispute(
                loc.derived.row, -1, loc.item.key, request.prompt, loc.item.answer, agreeing, request.image_hash()
            )
            asked.append((loc, dataclasses.replace(dispute, image=request.image)))
    if not asked:
        return
    _sides(asked, adjudicator, answers, passes)


def _sides(asked: list[tuple[_Located, Dispute]], adjudicator: Adjudicator, answers: Fetch, passes: bool) -> None:
    got = answers([r for _, dispute in asked for r in adjudicator.requests(dispute)], adjudicator.settings)
    for j, (loc, dispute) in enumerate(asked):
        gens = [got[len(ORDERS) * j + i][0] for i in range(len(ORDERS))]
        lacking = [f"the adjudicator's verdict ({order}) {g}" for order, g in zip(ORDERS, gens) if isinstance(g, str)]
        if lacking:
            loc.derived.missing.extend(lacking)
            continue
        sides = [adjudicator.side(i, g) for i, g in enumerate(gens)]  # type: ignore[arg-type]
        loc.draws["adjudication"] = adjudication_record(dispute, sides, passes)  # type: ignore[index]


def _routing(entries: dict[str, dict[str, Any] | None]) -> tuple[Any, ...]:
    accepted = entries.get("nothink") or entries.get("think")
    rejected = entries.get("rejected")
    return (
        entries.get("think") is not None,
        accepted is not None,
        rejected is not None,
        accepted["accepted_by"] if accepted else None,
        rejected["reason"] if rejected else None,
    )


# --- held against the published rows ----------------------------------------------------------------------------


Published = dict[str, dict[tuple[str, str], tuple[str, dict[str, Any]]]]
"""split -> (image sha256, question) -> (where it is: `repo/data row i, qa j`, its entry)."""


def published(family: Any) -> Published:
    out: Published = {}
    for split in SPLITS:
        repo = family.of(split)
        if repo is None:
            continue
        index: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        for i, row in enumerate(repo.rows):
            if split == "pairs":
                index.setdefault((row["image_sha256"], row["question"]), (f"{repo.name}/data row {i}", row))
            else:
                for j, qa in enumerate(row["qa"]):
                    index.setdefault((row["image_sha256"], qa["question"]), (f"{repo.name}/data row {i}, qa {j}", qa))
        out[split] = index
    return out


def _name(pick: Pick) -> str:
    return f"{pick.question!r} (image {pick.image_sha256[:12]})"


def _same(a: Audit, what: str, where: str, stated: Any, truth: Any, source: str) -> bool:
    """One comparison, None a value like any other (a published `pass_rate` of None is compared too)."""
    a.checked += 1
    if stated == truth:
        return True
    a.findings.append(Finding(what, where, stated, truth, source))
    return False


def compare(a: Audit, d: Derived, held: Published, source: str = FROM_CACHE) -> bool:
    """Each split's re-derived entry of one question against the published one, column by column; whether all agree."""
    key, agree = (d.pick.image_sha256, d.pick.question), True
    for split, index in held.items():
        mine, theirs = d.entries.get(split), index.get(key)
        if theirs is None or mine is None:
            where = theirs[0] if theirs is not None else f"{a.family.of(split).name}/data"
            agree &= _same(
                a,
                f"{_name(d.pick)} in the {split} repo",
                where,
                _entry(theirs[1] if theirs else None),
                _entry(mine),
                source,
            )
            continue
        where, entry = theirs
        for column in sorted(set(mine) | set(entry)):
            agree &= _same(
                a,
                f"{column} of {_name(d.pick)}",
                where,
                entry.get(column, "absent"),
                mine.get(column, "absent"),
                source,
            )
    return agree


def _entry(entry: dict[str, Any] | None) -> str:
    """An entry, in a word: whether there is one, and the routing it says."""
    if entry is None:
        return "absent"
    if "reason" in entry:
        return f"an entry (reason {entry['reason']})"
    return f"an entry (accepted_by {entry.get('accepted_by', entry.get('chosen_by'))})"


def _greedy(a: Audit, d: Derived, held: Published) -> None:
    """The greedy answer of a question whose other answers the cache lacks, against what the repos publish of it: a
    changed cached answer asks the judge what the run never asked, and is named here rather than only as missing."""
    key = (d.pick.image_sha256, d.pick.question)
    if not d.texts:
        return
    for split in ("nothink", "think", "rejected"):
        if split in held and key in held[split]:
            where, entry = held[split][key]
            column = (
                "wrong_vlm"
                if split == "rejected"
                else "greedy_answer"
                if entry["accepted_by"] == "recovery"
                else "answer"
            )
            _same(
                a, f"the greedy answer ({column}) of {_name(d.pick)}", where, entry[column], d.greedy or "", FROM_CACHE
            )
            return


def published_routing(key: tuple[str, str], held: Published) -> tuple[Any, ...] | None:
    """`_routing` of what the readable repos publish of a question; None when one of the three splits is unreadable."""
    if not all(s in held for s in ("think", "nothink", "rejected")):
        return None
    return _routing({s: held[s][key][1] if key in held[s] else None for s in ("think", "nothink", "rejected")})


# --- the replay -----------------------------------------------------------------------------------------------


@dataclass
class Replay:
    """What `--replay N` was asked for."""

    n: int
    config: Path | None = None
    """The families file that defines the family (None: the project's)."""
    cache: Path | None = None
    """The run's generation cache (None: `rs.context.default_cache_path()`)."""
    engine: bool = False
    """Also ask the family's engine, fresh."""
    engine_factory: Callable[[Family], tuple[Engine, Engine | None]] | None = None
    """Returns (sampler, judge), the caller's to close; None: `rs.engines.factory.engines_for`, closed here."""


def replay(a: Audit, root: Path, routes: Routes, asked: Replay) -> None:
    """`--replay`: the chosen questions re-derived from the run's cache and held against the repos; with `engine`, asked
    again and the agreement counted (notes; findings only under batch-invariant mode)."""
    report = a.report
    family = get_family(report.family, asked.config)
    recovered = check_build(family, root, report.limit)
    adjudication = recovered.adjudication if recovered is not None else None
    adjudicates = bool(adjudication and adjudication.calibration and adjudication.calibration.passes)
    cache_path = asked.cache or default_cache_path()
    if not cache_path.is_file():
        raise AuditUsageError(
            f"--replay: no generation cache at {cache_path}: the replay reads the answers the run cached",
            hint="give --cache PATH: the run's --cache, or $RS_CACHE_DIR/generations.sqlite where it ran",
        )
    _writable_cache(cache_path)
    picks = choose(a.family, asked.n)
    if not picks:
        a.notes.append(
            f"--replay {asked.n}: no question to replay (the think, nothink and rejected repos are empty, or none "
            "is readable here)"
        )
        return
    paths, pairs = BuildPaths(root), "pairs" in report.splits
    sampler, judge = (asked.engine_factory or engines_for)(family)
    try:
        with GenerationCache(cache_path) as cache:
            greedy = SamplingPass(
                family.config, sampler, judge, cache, progress=False, vocabulary=vocabulary_of(family, paths)
            )
            located, lost = _locate(picks, greedy, paths)
            for pick in lost:
                a.fail(
                    _name(pick),
                    f"{root}/clean",
                    "published, but the build's cleaned items ask no such question of that image",
                )
            answers = _from_cache(cache, identity_key(sampler))
            verdicts = answers if judge in (None, sampler) else _from_cache(cache, identity_key(judge))  # type: ignore[arg-type]
            cached = derive(located, greedy, routes, answers, verdicts, pairs=pairs, adjudicates=adjudicates)
            held = published(a.family)
            agree = 0
            for d in cached:
                if d.missing:
                    _greedy(a, d, held)
                    a.fail(
                        _name(d.pick), str(cache_path), f"{'; '.join(d.missing)}: nothing re-derived, nothing compared"
                    )
                else:
                    agree += compare(a, d, held)
            _question_rows(a, located, routes)
            missing = sum(bool(d.missing) for d in cached)
            a.notes.append(
                f"--replay {asked.n}: {_questions(len(picks))} ({_by_group(picks)}) re-derived from the generation cache "
                f"{cache_path}: {agree} of {len(picks)} published byte for byte as their cached answers make them"
                + (f"; {missing} not whole in the cache" if missing else "")
                + (f"; {len(lost)} not in the build's cleaned items" if lost else "")
            )
            if asked.engine:
                images = read_clean_images(paths.clean, {loc.row.image_sha256 for loc in located})
                again = [
                    _Located(
                        Derived(loc.derived.pick, row=loc.derived.row),
                        loc.row,
                        loc.item,
                        dataclasses.replace(loc.request, image=images[loc.row.image_sha256]),
                    )
                    for loc in located
                ]
                answers = _from_engine(sampler)
                verdicts = answers if judge in (None, sampler) else _from_engine(judge)  # type: ignore[arg-type]
                fresh = derive(again, greedy, routes, answers, verdicts, pairs=pairs, adjudicates=adjudicates)
                _agreement(
                    a,
                    asked.n,
                    [loc.derived for loc in located],
                    fresh,
                    held,
                    invariant=bool(getattr(family.config.engine, "batch_invariant", False)),
                    engine=f"the {sampler.kind} engine of {family.config.model.id}",
                )
    except sqlite3.OperationalError as err:  # opened (or read) lazily: a file system that refuses it, or not a cache
        raise AuditUsageError(
            f"--replay: the generation cache {cache_path} cannot be read ({err}): a read-only folder or file system, "
            "or not a cache rs wrote",
            hint="give --cache a copy of the run's cache in a folder you can write",
        ) from None
    finally:
        if asked.engine_factory is None:
            for engine in {id(e): e for e in (sampler, judge) if e is not None}.values():
                engine.close()


def _writable_cache(path: Path) -> None:
    """The generation cache opens in SQLite's WAL mode, which writes `-wal` and `-shm` files beside it even to read: a
    cache in a folder this process cannot write is refused, saying so (rather than `sqlite3.OperationalError`)."""
    folder = path.resolve().parent
    blocked = next((p for p in (folder, path) if p.exists() and not os.access(p, os.W_OK)), None)
    if blocked is not None:
        raise AuditUsageError(
            f"--replay: the generation cache {path} cannot be opened: {blocked} is read-only, and SQLite writes its "
            "-wal and -shm files beside the cache even to read it (nothing in the cache is changed)",
            hint=f"copy the cache to a folder you can write (cp {path} /tmp/) and give --cache that copy",
        )


def _question_rows(a: Audit, located: list[_Located], routes: Routes) -> None:
    """The samples repo's generations (their raw texts: the greedy answer, then each sample; None where a text is over
    its share of the row, `rs.pipeline.write.samples.published_text`) and the RL repo's `solution` and `references` of
    each re-derived question, against what the cache re-derives of it."""
    repos = {split: a.family.of(split) for split in ("samples", "rl")}
    index = {
        split: {(r["image_sha256"], r["question"]): (i, r) for i, r in enumerate(repo.rows)}
        for split, repo in repos.items()
        if repo is not None
    }
    for loc in located:
        d = loc.derived
        if d.missing or loc.record is None:
            continue
        key = (d.pick.image_sha256, d.pick.question)
        if key in index.get("samples", {}):
            i, row = index["samples"][key]
            records = [loc.record, *((loc.draws or {}).get("samples") or ())]
            share = generation_share(routes.answer_bytes, len(records))
            _same(
                a,
                f"the generations' texts of {_name(d.pick)}",
                f"{repos['samples'].name}/data row {i}",  # type: ignore[union-attr]
                [g["text"] for g in row["generations"]],
                [None if published_text(r, share)["too_large"] else text for r, text in zip(records, d.texts)],
                FROM_CACHE,
            )
            _same(
                a,
                f"the judge's labels on the generations of {_name(d.pick)}",
                f"{repos['samples'].name}/data row {i}",  # type: ignore[union-attr]
                [g["judge"] for g in row["generations"]],
                d.judges,
                FROM_CACHE,
            )
        if key in index.get("rl", {}):
            i, row = index["rl"][key]
            where = f"{repos['rl'].name}/data row {i}"  # type: ignore[union-attr]
            _same(a, f"solution of {_name(d.pick)}", where, row["solution"], loc.record["reference"], FROM_CACHE)
            _same(
                a,
                f"references of {_name(d.pick)}",
                where,
                row["references"],
                list(loc.record["references"]),
                FROM_CACHE,
            )
            _same(a, f"k of {_name(d.pick)}", where, row["k"], len(d.texts) - 1, FROM_CACHE)


def _questions(n: int) -> str:
    return f"{n} question{'s' if n != 1 else ''}"


def _by_group(picks: list[Pick]) -> str:
    return ", ".join(f"{g} {n}" for g in GROUPS if (n := sum(p.group == g for p in picks)))


def _agreement(
    a: Audit, n: int, cached: list[Derived], fresh: list[Derived], held: Published, *, invariant: bool, engine: str
) -> None:
    """Per group: final answers identical to the published ones, texts byte-identical to the cached ones, routing identical
    to the published; `invariant` (the engine in batch-invariant mode): a text that differs is a finding."""
    lines = []
    for group in (*GROUPS, "all"):
        pairs = [(c, f) for c, f in zip(cached, fresh) if group in ("all", c.pick.group)]
        if not pairs:
            continue
        answers = texts = routing = compared = 0
        for c, f in pairs:
            key = (c.pick.image_sha256, c.pick.question)
            entry = next(
                (held[s][key][1] for s in ("nothink", "think", "rejected") if s in held and key in held[s]), None
            )
            shown = entry.get("answer" if "accepted_by" in entry else "wrong_vlm") if entry is not None else c.answer
            answers += not f.missing and (f.answer or "") == (shown or "")
            routing += not f.missing and f.routing == (published_routing(key, held) or c.routing)
            if not c.missing:
                compared += 1
                texts += f.texts == c.texts
                if invariant and group != "all" and f.texts != c.texts:
                    _same(
                        a,
                        f"the answers' texts of {_name(c.pick)} in batch-invariant mode",
                        "the generation cache",
                        c.texts,
                        f.texts,
                        "the engine answers now",
                    )
        count = len(pairs)
        lines.append(
            f"{group:>9} {count:>3}: final answers {answers}/{count} identical, texts {texts}/{compared} byte-identical, "
            f"routing {routing}/{count} identical"
        )
    mode = (
        "in batch-invariant mode: anything but byte-identical is a finding"
        if invariant
        else ("not batch-invariant (engine.batch_invariant off): a difference is measured, not failed")
    )
    a.notes.append(
        f"--replay {n} --engine: the same {_questions(len(cached))} sent to {engine} fresh (no cache read or "
        f"written), {mode}:" + "".join(f"\n        {line}" for line in lines)
    )
