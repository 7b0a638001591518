"""A `datasets` builder with one config per family and split, derived from families.yaml.

`builder_class(families_path)` returns an `ArrowBasedBuilder` subclass whose configs are
`{FAMILY}_RS_think`, `{FAMILY}_RS_nothink` and `{FAMILY}_rejected` (and `{FAMILY}_RS_pairs` when its
recovery pass makes pairs) for every family of that file, so a family added in YAML is buildable with
no code. The write stage (`rs.pipeline.write.splits`) prepares each config once the family's clean, sample and recovery
stages are done, with the routing they call for (`routes`): the builder routes the items into that split while
`datasets` writes the parquet shards, and never runs the model.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import datasets
import pyarrow as pa
from datasets.builder import Key

from rs.context import BuildContext
from rs.families import load_families
from rs.pipeline.route import Routes, split_rows, typer
from rs.pipeline.write.pairs import pair_rows
from rs.pipeline.write.samples import rl_rows, sample_rows
from rs.splits_schema import features
from rs.util.progress import progress

_CHUNK_ROWS = 256


@dataclass
class RSConfig(datasets.BuilderConfig):
    family: str = ""
    split: str = "think"


class RSBuilder(datasets.ArrowBasedBuilder):
    """Builds one published split of one family; `context` is the `rs.context.BuildContext` of the run, `routes` how its
    items are routed (`rs.pipeline.route.routes_for`, given its calibration)."""

    BUILDER_CONFIG_CLASS = RSConfig
    BUILDER_CONFIGS: list[RSConfig] = []

    def __init__(self, *args: Any, context: BuildContext, routes: Routes, **kwargs: Any):
        self.context, self.routes = context, routes
        super().__init__(*args, **kwargs)

    def _info(self) -> datasets.DatasetInfo:
        family = self.context.family
        card = family.config.card
        return datasets.DatasetInfo(
            description=card.description,
            citation=card.citation,
            homepage=card.homepage or "",
            license=card.license,
            features=features(
                self.config.split,
                recovery=family.config.recovery is not None,
                blind=family.config.blind is not None,
            ),
        )

    def _split_generators(self, dl_manager: Any) -> list[datasets.SplitGenerator]:
        return [
            datasets.SplitGenerator(
                name=datasets.Split.TRAIN,
                gen_kwargs={"build_dir": str(self.context.paths.root), "routes": self.routes},
            )
        ]

    def _generate_tables(self, build_dir: str, routes: Routes) -> Iterator[tuple[Key, pa.Table]]:
        """Routed rows as Arrow tables of one row group each: no per-example encoding in Python.

        Rows become Arrow record batches a few hundred at a time, so Python objects never hold
        more than that; batches are gathered into a table until it holds the family's row-group
        target of bytes (`shard.row_group_target()`, measured on the rows themselves, reasoning and
        images included) or `writer_batch_size` rows, and each table becomes one row group. (A table
        of one row is buffered by `datasets` with the next one-row tables, so rows of more than half
        the target can share a group over it: `rs.pipeline.write.splits.check_row_groups` catches that after writing.)
        """
        schema = self.info.features.arrow_schema
        target = self.context.family.config.shard.row_group_target()
        rows: list[dict[str, Any]] = []
        group: list[pa.RecordBatch] = []
        group_rows = group_bytes = index = 0

        def flush() -> Iterator[tuple[Key, pa.Table]]:
            nonlocal group, group_rows, group_bytes, index
            if group:
                yield Key(0, index), pa.Table.from_batches(group, schema=schema)
                index, group, group_rows, group_bytes = index + 1, [], 0, 0

        def add(batch: pa.RecordBatch) -> Iterator[tuple[Key, pa.Table]]:
            nonlocal group_rows, group_bytes
            if batch.nbytes > target and batch.num_rows > 1:  # rows this large: split until a part fits
                half = batch.num_rows // 2
                yield from add(batch.slice(0, half))
                yield from add(batch.slice(half))
                return
            if group and (
                group_bytes + batch.nbytes > target or group_rows + batch.num_rows > self._writer_batch_size
            ):
                yield from flush()
            group.append(batch)
            group_rows, group_bytes = group_rows + batch.num_rows, group_bytes + batch.nbytes

        with progress(None, f"writing {self.config.name}", unit="row", enabled=self.context.progress) as bar:
            split = self.config.split
            for row in self._rows(build_dir, split, routes):
                rows.append(row)
                bar.update()
                if len(rows) >= _CHUNK_ROWS:
                    yield from add(pa.RecordBatch.from_pylist(rows, schema=schema))
                    rows = []
        if rows:
            yield from add(pa.RecordBatch.from_pylist(rows, schema=schema))
        yield from flush()

    def _rows(self, build_dir: str, split: str, routes: Routes) -> Iterator[dict[str, Any]]:
        types = self.context.family.config.question_types
        type_of = typer(types) if types is not None else None
        if split == "pairs":
            return pair_rows(build_dir, routes)
        if split == "samples":
            return sample_rows(build_dir, routes, type_of)
        if split == "rl":
            return rl_rows(build_dir, routes, type_of)
        return split_rows(build_dir, split, routes)


_CLASSES: dict[str, type[RSBuilder]] = {}


def builder_class(families_path: str | Path) -> type[RSBuilder]:
    """The builder class for a families file: one config per family and split."""
    path = Path(families_path).resolve()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    if digest not in _CLASSES:
        configs = [
            RSConfig(name=family.repo_name(split), family=name, split=split, version=datasets.Version("1.0.0"))
            for name, family in load_families(path).items()
            for split in family.splits
        ]
        _CLASSES[digest] = type(
            f"RSBuilder_{digest}", (RSBuilder,), {"BUILDER_CONFIGS": configs, "__module__": __name__}
        )
    return _CLASSES[digest]
