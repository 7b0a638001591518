"""Map the records of a tabular source (Hub or local files) to `SourceRecord`s.

Two shapes cover the real pools: `flat` (one image, one question, one answer per record, as in
VQAv2 or TextVQA) and `conversational` (a list of images and a list of `{user, assistant, source}`
turns, as in HuggingFaceM4/the_cauldron). Column names come from the family's YAML.
"""

from __future__ import annotations

import difflib
import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal

from rs.errors import UsageError
from rs.records import QAItem
from rs.registry import KindConfig
from rs.sources.base import MAX_IMAGE_BYTES, RefusedImage, SourceRecord
from rs.util.sizes import format_bytes


@dataclass
class Columns:
    """Where each field lives in a source record; which ones are read depends on `shape`."""

    image: str = "image"
    """flat: the image column (a `datasets.Image`, bytes, or a file path)."""
    question: str = "question"
    """flat: the question column."""
    answer: str = "answer"
    """flat: the reference column: a string, or a list of annotator answers (the most frequent is the official one, all are references)."""
    answers: str | None = None
    """flat: optional column with further acceptable references (VQA annotators)."""
    options: str | None = None
    """flat: optional column with multiple-choice options."""
    id: str | None = None
    """Record id column; the record's position is used when absent."""
    image_id: str | None = None
    """Column with the image id or hash the QA was recorded against (checked by provenance)."""
    source: str | None = None
    """flat: column naming the dataset each record came from (checked by provenance)."""
    qtype: str | None = None
    """Column with the question type, when the source has one."""
    images: str = "images"
    """conversational: the list-of-images column."""
    texts: str = "texts"
    """conversational: the list-of-turns column."""
    user: str = "user"
    assistant: str = "assistant"
    turn_source: str = "source"
    """conversational: key of the per-turn dataset name."""


@dataclass(kw_only=True)
class TabularSourceConfig(KindConfig):
    """What the Hub and local-file sources share: the records' shape and where each field is."""

    shape: Literal["flat", "conversational"] = "flat"
    columns: Columns = field(default_factory=Columns)
    fixed_question: str | None = None
    """flat: the question asked of every record when the source has none (text recognition)."""


class SourceFormatError(UsageError, ValueError):
    """A source record does not have the shape its family's YAML says it has."""

    key: str = "path"
    """The `source:` key the problem is at (`columns.question`), for the loader's file:line."""


def required_columns(config: TabularSourceConfig) -> dict[str, str]:
    """Every column a record of this shape is read from, by the key that names it (`columns.question` -> `query`).

    The same columns `records_from_rows` reads: a source's first record, or its schema, can be checked against
    them before a run (`rs families validate`) rather than failing on the first record.
    """
    c = config.columns
    if config.shape == "conversational":
        named = {"images": c.images, "texts": c.texts, "id": c.id, "image_id": c.image_id, "qtype": c.qtype}
    else:
        named = {
            "image": c.image,
            "question": None if config.fixed_question is not None else c.question,
            "answer": c.answer,
            "answers": c.answers,
            "options": c.options,
            "id": c.id,
            "image_id": c.image_id,
            "source": c.source,
            "qtype": c.qtype,
        }
    return {f"columns.{key}": column for key, column in named.items() if column is not None}


def check_columns(config: TabularSourceConfig, present: Iterable[str], where: str) -> None:
    """Refuse a source whose records lack a column the family reads, naming the key, the column and the columns there are."""
    present = list(present)
    for key, column in required_columns(config).items():
        if column not in present:
            close = difflib.get_close_matches(column, present, n=1)
            did_you_mean = f"; did you mean {close[0]!r}?" if close else ""
            err = SourceFormatError(
                f"{key}: no column {column!r} in {where} (its columns: {', '.join(present)}){did_you_mean}",
                hint=f"set source.{key} to the column that holds it (shape {config.shape})",
            )
            err.key = key
            raise err


