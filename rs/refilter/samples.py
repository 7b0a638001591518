"""A build's stores rebuilt from a published samples repo alone (`rs refilter --from-samples REPO`).

A samples repo (`rs.pipeline.write.samples`, layout 4) holds one row per question with everything the build's stores held of it:
its image (once per question: the cleaned row's bytes, as published), the cleaned question (`item`), the prompt, every
generation with what the reader and the judge made of it, and the row's `row` index; `rs/run.json` holds the stages'
reports (the cleaning's numbers, the judge's calibration and verdict counts, the fingerprints and their inputs). The
clean, items and recovery stores are written back from them, beside the family's build (`<build>/from-samples/`), and
routed as the build's own would be: nothing is sampled, judged or cleaned again.

What a samples repo cannot give back, and what the stores then hold instead:
- the answers' run timings and engine-call counts (`rs.pipeline.write.samples.RUN_ONLY`): 0 (no published card states them);
- a judge verdict never given on a certainly wrong answer a re-read left unjudged: none (its routing is the same,
  `wrong_answer`, and the samples repo publishes no verdict for it either);
- the source records cleaning dropped (`exclusions.jsonl`): not in the repo, and not read by routing or the cards;
- the text, reasoning and final answer of a generation the repo withholds (`too_large`: over its share of a row
  group): found again in the run's generation cache (`rs.refilter.verify`), and refused without it.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any, Iterator

from rs.context import BuildContext
from rs.errors import UsageError
from rs.pipeline.route import NOT_ASKED
from rs.pipeline.sample import SampleReport
from rs.pipeline.sample.blind import BLIND
from rs.pipeline.stage import replace_dir, scratch
from rs.pipeline.write.samples import LAYOUT, RUN_FILE
from rs.records import ITEMS, RECOVERY
from rs.refilter.reread import _joined  # the stores' items with their cleaned questions and samples, in order
from rs.refilter.suspects import Unadjudicated, restore
from rs.refilter.verify import verify
from rs.store import CLEAN_ROWS, ParquetStreamWriter, read_records, write_json
from rs.util.checksums import seal
from rs.util.disk import writing
from rs.util.locks import build_lock

logger = logging.getLogger(__name__)

FOLDER = "from-samples"
"""Where the stores rebuilt from a samples repo go, in the family's build folder."""


class SamplesRepoError(UsageError):
    """A samples repo that cannot give the build's stores back: not one, of another layout, of another family, or torn."""

    default_hint = (
        "publish the family's samples repo again with this rs (`publish: {samples: true}`), or refilter from its build"
    )


