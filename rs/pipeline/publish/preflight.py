"""What a publish refuses before any work, so that nothing fails after a long build.

A folder that cannot be written (the build folder, the cache's, a local target), checked before anything is built.
A local publish replaces each repo folder whole (`rs.pipeline.publish.local`): a path there that this project did
not publish (a file, or a folder with files but without the marker every published repo holds, `rs/stats.json`) is
the user's, and the run is refused, naming it. The places a run writes must not hold one another: a `--out` inside
the build folder has its repos deleted while the next ones are assembled there, a cache inside `--out` is a file of
no repo, a build folder inside `--out` is taken for a repo. And a `--limit` trial never goes to the Hub, where it
would replace the whole family's repos, nor replaces a release (a publish of every image) in a local folder without
`--force`.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from rs.errors import UsageError
from rs.families import Family
from rs.util.writable import why_unwritable, writable_hint

MARKER = Path("rs") / "stats.json"
"""What every repo this project publishes holds (its card's figures)."""


def check_repo_paths(family: Family, root: Path, named: str) -> None:
    """Refuse a repo path under `root` that exists and is not a repo this project published (an empty folder is nobody's)."""
    for split in family.splits:
        path = root / family.repo_name(split)
        if not path.exists() and not path.is_symlink():
            continue
        if path.is_symlink() or not path.is_dir():
            raise UsageError(
                f"{named}: {path} is a file, not a repo this project published: publishing {family.name} there "
                "would replace it",
                hint=f"move it away, or give another {named}; nothing was changed",
            )
        if any(path.iterdir()) and not (path / MARKER).is_file():
            raise UsageError(
                f"{named}: {path} is a folder this project did not publish (it has no {MARKER.as_posix()}): publishing "
                f"{family.name} there would replace what it holds",
                hint=f"move it away, or give another {named}; nothing was changed",
            )


def check_overlap(out: Path | None, named: str, build_root: Path, cache_path: Path) -> None:
    """Refuse places that hold one another: `out` and the build folder either way, the cache inside either."""
    build, cache = build_root.resolve(), cache_path.resolve()
    if out is not None:
        folder = out.resolve()
        if folder == build or folder.is_relative_to(build):
            raise UsageError(
                f"{named} {out} is inside the build folder {build_root}: the build replaces what is there while it "
                "assembles the next repos",
                hint=f"give {named} a folder outside {build_root}",
            )
        if build.is_relative_to(folder):
            raise UsageError(
                f"the build folder {build_root} is inside {named} {out}: it would be taken for published repos",
                hint=f"give {named} and --build-dir folders apart",
            )
        if cache.is_relative_to(folder):
            raise UsageError(
                f"the generation cache {cache_path} is inside {named} {out}: it is no repo's file",
                hint=f"give --cache a path outside {out}",
            )
    if cache.is_relative_to(build):
        raise UsageError(
            f"the generation cache {cache_path} is inside the build folder {build_root}: a build is rebuilt from "
            "the cache, so the cache must not be part of one",
            hint=f"give --cache a path outside {build_root}",
        )


def check_local_root(folder: Path, named: str, what: str = "the published repos") -> None:
    """Refuse a local target that cannot hold the repos (a file in the way, a folder not writable) before the build, not after it.

    `what`: what goes there, for the message (the build folder and the cache are checked the same way).
    """
    existing = folder
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(
            f"{named} {folder}: {existing} is a file, not a folder: {what} cannot go there",
            hint=f"give {named} a folder (it is created if it does not exist)",
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(
            f"{named} {folder}: cannot write in {existing} ({why_unwritable(existing)})",
            hint=writable_hint(existing, named),
        )
    try:  # a place even root cannot write in passes os.access
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise UsageError(
            f"{named} {folder}: cannot write in {existing} ({why_unwritable(existing, err)})",
            hint=writable_hint(existing, named),
        ) from None


def check_trial(family: Family, limit: int | None, *, local: bool, dry_run: bool) -> None:
    """Refuse a `--limit` trial on its way to the Hub, where it would replace the whole family's repos."""
    if limit is not None and not local and not dry_run:
        namespace = family.config.publish.namespace
        raise UsageError(
            f"--limit {limit} builds a trial of {family.name} on its first {limit} images; published to the Hub "
            f"it would replace {namespace}/{family.repo_name('think')} and its two siblings with it",
            hint="publish the trial to a local folder (--out DIR) or see what would change (--dry-run); "
            "publish to the Hub without --limit",
        )


def published_limit(repo: Path) -> tuple[bool, int | None]:
    """Whether `repo` holds a publish of this project, and its `--limit` (None: a release of every image).

    Read from the repo's own `rs/stats.json`; one that cannot be read counts as a release (the safe side: a trial
    is then refused rather than let replace it)."""
    marker = repo / MARKER
    if not marker.is_file():
        return False, None
    try:
        limit = json.loads(marker.read_text(encoding="utf-8")).get("limit")
    except (OSError, ValueError, AttributeError):
        return True, None
    return True, limit if isinstance(limit, int) and not isinstance(limit, bool) else None


def check_release_kept(family: Family, root: Path, named: str, limit: int | None, *, force: bool) -> None:
    """Refuse a `--limit` trial into a local folder that holds a release of the family, unless `force`.

    A trial's repos hold its first N images only: switched in over a release they would replace it whole (the rows of
    every other image gone, the cards' figures of N images), with only the card's first line to tell.
    """
    if limit is None or force:
        return
    for split in family.splits:
        repo = root / family.repo_name(split)
        found, theirs = published_limit(repo)
        if found and theirs is None:
            raise UsageError(
                f"{named}: {repo} holds a release of {family.name} (every image of its source); this trial "
                f"(--limit {limit}, its first {limit} images) would replace it and its siblings",
                hint=f"publish the trial to another folder ({named} DIR), publish without --limit, or add --force to "
                "replace the release with the trial; nothing was changed",
            )
