"""`rs families validate` reads the first records of a local files source: an image column holding text is refused there,
at its key, not by the publish that follows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import png

FAMILY = """\
families:
  Mine:
    source: {kind: files, path: data.jsonl}
    model: {id: rs:tiny-vlm}
    instruction: "\\nAnswer briefly."
    verifier: {name: exact}
    card: {pretty_name: Mine, description: d, license: mit, citation: none}
"""


def validate(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from rs.cli.main import console; console()",
            "families",
            "validate",
            "--config",
            "mine.yaml",
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_an_image_column_holding_text_is_refused_by_validate(tmp_path: Path) -> None:
    rows = [{"image": f"a picture of {i} cubes", "question": f"How many cubes? {i}", "answer": "2"} for i in range(4)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "mine.yaml").write_text(FAMILY)
    done = validate(tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(
        "error: mine.yaml:3: families.Mine.source.columns.image: none of the first 3 records holds an image that opens"
    )


def test_a_files_source_whose_first_records_hold_images_is_valid_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    for i in range(4):
        (tmp_path / "img" / f"{i}.png").write_bytes(png((40 * i, 90, 200)))
    rows = [{"image": f"img/{i}.png", "question": f"How many cubes? {i}", "answer": "2"} for i in range(4)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "mine.yaml").write_text(FAMILY)
    done = validate(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "(the first 3 records of a local files source: the values they hold)" in done.stdout
    assert "Mine: the first 3 source records: an image that opens in 3, a question in 3, an answer in 3" in done.stdout