def locate(source: str, *, token: str | None = None) -> tuple[Path, str, bool]:
    """The samples repo's folder: `source` itself when it is one, else the Hub dataset repo `namespace/name`, downloaded
    with `huggingface_hub.snapshot_download` (its data, `rs/`). Returns the folder, how the cards name it (a local
    folder by its name alone: its path is this machine's) and whether it is local."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path, path.resolve().name, True
    if source.count("/") != 1 or path.exists():
        raise SamplesRepoError(
            f"--from-samples {source}: no such folder, and not a Hub repo id (namespace/name)",
            hint="give the folder of a published samples repo (laid out as on the Hub) or its Hub id",
        )
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(source, repo_type="dataset", allow_patterns=["data/*", "rs/*"], token=token)
    except Exception as err:  # not found, gated, offline: said as the source's problem
        raise SamplesRepoError(
            f"--from-samples {source}: cannot download the dataset repo from the Hub: {type(err).__name__}: {err}",
            hint="check the repo id and your token (`hf auth login`), or give a local folder",
        ) from None
    return Path(folder), source, False


def read_run(folder: Path, source: str, family: str) -> dict[str, Any]:
    """The repo's `rs/run.json`, checked: of layout `LAYOUT`, of `family`, with the sample stage's report."""
    path = folder / RUN_FILE
    try:
        run = json.loads(path.read_text())
    except FileNotFoundError:
        raise SamplesRepoError(
            f"{source}: no {RUN_FILE}: not a samples repo, or one of layout 1, which holds the generations but not the stages' "
            "reports (the judge's calibration, the cleaning's numbers), each row's cleaned question (`item`) and row index, "
            "without which the splits and their cards cannot be rebuilt exactly"
        ) from None
    except (OSError, ValueError) as err:
        raise SamplesRepoError(f"{source}: {RUN_FILE} cannot be read: {err}") from None
    if run.get("layout") != LAYOUT:
        raise SamplesRepoError(
            f"{source}: a samples repo of layout {run.get('layout')!r}; this rs rebuilds layout {LAYOUT!r}"
        )
    if not isinstance(run.get("sample"), dict) or not isinstance(run.get("clean"), dict):
        raise SamplesRepoError(f"{source}: {RUN_FILE} holds no clean or sample report")
    stats = folder / "rs" / "stats.json"
    named = json.loads(stats.read_text()).get("family") if stats.exists() else None
    if named is not None and named != family:
        raise SamplesRepoError(
            f"{source}: a samples repo of {named}, not of {family}",
            hint=f"refilter {named}, or give {family}'s samples repo",
        )
    return run


def _rows(folder: Path, source: str) -> Iterator[dict[str, Any]]:
    data = folder / "data"
    if not any(data.glob("train-*.parquet")):
        raise SamplesRepoError(f"{source}: no data/train-*.parquet: the samples repo holds no rows")
    yield from read_records(data, "train", batch_rows=64)


def _judge(generation: dict[str, Any]) -> str | None:
    """The stored verdict: the repo publishes none for an answer the judge was not asked about (its reason says it)."""
    return NOT_ASKED if generation["reason"] == "judge_not_asked" else generation["judge"]


def _item(row: dict[str, Any], greedy: dict[str, Any]) -> dict[str, Any]:
    """The items store's record of a question (`rs.records.ItemRecord`), from its samples repo row."""
    return {
        "row": row["row"],
        "key": row["key"],
        "image_sha256": row["image_sha256"],
        "prompt": row["question"],
        "reference": row["reference"],
        "references": row["references"],
        "text": greedy["text"],
        "reasoning": greedy["reasoning"],
        "final": greedy["final"],
        "finish_reason": greedy["finish_reason"],
        "prompt_tokens": row["prompt_tokens"],
        "completion_tokens": greedy["completion_tokens"],
        "model": row["model"],
        "model_revision": row["model_revision"],
        "error": greedy["error"],
        "verified": greedy["reader"] == "accepted",
        "contradicts": greedy["reader"] == "certain",
        "judge": _judge(greedy),
        "prompt_reasoning": row["prompt_reasoning"],
        "reasoning_agrees": greedy["reasoning_agrees"],
        "ending": greedy["ending"],
        "thinking_tokens": greedy["thinking_tokens"],
        "made_on": greedy["made_on"],
    }


