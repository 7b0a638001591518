"""Cleaning: every source item ends kept or dropped with its reason, on a Cauldron-shaped pool."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import datasets
import pytest
from datasets import Features, Image, List, Value
from family_yaml import MINIMAL, ONE_WORD, Whole, family_yaml, merged

from rs.families import load_families
from rs.families.schema import MULTIPLE_CHOICE_INSTRUCTION
from rs.pipeline.clean import AccountingError, Cleaner, CleaningReport, ExclusionWriter
from rs.pipeline.clean.filters import StripInstruction
from rs.pipeline.clean.multiple_choice import MultipleChoice, MultipleChoiceConfig, parse_options
from rs.pipeline.sample.requests import sampling_request
from rs.prompt import Instructions, build_prompt
from rs.records import QAItem
from rs.sources import open_source
from rs.sources.base import SourceRecord, sha256_hex

TURN = {"user": Value("string"), "assistant": Value("string"), "source": Value("string")}
INSTRUCTION = "\nAnswer the question using a single word or phrase."

VOCABULARY = [
    "a",
    "an",
    "the",
    "is",
    "are",
    "there",
    "how",
    "many",
    "what",
    "color",
    "shape",
    "does",
    "have",
    "of",
    "any",
    "red",
    "blue",
    "green",
    "cube",
    "cubes",
    "sphere",
    "cylinder",
    "object",
    "small",
    "large",
    "purple",
]
POOL = merged(
    MINIMAL,
    {
        "source": {"kind": "files", "path": "pool.parquet", "shape": "conversational"},
        "instruction": ONE_WORD,
        "cleaning": {
            "provenance": {"sources": ["clevr"]},
            "purity": {"enabled": True, "vocabulary": VOCABULARY},
            "reference_form": {"enabled": True, "max_words": 3, "action": "drop"},
            "multiple_choice": {"enabled": True},
        },
        "card": {"pretty_name": "Pool", "license": "other", "citation": "c"},
    },
)
"""A Cauldron-shaped pool of CLEVR questions, every optional cleaning step on."""
FAMILY = family_yaml("PoolCLEVR", POOL)


def turn(user: str, assistant: str, source: str = "clevr") -> dict[str, str]:
    return {"user": user, "assistant": assistant, "source": source}


@pytest.fixture
def pool(tmp_path: Path, images: dict[str, bytes]) -> Path:
    """A Cauldron-shaped parquet with the defects real pools have."""
    rows = [
        (
            images["red"],
            [
                turn("How many red cubes are there?", "2"),
                turn("Is there a sphere?" + INSTRUCTION, "yes"),  # instruction already appended by the pool
                turn(
                    "How many airplanes with propellers can be identified in this photo?",
                    "One airplane with propellers can be identified in the photo.",
                ),
                turn("What shape does the purple sphere have?", "The purple sphere has a round shape."),
                turn("How many red cubes are there?", "2"),  # duplicate
            ],
        ),
        (
            images["blue"],
            [
                turn("What color is the large cylinder? Options: red, blue, green.", "blue"),  # flattened MC
                turn("What shape is the small object? Options: cube, sphere.", "cylinder"),  # reference in no option
                turn("Is there a cube?", "no", source="vqav2"),  # foreign source
                turn("Is there a cylinder?", ""),  # empty reference
            ],
        ),
        (images["corrupt"], [turn("How many cubes are there?", "1")]),
        (images["red"], [turn("What color is the sphere?", "red")]),  # same image again: merged
    ]
    ds = datasets.Dataset.from_dict(
        {"images": [[{"bytes": b, "path": None}] for b, _ in rows], "texts": [t for _, t in rows]},
        features=Features({"images": List(Image()), "texts": List(TURN)}),
    )
    ds.to_parquet(str(tmp_path / "pool.parquet"))
    (tmp_path / "families.yaml").write_text(FAMILY)
    return tmp_path


def test_cauldron_pool_is_cleaned_and_fully_accounted(pool: Path, images: dict[str, bytes]) -> None:
    family = load_families(pool / "families.yaml")["PoolCLEVR"]
    source = open_source(family)
    with ExclusionWriter(pool / "exclusions.jsonl") as exclusions:
        cleaner = Cleaner(family.config, source.provenance(), exclusions=exclusions)
        rows = list(cleaner.rows(source))

    assert [row.image_sha256 for row in rows] == [sha256_hex(images["red"]), sha256_hex(images["blue"])]
    assert rows[0].image == images["red"] and rows[1].image == images["blue"]  # original bytes travel on
    red, blue = rows
    assert [(q.question, q.answer) for q in red.qa] == [
        ("How many red cubes are there?", "2"),
        ("Is there a sphere?", "yes"),
        ("What color is the sphere?", "red"),
    ]
    assert red.record_ids == ["0", "3"]
    assert build_prompt(red.qa[1].question, family.config.instruction) == "Is there a sphere?" + INSTRUCTION
    assert [(q.question, q.answer) for q in blue.qa] == [
        ("What color is the large cylinder?\nA. red\nB. blue\nC. green", "B")
    ]

    report = cleaner.report
    assert report.dropped == {
        "off_task_vocabulary": 1,
        "sentence_reference": 1,
        "duplicate_qa": 1,
        "mc_reference_not_in_options": 1,
        "foreign_source": 1,
        "empty_answer": 1,
        "undecodable_image": 1,
    }
    assert (report.source_items, report.kept_items, report.rows, report.source_records, report.merged_records) == (
        11,
        4,
        2,
        4,
        1,
    )
    assert report.steps["multiple_choice"].rewritten == {"options_rendered": 1, "reference_to_letter": 1}
    assert report.steps["strip_instruction"].rewritten == {"instruction_removed": 1}

    meta = blue.clean_meta
    assert meta["source"] == {
        "dataset": "local:pool.parquet",
        "config": "parquet",
        "split": "train",
        "revision": None,
    }  # not this machine's path
    assert meta["record_ids"] == ["1"]
    assert meta["policy"]["name"] == "rs.clean" and "multiple_choice@1" in meta["policy"]["steps"]
    assert meta["rewrites"] == ["1#0:multiple_choice:options_rendered", "1#0:multiple_choice:reference_to_letter"]

    excluded = [json.loads(line) for line in (pool / "exclusions.jsonl").read_text().splitlines()]
    assert len(excluded) == sum(report.dropped.values())
    off_task = next(e for e in excluded if e["reason"] == "off_task_vocabulary")
    assert off_task["question"].startswith("How many airplanes") and off_task["step"] == "task_purity"


def test_questions_with_options_are_asked_for_a_letter(pool: Path) -> None:
    """A question cleaning rendered with lettered options gets the multiple-choice instruction, once."""
    family = load_families(pool / "families.yaml")["PoolCLEVR"]
    source = open_source(family)
    red, blue = Cleaner(family.config, source.provenance()).rows(source)
    instructions = Instructions.of(family.config)
    rendered = blue.qa[0]
    assert (
        sampling_request(rendered, instructions, blue.image_sha256).prompt
        == "What color is the large cylinder?\nA. red\nB. blue\nC. green" + MULTIPLE_CHOICE_INSTRUCTION
    )
    assert [sampling_request(q, instructions, red.image_sha256).prompt for q in red.qa][
        1
    ] == "Is there a sphere?" + INSTRUCTION

    # a source that had already appended the multiple-choice instruction: removed by cleaning, appended once
    item = QAItem(
        "Which colour is it? Options: red, blue.\nAnswer with the option's letter from the given choices directly.",
        "blue",
        "r",
    )
    for step in (StripInstruction(instructions.all()), MultipleChoice(MultipleChoiceConfig(enabled=True))):
        assert step.check(item, "", None) is None
    prompt = sampling_request(item, instructions, "").prompt
    assert prompt == "Which colour is it?\nA. red\nB. blue" + MULTIPLE_CHOICE_INSTRUCTION and item.answer == "B"

    # `multiple_choice_instruction: null`: questions with options get the family's instruction too
    assert Instructions(INSTRUCTION, None).for_item(rendered) == INSTRUCTION


def test_mark_instead_of_drop_keeps_the_item_flagged(pool: Path) -> None:
    (pool / "families.yaml").write_text(
        family_yaml("PoolCLEVR", POOL, cleaning={"reference_form": {"action": "mark"}})
    )
    family = load_families(pool / "families.yaml")["PoolCLEVR"]
    source = open_source(family)
    cleaner = Cleaner(family.config, source.provenance())
    rows = list(cleaner.rows(source))
    assert "sentence_reference" not in cleaner.report.dropped
    assert any(flag.endswith(":sentence_reference") for flag in rows[0].clean_meta["flags"])


def test_policies_switch_off_per_family(pool: Path) -> None:
    (pool / "families.yaml").write_text(
        family_yaml("PoolCLEVR", POOL, cleaning={"provenance": Whole(enabled=False), "purity": {"enabled": False}})
    )
    family = load_families(pool / "families.yaml")["PoolCLEVR"]
    cleaner = Cleaner(family.config, {})
    list(cleaner.rows(open_source(family)))
    assert "foreign_source" not in cleaner.report.dropped and "off_task_vocabulary" not in cleaner.report.dropped
    cleaner.report.check()


def test_limit_stops_after_n_images(pool: Path) -> None:
    family = load_families(pool / "families.yaml")["PoolCLEVR"]
    cleaner = Cleaner(family.config, {})
    rows = list(cleaner.rows(open_source(family), limit=1))
    assert len(rows) == 1 and cleaner.report.source_records == 1


def test_multi_image_and_imageless_records_are_dropped_with_reason(images: dict[str, bytes]) -> None:
    family_config = load_families_text(FAMILY)
    records = [
        SourceRecord("a", [images["red"], images["blue"]], [QAItem("Which is red?", "left", "a")]),
        SourceRecord("b", [], [QAItem("Is there a cube?", "yes", "b")]),
        SourceRecord("c", [b""], [QAItem("Is there a cube?", "yes", "c")]),
    ]
    cleaner = Cleaner(family_config, {})
    assert list(cleaner.rows(records)) == []
    assert cleaner.report.dropped == {"multiple_images": 1, "no_image": 1, "empty_image": 1}


def test_provenance_checks_recorded_image_id_and_hash(images: dict[str, bytes]) -> None:
    sha = sha256_hex(images["red"])
    records = [
        SourceRecord(
            "r",
            [images["red"]],
            [
                QAItem("Is there a cube?", "yes", "r", 0, source="clevr", image_ref="img-1"),
                QAItem("Is there a sphere?", "no", "r", 1, source="CLEVR", image_ref="img-2"),
                QAItem("Is there a cylinder?", "no", "r", 2, image_ref=sha),
                QAItem("How many cubes are there?", "1", "r", 3, image_ref="0" * 64),
            ],
            image_ids=["img-1"],
        )
    ]
    cleaner = Cleaner(load_families_text(FAMILY), {})
    (row,) = cleaner.rows(records)
    assert [q.turn for q in row.qa] == [0, 2]
    assert cleaner.report.dropped == {"image_id_mismatch": 1, "image_hash_mismatch": 1}


def test_conflicting_duplicates_drop_every_copy_and_duplicates_are_compared_normalised(
    images: dict[str, bytes],
) -> None:
    """A question asked again with other spacing or case is the same question; copies that disagree leave no ground truth."""
    records = [
        SourceRecord(
            "r",
            [images["red"]],
            [
                QAItem("How many cubes are there?", "1", "r", 0),
                QAItem("how  many cubes are there ?", "2", "r", 1),
                QAItem("What color is the cube?", "red", "r", 2),
                QAItem("what color is the cube ?", "Red", "r", 3),
                QAItem("Is there a sphere?", "no", "r", 4),
            ],
        )
    ]
    cleaner = Cleaner(load_families_text(FAMILY), {})
    (row,) = cleaner.rows(records)
    assert [q.turn for q in row.qa] == [2, 4]
    assert cleaner.report.dropped == {"conflicting_duplicate": 2, "duplicate_qa": 1}
    assert cleaner.report.steps["dedup"].dropped == {"conflicting_duplicate": 2, "duplicate_qa": 1}


def test_accounting_check_fails_loudly() -> None:
    report = CleaningReport(source_items=3, kept_items=1)
    report.dropped["x"] = 1
    with pytest.raises(AccountingError, match="3 from the source"):
        report.check()


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What color is it? Options: red, blue, green.", ("What color is it?", ["red", "blue", "green"])),
        (
            "What shape is it? Choose from: (a) cube (b) sphere (c) cylinder",
            ("What shape is it?", ["cube", "sphere", "cylinder"]),
        ),
        (
            "What shape is it? Select one: cube, sphere or cylinder",
            ("What shape is it?", ["cube", "sphere", "cylinder"]),
        ),
        ("Which animal?\nA. dog\nB. cat", ("Which animal?", ["dog", "cat"])),
        ("Which animal?\nChoices:\n(A) dog\n(B) cat\n(C) owl", ("Which animal?", ["dog", "cat", "owl"])),
        ("Which animal? A. dog B. cat C. owl", ("Which animal?", ["dog", "cat", "owl"])),
        (
            "Which animal?\nA. dog\nB. cat\nAnswer with the option's letter from the given choices directly.",
            ("Which animal?", ["dog", "cat"]),
        ),
        ("How many cubes are there?", None),
        ("Is (A) bigger than (C)?", None),
        ("Which one?\nB. dog\nC. cat", None),
    ],
)
def test_parse_options(question: str, expected: tuple[str, list[str]] | None) -> None:
    assert parse_options(question) == expected


def load_families_text(text: str, tmp: Path | None = None):
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "families.yaml"
        path.write_text(textwrap.dedent(text))
        return load_families(path)["PoolCLEVR"].config
