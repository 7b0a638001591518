"""Publish a local folder, laid out exactly like a Hub dataset repo, as one idempotent commit.

Why not `HfApi.upload_folder`: in huggingface_hub 2.x it is the large-upload pipeline, which may split an
upload into several commits (a half-published dataset would be visible in between) and, like
`create_commit`, never retries the commit POST. Here:

- the plan compares every local file with the remote tree by hash (sha256 for LFS files, the git blob id
  for regular ones), so unchanged files are neither uploaded nor committed;
- all additions, changes and deletions go into ONE `create_commit`, pinned with `parent_commit` to the head
  the plan was made against, so readers see the old dataset or the new one, never a mix;
- every retry (5xx, dropped connection, 409/412 conflict) re-plans from the remote state first, so a commit
  the server applied before its answer was lost is found "already there" and is not committed twice.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

import huggingface_hub
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError
from huggingface_hub.hf_api import RepoFile

try:  # huggingface_hub 2.x speaks httpx2, 1.x httpx: only their transport errors are needed here
    import httpx2 as _http
except ImportError:  # pragma: no cover
    import httpx as _http  # type: ignore[no-redef]

from rs import __version__
from rs.errors import RsError, UsageError

logger = logging.getLogger(__name__)

REPO_TYPE = "dataset"
DEFAULT_COMMIT_MESSAGE = "Publish dataset"
PROTECTED_REMOTE_FILES = frozenset({".gitattributes"})  # the Hub's LFS rules: never ours to delete
BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 30.0
_HASH_CHUNK = 8 * 1024 * 1024
_TRANSIENT_TRANSPORT_ERRORS = (_http.TimeoutException, _http.NetworkError, _http.RemoteProtocolError)

# Patched by tests so that retries do not really wait.
_sleep: Callable[[float], None] = time.sleep

Action = Literal["add", "change", "delete", "unchanged"]
T = TypeVar("T")


class MissingTokenError(UsageError, RuntimeError):
    """No Hugging Face token was found where the Hub clients look for one."""


class PublishError(RsError, RuntimeError):
    """Publishing failed; the message says why and what to do. Re-running is always safe."""

    exit_code = 2


@dataclass
class FileChange:
    path: str  # path in the repo, POSIX
    action: Action
    size: int  # local size in bytes (the remote size for a delete)


@dataclass
class PublishResult:
    repo_id: str
    changes: list[FileChange]
    commit_url: str | None  # None when nothing was committed (up to date, or a dry run)

    @property
    def committed(self) -> bool:
        return self.commit_url is not None

    def count(self, action: Action) -> int:
        return sum(1 for change in self.changes if change.action == action)


# ------------------------------------------------------------------------------------------ tokens


def resolve_token(token: str | None = None) -> str:
    """The token to publish with: `token`, else `HF_TOKEN`, else the one stored by `hf auth login`.

    Resolved up front (rather than letting the client find none and answer 401 per repo) so a missing
    login fails before any work, with a message that says how to fix it.
    """
    for candidate in (token, os.environ.get("HF_TOKEN"), huggingface_hub.get_token()):
        if candidate and candidate.strip():
            return candidate.strip()
    raise MissingTokenError(
        "No Hugging Face token found. Run `hf auth login` (or set the HF_TOKEN environment variable) "
        "with a token that has write access to the target namespace, then run the command again."
    )


def _optional_token(token: str | None) -> str | None:
    try:
        return resolve_token(token)
    except MissingTokenError:
        return None


def _redact(text: str, token: str | None) -> str:
    """Mask the token in text that leaves this module (exception messages, log lines)."""
    return text.replace(token, "hf_***") if token else text


# ------------------------------------------------------------------------------------ local / remote


@dataclass
class _LocalFile:
    path: str
    abspath: Path
    size: int
    _sha1: str | None = field(default=None, repr=False)
    _sha256: str | None = field(default=None, repr=False)

    def git_sha1(self) -> str:
        """The git blob id, `sha1(b"blob <size>\\0" + content)`: the Hub's oid for a regular file."""
        if self._sha1 is None:
            digest = hashlib.sha1(b"blob %d\0" % self.size)
            self._sha1 = _hash_file(self.abspath, digest)
        return self._sha1

    def sha256(self) -> str:
        """The content sha256: the Hub's LFS oid."""
        if self._sha256 is None:
            self._sha256 = _hash_file(self.abspath, hashlib.sha256())
        return self._sha256


@dataclass(frozen=True)
class _RemoteFile:
    path: str
    size: int
    blob_id: str  # git oid (of the LFS pointer for LFS files)
    sha256: str | None  # set for LFS files


@dataclass(frozen=True)
class _RemoteState:
    exists: bool
    head: str | None
    files: dict[str, _RemoteFile]
    private: bool | None = None


