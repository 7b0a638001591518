"""The `datasets` builder that drives a family's run; see `builders/rs_builder.py`.

Imported as `rs.builders`: a wheel maps this folder there (pyproject's package-dir), and in a source checkout
`rs/__init__.py` finds it here.
"""

from .rs_builder import RSBuilder, RSConfig, builder_class

__all__ = ["RSBuilder", "RSConfig", "builder_class"]
