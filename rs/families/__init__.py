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
    message, hint = _unknown(name, path, families, given=bool(config))
    raise UnknownFamilyError(message, hint=hint)


def _unknown(name: str, path: Path, families: dict[str, Family], *, given: bool) -> tuple[str, str]:
    """The message and hint for a family `path` does not define: the names near it, and the families file that defines
    it when one in the current folder does (a family of one's own is read only with `--config PATH`)."""
    close = difflib.get_close_matches(name, families, n=3) or [f for f in families if f.casefold() == name.casefold()]
    near = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
    message = f"unknown family {name!r} in {path}.{near} Known families: {', '.join(families)}"
    found = [other for other in _files_here() if other.resolve() != path.resolve() and _defines(other, name)]
    if found:
        return message, f"{name} is defined in {found[0]}: add `--config {found[0]}` to the command"
    if given:
        return message, f"check the name, or name the families file that defines {name} with --config PATH"
    return message, (
        f"a family of your own is read from its own families file: add `--config PATH` to the command (or set "
        f"RS_FAMILIES=PATH); without it rs reads {path}"
    )


def _files_here(most: int = 50) -> list[Path]:
    """The YAML files of the current folder (a few: a folder of thousands is no families folder)."""
    try:
        found = sorted(p for p in Path.cwd().iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    except OSError:
        return []
    return [Path(p.name) for p in found[:most]]


def _defines(path: Path, name: str) -> bool:
    """Whether the families file `path` defines the family `name` (read as YAML; a file that is not one defines none)."""
    try:
        if path.stat().st_size > 5_000_000:
            return False
        return name in load_families(path)
    except (OSError, UsageError, ValueError):
        return False
