"""A family's train QA from local files: parquet, JSON Lines, or an image folder with metadata."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from rs.families.schema import FilesSourceConfig
from rs.sources.base import SourceRecord
from rs.sources.hub import undecoded
from rs.sources.mapping import records_from_rows

_SUFFIX_FORMAT = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".ndjson": "json"}


class FilesSource:
    """Streams local files with `datasets`' own readers, mapped by the family's columns."""

    def __init__(self, config: FilesSourceConfig, base_dir: Path | None = None):
        self.config = config
        path = Path(config.path)
        self.path = path if path.is_absolute() or base_dir is None else base_dir / path

    def format(self) -> str:
        if self.config.format != "auto":
            return self.config.format
        if self.path.is_dir():
            return "imagefolder"
        suffix = self.path.suffix.lower() or Path(str(self.path).rstrip("*")).suffix.lower()
        if suffix not in _SUFFIX_FORMAT:
            raise ValueError(
                f"source.path {self.config.path!r}: cannot tell the format from {suffix or 'no suffix'!r}; "
                f"set source.format to one of parquet, json, imagefolder"
            )
        return _SUFFIX_FORMAT[suffix]

    def provenance(self) -> dict[str, str | None]:
        return {"dataset": str(self.path), "config": self.format(), "split": "train", "revision": None}

    def __iter__(self) -> Iterator[SourceRecord]:
        import datasets

        fmt = self.format()
        if fmt == "imagefolder":
            dataset = datasets.load_dataset("imagefolder", data_dir=str(self.path), split="train", streaming=True)
            base_dir = self.path
        else:
            dataset = datasets.load_dataset(fmt, data_files=str(self.path), split="train", streaming=True)
            base_dir = self.path.parent
        c = self.config
        yield from records_from_rows(undecoded(dataset), shape=c.shape, columns=c.columns, fixed_question=c.fixed_question, base_dir=base_dir)
