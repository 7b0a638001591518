"""A family's train QA from a Hub dataset, streamed through `datasets.load_dataset`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal

from rs.errors import RsError
from rs.registry import SOURCES
from rs.sources.base import SourceRecord
from rs.sources.mapping import TabularSourceConfig, records_from_rows
from rs.sources.resumable import is_dropped_connection, resumable


class SourceUnreachable(RsError):
    """The Hub dataset could not be opened (no network, the Hub down); nothing was read."""

    def __init__(self, label: str, error: BaseException):
        super().__init__(
            f"cannot reach the source {label} on the Hub ({type(error).__name__}: {error})",
            hint="check the network (or the Hub's status page) and run the same command again; with HF_HUB_OFFLINE=1 "
            "a dataset already in the local Hugging Face cache is read from there",
        )


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


def _resolve_revision(path: str) -> str | None:
    import logging
    from pathlib import Path

    from huggingface_hub import HfApi, constants

    if Path(path).exists() or constants.HF_HUB_OFFLINE:
        return None
    try:
        return HfApi().dataset_info(path).sha
    except Exception as err:  # no network, gated repo, ...: the build goes on, unpinned
        logging.getLogger(__name__).warning(
            "could not resolve the current revision of %s (%s); pin source.revision", path, err
        )
        return None


@dataclass(kw_only=True)
class HubSourceConfig(TabularSourceConfig):
    kind: Literal["hub"]
    path: str
    """Hub dataset id, e.g. HuggingFaceM4/the_cauldron."""
    name: str | None = None
    """Dataset config (subset), e.g. clevr."""
    split: str = "train"
    revision: str | None = None
    """Pin a commit for reproducible builds; recorded in clean_meta either way."""
    streaming: bool = True


@SOURCES.register("hub")
class HubSource:
    """Streams a Hub dataset split; `revision` pins the commit for reproducible builds."""

    Config = HubSourceConfig

    def __init__(self, config: HubSourceConfig):
        self.config = config
        self._revision: str | None = None

    @classmethod
    def from_config(cls, config: HubSourceConfig, *, base_dir: Path) -> HubSource:
        return cls(config)

    @staticmethod
    def label(config: HubSourceConfig) -> str:
        """How `rs families list` names this source."""
        return config.path + (f" [{config.name}]" if config.name else "") + f" ({config.split})"

    def provenance(self) -> dict[str, str | None]:
        c = self.config
        return {"dataset": c.path, "config": c.name, "split": c.split, "revision": self.revision()}

    def revision(self) -> str | None:
        """The commit the data comes from: the pinned revision, or the one `main` resolves to now.

        Recorded in every row's clean_meta and in the stats, so a build says which data it read.
        Offline, or for a local folder, an unpinned source has no revision to record.
        """
        if self._revision is None:
            self._revision = self.config.revision or _resolve_revision(self.config.path)
        return self._revision

    def size(self) -> int | None:
        """Records in the split, from the dataset's own info on the Hub; None when the Hub does not say (or is out of reach)."""
        import datasets

        c = self.config
        try:
            info = datasets.load_dataset_builder(c.path, c.name, revision=self.revision()).info
            return int(info.splits[c.split].num_examples) if info.splits and c.split in info.splits else None
        except Exception:  # offline, gated, no info: the plan says it cannot tell
            return None

    def __iter__(self) -> Iterator[SourceRecord]:
        import datasets

        c = self.config
        try:
            dataset = datasets.load_dataset(
                c.path, c.name, split=c.split, revision=self.revision(), streaming=c.streaming
            )
        except Exception as err:
            if not is_dropped_connection(err):
                raise
            raise SourceUnreachable(self.label(c), err) from err
        rows = resumable(undecoded(dataset), self.label(c))  # a dropped connection is resumed after the last record
        yield from records_from_rows(rows, shape=c.shape, columns=c.columns, fixed_question=c.fixed_question)
