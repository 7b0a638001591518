"""What publishing a folder would change in a repo, file by file: the local files, the target's, their diff.

The one comparison of every publish target. A local file is compared with the Hub's by hash (sha256 for
LFS files, the git blob id for regular ones), so an unchanged file is neither uploaded nor committed; the
Hub side is read at one commit (`main`, or a pull request's head), so the head and the files describe the
same tree. A local target (`rs publish --out`) is a folder laid out as the repo: its files are compared
by sha256, hashed only where the sizes agree.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from huggingface_hub import HfApi
from huggingface_hub.errors import RepositoryNotFoundError
from huggingface_hub.hf_api import RepoFile

from rs.hub.retry import PublishError

REPO_TYPE = "dataset"
PROTECTED_REMOTE_FILES = frozenset({".gitattributes"})  # the Hub's LFS rules: never ours to delete
_HASH_CHUNK = 8 * 1024 * 1024

Action = Literal["add", "change", "delete", "unchanged", "upload"]
"""`upload`: a dry run offline, the Hub not read: a file uploaded unless the Hub already holds it."""


@dataclass
class FileChange:
    path: str  # path in the repo, POSIX
    action: Action
    size: int  # local size in bytes (the remote size for a delete)


@dataclass
class LocalFile:
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

    @property
    def hashed_sha256(self) -> str | None:
        """The sha256 if it was already computed (while compared), so the client need not read the file again."""
        return self._sha256


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    blob_id: str  # git oid (of the LFS pointer for LFS files)
    sha256: str | None  # set for LFS files


@dataclass(frozen=True)
class RemoteState:
    exists: bool
    head: str | None
    files: dict[str, RemoteFile]
    private: bool | None = None


def _hash_file(path: Path, digest: "hashlib._Hash") -> str:
    with path.open("rb") as file:
        while chunk := file.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _is_ignored(path: str) -> bool:
    """Never published: git internals and huggingface_hub's local-dir metadata."""
    return ".git" in path.split("/") or path.startswith(".cache/huggingface/")


def _walk(folder: Path) -> dict[str, LocalFile]:
    files: dict[str, LocalFile] = {}
    for abspath in sorted(folder.rglob("*")):
        if not abspath.is_file():
            continue
        path = abspath.relative_to(folder).as_posix()
        if not _is_ignored(path):
            files[path] = LocalFile(path, abspath, abspath.stat().st_size)
    return files


def scan_folder(folder: Path) -> dict[str, LocalFile]:
    """Every file of `folder` to publish, by its path in the repo; refuses a missing or empty folder."""
    if not folder.is_dir():
        raise PublishError(f"{folder} is not a folder: build or assemble the repo first, then publish it.")
    files = _walk(folder)
    if not files:
        # An empty folder would otherwise be compared into deleting everything on the Hub.
        raise PublishError(f"{folder} has no files to publish: refusing to empty the remote repo.")
    return files


def folder_state(folder: Path) -> dict[str, LocalFile]:
    """The files a local target's repo folder holds now, the other side of its diff (none before its first publish)."""
    return _walk(folder) if folder.is_dir() else {}


def remote_state(api: HfApi, repo_id: str, revision: str | None = None) -> RemoteState:
    """The head of `revision` (main by default) and every file at that commit, read at the sha."""
    try:
        info = api.repo_info(repo_id, repo_type=REPO_TYPE, revision=revision)
    except RepositoryNotFoundError:
        return RemoteState(exists=False, head=None, files={})
    files: dict[str, RemoteFile] = {}
    if info.sha is not None:
        for entry in api.list_repo_tree(repo_id, repo_type=REPO_TYPE, revision=info.sha, recursive=True, expand=False):
            if isinstance(entry, RepoFile):
                sha256 = entry.lfs.sha256 if entry.lfs is not None else None
                files[entry.path] = RemoteFile(entry.path, entry.size, entry.blob_id, sha256)
    return RemoteState(exists=True, head=info.sha, files=files, private=info.private)


def selected(path: str, only: Sequence[str] | None) -> bool:
    """`only` entries are exact paths, glob patterns (`images/*.png`) or folders (`images/`)."""
    if only is None:
        return True
    return any(path == p or fnmatch.fnmatchcase(path, p) or (p.endswith("/") and path.startswith(p)) for p in only)


def _same_content(local: LocalFile, remote: RemoteFile | LocalFile) -> bool:
    if local.size != remote.size:  # cheap, and spares hashing most changed files
        return False
    if isinstance(remote, LocalFile):  # a local target's file
        return local.sha256() == remote.sha256()
    if remote.sha256 is not None:
        return local.sha256() == remote.sha256
    return local.git_sha1() == remote.blob_id


def diff(
    local: dict[str, LocalFile],
    remote: Mapping[str, RemoteFile | LocalFile],
    *,
    only: Sequence[str] | None,
    delete_extra: bool,
) -> list[FileChange]:
    """One FileChange per path in scope (unchanged ones included), sorted by path.

    `remote`: the Hub's files (`remote_state`) or a local target's (`folder_state`). `only` restricts everything (adds,
    changes and deletes) to matching paths: cards-only publishing passes the card files and leaves the data alone.
    """
    changes: list[FileChange] = []
    for path, file in local.items():
        if not selected(path, only):
            continue
        theirs = remote.get(path)
        if theirs is None:
            changes.append(FileChange(path, "add", file.size))
        else:
            changes.append(FileChange(path, "unchanged" if _same_content(file, theirs) else "change", file.size))
    if delete_extra:
        for path, theirs in remote.items():
            if path in local or path in PROTECTED_REMOTE_FILES or _is_ignored(path) or not selected(path, only):
                continue
            changes.append(FileChange(path, "delete", theirs.size))
    return sorted(changes, key=lambda change: change.path)


def fingerprint(local: dict[str, LocalFile], *, only: Sequence[str] | None, delete_extra: bool) -> str:
    """The identity of the state a publish brings the repo to: every file in scope by path and sha256.

    A pull request carries it in its title, so a later run knows whether the pull request holds this
    build (resume it) or an older one (close it). Hashes every file in scope once (kept for the upload).
    """
    digest = hashlib.sha256(repr((sorted(only) if only is not None else None, delete_extra)).encode())
    for path, file in sorted(local.items()):
        if selected(path, only):
            digest.update(f"{path}\0{file.sha256()}\n".encode())
    return digest.hexdigest()


def file_changes(
    api: HfApi, folder: Path, repo_id: str, *, only: Sequence[str] | None = None, delete_extra: bool = True
) -> list[FileChange]:
    """What publishing `folder` to the Hub repo `repo_id` would do, file by file (a missing repo: all adds).

    `only` as in `diff`. Remote `.gitattributes` is never deleted.
    """
    return diff(scan_folder(Path(folder)), remote_state(api, repo_id).files, only=only, delete_extra=delete_extra)
