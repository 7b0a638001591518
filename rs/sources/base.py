"""What every source yields: its records, each with its images and QA (`rs.records.QAItem`).

Sources differ in shape (flat VQA, Cauldron-style conversations, local files, synthetic scenes);
downstream stages only ever see these types, so adding a source never touches cleaning or sampling.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterator, Protocol

from rs.records import QAItem

MAX_IMAGE_BYTES = 64 * 2**20
"""An image file larger than this (64 MiB) is refused unread (`image_too_large`): no benchmark image is that big."""


@dataclass(frozen=True, slots=True)
class RefusedImage:
    """An image a source would not read, and why: its QA are dropped by cleaning with `reason`.

    A path that leaves the source's folder (`../`, an absolute path elsewhere, a symlink pointing
    out), something that is not a regular file, or a file too large to be an image is never opened.
    """

    reason: str
    """The cleaning reason its QA are dropped with: one of the records step's (`rs.pipeline.clean.RECORD_REASONS`:
    `unsafe_image_path`, `image_too_large`, ...)."""
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
