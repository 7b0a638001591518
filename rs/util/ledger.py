"""What this run has finished, for the account a stopped run ends with.

A run stopped by Ctrl-C or SIGTERM says what it keeps (`rs.cli.run`): the stages whose stores are
complete (written by this run or found current), the answers it committed to the generation cache,
the repos it published. The stages report here as they finish; what was in progress when the run
stopped is not here, and its temporary files are removed on the way out (`rs.pipeline.stage.scratch`).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["committed", "keep", "kept", "reset"]

_kept: list[str] = []
_committed: dict[Path, int] = {}


def reset() -> None:
    """Forget what earlier commands of this process finished (a command starts its account empty)."""
    _kept.clear()
    _committed.clear()


def keep(what: str) -> None:
    """Record something finished and kept: `"Alpha's clean store (8 rows)"`, `"the repo tester/Alpha_RS_think"`."""
    if what not in _kept:
        _kept.append(what)


def committed(cache: Path, answers: int) -> None:
    """Record `answers` newly committed to the generation cache at `cache`."""
    if answers:
        _committed[cache] = _committed.get(cache, 0) + answers


def kept() -> list[str]:
    """What this run finished, in order, the answers it committed to each cache last."""
    answers = [
        f"{n:,} new answer{'s' if n != 1 else ''} (the judge's verdicts included) in the generation cache {path}"
        for path, n in _committed.items()
    ]
    return [*_kept, *answers]
