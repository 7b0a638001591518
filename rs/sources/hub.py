"""A family's train QA from a Hub dataset, streamed through `datasets.load_dataset`."""

from __future__ import annotations

from typing import Any, Iterator

from rs.families.schema import HubSourceConfig
from rs.sources.base import SourceRecord
from rs.sources.mapping import records_from_rows


def undecoded(dataset: Any) -> Any:
    """Cast every image column to `Image(decode=False)` so the original bytes travel on untouched."""
    import datasets

    features = dataset.features
    if features is None:  # a stream whose schema is only known after the first record
        return dataset
    for name, feature in features.items():
        if isinstance(feature, datasets.Image) and feature.decode:
            dataset = dataset.cast_column(name, datasets.Image(decode=False))
        elif isinstance(feature, datasets.List) and isinstance(feature.feature, datasets.Image):
            dataset = dataset.cast_column(name, datasets.List(datasets.Image(decode=False)))
    return dataset


class HubSource:
    """Streams a Hub dataset split; `revision` pins the commit for reproducible builds."""

    def __init__(self, config: HubSourceConfig):
        self.config = config

    def provenance(self) -> dict[str, str | None]:
        c = self.config
        return {"dataset": c.path, "config": c.name, "split": c.split, "revision": c.revision}

    def __iter__(self) -> Iterator[SourceRecord]:
        import datasets

        c = self.config
        dataset = datasets.load_dataset(c.path, c.name, split=c.split, revision=c.revision, streaming=c.streaming)
        yield from records_from_rows(undecoded(dataset), shape=c.shape, columns=c.columns, fixed_question=c.fixed_question)
