"""A samples repo checked before `rs refilter --from-samples` trusts it: its images against their hashes, its answers
against what the model said (the run's generation cache).

The stores rebuilt from a samples repo are routed as they are: an answer changed in the repo (its text, or the reader's
outcome beside it) would be published as accepted by the verifier. So before anything is written, every row's image
must hash to its `image_sha256`, and every generation the run's cache holds under the key the run wrote it with (the
engine identity the run recorded, the family's sampling settings, the image's hash and the prompt, the sample's seed)
must be that generation, byte for byte: its `text`, and the final answer and reasoning read from it. A difference is
refused, naming the row. Where the cache is not there (another machine), nothing can be compared: a warning says so.

A generation the repo withholds (`too_large`: its text, reasoning and final answer over its share of a row group,
`rs.pipeline.write.samples.published_text`) has nothing to compare: its text is found in the cache under the same key and
read as the run read it (`Verified.withheld`), for the rebuilt stores; one the cache cannot give is named
(`Verified.unrestored`), and the rebuild refuses it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rs.context import BuildContext
from rs.engines.base import Generation
from rs.engines.cached_engine import key_function, sample_settings
from rs.engines.factory import sampling_settings
from rs.engines.generation_cache import CacheAnswerDamaged, GenerationCache
from rs.engines.reasoning import ReasoningFormat
from rs.errors import RsError, UsageError
from rs.pipeline.recover import recovery_settings
from rs.pipeline.sample import Reader, SampleReport
from rs.pipeline.sample.stage import answer_vocabulary
from rs.refilter.reread import _joined  # the stores' items with their cleaned questions and samples, in order
from rs.store import qa_item, read_records

logger = logging.getLogger(__name__)

BATCH = 256
"""Generations looked up in the cache at once."""


class ForgedSamplesRepo(UsageError):
    """A samples repo whose rows are not what the run published: an image or an answer changed since."""

    default_hint = (
        "refilter from the family's build, or from the samples repo as rs published it (publish it again with "
        "`publish: {samples: true}`)"
    )


@dataclass
class Verified:
    compared: int = 0
    """Generations found in the cache and compared."""
    missing: int = 0
    """Generations the cache does not hold (nothing compared)."""
    problem: str | None = None
    """Why nothing could be compared (no cache, no recorded identity)."""
    withheld: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    """(row, generation) -> the `text`, `reasoning` and `final` of a generation the repo withholds (`too_large`), from
    the cache."""
    unrestored: list[str] = field(default_factory=list)
    """The generations the repo withholds that the cache could not give back, each named (with why, where `problem`
    does not say it)."""


@dataclass
class _Pending:
    where: str
    key: str
    generation: dict[str, Any]
    at: tuple[int, int]
    """(row, generation): where a withheld generation's text goes back."""


def verify(ctx: BuildContext, folder: Path, named: str, run: dict[str, Any], cache_path: Path | None) -> Verified:
    """Check the samples repo in `folder` (`named` in messages) before its rows are trusted; raise `ForgedSamplesRepo`
    naming the first row that is not what the run made."""
    config = ctx.family.config
    identity = (SampleReport.from_dict(run["sample"]).identities or {}).get("sampler")
    path = cache_path or ctx.cache_path
    verified = Verified()
    if not identity:
        verified.problem = "the run recorded no engine identity (an older rs): its answers cannot be found in a cache"
    elif path is None or not Path(path).is_file():
        verified.problem = f"there is no generation cache at {path} (--cache)"
    greedy = sampling_settings(config)
    recovered = recovery_settings(config, greedy) if config.recovery is not None else greedy
    reading = None
    try:  # a vLLM reasoning parser needs the model's tokenizer, which refilter does not load
        reading = ReasoningFormat(config.model.reasoning, chat_template_kwargs=greedy.chat_template_kwargs)
        reading.check()
    except RsError:
        reading = None
    cache = GenerationCache(Path(path)) if verified.problem is None else None
    try:
        pending: dict[str, tuple[Any, list[_Pending]]] = {}
        for index, row in enumerate(read_records(folder / "data", "train", batch_rows=64)):
            where = f"{named}/data row {index} (question {row['key']!r}: {row['question']!r})"
            image = (row.get("image") or {}).get("bytes")
            if image is None or hashlib.sha256(image).hexdigest() != row["image_sha256"]:
                raise ForgedSamplesRepo(
                    f"{where}: its image's bytes do not hash to its image_sha256 {row['image_sha256']}: the repo was "
                    "changed after rs published it; nothing was rebuilt from it"
                )
            if cache is None:
                verified.unrestored += [
                    f"{where}, generation {i}" for i, g in enumerate(row["generations"]) if g.get("too_large")
                ]
                continue
            for i, g in enumerate(row["generations"]):
                settings = greedy if g["kind"] == "greedy" else sample_settings(recovered, g["sample"])
                key = key_function(identity, settings)(row["image_sha256"], row["question"])  # type: ignore[arg-type]
                group = pending.setdefault(json.dumps(settings.keyed(), sort_keys=True), (settings, []))
                group[1].append(_Pending(f"{where}, generation {i} ({g['kind']})", key, g, (index, i)))
                if len(group[1]) >= BATCH:
                    _compare(cache, settings, group[1], reading, verified)
                    group[1].clear()
        for settings, batch in pending.values():
            _compare(cache, settings, batch, reading, verified)
    finally:
        if cache is not None:
            cache.close()
    if verified.problem is not None:
        logger.warning(
            "%s: its answers were not compared with what the model said: %s; its rows are trusted as published "
            "(their images were checked against their hashes)",
            named,
            verified.problem,
        )
    elif verified.missing:
        logger.warning(
            "%s: %d of %d answers are not in the generation cache %s, and were not compared with what the model said",
            named,
            verified.missing,
            verified.missing + verified.compared,
            path,
        )
    return verified