def image_bytes(value: Any, base_dir: Path | None = None) -> bytes | RefusedImage | None:
    """The original bytes of an image value, as `datasets` stores it undecoded, or as a path (read only inside `base_dir`)."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, dict):
        if value.get("bytes"):
            return bytes(value["bytes"])
        if value.get("path"):
            return _read(value["path"], base_dir)
        return b""
    if isinstance(value, (str, Path)):
        return _read(value, base_dir)
    raise SourceFormatError(
        f"image value of type {type(value).__name__} has no original bytes; "
        "the column must be a datasets Image feature (read with decode=False), bytes, or a file path"
    )


def image_path(value: Any) -> str | None:
    """Where an image value comes from, for messages: its path, or the file name `datasets` keeps beside its bytes."""
    if isinstance(value, dict):
        return str(value["path"]) if value.get("path") else None
    return str(value) if isinstance(value, (str, Path)) else None


def _read(path: str | Path, base_dir: Path | None) -> bytes | RefusedImage | None:
    """A local image file's bytes; with `base_dir` (a files source), only a regular file whose real path is inside it.

    The checks come before the file is opened: a record cannot make the build read (and publish)
    a file elsewhere on the machine, through `../`, an absolute path or a symlink pointing out.
    """
    p = Path(path)
    if not p.is_absolute() and base_dir is not None:
        p = base_dir / p
    real = os.path.realpath(p)
    if base_dir is not None:
        root = os.path.realpath(base_dir)
        if os.path.commonpath([real, root]) != root:
            how = (
                "through a symlink"
                if os.path.realpath(os.path.abspath(p)) != os.path.normpath(os.path.abspath(p))
                else "by its path"
            )
            return RefusedImage("unsafe_image_path", f"{path} leaves {base_dir} {how}")
    try:
        info = os.stat(real)
    except FileNotFoundError:
        return RefusedImage("missing_image", f"{path}: no such file")  # the run goes on without it
    except OSError as err:
        return RefusedImage("unreadable_image", f"{path}: {err.strerror}")
    if not stat.S_ISREG(info.st_mode):
        return RefusedImage("unsafe_image_path", f"{path} is not a regular file")
    if info.st_size > MAX_IMAGE_BYTES:
        return RefusedImage(
            "image_too_large", f"{path} is {format_bytes(info.st_size)}, over {format_bytes(MAX_IMAGE_BYTES)}"
        )
    try:
        with open(real, "rb") as fh:
            return fh.read(MAX_IMAGE_BYTES + 1)  # a file that grew since: still bounded (the cleaning checks the size)
    except FileNotFoundError:
        return RefusedImage("missing_image", f"{path}: no such file")
    except OSError as err:
        return RefusedImage("unreadable_image", f"{path}: {err.strerror}")


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def split_answer(value: Any) -> tuple[str, tuple[str, ...]]:
    """A reference column may hold one answer or a list of annotator answers (VQA).

    For a list, the official answer is the most frequent one (the first on ties) and every
    annotator's answer is kept, repeats included: repeats are votes (`vqa` counts them).
    """
    if isinstance(value, (list, tuple)):
        answers = [_text(a) for a in value]
        if not answers:
            return "", ()
        counts = Counter(answers)
        best = max(answers, key=lambda a: (counts[a], -answers.index(a)))
        return best, tuple(answers)
    return _text(value), ()


def _get(record: dict, column: str | None, what: str) -> Any:
    if column is None:
        return None
    if column not in record:
        raise SourceFormatError(f"column {column!r} ({what}) not in the source; its columns are: {', '.join(record)}")
    return record[column]


def records_from_rows(
    rows: Iterable[dict[str, Any]],
    *,
    shape: Literal["flat", "conversational"],
    columns: Columns,
    fixed_question: str | None = None,
    base_dir: Path | None = None,
) -> Iterator[SourceRecord]:
    for position, record in enumerate(rows):
        record_id = _text(_get(record, columns.id, "columns.id")) if columns.id else str(position)
        image_ref = _get(record, columns.image_id, "columns.image_id")
        image_ref = None if image_ref is None else str(image_ref)
        qtype = _get(record, columns.qtype, "columns.qtype")
        if shape == "conversational":
            images = _get(record, columns.images, "columns.images") or []
            turns = _get(record, columns.texts, "columns.texts") or []
            qa = [
                QAItem(
                    question=_text(turn.get(columns.user)),
                    answer=_text(turn.get(columns.assistant)),
                    record_id=record_id,
                    turn=i,
                    source=turn.get(columns.turn_source),
                    image_ref=image_ref,
                    qtype=qtype,
                )
                for i, turn in enumerate(turns)
            ]
            yield SourceRecord(
                record_id=record_id,
                images=[image_bytes(im, base_dir) for im in images],
                qa=qa,
                image_paths=[image_path(im) for im in images],
            )
            continue
        question = (
            fixed_question if fixed_question is not None else _text(_get(record, columns.question, "columns.question"))
        )
        answer, references = split_answer(_get(record, columns.answer, "columns.answer"))
        if columns.answers:
            references = tuple(map(_text, _get(record, columns.answers, "columns.answers") or []))
        options = _get(record, columns.options, "columns.options") or ()
        source = _get(record, columns.source, "columns.source")
        item = QAItem(
            question=question,
            answer=answer,
            record_id=record_id,
            source=None if source is None else str(source),
            image_ref=image_ref,
            references=references,
            options=tuple(map(_text, options)),
            qtype=qtype,
        )
        image = _get(record, columns.image, "columns.image")
        yield SourceRecord(
            record_id=record_id, images=[image_bytes(image, base_dir)], qa=[item], image_paths=[image_path(image)]
        )
