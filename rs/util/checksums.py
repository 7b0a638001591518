"""A store's checksums: every file of a build's store folder, sealed when the store is whole, checked before use.

A build folder is trusted no more than the generation cache: a byte changed in a parquet file (its size
unchanged), a file deleted or truncated, is found before a later stage reads the store or a publish
ships it, and the store is rebuilt from what is upstream of it (`rs.pipeline.stage.ensure`, `rs.pipeline.write.splits`). The
manifest is `SHA256SUMS` in the store's folder, in `sha256sum`'s format (`sha256sum -c SHA256SUMS`
checks it by hand); it is written inside the temporary folder, so that it replaces the store with it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

MANIFEST = "SHA256SUMS"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def seal(folder: Path) -> None:
    """Record the checksum of every file in `folder` (not below it) in its manifest."""
    names = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST)
    tmp = folder / f"{MANIFEST}.tmp"
    tmp.write_text("".join(f"{file_sha256(folder / name)}  {name}\n" for name in names), encoding="utf-8")
    os.replace(tmp, folder / MANIFEST)


def damage(folder: Path) -> str | None:
    """Why the store in `folder` cannot be used as it is (its first problem, in words), or None when it is intact."""
    if not folder.is_dir():
        return "it is missing"
    try:
        lines = (folder / MANIFEST).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return f"it has no {MANIFEST} (written by an older rs, or not whole)"
    except (OSError, UnicodeDecodeError) as err:
        return f"its {MANIFEST} cannot be read ({err.__class__.__name__})"
    expected: dict[str, str] = {}
    for line in lines:
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or not name or "/" in name:
            return f"its {MANIFEST} is damaged"
        expected[name] = digest
    present = {p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST}
    for name in sorted(expected):
        if name not in present:
            return f"{name} is missing"
        try:
            if file_sha256(folder / name) != expected[name]:
                return f"{name} does not match its checksum"
        except OSError as err:
            return f"{name} cannot be read ({err.__class__.__name__})"
    if extra := sorted(present - set(expected)):
        return f"{extra[0]} is not one of its files"
    return None
