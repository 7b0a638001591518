"""`rs audit --build DIR`: the build's stores whole (their checksums), and the published shards the build's sealed ones.

Every store of a build is sealed with a `SHA256SUMS` manifest when it is whole (`rs.util.checksums`); a byte changed,
a file truncated or deleted since is found here before the stores are routed afresh (which would read damaged rows),
and named. Each readable repo's shards are then held against the build's split store they were linked from: the
same names, and each file's SHA-256 the one the build sealed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rs.audit.checkers import Audit
from rs.context import BuildPaths
from rs.errors import RsError
from rs.pipeline.route import NOT_ASKED
from rs.pipeline.write.report import FamilyReport
from rs.pipeline.write.samples import generation_share, published_text
from rs.store import read_records
from rs.util.checksums import MANIFEST, damage, file_sha256


def stores(root: Path, splits: list[str], *, recovery: bool) -> dict[str, Path]:
    """The stores a build of this family holds: name -> folder."""
    paths = BuildPaths(root)
    out = {"clean": paths.clean, "items": paths.items}
    if recovery:
        out["recovery"] = paths.recovery
    out |= {f"splits/{split}": paths.split(split) for split in splits}
    return out


def check_stores(a: Audit, root: Path) -> bool:
    """Each store's checksums; whether every store is whole (the stores are read afresh only then)."""
    whole = True
    for name, folder in stores(root, list(a.report.splits), recovery=a.report.recovery is not None).items():
        problem = damage(folder)
        a.checked += 1
        if problem is not None:
            whole = False
            a.fail(
                f"the build's {name} store",
                str(folder),
                f"{problem}: the store is not what the build sealed (rebuild the family to restore it)",
            )
    return whole


def _sealed(folder: Path) -> dict[str, str]:
    sealed = {}
    for line in (folder / MANIFEST).read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        sealed[name] = digest
    return sealed


def _made_this(a: Audit, paths: BuildPaths) -> bool:
    """Whether the build's report is the one this repo was published with (`FamilyReport.published`, as the repo keeps it)."""
    try:
        built = FamilyReport.from_dict(json.loads(paths.stats.read_text(encoding="utf-8")), where=str(paths.stats))
    except (OSError, ValueError, RsError):
        return False
    return json.loads(json.dumps(built.published().to_dict())) == a.repo.stats_raw


def check_shards(a: Audit, root: Path) -> None:
    """Each readable repo's shards: the build's split store's files, byte for byte (their sealed SHA-256)."""
    paths = BuildPaths(root)
    if not _made_this(a, paths):
        a.notes.append(
            f"{paths.stats}: not the stats this repo was published with (the build was rebuilt or re-routed since, "
            "`rs refilter`): its split stores are not this repo's shards, and were not compared with them"
        )
        return
    for split, repo in sorted(a.family.siblings.items()):
        folder = paths.split(split)
        if damage(folder) is not None:  # named by `check_stores`
            continue
        sealed = _sealed(folder)
        published = {p.name: p for p in repo.shards}
        a.same(
            f"the shards of {repo.name} (the build's {split} split)",
            f"{repo.name}/data",
            sorted(published),
            sorted(n for n in sealed if n.endswith(".parquet")),
            source=f"{folder} holds",
        )
        for name, path in sorted(published.items()):
            if name in sealed:
                a.same(
                    f"the SHA-256 of {repo.name}/data/{name}",
                    f"{repo.name}/data/{name}",
                    file_sha256(path),
                    sealed[name],
                    source=f"the build sealed ({folder / MANIFEST})",
                )


SHOWN = 10
"""Differences named one by one, a repo; the rest are counted."""


def published_judge(record: dict[str, Any]) -> str | None:
    """The judge's label of a stored answer as the samples repo publishes it (None where the judge was not asked)."""
    return None if record["judge"] == NOT_ASKED else record["judge"]


def _outcome(record: dict[str, Any]) -> str | None:
    """The reader's outcome of a stored answer, as the samples repo's `reader` says it."""
    if record["error"] is not None or record["final"] is None:
        return None
    return "accepted" if record["verified"] else "certain" if record["contradicts"] else "undecided"