def _hash_file(path: Path, digest: "hashlib._Hash") -> str:
    with path.open("rb") as file:
        while chunk := file.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _is_ignored(path: str) -> bool:
    """Never published: git internals and huggingface_hub's local-dir metadata."""
    return ".git" in path.split("/") or path.startswith(".cache/huggingface/")


def _scan_folder(folder: Path) -> dict[str, _LocalFile]:
    if not folder.is_dir():
        raise PublishError(f"{folder} is not a folder: build or stage the repo first, then publish it.")
    files: dict[str, _LocalFile] = {}
    for abspath in sorted(folder.rglob("*")):
        if not abspath.is_file():
            continue
        path = abspath.relative_to(folder).as_posix()
        if not _is_ignored(path):
            files[path] = _LocalFile(path, abspath, abspath.stat().st_size)
    if not files:
        # An empty folder would otherwise plan to delete everything on the Hub.
        raise PublishError(f"{folder} has no files to publish: refusing to empty the remote repo.")
    return files


def _remote_state(api: HfApi, repo_id: str) -> _RemoteState:
    """The head commit and every file at that commit (read at the sha, so both describe the same tree)."""
    try:
        info = api.repo_info(repo_id, repo_type=REPO_TYPE)
    except RepositoryNotFoundError:
        return _RemoteState(exists=False, head=None, files={})
    files: dict[str, _RemoteFile] = {}
    if info.sha is not None:
        for entry in api.list_repo_tree(repo_id, repo_type=REPO_TYPE, revision=info.sha, recursive=True, expand=False):
            if isinstance(entry, RepoFile):
                sha256 = entry.lfs.sha256 if entry.lfs is not None else None
                files[entry.path] = _RemoteFile(entry.path, entry.size, entry.blob_id, sha256)
    return _RemoteState(exists=True, head=info.sha, files=files, private=info.private)


def _selected(path: str, only: Sequence[str] | None) -> bool:
    """`only` entries are exact paths, glob patterns (`images/*.png`) or folders (`images/`)."""
    if only is None:
        return True
    return any(path == p or fnmatch.fnmatchcase(path, p) or (p.endswith("/") and path.startswith(p)) for p in only)


def _same_content(local: _LocalFile, remote: _RemoteFile) -> bool:
    if local.size != remote.size:  # cheap, and spares hashing most changed files
        return False
    if remote.sha256 is not None:
        return local.sha256() == remote.sha256
    return local.git_sha1() == remote.blob_id


def _diff(local: dict[str, _LocalFile], remote: dict[str, _RemoteFile], *, only: Sequence[str] | None,
          delete_extra: bool) -> list[FileChange]:
    changes: list[FileChange] = []
    for path, file in local.items():
        if not _selected(path, only):
            continue
        theirs = remote.get(path)
        if theirs is None:
            changes.append(FileChange(path, "add", file.size))
        else:
            changes.append(FileChange(path, "unchanged" if _same_content(file, theirs) else "change", file.size))
    if delete_extra:
        for path, theirs in remote.items():
            if path in local or path in PROTECTED_REMOTE_FILES or _is_ignored(path) or not _selected(path, only):
                continue
            changes.append(FileChange(path, "delete", theirs.size))
    return sorted(changes, key=lambda change: change.path)


def plan(api: HfApi, folder: Path, repo_id: str, *, only: Sequence[str] | None = None,
         delete_extra: bool = True) -> list[FileChange]:
    """What publishing `folder` to `repo_id` would do, file by file (a missing repo plans all adds).

    `only` restricts the whole plan (adds, changes and deletes) to matching paths: cards-only publishing
    passes the card files and leaves the data alone. Remote `.gitattributes` is never deleted.
    """
    return _diff(_scan_folder(Path(folder)), _remote_state(api, repo_id).files, only=only, delete_extra=delete_extra)


# ------------------------------------------------------------------------------------------ retries


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and its causes: the client wraps LFS upload failures in a RuntimeError."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _retry_kind(exc: BaseException) -> Literal["conflict", "transient"] | None:
    for cause in _causes(exc):
        if isinstance(cause, OfflineModeIsEnabled):
            return None
        if isinstance(cause, HfHubHTTPError) and cause.response is not None:
            status = cause.response.status_code
            if status in (409, 412):  # someone committed since we planned: re-plan against the new head
                return "conflict"
            if status in (408, 429) or status >= 500:
                return "transient"
            return None
        if isinstance(cause, _TRANSIENT_TRANSPORT_ERRORS):
            return "transient"
    return None


def _retry_after(exc: BaseException) -> float | None:
    for cause in _causes(exc):
        if isinstance(cause, HfHubHTTPError) and cause.response is not None:
            value = cause.response.headers.get("Retry-After", "")
            return float(value) if value.isdigit() else None
    return None


