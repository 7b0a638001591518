"""Where a family's train QA comes from: the Hub, local files, or the project's synthetic scenes.

Each source kind is a module here registering a class with `rs.registry.SOURCES`: its `Config`
dataclass is the `source:` block of families.yaml, `from_config` opens it and `label` names it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rs.registry import SOURCES

from .base import RefusedImage, Source, SourceRecord, sha256_hex

if TYPE_CHECKING:
    from rs.families import Family

__all__ = ["RefusedImage", "Source", "SourceRecord", "open_source", "sha256_hex"]


def open_source(family: Family) -> Source:
    """The family's source, ready to stream (nothing is read until it is iterated)."""
    config = family.config.source
    return SOURCES.get(config.kind).from_config(config, base_dir=family.path.parent)
