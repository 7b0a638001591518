"""A published repo as `rs audit` reads it: its card (front matter and text), its `rs/stats.json`, its parquet rows.

Read from a local folder (`--out`) or a Hub repo id (downloaded with `huggingface_hub.snapshot_download`); the
sibling repos of the family are read the same way when they are reachable, since a card states whole-family
numbers that only the siblings' rows hold.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from rs.errors import UsageError
from rs.pipeline.write.report import FamilyReport, ReportError


class AuditUsageError(UsageError, ValueError):
    """A target `rs audit` cannot read: no such folder or repo, or not a repo rs published."""


@dataclass
class RepoFiles:
    """One published repo's files."""

    name: str
    """The repo's name (`TinyCLEVR_RS_think`), as `stats.json`'s splits name it."""
    root: Path

    @cached_property
    def readme(self) -> str:
        path = self.root / "README.md"
        if not path.is_file():
            raise AuditUsageError(f"{self.root}: no README.md: not a dataset repo rs published")
        return _text(path)

    def json(self, path: Path) -> Any:
        """A JSON file of the repo, or an `AuditUsageError` saying what is wrong with it and where."""
        try:
            return json.loads(_text(path))
        except json.JSONDecodeError as err:
            raise AuditUsageError(
                f"{path}: not JSON (line {err.lineno}, column {err.colno}: {err.msg}): not a file rs wrote, or damaged"
            ) from None

    @cached_property
    def front_matter(self) -> dict[str, Any]:
        text = self.readme
        if not text.startswith("---\n") or "\n---\n" not in text[4:]:
            raise AuditUsageError(f"{self.root / 'README.md'}: no YAML front matter")
        try:
            data = load_yaml(text[4 : text.index("\n---\n", 4)]) or {}
        except yaml.YAMLError as err:
            raise AuditUsageError(f"{self.root / 'README.md'}: its front matter is not YAML ({err})") from None
        if not isinstance(data, dict):
            raise AuditUsageError(
                f"{self.root / 'README.md'}: its front matter is a YAML {type(data).__name__}, not a mapping"
            )
        return data

    @cached_property
    def body(self) -> str:
        text = self.readme
        return text[text.index("\n---\n", 4) + 5 :]

    @cached_property
    def stats_raw(self) -> dict[str, Any]:
        path = self.root / "rs" / "stats.json"
        if not path.is_file():
            raise AuditUsageError(
                f"{self.root}: no rs/stats.json: not a repo rs published (or one published before rs kept its stats)"
            )
        data = self.json(path)
        if not isinstance(data, dict):
            raise AuditUsageError(f"{path}: holds a JSON {type(data).__name__}, not the object rs writes")
        return data

    @cached_property
    def report(self) -> FamilyReport:
        where = self.root / "rs" / "stats.json"
        try:
            return FamilyReport.from_dict(self.stats_raw, where=str(where))
        except AuditUsageError:
            raise
        except ReportError as err:
            raise AuditUsageError(str(err), hint=err.hint) from None
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise AuditUsageError(
                f"{where}: not the stats rs writes ({type(err).__name__}: {err}): damaged, or written by another rs"
            ) from None

    @cached_property
    def split(self) -> str:
        """Which of the family's repos this is: `think`, `nothink`, `rejected`, `pairs` (or a kind a later rs adds)."""
        for split, summary in self.report.splits.items():
            if summary.repo == self.name:
                return split
        names = ", ".join(s.repo for s in self.report.splits.values())
        raise AuditUsageError(f"{self.root}: its rs/stats.json names the repos {names}, not {self.name}")

    @cached_property
    def shards(self) -> list[Path]:
        return sorted((self.root / "data").glob("*.parquet"))

    @cached_property
    def rows(self) -> list[dict[str, Any]]:
        """Every row of every shard, in order (images left out: the audit counts, it does not look)."""
        out: list[dict[str, Any]] = []
        for shard in self.shards:
            with reading(shard):
                schema = pq.read_schema(shard)
                keep = [c for c in schema.names if c not in ("image", "images")]
                out.extend(pq.read_table(shard, columns=keep).to_pylist())
        return out

    @cached_property
    def qa(self) -> list[dict[str, Any]]:
        """The QA entries of a per-image split, or the rows of a repo of one question per row (pairs, samples, RL)."""
        if self.split in ("pairs", "samples", "rl"):
            return self.rows
        return [qa for row in self.rows for qa in row["qa"]]

    @cached_property
    def arrow_schema(self) -> Any:
        if not self.shards:
            return None
        with reading(self.shards[0]):
            return pq.read_schema(self.shards[0])


def load_yaml(text: str) -> Any:
    """YAML read safely, with libyaml where PyYAML has it (a card's front matter: ten times faster than pure Python)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader


def _text(path: Path) -> str:
    """A text file of the repo, or an `AuditUsageError` naming it when it is not UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise AuditUsageError(
            f"{path}: not UTF-8 text (byte {err.start}: {err.reason}): not a file rs wrote, or damaged"
        ) from None


@contextmanager
def reading(shard: Path) -> Iterator[None]:
    """Reading a parquet shard; one that is not whole (truncated, damaged) is an `AuditUsageError` naming it."""
    try:
        yield
    except (pa.ArrowException, OSError) as err:
        raise AuditUsageError(
            f"{shard}: not a whole parquet file ({type(err).__name__}: {err}): damaged or truncated; publish the family "
            "again to restore it"
        ) from None


@dataclass
class Family:
    """The repo audited and whichever siblings could be read."""

    repo: RepoFiles
    siblings: dict[str, RepoFiles] = field(default_factory=dict)
    """split -> its repo, this one included."""
    missing: list[str] = field(default_factory=list)
    """Siblings that could not be read: their numbers are checked against stats.json alone."""

    def of(self, split: str) -> RepoFiles | None:
        return self.siblings.get(split)


def _download(repo_id: str, *, revision: str | None = None) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, repo_type="dataset", revision=revision))
    except Exception as err:  # not found, gated, offline: said as the target's problem
        raise AuditUsageError(
            f"{repo_id}: cannot download the dataset repo from the Hub: {type(err).__name__}: {err}"
        ) from None


def load_family(target: str, *, siblings: bool = True) -> Family:
    """The repo at `target` (a folder, or a Hub id `namespace/name`) and, with `siblings`, its family's other repos: beside
    it in the same parent folder, or in the same namespace on the Hub."""
    path = Path(target)
    local = path.is_dir()
    if not local and (target.count("/") != 1 or path.exists()):
        raise AuditUsageError(f"{target}: no such folder, and not a Hub repo id (namespace/name)")
    root = path if local else _download(target)
    repo = RepoFiles(path.resolve().name if local else target.split("/")[1], root)
    family = Family(repo, {repo.split: repo})
    if not siblings:
        family.missing = [summary.repo for split, summary in repo.report.splits.items() if split != repo.split]
        return family
    for split, summary in repo.report.splits.items():
        if split in family.siblings:
            continue
        try:
            if local:
                other = path.resolve().parent / summary.repo
                if not (other / "README.md").is_file():
                    raise AuditUsageError(f"{other}: not there")
                family.siblings[split] = RepoFiles(summary.repo, other)
            else:
                family.siblings[split] = RepoFiles(summary.repo, _download(f"{target.split('/')[0]}/{summary.repo}"))
        except AuditUsageError:
            family.missing.append(summary.repo)
    return family
