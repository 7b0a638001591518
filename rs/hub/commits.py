"""How a publish reaches the Hub: which commits, on main or on a pull request, and what each one holds.

- Nothing to change: no commit.
- At most `files_per_commit` operations: one commit on main, pinned to the head the changes were read
  against (readers see the old dataset or the new one).
- More: commits of at most `files_per_commit` operations on a pull request opened from that head, then
  one merge, so main still moves once. A pull request of this build left by an interrupted run is
  resumed (only what it lacks is committed); any other pull request of ours is closed, not merged.

The default of 50 files per commit is the Hub's guidance ("keep around 50-100 files per commit";
huggingface.co/docs/hub/storage-limits, where every operation of a commit is checked server-side
within a 60 s request timeout) and what `datasets` uses (`UPLOADS_MAX_NUMBER_PER_COMMIT`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi

from rs.hub import pulls
from rs.hub.diff import FileChange, LocalFile, RemoteState, diff, fingerprint, remote_state
from rs.hub.pulls import Pull

logger = logging.getLogger("rs.hub")


@dataclass
class CommitSchedule:
    """What one publish of a folder does to a repo, from what the Hub holds now."""

    remote: RemoteState  # main, as read
    changes: list[FileChange]  # against main: what a reader will see change (unchanged files included)
    files_per_commit: int
    build: str | None = None  # the fingerprint of the local files, when a pull request is involved
    resume: Pull | None = None  # our pull request of this build, opened from main's head
    stale: list[tuple[Pull, str]] = field(default_factory=list)  # our other pull requests, and why they go
    work: list[FileChange] = field(default_factory=list)  # still to commit (against `resume`'s head, else main)
    work_head: str | None = None  # `resume`'s head

    @property
    def todo(self) -> list[FileChange]:
        return [change for change in self.changes if change.action != "unchanged"]

    @property
    def via_pull_request(self) -> bool:
        return bool(self.todo) and (self.resume is not None or len(self.work) > self.files_per_commit)

    def batches(self) -> list[list[FileChange]]:
        """The commits' contents, in path order, each at most `files_per_commit` operations."""
        size = self.files_per_commit
        return [self.work[start : start + size] for start in range(0, len(self.work), size)]

    @property
    def commits(self) -> int:
        """Commits this schedule makes: 0, 1 on main, or those on the pull request plus its merge."""
        if not self.todo:
            return 0
        return len(self.batches()) + 1 if self.via_pull_request else 1


def schedule_commits(
    api: HfApi,
    repo_id: str,
    local: dict[str, LocalFile],
    *,
    only: Sequence[str] | None,
    delete_extra: bool,
    files_per_commit: int,
) -> CommitSchedule:
    """Read main and our open pull requests, and decide what to commit where (writes nothing)."""
    remote = remote_state(api, repo_id)
    schedule = CommitSchedule(
        remote, diff(local, remote.files, only=only, delete_extra=delete_extra), files_per_commit
    )
    schedule.work = schedule.todo
    open_pulls = list(pulls.ours(api, repo_id)) if remote.exists else []
    if open_pulls or len(schedule.todo) > files_per_commit:
        schedule.build = fingerprint(local, only=only, delete_extra=delete_extra)
    for pull in open_pulls:
        if not schedule.todo:
            schedule.stale.append((pull, "main already holds these files"))
        elif not pull.holds(schedule.build or ""):
            schedule.stale.append(
                (
                    pull,
                    f"it holds an older build (or other files); build "
                    f"{(schedule.build or '')[: pulls.MARK_LENGTH]} replaces it",
                )
            )
        elif not pull.based_on(remote.head):
            schedule.stale.append(
                (
                    pull,
                    "main moved since it was opened, so merging it would not give this build; "
                    "a new pull request replaces it",
                )
            )
        elif schedule.resume is None:
            schedule.resume = pull
        else:
            schedule.stale.append((pull, f"a duplicate of #{schedule.resume.num}"))
    if schedule.resume is not None:
        there = remote_state(api, repo_id, revision=schedule.resume.ref)
        schedule.work = [
            c for c in diff(local, there.files, only=only, delete_extra=delete_extra) if c.action != "unchanged"
        ]
        schedule.work_head = there.head
    return schedule


def operations(
    changes: Sequence[FileChange], local: dict[str, LocalFile]
) -> list[CommitOperationAdd | CommitOperationDelete]:
    """Fresh operations for one commit (the client mutates them, so never reuse them across attempts)."""
    result: list[CommitOperationAdd | CommitOperationDelete] = []
    for change in changes:
        if change.action == "delete":
            result.append(CommitOperationDelete(path_in_repo=change.path, is_folder=False))
        elif change.action in ("add", "change"):
            file = local[change.path]
            # A path, not bytes: the client streams it, so shards need not fit in memory.
            operation = CommitOperationAdd(path_in_repo=change.path, path_or_fileobj=str(file.abspath))
            if file.hashed_sha256 is not None:  # hashed while compared: spare the client a second pass
                operation.upload_info.sha256 = bytes.fromhex(file.hashed_sha256)
            result.append(operation)
    return result
