"""The `datasets` builder that drives a family's run; see `builders/rs_builder.py`.

Imported as `rs.builders`: `rs/builders` links here, so a wheel carries it inside `rs`.
"""

from .rs_builder import RSBuilder, RSConfig, builder_class

__all__ = ["RSBuilder", "RSConfig", "builder_class"]
