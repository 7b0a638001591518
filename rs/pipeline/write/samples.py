"""Two opt-in repos made of every answer a question got: `<FAMILY>_RS_samples` and `<FAMILY>_RS_rl`.

- samples (`publish.samples`): one row per question with every generation it got (the greedy answer, then each
  recovery or difficulty sample), each with its reasoning, final answer, ending, token counts, seed, temperature,
  what the reader made of it (`accepted` / `certain` / `undecided`), the judge's verdict where it was asked, and the
  routing decision: the material to re-filter offline, which the three splits decided once. A generation whose text
  would take more than its share of the row (`generation_share`) keeps its record with its text, reasoning and final
  answer withheld (`too_large`), so that one runaway answer never fails the family's write.
- rl (`recovery.difficulty.rl`): the questions whose pass rate is strictly within the bounds (the model answers them
  right only sometimes), in the layout TRL's GRPO trainer reads: `prompt` (conversational; TRL puts the image before
  the text), `images`, the reference as `solution` for the reward function, the pass rate with its Wilson interval.

Rows of both are one question each, its image once. `samples_numbers` and `rl_numbers` compute every number their
cards state from a repo's parquet files alone, so that a reader (or `rs audit`) can recompute them.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

from rs.pipeline.route import NOT_ASKED, Outcome, Routes, Typer, decide, in_rl_bounds, joined
from rs.pipeline.sample.calibration import wilson
from rs.pipeline.write.report import PASS_RATE_BINS, pass_rate_bin
from rs.store import qa_record, read_records

LAYOUT = "4"
"""What a samples repo holds: bump when a change adds or changes what it holds (1: the generations and decisions;
2: each row's `row`, `item`, `model_revision` and `prompt_reasoning`, and `rs/run.json`, the stages' reports: enough to
rebuild the build's stores from the repo alone, `rs refilter --from-samples`; 3: each generation's `made_on`, the id of
the machine that made it, whose record `rs/run.json`'s reports hold: the rebuilt provenance names the same machines;
4: each no-image answer's `made_on`, in the `blind` record; each generation's `too_large`, its text, reasoning and final
answer withheld: over its share of the row)."""

RUN_FILE = "rs/run.json"
"""In a samples repo: the layout and the reports of the stages that made it (`rs.refilter.samples`)."""

READER_OUTCOMES = ("accepted", "certain", "undecided")
"""What the reader made of an answer: verified, known wrong, neither (then the judge was asked, where there is one)."""


RUN_ONLY = ("seconds", "sampling_engine_calls", "judge_engine_calls")
"""What a stage report holds of one run alone (a re-run from the cache calls no engine): left out of `rs/run.json`, so
that the samples repo of the same answers is the same files."""


def run_record(build_dir: str | Path) -> dict[str, Any]:
    """A samples repo's `rs/run.json`: its layout and the build's stage reports (`clean.json`, `sample.json`,
    `recovery.json`: the cleaning's and the judge's numbers, the calibration, the fingerprints and what they were
    computed from), less `RUN_ONLY`: with the repo's rows, what rebuilding the stores takes."""
    record: dict[str, Any] = {"layout": LAYOUT}
    for name in ("clean", "sample", "recovery"):
        path = Path(build_dir) / f"{name}.json"
        report = json.loads(path.read_text()) if path.exists() else None
        for key in RUN_ONLY:
            if report is not None and key in report:
                report[key] = 0
        record[name] = report
    return record


def reader_outcome(answer: dict[str, Any]) -> str | None:
    """`accepted` / `certain` / `undecided`, or None for an answer with no final answer (or an engine error)."""
    if answer["error"] is not None or answer["final"] is None:
        return None
    return "accepted" if answer["verified"] else "certain" if answer["contradicts"] else "undecided"


GENERATION_TEXT = ("text", "reasoning", "final")
"""What a generation publishes of the model's own text: withheld together when too large (`too_large`)."""


def generation_bytes(answer: dict[str, Any]) -> int:
    """The bytes of the model's text a generation publishes (`GENERATION_TEXT`, in UTF-8)."""
    return sum(len((answer[column] or "").encode()) for column in GENERATION_TEXT)


def generation_share(answer_bytes: int | None, generations: int) -> int | None:
    """One generation's part of a samples row: `answer_bytes` (`Routes.answer_bytes`: the row-group target less what
    cleaning leaves an image and its questions; a row here is one question) shared equally by the question's
    `generations`. None: unbounded."""
    return None if answer_bytes is None else answer_bytes // max(1, generations)


