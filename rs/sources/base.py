"""The records every source yields, and the row a cleaned image becomes.

Sources differ in shape (flat VQA, Cauldron-style conversations, local files, synthetic scenes);
downstream stages only ever see these types, so adding a source never touches cleaning or sampling.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterator, Protocol


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


MAX_IMAGE_BYTES = 64 * 2**20
"""An image file larger than this (64 MiB) is refused unread (`image_too_large`): no benchmark image is that big."""


@dataclass(frozen=True, slots=True)
class RefusedImage:
    """An image a source would not read, and why: its QA are dropped by cleaning with `reason`.

    A path that leaves the source's folder (`../`, an absolute path elsewhere, a symlink pointing
    out), something that is not a regular file, or a file too large to be an image is never opened.
    """

    reason: str
    """The cleaning reason its QA are dropped with (`unsafe_image_path`, `image_too_large`)."""
    detail: str
    """What was refused, for the exclusions file and the log (the path, the size)."""


@dataclass(slots=True)
class SourceRecord:
    """One record of a source: its images (original bytes, or why they were not read) and the QA attached to them."""

    record_id: str
    images: list[bytes | RefusedImage | None]
    qa: list[QAItem]
    image_ids: list[str | None] = field(default_factory=list)
    image_paths: list[str | None] = field(default_factory=list)
    """Where each image was read from (a file path, or the name `datasets` kept with its bytes), when known: the
    exclusions name it when the image is dropped."""


@dataclass(slots=True)
class Row:
    """One image with all its QA: the unit that is sampled, stored and published."""

    image: bytes
    image_sha256: str
    qa: list[QAItem]
    record_ids: list[str] = field(default_factory=list)
    clean_meta: dict = field(default_factory=dict)
    """Provenance (source dataset, config, split, revision, record ids) and the cleaning policy that admitted the row."""


class Source(Protocol):
    """A stream of records plus what identifies where they came from."""

    def __iter__(self) -> Iterator[SourceRecord]: ...

    def provenance(self) -> dict[str, str | None]:
        """Dataset, config, split and revision, recorded in every row's `clean_meta`."""
        ...

    # Optional: `size() -> int | None`, the records in the source when known without reading them all
    # (`rs.plan` projects a family's cost from it).


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
