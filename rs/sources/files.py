"""A family's train QA from local files: parquet, JSON Lines, or an image folder with metadata."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal

from rs.registry import SOURCES
from rs.sources.base import SourceRecord
from rs.sources.hub import undecoded
from rs.sources.mapping import TabularSourceConfig, records_from_rows

_SUFFIX_FORMAT = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".ndjson": "json"}


@dataclass(kw_only=True)
class FilesSourceConfig(TabularSourceConfig):
    kind: Literal["files"]
    path: str
    """A parquet or JSON Lines file, a glob, or an image folder with metadata.jsonl/.csv (relative paths are relative to the families file)."""
    format: Literal["auto", "parquet", "json", "imagefolder"] = "auto"


@SOURCES.register("files")
class FilesSource:
    """Streams local files with `datasets`' own readers, mapped by the family's columns."""

    Config = FilesSourceConfig

    def __init__(self, config: FilesSourceConfig, base_dir: Path | None = None):
        self.config = config
        path = Path(config.path)
        self.path = path if path.is_absolute() or base_dir is None else base_dir / path

    @classmethod
    def from_config(cls, config: FilesSourceConfig, *, base_dir: Path) -> FilesSource:
        return cls(config, base_dir=base_dir)

    @staticmethod
    def label(config: FilesSourceConfig) -> str:
        """How `rs families list` names this source."""
        return config.path

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

    def size(self) -> int | None:
        """Records in the files: parquet's metadata, or the lines of JSON Lines; None for an image folder."""
        fmt = self.format()
        paths = sorted(self.path.parent.glob(self.path.name)) if "*" in self.path.name else [self.path]
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return sum(pq.ParquetFile(p).metadata.num_rows for p in paths)
        if fmt == "json":
            return sum(sum(1 for line in p.open("rb") if line.strip()) for p in paths)
        return None

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