def published_text(answer: dict[str, Any], share: int | None) -> dict[str, Any]:
    """What the samples repo publishes of a stored answer's text: its `GENERATION_TEXT`, or, over `share`, none of it
    and `too_large`."""
    withheld = share is not None and generation_bytes(answer) > share
    return {**{column: None if withheld else answer[column] for column in GENERATION_TEXT}, "too_large": withheld}


def _generation(
    answer: dict[str, Any], kind: str, routes: Routes, share: int | None, *, why: str | None = None
) -> dict[str, Any]:
    decision = decide(answer, routes.promotes)
    greedy = kind == "greedy"
    return {
        "kind": kind,
        "sample": None if greedy else answer["sample"],
        "sampled_for": why,
        "seed": routes.greedy_seed if greedy else answer["seed"],
        "temperature": routes.greedy_temperature if greedy else routes.recovery_temperature,
        **published_text(answer, share),
        "finish_reason": answer["finish_reason"],
        "ending": answer["ending"],
        "completion_tokens": answer["completion_tokens"],
        "thinking_tokens": answer["thinking_tokens"],
        "error": answer["error"],
        "reader": reader_outcome(answer),
        "judge": None if answer["judge"] == NOT_ASKED else answer["judge"],
        "reasoning_agrees": answer["reasoning_agrees"],
        "accepted": decision.accepted,
        "accepted_by": decision.by,
        "reason": decision.reason,
        "made_on": answer.get("made_on"),
    }


def _blind_record(result: Outcome) -> dict[str, Any] | None:
    """A question's no-image record as the samples repo keeps it (`rs.splits_schema.BLIND_RECORD`)."""
    if result.blind is None:
        return None
    record = {k: result.blind[k] for k in ("multiple_choice", "answers", "right", "errors", "marked")}
    return {**record, "made_on": result.blind.get("made_on")}  # a store of an older rs holds none


def _interval(result: Outcome) -> tuple[float | None, float | None]:
    if result.k is None:
        return None, None
    check, rate = wilson(result.passed, result.k), result.passed / result.k
    return min(check.low, rate), max(
        check.high, rate
    )  # the bounds' rounding (1 - 1e-16 at 4 of 4) never excludes the rate


def _typed(row: Any, type_of: Typer | None) -> dict[str, str | None]:
    """Each of a cleaned row's items' type, by key."""
    return {qa.key: type_of(qa.question, qa.qtype) if type_of else None for qa in row.qa}


def sample_rows(build_dir: str | Path, routes: Routes, type_of: Typer | None = None) -> Iterator[dict[str, Any]]:
    """One row per question, in item order: every generation it got, and the routing decision on the question."""
    for index, (row, results) in enumerate(joined(build_dir, routes)):
        types = _typed(row, type_of)
        cleaned = {qa.key: qa for qa in row.qa}
        for item, result in results:
            share = generation_share(routes.answer_bytes, 1 + len(result.samples or ()))
            generations = [_generation(item, "greedy", routes, share)]
            generations += [_generation(s, "sample", routes, share, why=result.why) for s in result.samples or ()]
            published = None
            if result.decision.accepted:
                published = 0 if not result.recovered else 1 + result.answer["sample"]
            low, high = _interval(result)
            yield {
                "image": {"bytes": row.image, "path": None},
                "row": index,
                "key": item["key"],
                "question": item["prompt"],
                "reference": item["reference"],
                "references": item["references"],
                "question_type": types.get(item["key"]),
                "item": qa_record(cleaned[item["key"]]),
                "model": item["model"],
                "model_revision": item["model_revision"],
                "prompt_tokens": item["prompt_tokens"],
                "prompt_reasoning": item["prompt_reasoning"],
                "accepted": result.decision.accepted,
                "accepted_by": result.decision.by,
                "reason": result.decision.reason,
                "greedy_accepted": result.greedy.accepted,
                "published": published,
                "pass_rate": result.pass_rate,
                "passed": result.passed if result.k else None,
                "k": result.k,
                "pass_rate_low": low,
                "pass_rate_high": high,
                "generations": generations,
                "image_sha256": row.image_sha256,
                "clean_meta": row.clean_meta,
                **({"blind": _blind_record(result)} if routes.blind else {}),
            }


