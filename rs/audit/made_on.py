"""`rs audit --build DIR [--cache PATH]`: `provenance.made_on` counted again, from the build's stores and from the cache.

The provenance lists the machines that made the answers with how many each made (`rs.pipeline.write.made_on`). With
the build, those counts are taken again from its stores; with the run's generation cache too, from the cache itself:
each stored answer's cache key is rebuilt as the run keyed it (the greedy answer from its item's prompt and image, a
recovery sample with the recovery pass's settings and its sample's seed, a no-image answer as the no-image pass asks
it, `rs.pipeline.sample.blind.BlindPass.keyed`) and the machine the cache holds for it counted. An answer the cache
lacks is named; a count that differs is a finding.
"""

from __future__ import annotations

from collections import Counter
from itertools import islice
from pathlib import Path
from typing import Iterator

from rs.audit.checkers import Audit
from rs.audit.replay import Replay, _writable_cache, check_build
from rs.audit.repo import AuditUsageError
from rs.context import BuildPaths
from rs.engines.base import Request
from rs.engines.factory import engines_for
from rs.engines.generation_cache import GenerationCache
from rs.engines.machine import UNKNOWN
from rs.families import get_family
from rs.pipeline.recover import recovery_settings
from rs.pipeline.sample import SamplingPass
from rs.pipeline.sample.stage import vocabulary_of
from rs.pipeline.write.made_on import count
from rs.store import read_clean_rows, read_records

CHUNK = 4096
"""Keys looked up in the cache together."""


def _listed(a: Audit) -> dict[str, int] | None:
    listed = (a.report.provenance or {}).get("made_on")
    return {m["id"]: m["answers"] for m in listed} if listed else None


def check_stores(a: Audit, root: Path) -> None:
    """`provenance.made_on`'s counts against the build's items, no-image and recovery stores."""
    if (held := _listed(a)) is None:
        return
    recovery = root / "recovery" if a.report.recovery is not None else None
    a.same(
        "where the answers were made (stores)",
        f"{root} (the build's stores)",
        held,
        dict(count(root / "items", recovery)),
    )


def check_cache(a: Audit, root: Path, asked: Replay) -> None:
    """`provenance.made_on`'s counts against the machines the generation cache holds for the build's answers."""
    if (held := _listed(a)) is None:
        return
    report = a.report
    family = get_family(report.family, asked.config)
    check_build(family, root, report.limit)
    cache_path = asked.cache
    assert cache_path is not None
    if not cache_path.is_file():
        raise AuditUsageError(
            f"--cache {cache_path}: no such file: the audit counts where the build's answers were made from the run's cache",
            hint="give --cache the run's --cache, or $RS_CACHE_DIR/generations.sqlite where it ran",
        )
    _writable_cache(cache_path)
    sampler, judge = (asked.engine_factory or engines_for)(family)
    found: Counter[str] = Counter()
    missing: list[str] = []
    try:
        with GenerationCache(cache_path) as cache:
            greedy = SamplingPass(
                family.config,
                sampler,
                judge,
                cache,
                progress=False,
                vocabulary=vocabulary_of(family, BuildPaths(root)),
            )
            keyed = _keys(root, greedy, report.recovery is not None, report.blind is not None)
            while block := list(islice(keyed, CHUNK)):
                machines = cache.made_on(key for key, _ in block)
                for key, what in block:
                    if key not in machines:
                        missing.append(what)
                    else:
                        found[machines[key] or UNKNOWN] += 1
    finally:
        if asked.engine_factory is None:
            for engine in {id(e): e for e in (sampler, judge) if e is not None}.values():
                engine.close()
    where = str(cache_path)
    if missing:
        a.fail(
            "where the answers were made (the generation cache)",
            where,
            f"the cache lacks {len(missing):,} of the build's answers ({', '.join(missing[:3])}"
            + (" and more" if len(missing) > 3 else "")
            + "): give --cache the cache the run used",
        )
        return
    a.same("where the answers were made (the generation cache)", where, held, dict(found))


def _keys(root: Path, greedy: SamplingPass, recovery: bool, blind: bool) -> Iterator[tuple[str, str]]:
    """Each answer of the stores with its cache key, as the run keyed it, and what it is (`item KEY`, `item KEY sample i`,
    `item KEY without its image`)."""
    sampled = {r["key"] for r in read_records(root / "recovery", "recovery", columns=["key"])} if recovery else set()
    prompts: dict[
        str, tuple[str, str | None]
    ] = {}  # of the sampled items alone: a recovery sample's request is its item's
    for item in read_records(root / "items", "items", columns=["key", "prompt", "image_sha256"]):
        request = Request(prompt=item["prompt"], image_sha256=item["image_sha256"], item_key=item["key"])
        if item["key"] in sampled:
            prompts[item["key"]] = (item["prompt"], item["image_sha256"])
        yield greedy.runner.key(request, greedy.settings), f"item {item['key']}"
    if blind:  # the no-image pass's requests, as the sample stage asked them (`check_build`: the family's settings)
        for key, request, _ in greedy.blind_requests(read_clean_rows(root / "clean", images=False)):
            yield key, f"item {request.item_key} without its image"
    if not recovery:
        return
    settings = recovery_settings(greedy.config, greedy.settings)
    for record in read_records(root / "recovery", "recovery", columns=["key", "samples"]):
        prompt, sha = prompts[record["key"]]
        for sample in record["samples"]:
            request = Request(prompt=prompt, image_sha256=sha, item_key=record["key"], sample=sample["sample"])
            yield greedy.runner.key(request, settings), f"item {record['key']} sample {sample['sample']}"
