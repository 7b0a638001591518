"""`rs plan --limit N` on a family of local files: the family's size counted from the files (an image folder's metadata
rows too), so the whole family is projected, and the recovery pass's section shown whether or not it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import ROOT
from faults import FAMILY, write_families

from rs.families import load_families
from rs.sources import open_source

pytestmark = pytest.mark.slow

RECOVERY = FAMILY.replace("judge:", "recovery: {samples: 2, temperature: 0.7}\n    judge:")


def image_folder_family(folder: Path) -> Path:
    """MyShapes of tests/faults.py (8 images, 2 questions each, answered from a replay file) as an image folder: its
    records in `MyShapes/metadata.jsonl`, each naming its image in `file_name`, and a recovery pass."""
    families = write_families(folder, names=("MyShapes",), family=RECOVERY, samples=2)
    train = folder / "MyShapes" / "train.jsonl"
    rows = [json.loads(line) for line in train.read_text().splitlines()]
    (folder / "MyShapes" / "metadata.jsonl").write_text(
        "".join(json.dumps({"file_name": r.pop("image"), **r}) + "\n" for r in rows)
    )
    train.unlink()
    families.write_text(families.read_text().replace("path: MyShapes/train.jsonl", "path: MyShapes"))
    return families


def test_an_image_folder_says_its_size_from_its_metadata(tmp_path: Path) -> None:
    family = load_families(image_folder_family(tmp_path))["MyShapes"]
    assert open_source(family).size() == 16 == sum(1 for _ in open_source(family))


def test_the_plan_of_an_image_folder_projects_the_family_and_shows_its_recovery_pass(tmp_path: Path) -> None:
    image_folder_family(tmp_path)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    said = subprocess.run(
        [sys.executable, "-m", "rs.plan", "MyShapes", "--config", "families.yaml", "--limit", "2"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert said.returncode == 0, said.stderr[-3000:]
    assert "no projection" not in said.stdout
    assert "sample: 16 records of 16 records, 16 questions" in said.stdout, said.stdout
    assert "  whole family: about 16 questions, " in said.stdout
    assert "recovery pass (2 samples at temperature 0.7), run on the same images: " in said.stdout
