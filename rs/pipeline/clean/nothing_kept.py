"""A cleaning that kept no QA stops the run before sampling: nothing would be sampled, and empty repos published.

A family whose image column points at the question text once published four empty repos with exit
0 after dropping 82 of 82 QA as `missing_image`. The most frequent reason is named, with what
usually causes it, and the run exits 2 (a configuration problem: the family's source or columns).
"""

from __future__ import annotations

from collections import Counter

from rs.errors import UsageError
from rs.pipeline.clean.causes import LIKELY_CAUSES
from rs.util import invocation

__all__ = ["LIKELY_CAUSES", "NothingKept", "check_something_kept"]


class NothingKept(UsageError):
    """Cleaning dropped every QA of the family."""


def check_something_kept(family: str, kept: int, dropped: Counter[str] | dict[str, int]) -> None:
    """Raise `NothingKept` when cleaning kept no QA, naming the most frequent reason and its likely cause."""
    if kept > 0:
        return
    total = sum(dropped.values())
    if not total:
        raise NothingKept(
            f"{family}: the source gave no QA to clean: nothing to sample",
            hint="check source.path / source.split and --limit "
            f"(`{invocation.command('families', 'preview', family, carry=('--config',))}` shows the first records)",
        )
    reason, count = Counter(dropped).most_common(1)[0]
    cause = LIKELY_CAUSES.get(reason, "see the family's exclusions.jsonl, every dropped QA with its reason")
    raise NothingKept(
        f"{family}: cleaning dropped every QA ({total} of {total}), most often as {reason} ({count}): nothing "
        "to sample",
        hint=f"likely: {cause}; `{invocation.command('families', 'preview', family, carry=('--config',))}` shows the "
        f"first records as read, `{invocation.command('families', 'validate', carry=('--config',), extra=('--source', '20'))}` "
        "checks each column's type",
    )