class _Differences:
    def __init__(self, a: Audit, repo: str) -> None:
        self.a, self.repo, self.count = a, repo, 0

    def same(self, what: str, where: str, stated: Any, truth: Any, source: str) -> None:
        if stated == truth:
            self.a.checked += 1
            return
        self.count += 1
        if self.count <= SHOWN:
            self.a.same(what, where, stated, truth, source=source)

    def close(self) -> None:
        if self.count > SHOWN:
            self.a.fail(
                f"{self.repo}: rows that differ from the build's stores",
                f"{self.repo}/data",
                f"{self.count - SHOWN} more differences besides the {SHOWN} named",
            )


def check_answers(a: Audit, root: Path) -> None:
    """The samples repo's generations against the build's items and recovery stores (what the model said, as the run
    stored it, withheld where and only where it is over its share of the row, and the judge's label on it), and the RL repo's
    `solution` and `references` against the cleaned question's reference."""
    samples, rl = a.family.of("samples"), a.family.of("rl")
    if samples is None and rl is None:
        return
    paths = BuildPaths(root)
    items = {(r["image_sha256"], r["prompt"]): r for r in read_records(paths.items, "items")}
    draws = {r["key"]: r for r in read_records(paths.recovery, "recovery")} if a.report.recovery is not None else {}
    source = f"the build's stores ({root}) hold"
    if samples is not None:
        diff = _Differences(a, samples.name)
        for i, row in enumerate(samples.rows):
            where = f"{samples.name}/data row {i}"
            item = items.get((row["image_sha256"], row["question"]))
            if item is None:
                diff.same(f"{row['question']!r} in the build's items store", where, "a question", "absent", source)
                continue
            greedy, *drawn = row["generations"]
            stored = (draws.get(row["key"]) or {}).get("samples") or []
            share = generation_share(a.report.verifier.answer_bytes, 1 + len(stored))  # as the stores make the row
            for column, value in published_text(item, share).items():
                diff.same(
                    f"the greedy generation's {column} of {row['question']!r}",
                    where,
                    greedy.get(column, False),  # `too_large`: absent before the samples repo's layout 4
                    value,
                    source,
                )
            diff.same(
                f"the greedy generation's reader of {row['question']!r}",
                where,
                greedy["reader"],
                _outcome(item),
                source,
            )
            diff.same(
                f"the greedy generation's judge of {row['question']!r}",
                where,
                greedy["judge"],
                published_judge(item),
                source,
            )
            diff.same(f"the samples of {row['question']!r}", where, len(drawn), len(stored), source)
            for g, s in zip(drawn, stored):
                for column, value in {"sample": s["sample"], "seed": s["seed"], **published_text(s, share)}.items():
                    diff.same(
                        f"sample {s['sample']}'s {column} of {row['question']!r}",
                        where,
                        g.get(column, False),
                        value,
                        source,
                    )
                diff.same(
                    f"sample {s['sample']}'s reader of {row['question']!r}", where, g["reader"], _outcome(s), source
                )
                diff.same(
                    f"sample {s['sample']}'s judge of {row['question']!r}",
                    where,
                    g["judge"],
                    published_judge(s),
                    source,
                )
        diff.close()
    if rl is not None:
        diff = _Differences(a, rl.name)
        for i, row in enumerate(rl.rows):
            where = f"{rl.name}/data row {i}"
            item = items.get((row["image_sha256"], row["question"]))
            if item is None:
                diff.same(f"{row['question']!r} in the build's items store", where, "a question", "absent", source)
                continue
            diff.same(f"solution of {row['question']!r}", where, row["solution"], item["reference"], source)
            diff.same(f"references of {row['question']!r}", where, row["references"], item["references"], source)
            stored = (draws.get(item["key"]) or {}).get("samples") or []
            diff.same(f"k of {row['question']!r}", where, row["k"], len(stored), source)
        diff.close()
