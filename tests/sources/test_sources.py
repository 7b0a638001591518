"""Sources: Hub-shaped (flat and conversational), local files, mapping and original image bytes."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
from datasets import Features, Image, List, Value

from rs.records import QAItem
from rs.sources.base import RefusedImage, sha256_hex
from rs.sources.files import FilesSource, FilesSourceConfig
from rs.sources.hub import HubSource, HubSourceConfig
from rs.sources.mapping import Columns, SourceFormatError, split_answer
from rs.verifiers import get_verifier

TURN = {"user": Value("string"), "assistant": Value("string"), "source": Value("string")}


def cauldron_repo(root: Path, images: dict[str, bytes]) -> Path:
    """A local dataset repo laid out like HuggingFaceM4/the_cauldron: one parquet folder per config."""
    records = {
        "images": [[{"bytes": images["red"], "path": None}], [{"bytes": images["green"], "path": None}]],
        "texts": [
            [
                {"user": "How many red cubes are there?", "assistant": "2", "source": "clevr"},
                {"user": "Is there a sphere?", "assistant": "yes", "source": "clevr"},
            ],
            [{"user": "What color is the cylinder?", "assistant": "green", "source": "clevr"}],
        ],
    }
    ds = datasets.Dataset.from_dict(records, features=Features({"images": List(Image()), "texts": List(TURN)}))
    (root / "clevr").mkdir(parents=True)
    ds.to_parquet(str(root / "clevr" / "train-00000-of-00001.parquet"))
    (root / "README.md").write_text(
        "---\nconfigs:\n- config_name: clevr\n  data_files:\n  - split: train\n    path: clevr/train-*\n---\n"
    )
    return root


def test_hub_source_conversational_reads_turns_and_original_bytes(tmp_path: Path, images: dict[str, bytes]) -> None:
    repo = cauldron_repo(tmp_path / "repo", images)
    source = HubSource(HubSourceConfig(kind="hub", path=str(repo), name="clevr", shape="conversational"))
    records = list(source)
    assert [len(r.qa) for r in records] == [2, 1]
    assert records[0].images == [images["red"]]
    assert records[1].images == [images["green"]]  # the JPEG's own bytes, not a re-encode
    first = records[0].qa[1]
    assert (first.question, first.answer, first.source, first.turn, first.record_id) == (
        "Is there a sphere?",
        "yes",
        "clevr",
        1,
        "0",
    )
    assert source.provenance() == {"dataset": str(repo), "config": "clevr", "split": "train", "revision": None}


def test_hub_source_flat_with_annotator_answers(tmp_path: Path, images: dict[str, bytes]) -> None:
    ds = datasets.Dataset.from_dict(
        {
            "image": [{"bytes": images["blue"], "path": None}],
            "question": ["What does the sign say?"],
            "answers": [["stop", "STOP", "stop", "halt"]],
            "question_id": [17],
        },
        features=Features(
            {
                "image": Image(),
                "question": Value("string"),
                "answers": List(Value("string")),
                "question_id": Value("int64"),
            }
        ),
    )
    (tmp_path / "data").mkdir()
    ds.to_parquet(str(tmp_path / "data" / "train-00000-of-00001.parquet"))
    cols = Columns(answer="answers", id="question_id")
    (record,) = HubSource(HubSourceConfig(kind="hub", path=str(tmp_path), columns=cols))
    assert record.record_id == "17" and record.images == [images["blue"]]
    assert record.qa[0].answer == "stop" and record.qa[0].references == ("stop", "STOP", "stop", "halt")
    assert record.qa[0].all_references() == ["stop", "STOP", "stop", "halt"]  # votes kept for `vqa`


def test_split_answer_most_frequent_then_first() -> None:
    assert split_answer(["a", "b", "b", "a", "c"]) == ("a", ("a", "b", "b", "a", "c"))
    assert split_answer("42") == ("42", ())
    assert split_answer([]) == ("", ())


def test_annotator_votes_reach_the_vqa_verifier() -> None:
    # Nine annotators said "2", one said "3". Deduplicated, the two answers looked like alternatives
    # (fewer than three references) and the lone "3" was accepted.
    answer, votes = split_answer(["2"] * 9 + ["3"])
    item = QAItem(question="How many?", answer=answer, record_id="0", references=votes)
    vqa = get_verifier("vqa")
    assert vqa.match("2", item.all_references()) and not vqa.match("3", item.all_references())
    assert QAItem(question="q", answer="x", record_id="1").all_references() == ["x"]
    assert QAItem(question="q", answer="x", record_id="2", references=("y", "y")).all_references() == ["x", "y", "y"]


def test_files_source_jsonl_with_relative_image_paths(tmp_path: Path, images: dict[str, bytes]) -> None:
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "a.png").write_bytes(images["red"])
    lines = [
        {"image": "img/a.png", "question": "Q1?", "answer": "x"},
        {"image": "img/missing.png", "question": "Q2?", "answer": "y"},
    ]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(line) for line in lines))
    records = list(FilesSource(FilesSourceConfig(kind="files", path="train.jsonl"), base_dir=tmp_path))
    assert records[0].images == [images["red"]]
    assert records[1].images == [
        RefusedImage("missing_image", "img/missing.png: no such file")
    ]  # dropped with its reason, the run goes on


def test_files_source_imagefolder_flat_one_line_per_qa(tmp_path: Path, images: dict[str, bytes]) -> None:
    (tmp_path / "a.png").write_bytes(images["red"])
    (tmp_path / "b.png").write_bytes(images["blue"])
    meta = [
        {"file_name": "a.png", "question": "Q1?", "answer": "1", "qid": "q1"},
        {"file_name": "a.png", "question": "Q2?", "answer": "2", "qid": "q2"},
        {"file_name": "b.png", "question": "Q3?", "answer": "3", "qid": "q3"},
    ]
    (tmp_path / "metadata.jsonl").write_text("\n".join(json.dumps(m) for m in meta))
    source = FilesSource(FilesSourceConfig(kind="files", path=str(tmp_path), columns=Columns(id="qid")))
    records = list(source)
    assert source.format() == "imagefolder"
    assert sorted((r.record_id, sha256_hex(r.images[0])) for r in records) == sorted(
        [("q1", sha256_hex(images["red"])), ("q2", sha256_hex(images["red"])), ("q3", sha256_hex(images["blue"]))]
    )


def test_parquet_with_a_missing_column_says_which(tmp_path: Path, images: dict[str, bytes]) -> None:
    ds = datasets.Dataset.from_dict(
        {"img": [{"bytes": images["red"], "path": None}], "q": ["?"], "a": ["1"]},
        features=Features({"img": Image(), "q": Value("string"), "a": Value("string")}),
    )
    ds.to_parquet(str(tmp_path / "train.parquet"))
    source = FilesSource(
        FilesSourceConfig(
            kind="files", path=str(tmp_path / "train.parquet"), columns=Columns(image="img", question="q")
        )
    )
    with pytest.raises(
        SourceFormatError, match=r"columns.answer: no column 'answer' in .*train.parquet \(its columns: img, q, a\)"
    ):
        list(source)


def test_unknown_suffix_asks_for_a_format(tmp_path: Path) -> None:
    with pytest.raises(SourceFormatError, match="cannot tell the format from '.xyz'") as err:
        FilesSource(FilesSourceConfig(kind="files", path=str(tmp_path / "data.xyz"))).format()
    assert "set source.format" in err.value.hint
