"""A family's train QA from local files: parquet, JSON Lines, or an image folder with metadata.

Image paths are read only inside the source's folder (`rs.sources.mapping`): a record naming a
file outside it, through `../`, an absolute path or a symlink, has its QA dropped as
`unsafe_image_path` and the file is never opened. An image folder's metadata files are read here
rather than by `datasets`' `imagefolder` builder, which stops the whole stream at the first
`file_name` leading out of the folder: here that record alone is refused.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal

from rs.errors import UsageError
from rs.registry import SOURCES
from rs.sources.base import SourceRecord
from rs.sources.hub import undecoded
from rs.sources.mapping import SourceFormatError, TabularSourceConfig, check_columns, records_from_rows
from rs.sources.resumable import resumable

_SUFFIX_FORMAT = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".ndjson": "json"}
_METADATA = {"metadata.jsonl": "json", "metadata.csv": "csv", "metadata.parquet": "parquet"}


LOCAL_PREFIX = "local:"
"""How a files source names itself in the provenance (`local:shapes.parquet`)."""


class SourceNotFound(UsageError, FileNotFoundError):
    """A files source whose path names no file."""


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
            raise SourceFormatError(
                f"source.path {self.config.path!r}: cannot tell the format from {suffix or 'no suffix'!r}",
                hint="set source.format to one of parquet, json, imagefolder",
            )
        return _SUFFIX_FORMAT[suffix]

    def files(self) -> list[Path]:
        """The files (or the one folder) `path` names; a path that names nothing is refused with the names close to it."""
        paths = sorted(self.path.parent.glob(self.path.name)) if "*" in self.path.name else [self.path]
        paths = [p for p in paths if p.exists()]
        if paths:
            return paths
        parent = self.path.parent
        near = sorted(p.name for p in parent.iterdir()) if parent.is_dir() else []
        close = difflib.get_close_matches(self.path.name, near, n=1)
        did_you_mean = f"; did you mean {str(Path(self.config.path).parent / close[0])!r}?" if close else ""
        where = "matches no file" if "*" in self.path.name else "does not exist"
        raise SourceNotFound(
            f"source.path {self.config.path!r}: {self.path.absolute()} {where}{did_you_mean}",
            hint="fix the path in the families file"
            if Path(self.config.path).expanduser().is_absolute()
            else "a relative source.path is relative to the families file's folder; fix the path there",
        )

    def columns(self) -> list[str] | None:
        """The columns of the first file (parquet's schema, a JSON Lines file's first record, an image folder's first
        metadata row, its `file_name` standing for the image column); None when the first record cannot be read here."""
        fmt, first = self.format(), self.files()[0]
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            try:
                return list(pq.read_schema(first).names)
            except (OSError, pa.ArrowException) as err:
                raise SourceFormatError(
                    f"source.path {self.config.path!r}: {first} cannot be read as parquet ({err})",
                    hint="check the file (is it complete?), or set source.format to its real format",
                ) from None
        if fmt == "imagefolder":
            metadata = sorted(p for p in first.rglob("metadata.*") if p.name in _METADATA)
            if not metadata:
                return None
            import datasets

            row = next(
                iter(
                    datasets.load_dataset(
                        _METADATA[metadata[0].name], data_files=str(metadata[0]), split="train", streaming=True
                    )
                ),
                None,
            )
            image = self.config.columns.image  # named by `file_name` (or `<image>_file_name`) in the metadata
            return None if row is None else [image if k in ("file_name", f"{image}_file_name") else k for k in row]
        with first.open("rb") as fh:
            line = next((line for line in fh if line.strip()), b"")
        try:
            record = json.loads(line)
        except ValueError:  # a JSON array over many lines: `datasets` reads it, the first line alone is not a record
            return None
        return list(record) if isinstance(record, dict) else None

    def check(self) -> list[str]:
        """Check what can be checked without reading the records: the path, the format, the columns the family reads.
        Returns what could not be checked here."""
        self.files()
        columns = self.columns()
        if columns is None:
            return [f"the columns of {self.config.path} (its first record could not be read on its own)"]
        check_columns(self.config, columns, self.config.path)
        return []

    def provenance(self) -> dict[str, str | None]:
        """`local:` and the file's (or folder's) name, never its path on this machine: it is recorded in every row and on the cards."""
        return {
            "dataset": f"{LOCAL_PREFIX}{Path(self.config.path).name}",
            "config": self.format(),
            "split": "train",
            "revision": None,
        }

    def size(self) -> int | None:
        """Records in the files: parquet's metadata, or the lines of JSON Lines; None for an image folder."""
        fmt, paths = self.format(), self.files()
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return sum(pq.ParquetFile(p).metadata.num_rows for p in paths)
        if fmt == "json":
            return sum(_lines(p) for p in paths)
        if fmt == "imagefolder":  # a record a row of its metadata files (`_image_folder_rows`)
            found = sorted(p for p in self.path.rglob("metadata.*") if p.name in _METADATA)
            return sum(_metadata_rows(p) for p in found) if found else None
        return None

    def __iter__(self) -> Iterator[SourceRecord]:
        import datasets

        fmt = self.format()
        self.check()  # the path, the first file's schema and the columns, before a stream fails on them
        if fmt == "json" and not any(_holds_a_line(path) for path in self.files()):
            return  # `datasets` cannot read a JSON Lines file of no record (a StopIteration inside its reader): none
        if fmt == "imagefolder":
            rows, base_dir = self._image_folder_rows(), self.path
        else:
            dataset = datasets.load_dataset(fmt, data_files=str(self.path), split="train", streaming=True)
            rows, base_dir = resumable(undecoded(dataset), str(self.path)), self.path.parent
        c = self.config
        yield from records_from_rows(
            rows, shape=c.shape, columns=c.columns, fixed_question=c.fixed_question, base_dir=base_dir
        )

    def _image_folder_rows(self) -> Iterator[dict[str, Any]]:
        """The rows of the folder's metadata files, in path order, each `file_name` made a path under its metadata file's folder.

        The path is only joined here; whether it may be read is decided where it is read.
        """
        import datasets

        root = self.path.resolve()
        found = sorted(p for p in self.path.rglob("metadata.*") if p.name in _METADATA)
        if not found:
            raise SourceFormatError(
                f"source.path {self.config.path!r}: an image folder needs a metadata.jsonl, metadata.csv or "
                "metadata.parquet naming each image in a file_name column, beside its question and answer"
            )
        column = self.config.columns.image
        for metadata in found:
            if not metadata.resolve().is_relative_to(root):
                raise SourceFormatError(
                    f"source.path {self.config.path!r}: {metadata} is a link to a file outside the folder"
                )
            dataset = datasets.load_dataset(
                _METADATA[metadata.name], data_files=str(metadata), split="train", streaming=True
            )
            for row in resumable(dataset, str(metadata)):
                name = row.pop("file_name", None) or row.pop(f"{column}_file_name", None)
                # relative to the folder (`rows`' base_dir), as the folder was named: joined with it again where it is
                # read, a path that already held it pointed at FOLDER/FOLDER/... when the families file was named relatively
                row[column] = None if name is None else str(metadata.parent.relative_to(self.path) / str(name))
                yield row


def _lines(path: Path) -> int:
    """The records of a JSON Lines file: its lines that are not blank, read as a stream."""
    with path.open("rb") as fh:
        return sum(1 for line in fh if line.strip())


def _metadata_rows(path: Path) -> int:
    """The rows of an image folder's metadata file, read as a stream (parquet: its footer alone)."""
    if path.name == "metadata.parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    if path.name == "metadata.csv":
        import csv

        with path.open(newline="", encoding="utf-8", errors="replace") as fh:
            return max(0, sum(1 for row in csv.reader(fh) if row) - 1)  # the header is no row
    return _lines(path)


def _holds_a_line(path: Path) -> bool:
    """Whether a JSON Lines file has a line that is not blank (read up to the first one)."""
    with path.open("rb") as fh:
        return any(line.strip() for line in fh)
