"""The `datasets` builder that drives a family's run; see `builders/rs_builder.py`."""

from builders.rs_builder import RSBuilder, RSConfig, builder_class

__all__ = ["RSBuilder", "RSConfig", "builder_class"]
