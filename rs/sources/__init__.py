"""Where a family's train QA comes from: the Hub, local files, or the project's synthetic scenes."""

from __future__ import annotations

from rs.families import Family
from rs.families.schema import FilesSourceConfig, HubSourceConfig, SyntheticSourceConfig

from .base import QAItem, Row, Source, SourceRecord, sha256_hex

__all__ = ["QAItem", "Row", "Source", "SourceRecord", "open_source", "sha256_hex"]


def open_source(family: Family) -> Source:
    """The family's source, ready to stream (nothing is read until it is iterated)."""
    config = family.config.source
    if isinstance(config, HubSourceConfig):
        from .hub import HubSource

        return HubSource(config)
    if isinstance(config, FilesSourceConfig):
        from .files import FilesSource

        return FilesSource(config, base_dir=family.path.parent)
    if isinstance(config, SyntheticSourceConfig):
        from .synthetic import SyntheticSource

        return SyntheticSource(
            seed=config.seed, num_images=config.num_images, questions_per_image=config.questions_per_image,
            style=config.style, image_size=config.image_size, noise=config.noise,
        )
    raise TypeError(f"unknown source config {type(config).__name__}")
