"""What the sampling stage and the recovery pass record of each answer: typed records, and the stores' schemas derived from them.

One record per QA item in the items store (`ItemRecord`), one per recovery sample in the recovery store
(`SampleRecord`, inside its item's record). Routing and the cards read them back by field name.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

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
    return [pa.field(f.name, (narrower or {}).get(f.name) or arrow_type(hints[f.name])) for f in dataclasses.fields(cls)]


@dataclass
class ItemRecord:
    """One QA item's greedy answer, as verified and judged (`rs.sample`)."""

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


@dataclass
class SampleRecord:
    """One recovery sample of an item, as verified and judged (`rs.recovery`)."""

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


ITEMS = pa.schema(arrow_fields(ItemRecord))
"""The items store: one `ItemRecord` per QA item, in item order."""

RECOVERY_SAMPLE = pa.struct(arrow_fields(SampleRecord, {"sample": pa.int32()}))

RECOVERY = pa.schema([
    ("row", pa.int64()), ("key", pa.string()), ("why", pa.string()), ("k", pa.int32()), ("samples", pa.list_(RECOVERY_SAMPLE)),
])
"""The recovery store (`rs.recovery`): one record per sampled item, in item order, with its k `SampleRecord`s."""
