"""A local publish (`--out`): a family's three repos switched in as one transaction.

A reader of a repo folder must see the old repo or the new one, never a new card beside old rows,
and a run killed at any moment must leave something the next run finishes (or undoes) by itself.
So each repo that changes is first laid out whole beside the target, in
`<root>/.rs-publish/<FAMILY>/new/<repo>` (new and changed files copied from the assembled repo,
unchanged ones hard-linked from the published folder: `prepare`), then a journal naming those folders is
written (the commit point), then each is switched with the published folder in one
`renameat2(RENAME_EXCHANGE)` (two renames where the filesystem cannot exchange), and the
transaction folder, now holding the old repos, is removed.

The next run of the family (`recover`, under the same lock) finds what a killed run left: without
a journal the folders laid out are incomplete or uncommitted, and are removed (the published
repos were not touched); with one, every switch not yet made is made. A switch is recognised as
made by the published folder's inode, which is the new folder's (recorded in the journal).
"""

from __future__ import annotations

import ctypes
import errno
import json
import logging
import os
import shutil
import sys
from pathlib import Path

from rs.errors import RsError, UsageError
from rs.hub import FileChange
from rs.store import write_json
from rs.util.writable import read_only_mount, why_unwritable, writable_hint

logger = logging.getLogger("rs.pipeline.publish")

CONTROL = ".rs-publish"
"""The folder beside the repos that holds each family's publish lock and transaction."""

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


class PublishLeftBroken(RsError):
    """A killed publish's journal names a folder that is gone: the transaction cannot be finished."""


def transaction(root: Path, family: str) -> Path:
    return root / CONTROL / family


def check_writable(root: Path, targets: list[Path], named: str) -> None:
    """Refuse before anything is switched when a repo folder cannot be replaced (a read-only folder in it), naming it."""
    folders = [root] if root.is_dir() else []
    folders += [Path(current) for target in targets if target.is_dir() for current, _, _ in os.walk(target)]
    for folder in folders:
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UsageError(
                f"{named} {root.parent}: cannot write in {folder} ({_why(folder)}), so the published "
                "repo there cannot be replaced",
                hint=(
                    f"{writable_hint(folder, named)}; nothing was changed"
                    if read_only_mount(folder)
                    else f"make it writable (chmod -R u+w {folder}) or publish to another {named}; nothing was changed"
                ),
            )


def _why(folder: Path) -> str:
    """A folder's mode that forbids writing, or its read-only mount."""
    return why_unwritable(folder) if read_only_mount(folder) else "read-only"


def prepare(assembled: Path, target: Path, changes: list[FileChange], new: Path) -> None:
    """Lay out in `new` the repo `target` becomes: `changes` applied (adds and changes from `assembled`, deletes left out)."""
    for change in changes:
        if change.action == "delete":
            continue
        dst = new / change.path
        dst.parent.mkdir(parents=True, exist_ok=True)
        if change.action == "unchanged":
            _link_or_copy(target / change.path, dst)
        else:
            _copy(assembled / change.path, dst)
    compared = {change.path for change in changes}
    if target.is_dir():  # files the publish does not touch (outside --cards-only's scope) stay
        for path in sorted(target.rglob("*")):
            rel = path.relative_to(target).as_posix()
            if path.is_file() and rel not in compared:
                (new / rel).parent.mkdir(parents=True, exist_ok=True)
                _link_or_copy(path, new / rel)
    new.mkdir(parents=True, exist_ok=True)  # a repo with nothing in scope is still a folder


def commit(root: Path, family: str, repos: list[str]) -> None:
    """Switch the repos laid out in `transaction(root, family)/new` into `root`: the journal first, then each repo."""
    txn = transaction(root, family)
    entries = [{"repo": repo, "inode": os.stat(txn / "new" / repo).st_ino} for repo in repos]
    _sync_dir(txn / "new")
    write_json(txn / "journal.json", {"family": family, "repos": entries})
    _sync_dir(txn)
    _finish(root, txn)


def recover(root: Path, family: str) -> list[str]:
    """Finish the publish a killed run committed, or remove what one left uncommitted; returns the repos switched now."""
    txn = transaction(root, family)
    if not txn.exists():
        return []
    switched = _finish(root, txn) if (txn / "journal.json").exists() else []
    if switched:
        logger.warning("finished the publish of %s that a stopped run had committed: %s", family, ", ".join(switched))
    _remove(txn)
    return switched


def abandon(root: Path, family: str) -> None:
    """Remove an uncommitted transaction (a failure before the journal was written); never raises over the real error."""
    txn = transaction(root, family)
    if not (txn / "journal.json").exists():
        _remove(txn)


def _finish(root: Path, txn: Path) -> list[str]:
    journal = json.loads((txn / "journal.json").read_text())
    switched = []
    for entry in journal["repos"]:
        if _switch(txn / "new" / entry["repo"], root / entry["repo"], entry["inode"], txn / "old" / entry["repo"]):
            switched.append(entry["repo"])
    _sync_dir(root)
    (txn / "journal.json").unlink()  # committed and done: what is left in `txn` is the old repos
    _remove(txn)
    return switched


def _switch(new: Path, target: Path, inode: int, old: Path) -> bool:
    """Put the folder `new` (inode `inode`) at `target`; False when it is there already."""
    if _inode(target) == inode:
        return False
    if _inode(new) != inode:
        raise PublishLeftBroken(
            f"a stopped publish committed {new} to replace {target}, but it is gone",
            hint=f"remove {new.parents[1]} and run the same command again: it publishes the repos whole",
        )
    if target.exists():
        try:
            exchange(new, target)
            return True
        except OSError as err:
            if err.errno not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
        # no atomic exchange on this filesystem: the old folder aside, then the new one in
        _remove(old)
        old.parent.mkdir(parents=True, exist_ok=True)
        os.rename(target, old)
    os.rename(new, target)
    return True


def exchange(a: Path, b: Path) -> None:
    """Swap two paths in one step (Linux `renameat2(RENAME_EXCHANGE)`); OSError(ENOSYS) where there is none."""
    sys.audit(
        "rs.pipeline.publish.exchange", str(a), str(b)
    )  # a test can stop the run at this rename as at os.rename's
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(a), None, str(b))


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _inode(path: Path) -> int | None:
    try:
        return os.lstat(path).st_ino
    except FileNotFoundError:
        return None


def _copy(src: Path, dst: Path) -> None:
    """Copy and flush to disk: the journal written after it must never name a file still in the page cache only."""
    shutil.copyfile(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        _copy(src, dst)


def _sync_dir(folder: Path) -> None:
    """fsync a folder, so that the renames in it outlive a power cut (best effort: some filesystems refuse)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
