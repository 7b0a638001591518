"""The summary of a run says which generation cache it used: the default one is shared by every checkout, so a "fresh"
clone reuses the answers there silently unless it is said."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from faults import ROOT, publish_command, write_families


def test_publish_and_sample_name_the_cache_they_used(tmp_path: Path) -> None:
    families = write_families(tmp_path, images=2, names=("Alpha",))
    run = subprocess.run(publish_command(families, tmp_path / "run"), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"  generation cache: {tmp_path / 'run' / 'cache.sqlite'} (answers already there were not asked again)" in run.stdout
    sample = subprocess.run([sys.executable, "-m", "rs.sample", "Alpha", "--config", str(families), "--build-dir", str(tmp_path / "b")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "RS_CACHE_DIR": str(tmp_path / "default-cache")})
    assert sample.returncode == 0, sample.stderr[-3000:]
    assert json.loads(sample.stdout.strip().splitlines()[-1])["cache"].startswith(str(tmp_path / "default-cache"))
