"""The family registry: families.yaml is the only place a family is defined.

>>> from rs.families import get_family
>>> family = get_family("CLEVRMath")
>>> family.config.verifier.name
'relaxed'
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from rs.errors import UsageError

from .loader import SHIPPED, Family, FamilyConfigError, load_families
from .schema import FamilyConfig

__all__ = [
    "Family",
    "FamilyConfig",
    "FamilyConfigError",
    "UnknownFamilyError",
    "default_families_path",
    "get_family",
    "load_families",
]


class UnknownFamilyError(UsageError, KeyError):
    """A family name that is not in the families file; the message lists the ones that are."""


def default_families_path() -> Path:
    """`$RS_FAMILIES`, else the families.yaml the package ships (the checkout's own file in a checkout)."""
    if env := os.environ.get("RS_FAMILIES"):
        return Path(env)
    return SHIPPED.resolve()


def get_family(name: str, config: str | Path | None = None) -> Family:
    """Look a family up by its exact, case-sensitive name."""
    path = Path(config) if config else default_families_path()
    families = load_families(path)
    if name in families:
        return families[name]
    close = difflib.get_close_matches(name, families, n=1) or [f for f in families if f.casefold() == name.casefold()]
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise UnknownFamilyError(f"unknown family {name!r} in {path}.{hint} Known families: {', '.join(families)}")
