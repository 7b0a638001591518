"""The summary of a run says which generation cache it used: the default one is shared by every checkout, so a "fresh"
clone reuses the answers there silently unless it is said."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import ROOT
from faults import publish_command, write_families


@pytest.mark.slow
def test_publish_and_sample_name_the_cache_they_used(tmp_path: Path) -> None:
    families = write_families(tmp_path, images=2, names=("Alpha",))
    run = subprocess.run(
        publish_command(families, tmp_path / "run"), cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (
        f"  generation cache: {tmp_path / 'run' / 'cache.sqlite'} (answers already there were not asked again)"
        in run.stdout
    )
    sample = subprocess.run(
        [sys.executable, "-m", "rs.sample", "Alpha", "--config", str(families), "--build-dir", str(tmp_path / "b")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RS_CACHE_DIR": str(tmp_path / "default-cache")},
    )
    assert sample.returncode == 0, sample.stderr[-3000:]
    assert json.loads(sample.stdout.strip().splitlines()[-1])["cache"].startswith(str(tmp_path / "default-cache"))


def test_the_card_counts_the_answers_whose_reasoning_could_not_be_compared(tmp_path: Path) -> None:
    """Free-text answers (a colour, no closed set) are never compared with their reasoning: the card said no accepted
    answer's reasoning concluded another value, a check that had not run. Now it counts them as unchecked."""
    from faults import publish_family

    families = write_families(tmp_path, images=3, names=("Alpha",))
    report = publish_family(families, tmp_path / "run")
    sampled = json.loads((tmp_path / "run" / "build" / "Alpha" / "sample.json").read_text())
    assert sampled["reasoning_unchecked"] > 0 and sampled["reasoning_disagrees"] == 0
    card = next((tmp_path / "run" / "out").rglob("README.md")).read_text()
    assert (
        f"of the {sampled['verified']} answers the verifier accepted, {sampled['reasoning_unchecked']} could not be compared "
        "with their reasoning and are unchecked"
    ) in card.replace("\n", " ")
    assert "no accepted answer had reasoning that concluded another value" not in card
    assert report is not None
