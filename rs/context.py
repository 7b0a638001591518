"""What a family's build needs besides the family: where its stores go, the generation cache, and the engines,
made on demand and shared by every pass of one run."""

from __future__ import annotations

import logging
import os
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from rs.engines.base import Engine
from rs.engines.factory import engines_for
from rs.families import Family
from rs.util.checksums import MANIFEST, damage
from rs.util.locks import build_lock

if TYPE_CHECKING:
    from rs.pipeline.route import RouteFilter

logger = logging.getLogger(__name__)


@dataclass
class BuildPaths:
    root: Path

    @property
    def clean(self) -> Path:
        return self.root / "clean"

    @property
    def items(self) -> Path:
        return self.root / "items"

    @property
    def recovery(self) -> Path:
        return self.root / "recovery"

    @property
    def recovery_report(self) -> Path:
        return self.root / "recovery.json"

    @property
    def clean_report(self) -> Path:
        return self.root / "clean.json"

    @property
    def sample_report(self) -> Path:
        return self.root / "sample.json"

    @property
    def stats(self) -> Path:
        return self.root / "stats.json"

    def split(self, split: str) -> Path:
        return self.root / "splits" / split

    @property
    def splits_report(self) -> Path:
        return self.root / "splits" / "splits.json"


def default_cache_path() -> Path:
    """`$RS_CACHE_DIR/generations.sqlite`, else ~/.cache/rs/generations.sqlite."""
    base = Path(os.environ.get("RS_CACHE_DIR") or Path.home() / ".cache" / "rs")
    return base / "generations.sqlite"


@dataclass
class BuildContext:
    """What a build needs besides the family: where it goes, the cache, the engines (made on demand)."""

    family: Family
    build_root: Path
    cache_path: Path = field(default_factory=default_cache_path)
    limit: int | None = None
    progress: bool = True
    engine_factory: Callable[[Family], tuple[Engine, Engine | None]] | None = None
    """Returns (sampler, judge) engines; defaults to `rs.engines.factory.engines_for`. Called only when sampling must run, and
    once a run: every pass shares what it returns (`engines`)."""
    _engines: tuple[Engine, Engine | None] | None = field(default=None, init=False, repr=False, compare=False)
    engines_made: int = field(default=0, init=False, compare=False)
    """How many distinct engine objects this run made (a model load each, the first time they generate)."""
    route_filter: RouteFilter | None = None
    """Routing settings changed after the run (`rs refilter`); None: the family's own."""
    stores: Path | None = None
    """The folder of the stores and splits when it is not the family's build folder: the stores `rs refilter` re-read
    under a changed reader, or rebuilt from a published samples repo (`rs.refilter`)."""
    refiltered: dict[str, Any] | None = None
    """What `rs refilter` did besides routing (`rs.refilter.Prepared.refiltered`: `source`, the samples repo the stores
    came from; `reread`, what re-reading them changed): the cards say it."""
    _passes: int = field(default=0, init=False, repr=False, compare=False)
    """How many `passes()` scopes are open: the engines live until the outermost one ends."""
    _checked: dict[Path, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    """Stores found intact in this run: their manifest's mtime (a store rewritten since is checked again)."""

    def intact(self, folder: Path, what: str, upstream: str, *, say: bool = True) -> bool:
        """Whether the store in `folder` matches its checksums (`rs.util.checksums`); when not, `say` it in one line: the
        stage that writes it runs again, from `upstream`. A store is hashed once a run."""
        try:
            stamp = (folder / MANIFEST).stat().st_mtime_ns
        except OSError:
            stamp = None
        if stamp is not None and self._checked.get(folder) == stamp:
            return True
        problem = damage(folder)
        if problem is None:
            if stamp is not None:
                self._checked[folder] = stamp
            return True
        if say:
            logger.warning(
                "%s: %s %s cannot be used as it is: %s; rebuilt from %s",
                self.family.name,
                what,
                folder,
                problem,
                upstream,
            )
        return False

    def engines(self, purpose: str) -> tuple[Engine, Engine | None]:
        """The run's (sampler, judge), made on first use and shared by every later pass (`purpose` names the pass).

        One engine per model per run: a second `vllm.LLM` of the same model while the first lives would hold the
        weights and the KV cache twice (on a GPU at `gpu_memory_utilization: 0.9` it cannot start). `close_engines`
        frees them when the run's last pass is done.
        """
        if self._engines is None:
            sampler, judge = (self.engine_factory or engines_for)(self.family)
            self._engines = sampler, judge
            self.engines_made = len({id(e) for e in (sampler, judge) if e is not None})
            logger.debug("%s: the %s pass makes the run's engines (%d)", self.family.name, purpose, self.engines_made)
        else:
            logger.debug("%s: the %s pass shares the run's engines", self.family.name, purpose)
        return self._engines

    @contextmanager
    def passes(self) -> Iterator[None]:
        """A scope of passes sharing the run's engines, closed when the outermost scope ends: a stage called alone
        frees its engine when it is done, and `rs.pipeline.build.ensure_passes` keeps one engine for all its passes. Never left to the
        garbage collector: an in-process vLLM engine freed late tears down the process's model-parallel state under
        the next engine."""
        self._passes += 1
        try:
            yield
        finally:
            self._passes -= 1
            if not self._passes:
                self.close_engines()

    def close_engines(self) -> None:
        """Free the run's engines (weights, KV cache, engine processes); a later pass makes them again. Engines from an
        `engine_factory` are its caller's, who closes them (a test's engine serves several runs)."""
        engines, self._engines = self._engines, None
        if self.engine_factory is not None:
            return
        for engine in {id(e): e for e in engines or () if e is not None}.values():
            try:
                engine.close()
            except Exception:  # a failing close must not hide why the run stopped (an engine that died, say)
                logger.warning("%s: closing the engine failed", self.family.name, exc_info=True)

    @property
    def paths(self) -> BuildPaths:
        """`build/FAMILY`; a `--limit N` trial builds in `build/FAMILY/limit-N`, so it never replaces the full build; `stores`
        when set."""
        if self.stores is not None:
            return BuildPaths(self.stores)
        return BuildPaths(self.family_root)

    @property
    def family_root(self) -> Path:
        """The family's own build folder, `build/FAMILY` (`build/FAMILY/limit-N` for a trial)."""
        root = self.build_root / self.family.name
        return root if self.limit is None else root / f"limit-{self.limit}"

    def lock(self, *, shared: bool = False) -> AbstractContextManager[None]:
        """Hold the family's build lock (`rs.util.locks.build_lock`): one writer of its stages at a time."""
        return build_lock(self.paths.root, shared=shared)
