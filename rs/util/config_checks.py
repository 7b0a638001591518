"""Value checks shared by the configuration dataclasses (`families.yaml` blocks), with the key they belong to.

A config's `__post_init__` raises `ConfigValueError` naming its own key; the families loader then
reports the problem at that key's line and full path (`families.X.sampling.max_tokens`), at
`python -m rs.families validate` time, instead of a run failing on it after a model has loaded.
Here, not in `rs.families`: an engine's, a source's or a cleaning step's config checks its values without
importing the family registry.
"""

from __future__ import annotations

import math


class ConfigValueError(ValueError):
    """A value a configuration block refuses: `key` is the field (dotted below the block), `problem` what is wrong and valid."""

    def __init__(self, key: str, problem: str):
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def at_least(key: str, value: float | None, minimum: float, *, what: str = "") -> None:
    """Refuse a number below `minimum`, or one that is no number (nan, inf); None, an unset optional, passes."""
    if value is not None and not math.isfinite(value):
        raise ConfigValueError(key, f"must be a finite number, got {value!r}")
    if value is not None and value < minimum:
        raise ConfigValueError(key, f"must be at least {minimum}{f' ({what})' if what else ''}, got {value!r}")


def positive(key: str, value: float | None, *, what: str = "") -> None:
    """Refuse zero, a negative number, nan or inf (None, an unset optional, passes)."""
    if value is not None and not math.isfinite(value):
        raise ConfigValueError(key, f"must be a finite number, got {value!r}")
    if value is not None and value <= 0:
        raise ConfigValueError(key, f"must be above 0{f' ({what})' if what else ''}, got {value!r}")


def within(key: str, value: float, low: float, high: float, *, what: str = "") -> None:
    """Refuse a number outside [low, high]."""
    if not low <= value <= high:
        raise ConfigValueError(key, f"must be from {low} to {high}{f' ({what})' if what else ''}, got {value!r}")
