"""Byte sizes as written in families.yaml ("500MB", "1GiB", 1048576)."""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: int | str) -> int:
    if isinstance(value, int):
        return value
    m = _SIZE.match(value)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(
            f"{value!r} is not a byte size; write an integer or a number with a unit ({', '.join(u for u in _UNITS if u)})"
        )
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def format_bytes(size: int) -> str:
    """A byte count as a person reads it: 512 B, 3.4 kB, 12.0 GB (powers of 1000)."""
    units = ("B", "kB", "MB", "GB", "TB", "PB")
    power = 0
    while size >= 1000 ** (power + 1) and power < len(units) - 1:
        power += 1
    return f"{size} B" if power == 0 else f"{size / 1000**power:.1f} {units[power]}"
