"""vLLM's temporary files in a folder of the engine's own: removed with the engine, and after a kill by the next start.

Each vLLM engine start (0.32) rendezvous its distributed state through a file, `{tempfile.gettempdir()}/vllm_dist_<uuid>`
(`vllm.utils.network_utils.get_file_store_init_method`, a torch `FileStore`), and its client and engine core talk over
ZeroMQ sockets made there too. torch removes the file when its last user closes the store; a run that was killed never
does, and the system's temporary folder kept one file per killed engine start.

So an engine starts inside `engine_temp_dir()`: a folder `rs-vllm-<pid>-<random>` in the system's temporary folder is
`tempfile`'s folder and `TMPDIR` while vLLM starts (the engine core, spawned or forked then, inherits either), and the
engine's files are made there. The folder holds a lock (`flock`) for as long as its process lives; `release` removes it
when the engine is shut down, and every start first removes the folders whose lock nobody holds: those of runs that
were killed (the kernel drops a dead process's locks, so a reused pid cannot keep a folder alive).

While an engine starts, any temporary file another thread of the process makes goes there too, and goes with it.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

logger = logging.getLogger(__name__)

PREFIX = "rs-vllm-"
LOCK = ".lock"
_HELD: dict[Path, int] = {}
"""This process's engine folders and the descriptor holding each one's lock."""


def system_temp_dir() -> Path:
    """The temporary folder vLLM would use (`TMPDIR`, else the platform's), not an engine folder a start set meanwhile."""
    folder = Path(tempfile.gettempdir())
    return folder.parent if folder in _HELD else folder


def remove_stale(root: Path | None = None) -> list[Path]:
    """Remove the engine folders under `root` (the system's temporary folder) that no living process holds."""
    removed = []
    for folder in sorted((root or system_temp_dir()).glob(f"{PREFIX}*")):
        if folder in _HELD or not folder.is_dir() or folder.is_symlink():
            continue
        try:
            fd = os.open(folder / LOCK, os.O_RDONLY)
        except FileNotFoundError:  # a folder made, killed before its lock: no process holds it
            fd = None
        except OSError:
            continue
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a living engine's
        finally:
            if fd is not None:
                os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    if removed:
        logger.info("removed %d temporary folder(s) of engines whose runs were killed", len(removed))
    return removed


def make() -> Path:
    """A new engine folder in the system's temporary folder, locked by this process until `release`."""
    root = system_temp_dir()
    remove_stale(root)
    folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root))
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _HELD[folder] = fd
    _exit_hook()
    return folder


def release(folder: Path | None) -> None:
    """Remove an engine folder of this process (its engine shut down, or the process ending)."""
    if folder is None:
        return
    fd = _HELD.pop(folder, None)
    shutil.rmtree(folder, ignore_errors=True)
    if fd is not None:
        os.close(fd)


@contextmanager
def engine_temp_dir(folder: Path) -> Iterator[Path]:
    """`folder` as `tempfile`'s folder and `TMPDIR` within the block (an engine's start), as they were after it."""
    before_dir, before_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = str(folder)
    os.environ["TMPDIR"] = str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = before_dir
        if before_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before_env


def _release_all() -> None:
    for folder in list(_HELD):
        release(folder)


_hooked = False


def _exit_hook() -> None:
    """At the exit, the folders of engines left to it go too (torch's file store does not mind its file gone)."""
    global _hooked
    if not _hooked:
        atexit.register(_release_all)
        _hooked = True
