"""Local publish targets refused before any work: nothing of the user's is overwritten, and no two places overlap.

A local publish replaces each repo folder whole (`rs.pipeline.publish.local`). A path there that this project
did not publish (a file, or a folder with files but without the marker every published repo holds,
`rs/stats.json`) is the user's: the run is refused, naming it, before anything is built. And the
places a run writes must not hold one another: a `--out` inside the build folder has its repos
deleted while the next ones are staged there, a cache inside `--out` is a file of no repo, a
build folder inside `--out` is taken for a repo.
"""

from __future__ import annotations

from pathlib import Path

from rs.errors import UsageError
from rs.families import Family

MARKER = Path("rs") / "stats.json"
"""What every repo this project publishes holds (its card's figures)."""


def check_repo_paths(family: Family, root: Path, named: str) -> None:
    """Refuse a repo path under `root` that exists and is not a repo this project published (an empty folder is nobody's)."""
    for split in family.splits:
        path = root / family.repo_name(split)
        if not path.exists() and not path.is_symlink():
            continue
        if path.is_symlink() or not path.is_dir():
            raise UsageError(f"{named}: {path} is a file, not a repo this project published: publishing {family.name} there "
                             "would replace it", hint=f"move it away, or give another {named}; nothing was changed")
        if any(path.iterdir()) and not (path / MARKER).is_file():
            raise UsageError(f"{named}: {path} is a folder this project did not publish (it has no {MARKER.as_posix()}): publishing "
                             f"{family.name} there would replace what it holds",
                             hint=f"move it away, or give another {named}; nothing was changed")


def check_overlap(out: Path | None, named: str, build_root: Path, cache_path: Path) -> None:
    """Refuse places that hold one another: `out` and the build folder either way, the cache inside either."""
    build, cache = build_root.resolve(), cache_path.resolve()
    if out is not None:
        folder = out.resolve()
        if folder == build or folder.is_relative_to(build):
            raise UsageError(f"{named} {out} is inside the build folder {build_root}: the build replaces what is there while it "
                             "stages the next repos", hint=f"give {named} a folder outside {build_root}")
        if build.is_relative_to(folder):
            raise UsageError(f"the build folder {build_root} is inside {named} {out}: it would be taken for published repos",
                             hint=f"give {named} and --build-dir folders apart")
        if cache.is_relative_to(folder):
            raise UsageError(f"the generation cache {cache_path} is inside {named} {out}: it is no repo's file",
                             hint=f"give --cache a path outside {out}")
    if cache.is_relative_to(build):
        raise UsageError(f"the generation cache {cache_path} is inside the build folder {build_root}: a build is rebuilt from "
                         "the cache, so the cache must not be part of one", hint=f"give --cache a path outside {build_root}")
