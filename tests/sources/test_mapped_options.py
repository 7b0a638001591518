"""A source's `options` column is always in the prompt: rendered as a lettered block into the question, which is the
published question, byte for byte what the model received; a family that switches the rendering off is refused.

Before, a `files` source mapping `columns.options` without `cleaning.multiple_choice.enabled` published questions asked
"Answer with the option's letter" with no options in them, against a letter reference.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import datasets
import pytest
from family_yaml import REPLAY, family_yaml
from PIL import Image

from rs.families import load_families
from rs.families.loader import FamilyConfigError
from rs.families.schema import MULTIPLE_CHOICE_INSTRUCTION

ROWS = [
    ("What shape is drawn?", ["circle", "square", "triangle"], "square"),
    ("Which colour fills the shape?", ["red", "purple"], "B"),
]
PROMPTS = [
    "What shape is drawn?\nA. circle\nB. square\nC. triangle" + MULTIPLE_CHOICE_INSTRUCTION,
    "Which colour fills the shape?\nA. red\nB. purple" + MULTIPLE_CHOICE_INSTRUCTION,
]
"""What the model must be asked: the options in the question, then the multiple-choice instruction."""


def _png(n: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (16, 16), (60 * n, 90, 200 - 60 * n)).save(out, "PNG")
    return out.getvalue()


def _family(tmp_path: Path, **blocks) -> Path:
    (tmp_path / "images").mkdir()
    with open(tmp_path / "train.jsonl", "w") as fh:
        for n, (question, options, answer) in enumerate(ROWS):
            (tmp_path / "images" / f"{n}.png").write_bytes(_png(n))
            fh.write(
                json.dumps({"image": f"images/{n}.png", "question": question, "choices": options, "answer": answer})
                + "\n"
            )
    # the right letter answers only the prompt that shows the options; the item's own record answers anything else wrong
    with open(tmp_path / "answers.jsonl", "w") as fh:
        for n, prompt in enumerate(PROMPTS):
            fh.write(json.dumps({"prompt": prompt, "text": "<think>\nI read the options.\n</think>\n\nB"}) + "\n")
            fh.write(json.dumps({"key": f"{n}#0", "text": "<think>\nNo options are shown.\n</think>\n\nZ"}) + "\n")
    source = {"kind": "files", "path": "train.jsonl", "columns": {"options": "choices"}}
    path = tmp_path / "families.yaml"
    path.write_text(family_yaml("Choices", REPLAY, source=source, judge={"enabled": False}, **blocks))
    return path


def test_mapped_options_are_in_the_published_prompt_the_model_received(tmp_path: Path, capsys) -> None:
    from rs.cli.publish import main

    config = _family(tmp_path)
    build = ["--build-dir", str(tmp_path / "build"), "--cache", str(tmp_path / "cache.sqlite")]
    assert main(["Choices", "--config", str(config), "--out", str(tmp_path / "out"), *build]) == 0
    assert "Choices: 2 source QA, 0 dropped by cleaning, 2 accepted" in capsys.readouterr().out
    rows = datasets.load_dataset(str(tmp_path / "out" / "local" / "Choices_RS_nothink"), split="train")
    published = sorted((qa["question"], qa["answer"]) for row in rows for qa in row["qa"])
    # the published question is the prompt the replay engine answered (by its exact text), the reference the letter
    assert published == sorted(zip(PROMPTS, ["B", "B"])), published


def test_rs_plan_shows_the_options_in_the_prompt(tmp_path: Path) -> None:
    from rs.plan import plan_family

    family = load_families(_family(tmp_path))["Choices"]
    assert family.config.cleaning.step("multiple_choice").enabled
    plan = plan_family(family, count_tokens=False)
    assert [(k.kind, k.items, k.example) for k in plan.kinds] == [("multiple choice", 2, PROMPTS[0])]
    assert any("source.columns.options" in note and "'choices'" in note for note in plan.notes), plan.notes


def test_options_mapped_with_the_rendering_switched_off_are_refused_at_the_key(tmp_path: Path) -> None:
    config = _family(tmp_path, cleaning={"multiple_choice": {"enabled": False}})
    with pytest.raises(FamilyConfigError) as err:
        load_families(config)
    message = str(err.value)
    assert f"{config}:" in message and "families.Choices.cleaning.multiple_choice.enabled" in message
    assert "source.columns.options maps the column 'choices'" in message
