"""Why a folder cannot be written, said as the cause it is: a read-only file system is not a permission.

`os.access(folder, W_OK)` is False, and a write fails, on a file system mounted read-only whoever runs (root too,
whose permission bits look fine): `access` says EROFS, and a message built on "cannot write" said "permission denied",
sending the user to `chmod`, which cannot help. The mount's own flag (`os.statvfs`'s `ST_RDONLY`) tells them apart.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


def read_only_mount(folder: Path) -> bool:
    """Whether `folder` (an existing path) is on a file system mounted read-only."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs (Windows), or the path went away
        return False


def why_unwritable(folder: Path, err: OSError | None = None) -> str:
    """Why `folder` cannot be written, in words: `read-only file system`, `permission denied`, or the error's own."""
    if read_only_mount(folder) or (err is not None and err.errno == errno.EROFS):
        return "its file system is mounted read-only"
    if err is not None and err.errno not in (errno.EACCES, errno.EPERM, None):
        return err.strerror or str(err)
    return "permission denied"


def writable_hint(folder: Path, named: str) -> str:
    """What to do about it: another place on a writable file system, or permissions that can be changed."""
    if read_only_mount(folder):
        return f"give {named} a folder on a file system mounted read-write (`findmnt -T {folder}` shows the mount)"
    return f"give {named} a folder you can write in"
