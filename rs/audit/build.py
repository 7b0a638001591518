"""`rs audit --build DIR`: the build's stores whole (their checksums), and the published shards the build's sealed ones.

Every store of a build is sealed with a `SHA256SUMS` manifest when it is whole (`rs.util.checksums`); a byte changed,
a file truncated or deleted since is found here before the stores are routed afresh (which would read damaged rows),
and named. Each readable repo's shards are then held against the build's split store they were linked from: the
same names, and each file's SHA-256 the one the build sealed.
"""

from __future__ import annotations

from pathlib import Path

from rs.audit.checkers import Audit
from rs.context import BuildPaths
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


def check_shards(a: Audit, root: Path) -> None:
    """Each readable repo's shards: the build's split store's files, byte for byte (their sealed SHA-256)."""
    paths = BuildPaths(root)
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