def _first_line(exc: BaseException, token: str | None) -> str:
    text = str(exc).strip().splitlines()
    return _redact(f"{type(exc).__name__}: {text[0] if text else ''}", token)


def _fatal(exc: Exception, repo_id: str, token: str | None) -> PublishError | None:
    """A PublishError that says what to do for errors a retry cannot fix; None for unexpected errors."""
    for cause in _causes(exc):
        if isinstance(cause, OfflineModeIsEnabled):
            return PublishError(f"Cannot publish {repo_id}: HF_HUB_OFFLINE is set. Unset it and run again.")
        if isinstance(cause, ValueError) and "Invalid metadata in README.md" in str(cause):
            return PublishError(_redact(f"The Hub rejected the metadata of {repo_id}'s README.md: {cause} "
                                        "Fix the YAML header of README.md and publish again.", token))
        if isinstance(cause, HfHubHTTPError):
            status = cause.response.status_code if cause.response is not None else None
            if status in (401, 403) or isinstance(cause, RepositoryNotFoundError):
                hint = (f"Check that your token has write access to '{repo_id.split('/')[0]}' "
                        "(`hf auth whoami`; create a write token at https://huggingface.co/settings/tokens).")
            else:
                hint = "Re-running is safe: files already on the Hub are neither uploaded nor committed again."
            return PublishError(f"Publishing {repo_id} failed ({_first_line(cause, token)}). {hint}")
    return None


def _retrying(attempt: Callable[[int], T], *, repo_id: str, token: str | None, max_attempts: int) -> T:
    """Run `attempt(n)` until it returns; retry transient errors and conflicts with exponential backoff."""
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    for n in range(1, max_attempts + 1):
        try:
            return attempt(n)
        except Exception as exc:
            kind = _retry_kind(exc)
            if kind is None:
                error = _fatal(exc, repo_id, token)
                if error is None:
                    raise
                raise error from exc
            if n == max_attempts:
                raise PublishError(
                    f"Gave up publishing {repo_id} after {max_attempts} attempts (last error: "
                    f"{_first_line(exc, token)}). Re-running is safe: files already on the Hub are neither "
                    "uploaded nor committed again."
                ) from exc
            delay = min(BACKOFF_BASE_S * 2 ** (n - 1), BACKOFF_MAX_S)
            delay = max(delay, _retry_after(exc) or 0.0)
            reason = "the repo changed since the plan" if kind == "conflict" else "a transient error"
            logger.warning("%s: %s (%s); re-planning and retrying in %.1fs (attempt %d/%d)", repo_id, reason,
                           _first_line(exc, token), delay, n + 1, max_attempts)
            _sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


# ------------------------------------------------------------------------------------------ publish


def _operations(changes: list[FileChange], local: dict[str, _LocalFile]) -> list[CommitOperationAdd | CommitOperationDelete]:
    """Fresh operations for one commit (the client mutates them, so never reuse them across attempts)."""
    operations: list[CommitOperationAdd | CommitOperationDelete] = []
    for change in changes:
        if change.action == "delete":
            operations.append(CommitOperationDelete(path_in_repo=change.path, is_folder=False))
        elif change.action in ("add", "change"):
            file = local[change.path]
            # A path, not bytes: the client streams it, so shards need not fit in memory.
            operation = CommitOperationAdd(path_in_repo=change.path, path_or_fileobj=str(file.abspath))
            if file._sha256 is not None:  # already hashed while planning: spare the client a second pass
                operation.upload_info.sha256 = bytes.fromhex(file._sha256)
            operations.append(operation)
    return operations


def _summary(changes: Sequence[FileChange]) -> str:
    counts = {action: sum(1 for c in changes if c.action == action) for action in ("add", "change", "delete", "unchanged")}
    return (f"{counts['add']} added, {counts['change']} changed, {counts['delete']} deleted, "
            f"{counts['unchanged']} unchanged")


def _commit_url(api: HfApi, repo_id: str, oid: str) -> str:
    return f"{api.endpoint}/datasets/{repo_id}/commit/{oid}"