def _draws(row: dict[str, Any], samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The recovery store's record of a question (`rs.records.RECOVERY`), from its samples repo row's samples."""
    return {
        "row": row["row"],
        "key": row["key"],
        "why": samples[0]["sampled_for"],
        "k": len(samples),
        "samples": [
            {
                "sample": g["sample"],
                "seed": g["seed"],
                "text": g["text"],
                "reasoning": g["reasoning"],
                "final": g["final"],
                "finish_reason": g["finish_reason"],
                "ending": g["ending"],
                "completion_tokens": g["completion_tokens"],
                "thinking_tokens": g["thinking_tokens"],
                "error": g["error"],
                "verified": g["reader"] == "accepted",
                "contradicts": g["reader"] == "certain",
                "judge": _judge(g),
                "reasoning_agrees": g["reasoning_agrees"],
                "made_on": g["made_on"],
            }
            for g in samples
        ],
    }


def _adjudication(ctx: BuildContext, tmp: Path, run: dict[str, Any], named: str, cache_path: Path | None) -> None:
    """The suspect references' adjudication records, which a samples repo does not publish, found again from the rebuilt
    stores and the generation cache (`rs.refilter.suspects.restore`; the run's report kept): without them a suspect
    reference would be routed `wrong_answer`, the model's mistake. Without the cache they cannot be: refused."""
    identity = (SampleReport.from_dict(run["sample"]).identities or {}).get("sampler")
    try:
        restore(ctx, tmp, _joined(tmp, True), identity, cache_path)
    except Unadjudicated as err:
        raise SamplesRepoError(
            f"{named}: {err}",
            hint="refilter where the run's generation cache is (--cache), or run `rs publish` there",
        ) from None


def rebuild(
    ctx: BuildContext, source: str, *, token: str | None = None, cache_path: Path | None = None
) -> tuple[Path, dict[str, Any]]:
    """Write the stores of `ctx`'s family back from the samples repo `source` (a folder or a Hub id) into
    `<build>/from-samples/`; returns that folder and what the cards say of it (`source`, `layout`). The repo is checked
    first (`rs.refilter.verify`): its images against their hashes, its answers against the generation cache
    `cache_path` (default: the context's)."""
    folder, named, local = locate(source, token=token)
    family = ctx.family
    run = read_run(folder, named, family.name)
    verified = verify(
        ctx, folder, named, run, cache_path
    )  # refused before anything is written: a changed image or answer
    if unrestored := verified.unrestored:
        raise SamplesRepoError(
            f"{named}: {len(unrestored)} generation(s) the repo withholds (`too_large`: over their share of a row group) "
            f"cannot be had again{f' ({verified.problem})' if verified.problem else ''}: {'; '.join(unrestored[:3])}"
            f"{f' and {len(unrestored) - 3} more' if len(unrestored) > 3 else ''}. Their text, reasoning and final "
            "answer are in the stores the splits are routed from; nothing was rebuilt without them",
            hint="refilter where the run's generation cache is (--cache), or from the family's build",
        )
    out = ctx.family_root / FOLDER
    tmp = out.with_name(out.name + ".tmp")
    rows = questions = 0
    # the family's build lock: one writer of its folder at a time (a lock inside `out` would go with it when replaced)
    with build_lock(ctx.family_root), writing("the stores rebuilt from the samples repo", tmp), scratch(tmp):
        with (
            ParquetStreamWriter(tmp / "clean", "rows", CLEAN_ROWS, group_rows=2_000) as clean,
            ParquetStreamWriter(tmp / "items", "items", ITEMS, group_rows=10_000, group_bytes=32 << 20) as items,
            ParquetStreamWriter(
                tmp / "recovery", "recovery", RECOVERY, group_rows=2_000, group_bytes=32 << 20
            ) as recovery,
            ParquetStreamWriter(tmp / "items", "blind", BLIND, group_rows=10_000) as blind,
        ):
            blinded = run["sample"].get("blind") is not None
            current: dict[str, Any] | None = None
            for row in _rows(folder, named):
                if current is None or row["row"] != current["index"]:
                    if row["row"] != rows:
                        raise SamplesRepoError(
                            f"{named}: row {questions} of data/ belongs to image {row['row']}, where image {rows} "
                            "was due: the repo's rows are not the build's, in its order (a shard missing?)"
                        )
                    if current is not None:
                        clean.write(current["row"], size=len(current["row"]["image"]))
                    current = {
                        "index": rows,
                        "row": {
                            "image": row["image"]["bytes"],
                            "image_sha256": row["image_sha256"],
                            "qa": [],
                            "clean_meta": row["clean_meta"],
                        },
                    }
                    rows += 1
                current["row"]["qa"].append(row["item"])
                greedy, *samples = (
                    {**g, **verified.withheld[(questions, i)]} if g.get("too_large") else g
                    for i, g in enumerate(row["generations"])
                )
                if greedy["kind"] != "greedy" or any(g["kind"] != "sample" for g in samples):
                    raise SamplesRepoError(
                        f"{named}: question {row['key']}'s generations are not its greedy answer then its samples"
                    )
                record = _item(row, greedy)
                items.write(record, size=len(record["text"]) + len(record["prompt"]))
                if blinded:  # the no-image pass's record, as the run wrote it (`rs.pipeline.sample.blind`)
                    if row.get("blind") is None:
                        raise SamplesRepoError(f"{named}: question {row['key']} has no no-image record (`blind`)")
                    blind.write({"row": record["row"], "key": record["key"], **row["blind"]})
                if samples:
                    recovery.write(_draws(row, samples), size=sum(len(g["text"]) for g in samples))
                questions += 1
            if current is not None:
                clean.write(current["row"], size=len(current["row"]["image"]))
        expected = run["clean"].get("rows"), run["sample"].get("items")
        if (rows, questions) != expected:
            raise SamplesRepoError(
                f"{named}: data/ holds {rows} images and {questions} questions, its {RUN_FILE} says the run had "
                f"{expected[0]} and {expected[1]}: the repo is not whole"
            )
        for store in ("clean", "items"):
            seal(tmp / store)
        write_json(tmp / "clean.json", run["clean"])
        write_json(tmp / "sample.json", run["sample"])
        if run.get("recovery") is not None:
            if (run["recovery"].get("adjudication") or None) is not None:
                _adjudication(ctx, tmp, run, named, cache_path)
            seal(tmp / "recovery")
            write_json(tmp / "recovery.json", run["recovery"])
        else:
            shutil.rmtree(tmp / "recovery")
        replace_dir(tmp, out)
    logger.info(
        "%s: the stores of %d questions over %d images rebuilt from the samples repo %s (what it does not hold, and no "
        "published file does: the run's timings and engine calls, the source records cleaning dropped)",
        family.name,
        questions,
        rows,
        named,
    )
    return out, {"repo": named, "local": local, "layout": LAYOUT}
