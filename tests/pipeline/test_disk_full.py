"""A disk that fills up while a family is written: the clean store, the cache, the items store, a split, an assembled repo, the published folder.

Each case puts that one store on a small tmpfs the test mounts itself (root is needed: without it
these cases skip, saying so), fills it to the last byte, and publishes: the stage stops with `no
space left on device` naming the store and its path, every file of the last complete state is
unchanged, nothing half-written is left (no `.tmp`), and once the ballast is removed the same
publish finishes with the bytes of an uninterrupted one. The last test needs no root: `/dev/full`
is a real device on which every write fails with ENOSPC.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import faults
import pytest
from faults import assert_same_published, cache_keys, published_files

from rs.context import BuildContext
from rs.engines.generation_cache import GenerationCache
from rs.families import load_families
from rs.pipeline.build import build_family
from rs.pipeline.clean.stage import CleanStage
from rs.pipeline.publish.stage import publish
from rs.pipeline.sample.stage import SampleStage
from rs.pipeline.stage import ensure
from rs.util.disk import DiskFull


class SmallDisk:
    """A tmpfs mounted by the test; `fill` writes a ballast file until the kernel says ENOSPC."""

    def __init__(self, path: Path):
        self.path, self.ballast = path, path / ".ballast"

    def fill(self, *, leave: int = 0) -> None:
        spacer = self.path / ".spacer"
        if leave:
            spacer.write_bytes(b"\0" * leave)
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for chunk in (1 << 20, 1 << 12, 1):
                try:
                    while True:
                        os.write(fd, b"\0" * chunk)
                except OSError:
                    continue
        finally:
            os.close(fd)
        spacer.unlink(missing_ok=True)

    def free(self) -> None:
        self.ballast.unlink()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[Path], SmallDisk]]:
    mounted: list[Path] = []

    def mount(path: Path) -> SmallDisk:
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=32m", "rs-disk-full-test", str(path)], capture_output=True, text=True
        )
        if done.returncode != 0:
            pytest.skip(f"a small filesystem of the test's own needs `mount -t tmpfs` (root): {done.stderr.strip()}")
        mounted.append(path)
        return SmallDisk(path)

    if not sys.platform.startswith("linux"):
        pytest.skip("tmpfs is Linux's")
    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The families file, and the folder of Alpha published without a fault (its out/, build/ and cache.sqlite)."""
    return faults.reference(tmp_path_factory.mktemp("families"))


def complete_state(build: Path) -> dict[str, bytes]:
    """The files a later stage reads as complete: the reports and the stores."""
    names = ["clean.json", "sample.json", "stats.json", "exclusions.jsonl", "clean/*", "items/*", "splits/*/*"]
    return {
        p.relative_to(build).as_posix(): p.read_bytes()
        for name in names
        for p in build.glob(f"Alpha/{name}")
        if p.is_file()
    }


def engine_calls(build: Path) -> int:
    """Requests the last sampling run sent to the engine (answers and verdicts)."""
    run = json.loads((build / "Alpha" / "stats.json").read_text())["run"]
    return run["sampling_engine_calls"] + run["judge_engine_calls"]


def leftovers(*folders: Path) -> list[str]:
    return [
        p.as_posix() for folder in folders if folder.exists() for p in folder.rglob("*") if p.name.endswith(".tmp")
    ]


CASES = {
    # store: (what the error names, the folder on the small disk, the stage done first, bytes left free, the path named)
    "clean store": ("the clean store", "build", None, 0, "build/Alpha/clean.tmp"),
    "generation cache": ("the generation cache", "cache", CleanStage, 48 << 10, "cache/cache.sqlite"),
    "items store": ("the items store", "build", CleanStage, 0, "build/Alpha/items.tmp"),
    "split": ("the think split", "build", SampleStage, 0, "build/Alpha/splits/think.tmp"),
    "assembled repo": ("the assembled repo", "build/Alpha/repos", None, 0, "build/Alpha/repos/Alpha_RS_think"),
    "published folder": ("the published repo", "out", None, 48 << 10, "out/tester/Alpha_RS_think"),
}
"""With room left, the cache commits a few answers before it is full, and the published folder takes a few files' copies."""


@pytest.mark.parametrize("store", list(CASES))
def test_a_full_disk_names_the_store_keeps_the_last_complete_state_and_resumes(
    store: str, reference, small_disk, tmp_path: Path
) -> None:
    families, ref = reference
    what, mounted, done_first, leave, named = CASES[store]
    family = load_families(families)["Alpha"]
    build, cache, out = tmp_path / "build", tmp_path / "cache" / "cache.sqlite", tmp_path / "out"
    disk = small_disk(tmp_path / mounted)
    ctx = BuildContext(family, build, cache, progress=False)
    if done_first is not None:
        ensure(done_first(), ctx)
    if store == "generation cache":
        GenerationCache(cache).close()
    before = complete_state(build)
    disk.fill(leave=leave)

    with pytest.raises(DiskFull) as caught:
        publish(family, out=out, build_root=build, cache_path=cache, progress=False)
    assert str(caught.value).startswith(f"no space left on device: could not write {what} at {tmp_path / named}")
    assert "run the same command again" in caught.value.hint
    moved_by = {"generation cache": "--cache", "published folder": "--out"}.get(store, "--build-dir or --cache")
    assert f"(or point {moved_by} elsewhere)" in caught.value.hint  # the flag that moves the full store
    after = complete_state(build)
    assert {path: after.get(path) for path in before} == before  # the last complete state, untouched
    assert leftovers(build, out) == []  # nothing half-written left behind
    assert published_files(out / "tester") == []  # nothing published
    committed = cache_keys(cache) if cache.exists() else set()
    everything = cache_keys(ref / "cache.sqlite")
    if store == "generation cache":
        assert 0 < len(committed) < len(everything)  # the answers committed before the disk filled stay

    disk.free()
    publish(family, out=out, build_root=build, cache_path=cache, progress=False)
    assert_same_published(ref / "out" / "tester", out / "tester")
    if store in (
        "clean store",
        "generation cache",
        "items store",
    ):  # sampling ran again: it sent only what was missing
        assert engine_calls(build) == engine_calls(ref / "build") - len(committed)


def test_a_report_written_to_a_full_device_is_never_left_torn(reference, tmp_path: Path) -> None:
    """stats.json's temporary file is a link to /dev/full: the kernel refuses the write (ENOSPC) as on a full disk."""
    families, ref = reference
    family = load_families(families)["Alpha"]
    build, cache, out = tmp_path / "build", tmp_path / "cache.sqlite", tmp_path / "out"
    ctx = BuildContext(family, build, cache, progress=False)
    build_family(ctx)
    sampled = ctx.paths.sample_report.read_bytes()
    (build / "Alpha" / "stats.json.tmp").symlink_to("/dev/full")

    with pytest.raises(DiskFull, match=f"could not write stats.json at {build / 'Alpha' / 'stats.json'}"):
        publish(family, out=out, build_root=build, cache_path=cache, progress=False)
    assert (
        not ctx.paths.stats.exists() and not (build / "Alpha" / "stats.json.tmp").exists()
    )  # no report to be read as complete
    assert ctx.paths.sample_report.read_bytes() == sampled and not out.exists()
    publish(family, out=out, build_root=build, cache_path=cache, progress=False)
    assert_same_published(ref / "out" / "tester", out / "tester")
