"""The stage contract every stage of the pipeline implements, and `ensure`: the one way a stage's store is reused or made.

    build/<FAMILY>/
      clean/rows-*.parquet      cleaned rows, original image bytes      clean.json (report)     rs.pipeline.clean.stage
      exclusions.jsonl          every dropped source item with its reason
      items/items-*.parquet     one result per QA item (raw output kept) sample.json (report)   rs.pipeline.sample.stage
      recovery/*.parquet        the recovery pass's samples              recovery.json (report)  rs.pipeline.recover
      splits/<split>/, ...      the published splits, stats.json                                 rs.pipeline.write.stage

A stage (`Stage`) says what its product depends on (`fingerprint`), which engine requests it sends (`requests`, keyed
as the generation cache keys them: the Ray driver sends them, `rs.distributed`) and makes its product (`run`). A stage
that keeps a store (`StoredStage`) is run through `ensure`: it is skipped when its report exists with the same
fingerprint and its store is intact (`rs.util.checksums`), so a re-run after a crash redoes only unfinished stages,
and the generation cache makes a re-run of a sampling stage answer only what is missing. The stage writes into a
`.tmp` folder that replaces the store only when whole, and that is removed when the stage fails (a full disk gets its
room back); one process at a time writes a family's build (`rs.util.locks`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Generic, Iterator, Protocol, TypeVar, runtime_checkable

from rs.errors import RsError
from rs.store import write_json
from rs.util import ledger, progress
from rs.util.checksums import seal
from rs.util.disk import writing

if TYPE_CHECKING:
    from rs.context import BuildContext, BuildPaths
    from rs.engines.base import Request


class BuildError(RsError, RuntimeError):
    """A build that cannot be trusted (accounting mismatch, stores that disagree); never published over."""


def fingerprint(data: Any) -> str:
    """The sha256 of `data` as JSON, keys sorted: what a report's `fingerprint` is."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def plain(data: Any) -> Any:
    """`data` as JSON reads it back (tuples as lists, keys as strings): what a report stores, and compares equal to it."""
    return json.loads(json.dumps(data, sort_keys=True, default=str))


R = TypeVar("R")


class Stage(Protocol[R]):
    """One stage of the pipeline (`rs.pipeline.STAGES`)."""

    name: ClassVar[str]
    """`clean`, `sample`, `recover`, `route`, `write` or `publish`."""

    def fingerprint(self, ctx: BuildContext) -> str | None:
        """What its product depends on; None: nothing stored to reuse."""
        ...

    def requests(self, ctx: BuildContext) -> Iterator[tuple[str, Request]]:
        """The engine requests it sends, each with its generation cache key; none for a stage with no model."""
        ...

    def run(self, ctx: BuildContext) -> R:
        """Make the product (a `StoredStage`: into its store's temporary folder, which `ensure` seals and moves in place)."""
        ...


@dataclass(frozen=True)
class Store(Generic[R]):
    """What a stage keeps in the build: a folder sealed with checksums and a report beside it, found by `BuildPaths`."""

    folder: str
    """The `BuildPaths` attribute of its folder (`clean`: `build/FAMILY/clean`); the stage writes `clean.tmp`."""
    report: str
    """The `BuildPaths` attribute of its report (`clean_report`: `build/FAMILY/clean.json`)."""
    what: str
    """The store in words, as a warning and a full disk name it: `the clean store`."""
    upstream: str
    """What it is made from, in words (`the source`): a damaged store is rebuilt from it."""
    read: Callable[[dict[str, Any]], R]
    """The report from its JSON (`CleaningReport.from_dict`)."""
    beside: tuple[str, ...] = ()
    """Files the stage writes in the build folder beside its store (as `NAME.tmp`), moved in place with it."""

    def path(self, paths: BuildPaths) -> Path:
        return getattr(paths, self.folder)

    def tmp(self, paths: BuildPaths) -> Path:
        """The temporary folder the stage writes into (`clean.tmp`)."""
        path = self.path(paths)
        return path.with_name(path.name + ".tmp")

    def report_path(self, paths: BuildPaths) -> Path:
        return getattr(paths, self.report)


