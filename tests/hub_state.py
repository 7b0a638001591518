"""The Hub emulator's state: blobs, commits, branches and pull-request refs, merges, the commit rate limit.

Kept apart from the HTTP layer (hub_server.py) so that what a repo *is* can be read in one place.
What the Hub does and this models (see hub_server.py for the sources of each behaviour):
- `main` is a chain of commits; a pull request is a ref `refs/pr/N` whose own commits start from the
  commit it was opened from (`base`);
- merging applies the pull request's changes (base -> its head) onto main as ONE commit, titled
  "<title> (#N)" as on the Hub; a path changed on both sides since the base is a conflict;
- commits per repo are rate-limited over a sliding window (the Hub names 128 per hour), answered
  with 429 and `Retry-After`, on a clock the test can drive;
- a folder may not hold more than 10,000 entries, and a commit not more than 25,000 LFS files.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

MAX_ENTRIES_PER_FOLDER = 10_000  # huggingface.co/docs/hub/storage-limits: "cannot exceed 10k files per folder"
MAX_LFS_FILES_PER_COMMIT = 25_000  # HfApi.create_commit: "limited to 25k LFS files"
URL_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
COMMIT_QUOTA_MESSAGE = "You have exceeded our hourly quotas for action: commit. We invite you to retry later."

_oids = itertools.count(1)


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a regular file: what the Hub reports as `oid` for non-LFS files."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


class HttpError(Exception):
    """Raised by endpoint handlers and the state: turned into a JSON error with the Hub's X-Error-* headers."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        *,
        headers: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.headers, self.body = dict(headers or {}), dict(body or {})


@dataclass
class Blob:
    """File content plus the ids the Hub derives from it."""

    data: bytes
    lfs: bool
    sha1: str = field(init=False)  # git blob id of the content (regular) or of the LFS pointer (lfs)
    sha256: str = field(init=False)
    pointer_size: int = field(init=False)

    def __post_init__(self) -> None:
        self.sha256 = hashlib.sha256(self.data).hexdigest()
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {len(self.data)}\n"
        self.pointer_size = len(pointer)
        self.sha1 = git_blob_sha1(pointer.encode() if self.lfs else self.data)

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def etag(self) -> str:
        """What resolve answers as ETag: sha256 for LFS files (as X-Linked-Etag on the Hub), git id otherwise."""
        return self.sha256 if self.lfs else self.sha1

    @property
    def preupload_oid(self) -> str:
        """The oid preupload reports: it must equal the client's local oid for an unchanged file."""
        return self.sha256 if self.lfs else git_blob_sha1(self.data)


@dataclass
class Commit:
    oid: str
    parent: str | None
    title: str
    description: str
    files: dict[str, Blob]  # the whole tree after this commit
    operations: list[dict[str, Any]]  # {"op": "add"|"delete", "path": ..., "lfs"/"size" for adds}
    author: str
    date: str

    @property
    def added(self) -> list[str]:
        return sorted(op["path"] for op in self.operations if op["op"] == "add")

    @property
    def deleted(self) -> list[str]:
        return sorted(op["path"] for op in self.operations if op["op"] == "delete")


def make_commit(
    parent: Commit | None,
    adds: dict[str, Blob],
    deletes: list[tuple[str, bool]],
    title: str,
    description: str,
    *,
    author: str,
) -> Commit:
    """The commit that applies `adds` and `deletes` ((path, is_folder)) on top of `parent`; refuses what the Hub refuses."""
    files = dict(parent.files) if parent is not None else {}
    operations: list[dict[str, Any]] = []
    for path, is_folder in deletes:
        doomed = [p for p in files if p.startswith(path.rstrip("/") + "/")] if is_folder else [path] * (path in files)
        if not doomed:
            raise HttpError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
        for p in doomed:
            del files[p]
            operations.append({"op": "delete", "path": p})
    for path, blob in adds.items():
        files[path] = blob
        operations.append({"op": "add", "path": path, "lfs": blob.lfs, "size": blob.size})
    lfs_added = sum(1 for blob in adds.values() if blob.lfs)
    if lfs_added > MAX_LFS_FILES_PER_COMMIT:
        raise HttpError(400, f"A commit may add at most {MAX_LFS_FILES_PER_COMMIT:,} LFS files, got {lfs_added:,}")
    _check_folders(files, adds)
    seed = json.dumps([parent.oid if parent else None, title, operations, next(_oids)]).encode()
    return Commit(
        hashlib.sha1(seed).hexdigest(),
        parent.oid if parent else None,
        title,
        description,
        files,
        operations,
        author,
        now_iso(),
    )


def _check_folders(files: dict[str, Blob], adds: dict[str, Blob]) -> None:
    """No folder the commit adds to may end up with more than MAX_ENTRIES_PER_FOLDER entries."""
    touched = {path.rsplit("/", 1)[0] if "/" in path else "" for path in adds}
    for folder in touched:
        prefix = folder + "/" if folder else ""
        entries = {p[len(prefix) :].split("/", 1)[0] for p in files if p.startswith(prefix)}
        if len(entries) > MAX_ENTRIES_PER_FOLDER:
            raise HttpError(
                400,
                f"Folder '{folder or '/'}' would hold {len(entries):,} entries; the maximum is "
                f"{MAX_ENTRIES_PER_FOLDER:,} per folder",
            )


