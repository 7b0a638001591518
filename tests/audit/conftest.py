"""TinyCLEVR published with every repo it can have (`make demo-samples`: the splits, pairs, samples and RL), once a
session, for the audit's tests that edit a real family's cards and files (on copies)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import ROOT
from shared_builds import IN_PROCESS_ENV, made_once


@pytest.fixture(scope="session")
def tinyclevr_every_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The work folder of TinyCLEVR's samples variant published locally: families.yaml, out/local/<repos>, build/,
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
