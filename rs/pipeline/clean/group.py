"""Group QA by image across a whole stream, in constant memory.

The same image can appear in several source records (the Cauldron repeats images across records);
it must become one row with all its QA. Holding a dict of every image seen would grow with the
family, so QA and image bytes are spilled to a temporary SQLite file and read back grouped, in
order of first appearance. A QA is spilled as JSON (`rs.store.qa_record`): what is read back is data, never code.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Iterator

from rs.records import QAItem, Row
from rs.store import qa_item, qa_record


class ImageGrouper:
    """Collect (image, QA) pairs keyed by image SHA-256; `rows()` yields one Row per image."""

    def __init__(self, work_dir: str | Path | None = None):
        self._tmp = tempfile.TemporaryDirectory(prefix="rs-group-", dir=work_dir)
        self._db = sqlite3.connect(Path(self._tmp.name) / "group.sqlite", isolation_level=None)
        self._db.executescript(
            """
            PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-8000;
            CREATE TABLE images (sha TEXT PRIMARY KEY, ord INTEGER NOT NULL, image BLOB NOT NULL, record_ids TEXT NOT NULL);
            CREATE TABLE qa (id INTEGER PRIMARY KEY, sha TEXT NOT NULL, item TEXT NOT NULL);
            BEGIN;
            """
        )
        self.images = 0
        self.merged_records = 0

    def __contains__(self, image_sha256: str) -> bool:
        return self._db.execute("SELECT 1 FROM images WHERE sha = ?", (image_sha256,)).fetchone() is not None

    def add(self, image_sha256: str, image: bytes, record_id: str, items: list[QAItem]) -> None:
        seen = self._db.execute("SELECT record_ids FROM images WHERE sha = ?", (image_sha256,)).fetchone()
        if seen is None:
            self._db.execute("INSERT INTO images VALUES (?, ?, ?, ?)", (image_sha256, self.images, image, record_id))
            self.images += 1
        else:
            self.merged_records += 1
            self._db.execute(
                "UPDATE images SET record_ids = ? WHERE sha = ?", (f"{seen[0]}\n{record_id}", image_sha256)
            )
        self._db.executemany(
            "INSERT INTO qa (sha, item) VALUES (?, ?)",
            [(image_sha256, json.dumps(qa_record(item))) for item in items],
        )

    def rows(self) -> Iterator[Row]:
        self._db.execute("COMMIT")
        self._db.execute("CREATE INDEX qa_sha ON qa (sha, id)")
        reader = self._db.cursor()
        for sha, image, record_ids in reader.execute("SELECT sha, image, record_ids FROM images ORDER BY ord"):
            items = [
                qa_item(json.loads(text))
                for (text,) in self._db.execute("SELECT item FROM qa WHERE sha = ? ORDER BY id", (sha,))
            ]
            yield Row(image=image, image_sha256=sha, qa=items, record_ids=record_ids.split("\n"))

    def close(self) -> None:
        self._db.close()
        self._tmp.cleanup()

    def __enter__(self) -> "ImageGrouper":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
