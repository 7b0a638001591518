"""What the sampling stage and the recovery pass record of each answer: typed records, and the stores' schemas derived from them.

One record per QA item in the items store (`ItemRecord`), one per recovery sample in the recovery store
(`SampleRecord`, inside its item's record). Routing and the cards read them back by field name.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


@dataclass(slots=True)
class QAItem:
    """One question about one image, as the source recorded it.

    `question` and `answer` are the source's text, untouched by the source; cleaning may rewrite
    them (multiple-choice normalisation) and says so in `rewrites`.
    """

    question: str
    answer: str
    record_id: str
    turn: int = 0
    source: str | None = None
    """Dataset the pool says this item came from (the Cauldron's per-turn `source`), if recorded."""
    image_ref: str | None = None
    """Image id or hash the item was recorded against, if the source keeps one."""
    references: tuple[str, ...] = ()
    """Every annotator's answer, repeats included (repeats are votes), when the source has several."""
    options: tuple[str, ...] = ()
    """Multiple-choice options when the source stores them apart from the question."""
    qtype: str | None = None
    """Question type when the source knows it (synthetic scenes do)."""
    rewrites: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    """Cleaning marks that keep the item but are worth recording (e.g. `sentence_reference`)."""

    @property
    def key(self) -> str:
        """Stable id of the item within its family: record id and turn."""
        return f"{self.record_id}#{self.turn}"

    def all_references(self) -> list[str]:
        """What the verifier compares with: the annotators' answers as recorded (votes kept), with the
        official answer first when it is not one of them; just the answer when there are no annotators."""
        if not self.references:
            return [self.answer]
        if self.answer in self.references:
            return list(self.references)
        return [self.answer, *self.references]


@dataclass(slots=True)
class Row:
    """One image with all its QA: the unit that is sampled, stored and published."""

    image: bytes
    image_sha256: str
    qa: list[QAItem]
    record_ids: list[str] = field(default_factory=list)
    clean_meta: dict = field(default_factory=dict)
    """Provenance (source dataset, config, split, revision, record ids) and the cleaning policy that admitted the row."""


_ARROW = {str: pa.string(), int: pa.int64(), bool: pa.bool_(), float: pa.float64()}


def arrow_type(hint: Any) -> pa.DataType:
    """The Arrow type of a field's annotation: str, int, bool, float, a list of one of them, each optional."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (hint,) = args
        args = list(typing.get_args(hint))
    if typing.get_origin(hint) is list:
        return pa.list_(arrow_type(args[0]))
    return _ARROW[hint]


def arrow_fields(cls: type, narrower: dict[str, pa.DataType] | None = None) -> list[pa.Field]:
    """The fields of a record class, in order, as Arrow fields (`narrower`: a smaller type for some, such as int32)."""
    hints = typing.get_type_hints(cls)
    return [
        pa.field(f.name, (narrower or {}).get(f.name) or arrow_type(hints[f.name])) for f in dataclasses.fields(cls)
    ]


@dataclass
class ItemRecord:
    """One QA item's greedy answer, as verified and judged (`rs.pipeline.sample`)."""

    row: int
    """The cleaned row (image) it belongs to."""
    key: str
    image_sha256: str | None
    prompt: str
    """The exact question the model received."""
    reference: str
    references: list[str]
    text: str
    """The raw output."""
    reasoning: str | None
    final: str | None
    finish_reason: str
    prompt_tokens: int | None
    completion_tokens: int | None
    model: str
    model_revision: str | None
    error: str | None
    verified: bool
    contradicts: bool
    judge: str | None
    """The judge's label, when it was asked."""
    prompt_reasoning: str | None
    reasoning_agrees: bool | None
    ending: str
    thinking_tokens: int | None
    made_on: str | None = None
    """The id of the machine and engine that made the answer (`rs.engines.machine`); None: not known (cached before rs
    recorded it, or a store rebuilt from a samples repo)."""


@dataclass
class SampleRecord:
    """One recovery sample of an item, as verified and judged (`rs.pipeline.recover`)."""

    sample: int
    seed: int
    text: str
    reasoning: str | None
    final: str | None
    finish_reason: str
    ending: str
    completion_tokens: int | None
    thinking_tokens: int | None
    error: str | None
    verified: bool
    contradicts: bool
    judge: str | None
    reasoning_agrees: bool | None
    made_on: str | None = None
    """As `ItemRecord.made_on`."""


ITEMS = pa.schema(arrow_fields(ItemRecord))
"""The items store: one `ItemRecord` per QA item, in item order."""

RECOVERY_SAMPLE = pa.struct(arrow_fields(SampleRecord, {"sample": pa.int32()}))

RECOVERY = pa.schema(
    [
        ("row", pa.int64()),
        ("key", pa.string()),
        ("why", pa.string()),
        ("k", pa.int32()),
        ("samples", pa.list_(RECOVERY_SAMPLE)),
    ]
)
"""The recovery store (`rs.pipeline.recover`): one record per sampled item, in item order, with its k `SampleRecord`s."""
