"""rs: rejection-sampled VLM training data from benchmark train splits."""

from pathlib import Path as _Path

__version__ = "0.1.0"

_HERE = _Path(__file__).resolve().parent
if not (_HERE / "builders").is_dir() and (_HERE.parent / "builders" / "rs_builder.py").is_file():
    # A source checkout: the `datasets` builder is the top-level builders/ folder, which a wheel maps to
    # rs/builders (pyproject's package-dir). The checkout's top is searched for `rs.builders` the same way.
    __path__.append(str(_HERE.parent))
