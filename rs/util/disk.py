"""A full disk, said plainly: which store could not be written, where, and how much room is left.

Every store of a build is written beside its previous complete state (a `.tmp` folder or file,
renamed when whole), so a write that runs out of space leaves the last complete state readable and
the stage can simply run again once there is room. What is left to do is to tell the user: the
libraries that write (pyarrow, SQLite, `datasets`) each say "no space" in their own way, often
wrapped in an error of their own; `writing` recognises them all and raises one `DiskFull` that
names the store and its path.
"""

from __future__ import annotations

import errno
import shutil
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from rs.errors import RsError, causes
from rs.util.sizes import format_bytes

_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_FULL_TEXTS = ("no space left on device", "disk quota exceeded", "database or disk is full", "not enough disk space")
_SQLITE_FULL = 13


class DiskFull(RsError):
    """A store could not be written for want of space; what was complete before is kept."""

    def __init__(self, what: str, path: Path, flag: str | None = None):
        self.what, self.path = what, Path(path)
        free = free_bytes(self.path)
        room = f"; {format_bytes(free)} free there now" if free is not None else ""
        super().__init__(
            f"no space left on device: could not write {what} at {self.path}{room}",
            hint=f"free some space on that disk (or point {flag or '--build-dir or --cache'} elsewhere), then run the same "
            "command again: the stages finished before are kept and nothing half-written is read back",
        )


def is_disk_full(error: BaseException) -> bool:
    """Whether `error`, or an error it was raised from, says the disk (or the user's quota) is full."""
    for current in causes(error):
        if isinstance(current, OSError) and current.errno in _FULL_ERRNOS:
            return True
        if isinstance(current, sqlite3.Error) and (getattr(current, "sqlite_errorcode", 0) & 0xFF) == _SQLITE_FULL:
            return True
        if isinstance(current, (OSError, sqlite3.Error)) and any(text in str(current).lower() for text in _FULL_TEXTS):
            return True  # pyarrow and `datasets` (its own check of free space) say it only in their text
    return False


@contextmanager
def writing(what: str, path: Path, *, flag: str | None = None) -> Iterator[None]:
    """Turn a full disk inside the block into `DiskFull(what, path)`; every other error passes unchanged.

    `flag`: the option that moves `path` elsewhere (`--out`), named in the hint; by default the build's.
    """
    try:
        yield
    except DiskFull:
        raise
    except Exception as err:
        if not is_disk_full(err):
            raise
        raise DiskFull(what, path, flag) from err


def free_bytes(path: Path) -> int | None:
    """Free bytes on the filesystem holding `path` (or its nearest existing parent); None when unknown."""
    for candidate in (path, *path.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None