def rl_rows(build_dir: str | Path, routes: Routes, type_of: Typer | None = None) -> Iterator[dict[str, Any]]:
    """One row per question whose pass rate is within `routes.rl_bounds`, in item order, in TRL's GRPO layout."""
    assert routes.rl_bounds is not None
    for row, results in joined(build_dir, routes):
        types = _typed(row, type_of)
        for item, result in results:
            if not in_rl_bounds(result, routes.rl_bounds, keeps_blind=routes.rl_keeps_blind):
                continue
            low, high = _interval(result)
            yield {
                "images": [{"bytes": row.image, "path": None}],
                "prompt": [{"role": "user", "content": item["prompt"]}],
                "solution": item["reference"],
                "references": item["references"],
                "question": item["prompt"],
                "question_type": types.get(item["key"]),
                "pass_rate": result.pass_rate,
                "passed": result.passed,
                "k": result.k,
                "pass_rate_low": low,
                "pass_rate_high": high,
                "greedy_accepted": result.greedy.accepted,
                "image_sha256": row.image_sha256,
                "clean_meta": row.clean_meta,
            }


def _by_type(counts: dict[str, Counter[str]]) -> dict[str, dict[str, int]]:
    return {name: dict(sorted(c.items())) for name, c in sorted(counts.items())}


def samples_numbers(repo_data: str | Path) -> dict[str, Any]:
    """Every number the samples card states, from the repo's parquet files (`data/train-*.parquet`) alone."""
    n: dict[str, Any] = {
        "rows": 0,
        "generations": 0,
        "too_large": 0,
        "accepted": 0,
        "greedy_accepted": 0,
        "measured": 0,
    }
    images: set[str] = set()
    kinds: Counter[str] = Counter()
    sampled_for: Counter[str] = Counter()
    reader: Counter[str] = Counter()
    judge: Counter[str] = Counter()
    accepted_by: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    types: dict[str, Counter[str]] = {}
    columns = [
        "image_sha256",
        "accepted",
        "accepted_by",
        "reason",
        "greedy_accepted",
        "k",
        "question_type",
        "generations",
    ]
    for row in read_records(repo_data, "train", columns=columns):
        n["rows"] += 1
        images.add(row["image_sha256"])
        n["accepted"] += row["accepted"]
        n["greedy_accepted"] += row["greedy_accepted"]
        n["measured"] += row["k"] is not None
        (accepted_by if row["accepted"] else reasons)[row["accepted_by"] or row["reason"]] += 1
        if row["question_type"] is not None:
            t = types.setdefault(row["question_type"], Counter())
            t["questions"] += 1
            t["accepted"] += row["accepted"]
        for g in row["generations"]:
            n["generations"] += 1
            n["too_large"] += bool(g.get("too_large"))  # absent before layout 4
            kinds[g["kind"]] += 1
            if g["sampled_for"]:
                sampled_for[g["sampled_for"]] += 1
            reader[g["reader"] or "no_final_answer"] += 1
            if g["judge"] is not None:
                judge[g["judge"]] += 1
    n["images"] = len(images)
    n.update(
        kinds=dict(sorted(kinds.items())),
        sampled_for=dict(sorted(sampled_for.items())),
        reader=dict(sorted(reader.items())),
        judge=dict(sorted(judge.items())),
        accepted_by=dict(sorted(accepted_by.items())),
        rejected_by_reason=dict(sorted(reasons.items())),
        types=_by_type(types),
    )
    return n


def rl_numbers(repo_data: str | Path) -> dict[str, Any]:
    """Every number the RL card states, from the repo's parquet files alone."""
    rows = 0
    images: set[str] = set()
    bins = [0] * len(PASS_RATE_BINS)
    total_rate = 0.0
    ks: Counter[int] = Counter()
    types: dict[str, Counter[str]] = {}
    greedy_accepted = 0
    for row in read_records(
        repo_data, "train", columns=["image_sha256", "pass_rate", "k", "question_type", "greedy_accepted"]
    ):
        rows += 1
        images.add(row["image_sha256"])
        bins[pass_rate_bin(row["pass_rate"])] += 1
        total_rate += row["pass_rate"]
        ks[row["k"]] += 1
        greedy_accepted += row["greedy_accepted"]
        if row["question_type"] is not None:
            types.setdefault(row["question_type"], Counter())["questions"] += 1
    return {
        "rows": rows,
        "images": len(images),
        "pass_rates": dict(zip(PASS_RATE_BINS, bins)),
        "pass_rate_mean": total_rate / rows if rows else None,
        "k": {str(k): v for k, v in sorted(ks.items())},
        "greedy_accepted": greedy_accepted,
        "types": _by_type(types),
    }


REPO_NUMBERS = {"samples": samples_numbers, "rl": rl_numbers}
"""The function that computes a repo kind's card numbers from its files (the three splits' and the pairs' are on
`rs.pipeline.write.report`'s side: stats.json)."""