@runtime_checkable
class StoredStage(Stage[R], Protocol):
    """A stage whose product is a store of the build, reused while it is current (`ensure`)."""

    store: ClassVar[Store[Any]]

    def hold(self, ctx: BuildContext) -> AbstractContextManager[None]:
        """What `ensure` holds while it finds the store current or makes it (the build's lock, the engines' scope, the
        stores upstream made current first); nothing by default."""
        return nullcontext()

    def turn(self, ctx: BuildContext) -> AbstractContextManager[None]:
        """Taken when the store is not current: one process makes it while the others wait for their turn, then find it
        made (several sampling shards finding no clean store); nothing by default."""
        return nullcontext()

    def kept(self, ctx: BuildContext, report: R) -> str:
        """What the run keeps of it, for the account a stopped run ends with (`rs.util.ledger`)."""
        ...


def ensure(stage: Stage[R], ctx: BuildContext) -> R:
    """The stage's product for `ctx`'s build: a stored stage's store is reused when its report was written under the same
    fingerprint and the store is intact, else made again (a damaged store is said in one line); a stage that keeps none
    runs. The run is in `the NAME stage` meanwhile (a stopped run names it where no progress bar is open)."""
    with progress.phase(f"the {stage.name} stage"):
        return _ensure(stage, ctx)


def _ensure(stage: Stage[R], ctx: BuildContext) -> R:
    if not isinstance(stage, StoredStage):
        return stage.run(ctx)
    expected = stage.fingerprint(ctx)
    if expected is None:
        return stage.run(ctx)
    with stage.hold(ctx):
        report = current(stage, ctx, expected)
        if report is None:
            with stage.turn(ctx):
                report = current(stage, ctx, expected, say=True)
                if report is None:
                    report = _make(stage, ctx, expected)
        ledger.keep(stage.kept(ctx, report))
        return report


def current(stage: StoredStage[R], ctx: BuildContext, expected: str | None = None, *, say: bool = False) -> R | None:
    """The stage's report when its store is current (same fingerprint, intact), else None; runs nothing. With `say`, a
    damaged store is said in one line (`BuildContext.intact`)."""
    expected = expected if expected is not None else stage.fingerprint(ctx)
    if expected is None:
        return None
    store = stage.store
    report = read_report(store.report_path(ctx.paths), expected, store.read)
    if report is None or not ctx.intact(store.path(ctx.paths), store.what, store.upstream, say=say):
        return None
    return report


def _make(stage: StoredStage[R], ctx: BuildContext, expected: str) -> R:
    """Run the stage into its temporary folder, then seal it, move it (and the files beside it) in place and write the report."""
    store, root = stage.store, ctx.paths.root
    tmp = store.tmp(ctx.paths)
    beside = [(root / f"{name}.tmp", root / name) for name in store.beside]
    with writing(store.what, tmp), scratch(tmp, *(part for part, _ in beside)):
        report: Any = stage.run(ctx)
        seal(tmp)
        replace_dir(tmp, store.path(ctx.paths))
        for part, final in beside:
            os.replace(part, final)
        report.fingerprint = expected
        write_json(store.report_path(ctx.paths), report.to_dict())
    return report


def read_report(path: Path, expected: str, kind: Callable[[dict[str, Any]], R]) -> R | None:
    """The stage report at `path` when it was written under the fingerprint `expected`, else None (run the stage)."""
    try:
        data = json.loads(path.read_text())
        if data.get("fingerprint") != expected:
            return None
        return kind(data)
    except (OSError, json.JSONDecodeError, AttributeError, KeyError, TypeError):
        return None  # missing, torn or of another version: the stage runs again


def replace_dir(tmp: Path, final: Path) -> None:
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)


@contextmanager
def scratch(*tmp: Path) -> Iterator[None]:
    """A stage's temporary outputs: cleared before it starts, removed if it fails, so that a failure leaves only the last complete state."""
    for path in tmp:
        remove(path)
    try:
        yield
    except BaseException:
        for path in tmp:
            remove(path)
        raise


def remove(path: Path) -> None:
    """Remove a file or a folder, whichever `path` is, if it is there."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
