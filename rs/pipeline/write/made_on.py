"""Where the published answers were made: the `made_on` list of the provenance, each machine with how many it made.

`provenance.hardware` is the machine that writes the splits; the answers may have been made elsewhere (sampling
shards on other machines and their caches merged, replicas on a Ray cluster, a run resumed from a cache made on
another machine). Every answer's record in the build's stores names the machine and engine that made it
(`rs.records.ItemRecord.made_on`, read back from the generation cache, `rs.engines.machine`), and every answer the
repos publish is counted here, by machine: the greedy answer of every question (the items store), every recovery
sample (the recovery store) and, with the no-image pass (`blind:`), every answer it made (its store beside the items,
`rs.pipeline.sample.blind.BLIND`). All of the no-image pass's answers count, each rotation and each sample, not its
temperature-0 answer alone: the splits publish that one, but also how many of them all were right (`blind.passed`,
`blind.k`), and the samples repo publishes each. The judge's verdicts are not counted: they are labels about those
answers, not answers the repos publish. An answer cached before rs recorded machines counts under `unknown`, never as
the machine that reads it. `rs audit --build` counts them again from the stores, and with `--cache` from the
generation cache.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterable

import pyarrow.compute as pc
import pyarrow.parquet as pq

from rs.engines.generation_cache import GenerationCache
from rs.engines.machine import UNKNOWN, canonical


def _column(paths: Iterable[Path], nested: bool) -> Iterable[str | None]:
    """Each answer's `made_on` in a store's files (`nested`: the recovery store, whose answers are its records' samples);
    a store written before the column reads as None for every answer."""
    for path in paths:
        with pq.ParquetFile(path) as parquet:
            names = parquet.schema_arrow.names
            table = parquet.read(columns=["samples"] if nested else (["made_on"] if "made_on" in names else ["key"]))
        column = table.column(0)
        if nested:
            samples = pc.list_flatten(column)
            kinds = samples.type
            if any(kinds.field(i).name == "made_on" for i in range(kinds.num_fields)):
                yield from pc.struct_field(samples, "made_on").to_pylist()
            else:
                yield from [None] * len(samples)
        elif "made_on" in names:
            yield from column.to_pylist()
        else:
            yield from [None] * len(column)


def _blind(paths: Iterable[Path]) -> Iterable[str | None]:
    """Each no-image answer's `made_on` in the no-image store's files (a record's list beside its `answers`); a store
    written before the column, or a record rebuilt without it, reads as None for each of its answers."""
    for path in paths:
        with pq.ParquetFile(path) as parquet:
            recorded = "made_on" in parquet.schema_arrow.names
            table = parquet.read(columns=["answers", "made_on"] if recorded else ["answers"])
        answers = table.column("answers").to_pylist()
        made = table.column("made_on").to_pylist() if recorded else [None] * len(answers)
        for asked, ids in zip(answers, made):
            yield from ids if ids is not None else [None] * len(asked)


def count(items: Path, recovery: Path | None) -> Counter[str]:
    """The answers of the build's stores by the id of the machine that made them (`UNKNOWN` where not known): the items,
    the no-image pass's beside them (where it ran), and the recovery samples."""
    counts: Counter[str] = Counter()
    ids = [
        *_column(sorted(items.glob("items-*.parquet")), nested=False),
        *_blind(sorted(items.glob("blind-*.parquet"))),
    ]
    if recovery is not None and recovery.is_dir():
        ids += _column(sorted(recovery.glob("recovery-*.parquet")), nested=True)
    for made_on in ids:
        counts[made_on or UNKNOWN] += 1
    return counts


def machines(
    counts: Counter[str], records: dict[str, dict[str, Any]], cache_path: Path | None = None
) -> list[dict[str, Any]]:
    """The provenance's `made_on` list: each machine's record and its count, most answers first; `unknown` last. The
    records come from the stage reports (`SampleReport.machines`, which a samples repo carries), else from the
    generation cache. Byte for byte the same on every machine that builds from the same stores."""
    records = dict(records)
    lacking = [i for i in counts if i != UNKNOWN and i not in records]
    if lacking and cache_path is not None and cache_path.is_file():
        with GenerationCache(cache_path) as cache:
            records.update({i: cache.machine(i) or {"id": i} for i in lacking})
    out = []
    for made_on, n in sorted(counts.items(), key=lambda kv: (kv[0] == UNKNOWN, -kv[1], kv[0])):
        record = canonical(records.get(made_on) or {"id": made_on})
        out.append({**record, "answers": n})
    return out


def distinct_machines(made_on: list[dict[str, Any]]) -> int:
    """How many hosts the list names (records of one host with two engines or versions are one machine)."""
    return len({m.get("machine", m["id"]) for m in made_on if m["id"] != UNKNOWN})
