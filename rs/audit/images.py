"""Every published image's bytes against the `image_sha256` its row states, in every repo kind and every mode.

The row's hash is what the cache keys, the replay, the decontamination and the pairs join on: an image whose bytes no
longer hash to it is a different image under the old name. The images are read shard by shard, a batch at a time
(the rows the rest of the audit reads leave them out).
"""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow.parquet as pq

from rs.audit.checkers import Audit, checker
from rs.audit.repo import reading

SHOWN = 10
"""Mismatches named one by one; the rest are counted."""


def _images(value: Any) -> list[bytes | None]:
    """The image bytes of one row's image column: an `Image()` struct, or a list of them (pairs, RL)."""
    if value is None:
        return [None]
    if isinstance(value, list):
        return [v.get("bytes") if isinstance(v, dict) else None for v in value]
    return [value.get("bytes") if isinstance(value, dict) else None]


@checker("*")
def image_bytes(a: Audit) -> None:
    """Each row's image bytes hash to its `image_sha256`."""
    repo, wrong, seen = a.repo, 0, 0
    for shard in repo.shards:
        with reading(shard):
            names = pq.read_schema(shard).names
            column = next((c for c in ("image", "images") if c in names), None)
            if column is None or "image_sha256" not in names:
                continue
            with pq.ParquetFile(shard) as parquet:
                row = 0
                for batch in parquet.iter_batches(batch_size=64, columns=[column, "image_sha256"]):
                    for value, stated in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                        for data in _images(value):
                            seen += 1
                            held = hashlib.sha256(data).hexdigest() if data is not None else "no image bytes"
                            if held != stated:
                                wrong += 1
                                if wrong <= SHOWN:
                                    a.same(
                                        f"the SHA-256 of the image bytes of row {row}",
                                        f"{repo.name}/{shard.relative_to(repo.root)} row {row} image_sha256",
                                        stated,
                                        held,
                                    )
                        row += 1
    a.checked += seen - min(wrong, SHOWN)
    if wrong > SHOWN:
        a.fail(
            "images whose bytes do not hash to their image_sha256",
            f"{repo.name}/data",
            f"{wrong - SHOWN} more besides the {SHOWN} named",
        )
