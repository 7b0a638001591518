"""The pull requests a publish opens, finds again, merges or closes.

A publish too large for one commit fills a pull request (`refs/pr/N`) in bounded commits and merges it
once complete, so `main` moves once. The pull request's title ends with a mark naming the build
(`fingerprint` of the files it brings) and the main commit it was opened from: a later run finds it
with one listing (`get_repo_discussions` returns titles, not descriptions) and knows, without reading
anything else, whether to resume it (same build, main still there) or close it (an older build, or
main moved since: merging it would not give this build).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass

from huggingface_hub import HfApi

from rs.hub.diff import REPO_TYPE
from rs.hub.retry import through_rate_limit

logger = logging.getLogger("rs.hub")

MARK_LENGTH = 12  # hex characters of the build fingerprint and of the base commit shown in the title
_MARK = re.compile(r"\[rs build ([0-9a-f]{%d}) on ([0-9a-f]{%d})\]\s*$" % (MARK_LENGTH, MARK_LENGTH))


@dataclass(frozen=True)
class Pull:
    """One of our open pull requests, as its title describes it."""

    num: int
    title: str
    build: str  # first MARK_LENGTH characters of the build fingerprint
    base: str  # first MARK_LENGTH characters of the main commit it was opened from
    status: str  # open | draft

    @property
    def ref(self) -> str:
        return f"refs/pr/{self.num}"

    def holds(self, build: str) -> bool:
        return build.startswith(self.build)

    def based_on(self, head: str | None) -> bool:
        return head is not None and head.startswith(self.base)


def title(message: str, build: str, base: str) -> str:
    """The pull request's title: the commit message, then the mark a later run finds it by."""
    return f"{message} [rs build {build[:MARK_LENGTH]} on {base[:MARK_LENGTH]}]"


def ours(api: HfApi, repo_id: str) -> Iterator[Pull]:
    """The open (or draft) pull requests of the repo that a publish opened."""
    listing = api.get_repo_discussions(
        repo_id, repo_type=REPO_TYPE, discussion_type="pull_request", discussion_status="open"
    )
    for discussion in listing:
        match = _MARK.search(discussion.title)
        if match and discussion.is_pull_request and discussion.status in ("open", "draft"):
            yield Pull(discussion.num, discussion.title, match.group(1), match.group(2), discussion.status)


def close(api: HfApi, repo_id: str, pull: Pull, reason: str, *, token: str | None) -> None:
    """Close `pull` with a comment saying why; its commits stay on its ref, and nothing reaches main."""
    logger.info("%s: closing pull request #%d (%s)", repo_id, pull.num, reason)
    through_rate_limit(
        lambda: api.change_discussion_status(
            repo_id, pull.num, "closed", repo_type=REPO_TYPE, comment=f"Closed by rs: {reason}."
        ),
        repo_id=repo_id,
        what=f"closing pull request #{pull.num}",
        token=token,
    )


def merge(api: HfApi, repo_id: str, pull: Pull, *, token: str | None) -> None:
    """Merge `pull` into main: the one moment readers see the change."""
    if pull.status == "draft":  # a draft cannot be merged (the Hub's own tests open it first)
        through_rate_limit(
            lambda: api.change_discussion_status(repo_id, pull.num, "open", repo_type=REPO_TYPE),
            repo_id=repo_id,
            what=f"opening pull request #{pull.num}",
            token=token,
        )
    through_rate_limit(
        lambda: api.merge_pull_request(
            repo_id, pull.num, repo_type=REPO_TYPE, comment="Merged by rs: every file of this build is on it."
        ),
        repo_id=repo_id,
        what=f"merging pull request #{pull.num}",
        token=token,
    )