@dataclass
class PullRequest:
    """A pull request: a discussion plus the ref `refs/pr/{num}` holding its commits."""

    num: int
    title: str
    description: str
    author: str
    base: Commit  # the commit the ref was opened from
    commits: list[Commit] = field(default_factory=list)  # the ref's own commits, oldest first
    status: str = "open"  # open | draft | closed | merged
    created_at: str = field(default_factory=now_iso)
    events: list[dict[str, Any]] = field(default_factory=list)
    merge_commit: str | None = None

    @property
    def head(self) -> Commit:
        return self.commits[-1] if self.commits else self.base

    @property
    def ref(self) -> str:
        return f"refs/pr/{self.num}"


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    commits: list[Commit] = field(default_factory=list)  # main, oldest first
    pulls: dict[int, PullRequest] = field(default_factory=dict)
    created_at: str = field(default_factory=now_iso)
    by_oid: dict[str, Commit] = field(default_factory=dict)  # every commit of every ref

    @property
    def head(self) -> Commit:
        return self.commits[-1]

    @property
    def url_path(self) -> str:
        return f"{URL_PREFIXES[self.repo_type]}{self.repo_id}"

    def next_discussion_num(self) -> int:
        return len(self.pulls) + 1  # discussions (not emulated) and pull requests share the numbering

    def append(self, commit: Commit, pull: PullRequest | None = None) -> Commit:
        """Add `commit` to main, or to the pull request's ref."""
        (pull.commits if pull is not None else self.commits).append(commit)
        self.by_oid[commit.oid] = commit
        return commit

    def resolve(self, revision: str) -> Commit | None:
        """`main` (or `HEAD`) is the head, `refs/pr/N` a pull request's head, a >= 7-char id that commit."""
        if revision in ("main", "HEAD", "refs/heads/main"):
            return self.head
        if revision.startswith("refs/pr/"):
            number = revision.removeprefix("refs/pr/")
            pull = self.pulls.get(int(number)) if number.isdigit() else None
            return pull.head if pull is not None else None
        if len(revision) >= 7:
            for oid, commit in self.by_oid.items():
                if oid.startswith(revision.lower()):
                    return commit
        return None

    def history(self, commit: Commit) -> list[Commit]:
        """`commit` and its ancestors, newest first."""
        chain = [commit]
        while chain[-1].parent is not None:
            chain.append(self.by_oid[chain[-1].parent])
        return chain


def _changed(before: dict[str, Blob], after: dict[str, Blob]) -> dict[str, Blob | None]:
    """path -> new blob (None: deleted) for every path that differs between two trees."""
    changes: dict[str, Blob | None] = {}
    for path in before.keys() | after.keys():
        old, new = before.get(path), after.get(path)
        if (old.sha1 if old else None) != (new.sha1 if new else None):
            changes[path] = new
    return changes


def merge(repo: Repo, pull: PullRequest, *, author: str) -> Commit:
    """Apply the pull request's changes onto main as one commit; HttpError 409 on conflicting paths."""
    ours = _changed(pull.base.files, pull.head.files)
    theirs = _changed(pull.base.files, repo.head.files)
    conflicts = sorted(
        p
        for p in ours.keys() & theirs.keys()
        if (ours[p].sha1 if ours[p] else None) != (theirs[p].sha1 if theirs[p] else None)
    )
    if conflicts:
        raise HttpError(
            409,
            f"Merge conflict in {len(conflicts)} file(s): {', '.join(conflicts[:5])}",
            body={"filesWithConflicts": conflicts},
        )
    adds = {path: blob for path, blob in ours.items() if blob is not None}
    deletes = [(path, False) for path, blob in ours.items() if blob is None and path in repo.head.files]
    return make_commit(repo.head, adds, deletes, f"{pull.title} (#{pull.num})", pull.description, author=author)


class CommitLimiter:
    """At most `limit` commits per repo in any `window_s` seconds of `clock`; the next one is told when to retry."""

    def __init__(self, limit: int, window_s: float, clock: Callable[[], float] = time.monotonic):
        self.limit, self.window_s, self.clock = limit, window_s, clock
        self._times: dict[tuple[str, str], deque[float]] = {}
        self.refused: list[int] = []  # the Retry-After of every 429 answered, in order

    def check(self, key: tuple[str, str]) -> None:
        """Raise the Hub's 429 when `key` has used its quota; otherwise do nothing (call `record` once applied)."""
        times = self._times.setdefault(key, deque())
        now = self.clock()
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if len(times) >= self.limit:
            wait = max(1, math.ceil(times[0] + self.window_s - now))
            self.refused.append(wait)
            raise HttpError(429, COMMIT_QUOTA_MESSAGE, headers={"Retry-After": str(wait)})

    def record(self, key: tuple[str, str]) -> None:
        self._times.setdefault(key, deque()).append(self.clock())