def _compare(
    cache: GenerationCache, settings: Any, batch: list[_Pending], reading: ReasoningFormat | None, verified: Verified
) -> None:
    keys = [p.key for p in batch]
    try:
        found = cache.get_many(keys, settings=settings)
    except CacheAnswerDamaged as err:
        found = {}
        verified.problem = f"the generation cache holds damaged answers ({err})"
    for p in batch:
        cached = found.get(p.key)
        if p.generation.get("too_large"):
            _restore(p, cached, reading, verified)
            continue
        if cached is None:
            verified.missing += 1
            continue
        verified.compared += 1
        said: dict[str, Any] = {"text": cached.text}
        if reading is not None:
            read = reading.read(cached)
            said |= {"final": read.answer, "reasoning": read.reasoning}
        for column, value in said.items():
            if p.generation[column] != value:
                raise ForgedSamplesRepo(
                    f"{p.where}: its {column} {p.generation[column]!r} is not what the model said "
                    f"({value!r}, the run's generation cache {cache.path} under the key {p.key[:16]}...): the repo was "
                    "changed after rs published it; nothing was rebuilt from it"
                )


def _restore(p: _Pending, cached: Generation | None, reading: ReasoningFormat | None, verified: Verified) -> None:
    """A withheld generation's text, reasoning and final answer, from its cached answer read as the run read it."""
    if cached is None:
        verified.unrestored.append(f"{p.where} (not in the generation cache)")
    elif reading is None:
        verified.unrestored.append(f"{p.where} (its reasoning format cannot be read here: a vLLM parser's tokenizer)")
    else:
        read = reading.read(cached)
        verified.withheld[p.at] = {"text": cached.text, "reasoning": read.reasoning, "final": read.answer}


def _outcome(verified: bool, contradicts: bool) -> str:
    return "accepted" if verified else "certain" if contradicts else "undecided"


def check_outcomes(ctx: BuildContext, named: str) -> int:
    """The stores rebuilt from the samples repo `named`, when they are routed as they are (the reader has not changed
    since the run): each stored answer's reader outcome must be what the reader makes of its final answer, else the
    repo's `reader` was changed after rs published it (refused, naming the question). Returns the answers checked."""
    reader = Reader(ctx.family.config, answer_vocabulary(ctx))
    checked = 0
    for cleaned, item, draws in _joined(ctx.paths.root, ctx.family.config.recovery is not None):
        qa = qa_item(cleaned)
        answers = [("its greedy answer", item)]
        answers += [(f"its sample {s['sample']}", s) for s in (draws or {}).get("samples") or []]
        for label, record in answers:
            if record["error"] is not None or record["final"] is None:
                continue
            generation = Generation(
                text=record["text"],
                reasoning=record["reasoning"],
                answer=record["final"],
                finish_reason=record["finish_reason"],
                error=record["error"],
            )
            v = reader.grade(qa, item["prompt"], generation)
            checked += 1
            said, read = _outcome(record["verified"], record["contradicts"]), _outcome(v.verified, v.contradicts)
            if said != read:
                raise ForgedSamplesRepo(
                    f"{named}: question {item['key']!r} ({item['prompt']!r}): {label} {record['final']!r} is "
                    f"`{said}` in the repo, but the reader, unchanged since the run, reads it `{read}` against "
                    f"{item['reference']!r}: the repo was changed after rs published it; nothing was published from it"
                )
    return checked
