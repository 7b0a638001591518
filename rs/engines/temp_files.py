"""vLLM's `vllm_dist_*` files: recorded with the process that made them, removed when it is done, or by the next start.

Each vLLM engine start (0.32) rendezvous its distributed state through a torch `FileStore` at
`{tempfile.gettempdir()}/vllm_dist_<uuid>` (`vllm.utils.network_utils.get_file_store_init_method`), made in the
process that runs the engine core: this one (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) or the core's own. torch removes the
file when the store is destroyed; a run killed with SIGKILL never does, nor does a process that leaves its in-process
engine to the exit (`VLLMCore.shutdown`), and the system's temporary folder kept one file per such start for good.

Nothing of the process's temporary-file state is changed (an earlier attempt made the engine's files in a folder of
its own by pointing `tempfile` and `TMPDIR` there during a start, and another in-process vLLM engine then lost its
model-parallel state). Instead each start notes the files it made: the store of the process's distributed state when
the core runs here (its exact path, from torch), else the `vllm_dist_*` files that appeared in the temporary folder
during the start. They are written, one path a line, in a manifest of the process's own,
`{tmp}/rs-vllm-files/<pid>`, which the process holds locked (`flock`) as long as it lives. Then:

- at an engine's teardown, its files still there are removed, except the store this process's distributed state
  still uses (torch removes that one itself when it destroys it);
- at the exit, the process's files still there are removed (torch's store does not mind its file gone: its destructor
  checks the file first);
- every start first reads the manifests nobody holds locked (their process died: the kernel drops a dead process's
  locks, so a reused pid keeps nothing alive) and removes the files they name, then the manifests.

A manifest is read back, so it is trusted with nothing: only a name `vllm_dist_<32 hex>`, directly in the manifest's
own temporary folder, and a regular file (not a link) is removed. A file another living process's manifest also names
(two starts at once, the other's file seen appearing during this one's) is left to that process.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Iterable

logger = logging.getLogger(__name__)

FOLDER = "rs-vllm-files"
"""The manifests' folder, in the temporary folder vLLM uses."""
STORE = re.compile(r"vllm_dist_[0-9a-f]{32}")
"""The name of a file vLLM makes there (`vllm_dist_{uuid4().hex}`); nothing else is ever removed."""


class Manifest:
    """This process's manifest in one temporary folder: the files its engine starts made, held locked while it lives."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.path = tmp / FOLDER / str(os.getpid())
        self.path.parent.mkdir(mode=0o700, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.files: set[Path] = set()

    def add(self, files: Iterable[Path]) -> None:
        self.files.update(files)
        self._write()

    def remove_gone_and(self, removable: Iterable[Path]) -> None:
        """Remove `removable` of this manifest's files but those another living process names too, and forget those no
        longer there."""
        others = _manifests(self.tmp)[0]
        for path in set(removable) & self.files:
            if str(path) not in others:
                _remove(path)
        self.files = {p for p in self.files if os.path.lexists(p)}
        self._write()

    def _write(self) -> None:
        data = "".join(f"{p}\n" for p in sorted(self.files)).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)


_MANIFESTS: dict[Path, Manifest] = {}
"""This process's manifests, by temporary folder (normally one)."""
_PID = os.getpid()


def system_temp_dir() -> Path:
    """The folder vLLM makes its `vllm_dist_*` files in (`tempfile.gettempdir()`, as vLLM calls it)."""
    return Path(tempfile.gettempdir())


def stores(tmp: Path) -> set[Path]:
    """The `vllm_dist_*` files in `tmp` now."""
    try:
        return {tmp / name for name in os.listdir(tmp) if STORE.fullmatch(name)}
    except OSError:
        return set()


def live_store() -> Path | None:
    """The file of this process's distributed state's store, while it is initialised (an engine core here); else None."""
    try:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            return None
        store = dist.distributed_c10d._get_default_store()
        while hasattr(store, "underlying_store"):  # PrefixStore
            store = store.underlying_store
        path = getattr(store, "path", None)
        return Path(path) if path else None
    except Exception:  # torch without the attribute, or state torn down meanwhile: nothing known to be in use
        return None


def _manifests(tmp: Path) -> tuple[set[str], list[tuple[Path, list[str]]]]:
    """What the manifests under `tmp` name: the lines of those whose process lives (this one's excepted), and each dead
    one with its lines."""
    folder = tmp / FOLDER
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return set(), []
    own = _MANIFESTS[tmp].path if tmp in _MANIFESTS else None
    living: set[str] = set()
    dead: list[tuple[Path, list[str]]] = []
    for name in names:
        path = folder / name
        if path == own:
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                alive = False
            except BlockingIOError:
                alive = True
            lines = os.read(fd, 1 << 20).decode("utf-8", "replace").splitlines()
        finally:
            os.close(fd)
        if alive:
            living.update(lines)
        else:
            dead.append((path, lines))
    return living, dead


def remove_stale(tmp: Path | None = None) -> list[Path]:
    """Remove the files named by the manifests under `tmp` whose process is dead, and those manifests."""
    tmp = tmp or system_temp_dir()
    living, dead = _manifests(tmp)
    removed = []
    for manifest, lines in dead:
        for line in lines:
            path = Path(line)
            if line not in living and path.parent == tmp and STORE.fullmatch(path.name) and _remove(path):
                removed.append(path)
        manifest.unlink(missing_ok=True)
    if removed:
        logger.info("removed %d vLLM file store(s) left by runs that were killed, in %s", len(removed), tmp)
    return removed


def _remove(path: Path) -> bool:
    """Remove a regular file (never a link or a folder); whether it was there."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        path.unlink()
        return True
    except OSError:
        return False


class Start:
    """One engine start: `before` it, the files already there; `after` it, the ones it made go in the manifest."""

    def __init__(self) -> None:
        self.tmp = system_temp_dir()
        self.files: set[Path] = set()
        remove_stale(self.tmp)
        self.before = stores(self.tmp)

    def after(self, in_process: bool) -> None:
        """Record what the start made: the store of this process's distributed state when the engine core runs here
        (`in_process`), else the files that appeared during the start."""
        own = live_store() if in_process else None
        made = {own} if own is not None else stores(self.tmp) - self.before
        if not made:
            return
        manifest = _MANIFESTS.get(self.tmp)
        if manifest is None:
            manifest = _MANIFESTS[self.tmp] = Manifest(self.tmp)
            _exit_hook()
        manifest.add(made)
        self.files = made

    def tear_down(self) -> None:
        """After the engine is shut down: its files still there go, but the store this process's state still uses."""
        manifest = _MANIFESTS.get(self.tmp)
        if manifest is None or os.getpid() != _PID:
            return
        manifest.remove_gone_and(self.files - {live_store()})


def _at_exit() -> None:
    """The process ends: every file its starts made goes, then its manifests."""
    if os.getpid() != _PID:  # a forked child: not its files
        return
    for manifest in list(_MANIFESTS.values()):
        manifest.remove_gone_and(manifest.files)
        if not manifest.files:
            manifest.path.unlink(missing_ok=True)
        os.close(manifest.fd)
    _MANIFESTS.clear()


_hooked = False


def _exit_hook() -> None:
    global _hooked
    if not _hooked:
        atexit.register(_at_exit)
        _hooked = True
