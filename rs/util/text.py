"""Counts, shares and errors in words: one spelling each for the cards, the audit, the commands and the logs."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """A count with its noun in the right number, as a reader reads it: "1 shard", "1,234 shards", "1 family"."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def pct(value: float | None) -> str:
    """A share (0.125) as a percentage with one decimal ("12.5%"); None, a share of nothing: "n/a"."""
    return "n/a" if value is None else f"{100 * value:.1f}%"


def first_line(err: BaseException) -> str:
    """An error's type and the first line of its message: what a one-line report of it says."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


def last_line(err: BaseException) -> str:
    """An error's type and the last line of its message (a Ray task's error ends with the remote one)."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[-1] if text else ''}"
