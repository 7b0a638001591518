"""A family's train QA from local files: parquet, JSON Lines, or an image folder with metadata.

Image paths are read only inside the source's folder (`rs.sources.mapping`): a record naming a
file outside it, through `../`, an absolute path or a symlink, has its QA dropped as
`unsafe_image_path` and the file is never opened. An image folder's metadata files are read here
rather than by `datasets`' `imagefolder` builder, which stops the whole stream at the first
`file_name` leading out of the folder: here that record alone is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal

from rs.registry import SOURCES
from rs.sources.base import SourceRecord
from rs.sources.hub import undecoded
from rs.sources.mapping import SourceFormatError, TabularSourceConfig, records_from_rows
from rs.sources.resumable import resumable

_SUFFIX_FORMAT = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".ndjson": "json"}
_METADATA = {"metadata.jsonl": "json", "metadata.csv": "csv", "metadata.parquet": "parquet"}


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
            rows, base_dir = self._image_folder_rows(), self.path
        else:
            dataset = datasets.load_dataset(fmt, data_files=str(self.path), split="train", streaming=True)
            rows, base_dir = resumable(undecoded(dataset), str(self.path)), self.path.parent
        c = self.config
        yield from records_from_rows(rows, shape=c.shape, columns=c.columns, fixed_question=c.fixed_question, base_dir=base_dir)

    def _image_folder_rows(self) -> Iterator[dict[str, Any]]:
        """The rows of the folder's metadata files, in path order, each `file_name` made a path under its metadata file's folder.

        The path is only joined here; whether it may be read is decided where it is read.
        """
        import datasets

        root = self.path.resolve()
        found = sorted(p for p in self.path.rglob("metadata.*") if p.name in _METADATA)
        if not found:
            raise SourceFormatError(f"source.path {self.config.path!r}: an image folder needs a metadata.jsonl, metadata.csv or "
                                    "metadata.parquet naming each image in a file_name column, beside its question and answer")
        column = self.config.columns.image
        for metadata in found:
            if not metadata.resolve().is_relative_to(root):
                raise SourceFormatError(f"source.path {self.config.path!r}: {metadata} is a link to a file outside the folder")
            dataset = datasets.load_dataset(_METADATA[metadata.name], data_files=str(metadata), split="train", streaming=True)
            for row in resumable(dataset, str(metadata)):
                name = row.pop("file_name", None) or row.pop(f"{column}_file_name", None)
                row[column] = None if name is None else str(metadata.parent / str(name))
                yield row
