"""What the Hub and its dataset viewer would refuse, checked on the assembled repos before anything is uploaded.

The figures are the Hub's documented repository limits and recommendations (huggingface.co/docs/hub/
storage-limits, read in the hub-docs repo at 242f4a1, 2026-08-22): fewer than 100,000 files per repo,
no more than 10,000 entries per folder, files under 200 GB (500 GB is the hard limit), around 50-100
files per commit; and the viewer's limits: one file format per split and row groups it can read
(`shard.row_group_bytes`, checked from the parquet metadata). A publish that would hit one stops
before the first upload and says what to change. The commits a repo needs are counted too: past the
Hub's commit quota (its 429 names 128 an hour per repo) the publish still finishes, waiting as the
Hub asks, and the check says so up front. A split with no rows, which `datasets` cannot load, goes to the Hub only
when asked for (`--allow-empty`).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from rs.context import BuildContext
from rs.errors import RsError, UsageError
from rs.hub.limits import (
    COMMITS_PER_HOUR,
    DEFAULT_FILES_PER_COMMIT,
    MAX_ENTRIES_PER_FOLDER,
    MAX_FILE_BYTES,
    MAX_FILES_PER_COMMIT,
    MAX_FILES_PER_REPO,
    RECOMMENDED_FILE_BYTES,
    check_files_per_commit,
)
from rs.pipeline.write.report import FamilyReport
from rs.pipeline.write.splits import RowGroupTooLarge, check_row_groups

logger = logging.getLogger(__name__)


class RepoCheckError(RsError, ValueError):
    """An assembled repo the Hub or its dataset viewer would refuse."""

    default_hint = "nothing was uploaded; change what the message says (families.yaml shard and publish settings) and publish again"


def _commit_problems(folder: Path, files: list[Path], files_per_commit: int) -> list[str]:
    """A `publish.files_per_commit` the Hub refuses; past the hourly commit quota only a warning (the publish waits)."""
    try:
        check_files_per_commit(files_per_commit, name="publish.files_per_commit")
    except ValueError as err:
        return [str(err)]
    commits = math.ceil(len(files) / files_per_commit) + (len(files) > files_per_commit)  # + the merge
    if commits > COMMITS_PER_HOUR:
        logger.warning(
            "%s: %s files make up to %s commits of %s files; the Hub allows about %s an hour per repo, "
            "so the publish will wait for its quota (raise publish.files_per_commit, up to %s, for fewer)",
            folder,
            f"{len(files):,}",
            f"{commits:,}",
            files_per_commit,
            COMMITS_PER_HOUR,
            MAX_FILES_PER_COMMIT,
        )
    return []


def _count_problems(folder: Path, files: list[Path]) -> list[str]:
    """Too many files in the repo, or entries in one of its folders."""
    problems = []
    if len(files) >= MAX_FILES_PER_REPO:
        problems.append(
            f"{folder}: {len(files):,} files, the Hub recommends fewer than {MAX_FILES_PER_REPO:,} per repo "
            "(raise shard.max_bytes for fewer, larger shards)"
        )
    for directory in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
        entries = sum(1 for _ in directory.iterdir())
        if entries >= MAX_ENTRIES_PER_FOLDER:
            problems.append(
                f"{directory}: {entries:,} entries, the Hub recommends fewer than {MAX_ENTRIES_PER_FOLDER:,} per folder "
                "(raise shard.max_bytes for fewer, larger shards)"
            )
    return problems


def _size_problems(files: list[Path]) -> list[str]:
    """Files over the Hub's limit per file; over its recommendation only a warning."""
    problems = []
    for path in files:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            problems.append(
                f"{path}: {size:,} bytes, over the Hub's {MAX_FILE_BYTES:,}-byte limit per file (lower shard.max_bytes)"
            )
        elif size > RECOMMENDED_FILE_BYTES:
            logger.warning(
                "%s: %s bytes, over the %s bytes the Hub recommends per file",
                path,
                f"{size:,}",
                f"{RECOMMENDED_FILE_BYTES:,}",
            )
    return problems


def _data_problems(folder: Path, files: list[Path], row_group_bytes: int) -> list[str]:
    """What the dataset viewer cannot read under `data/`: more than one format, or row groups too large."""
    problems = []
    data = [p for p in files if p.relative_to(folder).parts[0] == "data"]
    formats = sorted({p.suffix or p.name for p in data})
    if len(formats) > 1 or (formats and formats != [".parquet"]):
        problems.append(
            f"{folder / 'data'}: files of {', '.join(formats)}; the viewer reads one format per split, and this "
            "repo's card declares parquet"
        )
    try:
        check_row_groups(sorted(p for p in data if p.suffix == ".parquet"), row_group_bytes)
    except RowGroupTooLarge as err:
        problems.append(str(err))
    return problems


def check_repo(folder: Path, *, row_group_bytes: int, files_per_commit: int = DEFAULT_FILES_PER_COMMIT) -> None:
    """Raise `RepoCheckError` listing everything in `folder` (one assembled repo) the Hub or the viewer would refuse."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    problems = (
        _commit_problems(folder, files, files_per_commit)
        + _count_problems(folder, files)
        + _size_problems(files)
        + _data_problems(folder, files, row_group_bytes)
    )
    if problems:
        raise RepoCheckError("the Hub or its dataset viewer would refuse this publish:\n  " + "\n  ".join(problems))


class EmptySplitError(UsageError):
    """A split with no rows, which `datasets.load_dataset` cannot load, on its way to the Hub."""


def check_not_empty(ctx: BuildContext, report: FamilyReport | None, *, local: bool, allow_empty: bool) -> None:
    """Refuse a split with no rows on its way to the Hub unless allowed: `datasets` cannot load it."""
    family = ctx.family
    if (
        report is not None
        and not local
        and not allow_empty
        and (empty := [s for s in family.splits if not report.splits[s].rows])
    ):
        raise EmptySplitError(
            f"{', '.join(family.repo_name(s) for s in empty)} would have no rows: `datasets.load_dataset` refuses a split with "
            "no rows (\"Instruction 'train' corresponds to no data!\"), so nothing was published",
            hint=f"publish it anyway with --allow-empty (its card says it is empty and how to read it), or see why in "
            f"{ctx.paths.stats}",
        )