def publish_folder(folder: str | Path, repo_id: str, *, token: str | None = None, private: bool = False,
                   only: Sequence[str] | None = None, delete_extra: bool = True, dry_run: bool = False,
                   commit_message: str = DEFAULT_COMMIT_MESSAGE, endpoint: str | None = None,
                   max_attempts: int = 5) -> PublishResult:
    """Make the dataset repo `repo_id` hold exactly the files of `folder`, in at most one commit.

    Creates the repo (`private` only applies then), uploads added and changed files, deletes remote
    files that are not in `folder` (unless `delete_extra=False`; never `.gitattributes`), all in a single
    commit whose parent is the head the plan was made against. Nothing is committed when nothing changed.
    `only` limits everything to matching paths (exact, glob or `folder/`). `dry_run` only plans: it
    creates nothing and works without a token for public repos.

    Raises MissingTokenError without a token (except in a dry run) and PublishError when the Hub refuses
    or keeps failing after `max_attempts`.
    """
    folder = Path(folder)
    local = _scan_folder(folder)

    if dry_run:
        dry_token = _optional_token(token)
        if dry_token is None:
            logger.warning("%s: no Hugging Face token, planning against the public view of the Hub "
                           "(a private repo looks missing).", repo_id)
        api = HfApi(endpoint=endpoint, token=dry_token or False, library_name="rs", library_version=__version__)

        def dry_attempt(_: int) -> PublishResult:
            remote = _remote_state(api, repo_id)
            result = PublishResult(repo_id, _diff(local, remote.files, only=only, delete_extra=delete_extra), None)
            logger.info("Dry run, nothing published:\n%s", format_plan(result))
            return result

        return _retrying(dry_attempt, repo_id=repo_id, token=dry_token, max_attempts=max_attempts)

    token = resolve_token(token)
    api = HfApi(endpoint=endpoint, token=token, library_name="rs", library_version=__version__)
    repo_ready = False
    pending: tuple[list[FileChange], str | None] | None = None  # the plan of an attempt whose commit failed

    def attempt(n: int) -> PublishResult:
        nonlocal repo_ready, pending
        if not repo_ready:
            api.create_repo(repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True)
            repo_ready = True
        remote = _remote_state(api, repo_id)
        if private and remote.private is False:
            logger.warning("%s already exists and is public; publishing leaves its visibility unchanged.", repo_id)
        changes = _diff(local, remote.files, only=only, delete_extra=delete_extra)
        todo = [change for change in changes if change.action != "unchanged"]
        if not todo:
            if pending is not None and remote.head != pending[1]:
                # The last attempt failed after the server applied its commit (a lost answer): report that
                # commit rather than "nothing to do", and do not commit the same change again.
                logger.info("%s: the previous attempt's commit reached the Hub despite the error; not repeating it.",
                            repo_id)
                return PublishResult(repo_id, pending[0], _commit_url(api, repo_id, remote.head or ""))
            logger.info("%s is up to date (%s); nothing to commit.", repo_id, _summary(changes))
            return PublishResult(repo_id, changes, None)
        pending = (changes, remote.head)
        logger.info("Publishing %s to %s (attempt %d): %s", folder, repo_id, n, _summary(changes))
        info = api.create_commit(repo_id, _operations(todo, local), commit_message=commit_message,
                                 commit_description=_summary(changes), repo_type=REPO_TYPE,
                                 parent_commit=remote.head)
        logger.info("%s: committed %s", repo_id, info.commit_url)
        return PublishResult(repo_id, changes, info.commit_url)

    return _retrying(attempt, repo_id=repo_id, token=token, max_attempts=max_attempts)


# ------------------------------------------------------------------------------------------ display


def _human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")  # pragma: no cover


def format_plan(result_or_changes: PublishResult | Sequence[FileChange], *, repo_id: str | None = None,
                show_unchanged: bool = False) -> str:
    """A human-readable plan: one line per added, changed or deleted file, with sizes.

    Given a PublishResult (or `repo_id`), it starts with a summary line for the repo; given bare changes it
    is just the indented file lines, for callers that print their own header.
    """
    if isinstance(result_or_changes, PublishResult):
        changes, repo_id, commit_url = result_or_changes.changes, result_or_changes.repo_id, result_or_changes.commit_url
    else:
        changes, commit_url = list(result_or_changes), None
    marks = {"add": "+", "change": "~", "delete": "-", "unchanged": "="}
    shown = [c for c in changes if show_unchanged or c.action != "unchanged"]
    width = max((len(c.path) for c in shown), default=0)
    lines = []
    if repo_id is not None:
        parts = []
        for action, label in (("add", "to add"), ("change", "to change"), ("delete", "to delete")):
            selected = [c for c in changes if c.action == action]
            if selected:
                parts.append(f"{len(selected)} {label} ({_human_size(sum(c.size for c in selected))})")
        unchanged = sum(1 for c in changes if c.action == "unchanged")
        parts.append(f"{unchanged} unchanged")
        lines.append(f"datasets/{repo_id}: " + (", ".join(parts) if len(parts) > 1 else f"up to date ({parts[0]})"))
    for change in shown:
        lines.append(f"    {marks[change.action]} {change.action:<9} {change.path:<{width}}  {_human_size(change.size):>9}")
    if not shown and repo_id is None:
        lines.append("    (nothing to add, change or delete)")
    if commit_url:
        lines.append(f"    committed: {commit_url}")
    return "\n".join(lines)
