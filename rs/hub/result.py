"""What a publish did (or, in a dry run, would do) to one repo, and how that reads for a person."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rs.hub.diff import Action, FileChange
from rs.util.sizes import format_bytes


@dataclass
class PublishResult:
    repo_id: str
    changes: list[FileChange]  # against main before the publish: what a reader sees change
    commit_url: str | None  # main's new head; None when nothing was committed (up to date, or a dry run)
    commits: int = 0  # commits made (a dry run: that it would make), the merge included
    merges: int = 0  # 1 when the commits went through a pull request merged at the end
    pull_request: str | None = None  # the pull request used (a dry run: the one it would resume)
    offline: bool = False  # a dry run offline: the Hub was not read, `changes` are the local files (action `upload`)

    @property
    def committed(self) -> bool:
        return self.commit_url is not None

    def count(self, action: Action) -> int:
        return sum(1 for change in self.changes if change.action == action)


def describe_commits(result: PublishResult, *, dry_run: bool = False) -> str:
    """'no commit', '1 commit' or '21 commits: 20 on a pull request, then its merge' (would make, in a dry run)."""
    verb = "would make " if dry_run else ""
    if result.offline:
        return "the commits it takes are not known offline"
    if result.commits == 0:
        return "would make no commit" if dry_run else "no commit"
    if not result.merges:
        return f"{verb}{result.commits} commit" + ("s" if result.commits > 1 else "")
    where = result.pull_request or "a new pull request"
    on_pull = result.commits - result.merges
    return (
        f"{verb}{result.commits} commit{'s' if result.commits > 1 else ''}: {on_pull} on {where}, then its merge"
        if on_pull
        else f"{verb}1 commit: the merge of {where}"
    )


def _summary_line(repo_id: str, changes: Sequence[FileChange], result: PublishResult | None, *, dry_run: bool) -> str:
    """The changes' header: how many files each action touches and their bytes (and the commits, given a PublishResult)."""
    parts = []
    for action, label in (
        ("add", "to add"),
        ("change", "to change"),
        ("delete", "to delete"),
        ("upload", "to upload at most"),
    ):
        selected = [c for c in changes if c.action == action]
        if selected:
            parts.append(f"{len(selected)} {label} ({format_bytes(sum(c.size for c in selected))})")
    if any(c.action == "upload" for c in changes):  # offline: nothing is known unchanged
        line = f"datasets/{repo_id}: {parts[0]}, not compared with the Hub (offline)"
    else:
        parts.append(f"{sum(1 for c in changes if c.action == 'unchanged')} unchanged")
        line = f"datasets/{repo_id}: " + (", ".join(parts) if len(parts) > 1 else f"up to date ({parts[0]})")
    if result is not None:
        line += f"; {describe_commits(result, dry_run=dry_run)}"
    return line


def format_changes(
    result_or_changes: PublishResult | Sequence[FileChange],
    *,
    repo_id: str | None = None,
    show_unchanged: bool = False,
    dry_run: bool = False,
) -> str:
    """The changes for a person: one line per added, changed or deleted file, with sizes.

    Given a PublishResult (or `repo_id`), it starts with a summary line for the repo (with the commits,
    given a PublishResult); given bare changes it is just the indented file lines, for callers that
    print their own header.
    """
    result = result_or_changes if isinstance(result_or_changes, PublishResult) else None
    if result is not None:
        changes, repo_id, commit_url = result.changes, result.repo_id, result.commit_url
    else:
        changes, commit_url = list(result_or_changes), None
    marks = {"add": "+", "change": "~", "delete": "-", "unchanged": "=", "upload": "?"}
    shown = [c for c in changes if show_unchanged or c.action != "unchanged"]
    width = max((len(c.path) for c in shown), default=0)
    lines = [] if repo_id is None else [_summary_line(repo_id, changes, result, dry_run=dry_run)]
    for change in shown:
        lines.append(
            f"    {marks[change.action]} {change.action:<9} {change.path:<{width}}  {format_bytes(change.size):>9}"
        )
    if not shown and repo_id is None:
        lines.append("    (nothing to add, change or delete)")
    if commit_url:
        lines.append(f"    committed: {commit_url}")
    return "\n".join(lines)
