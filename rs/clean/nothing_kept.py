"""A cleaning that kept no QA stops the run before sampling: nothing would be sampled, and empty repos published.

A family whose image column points at the question text once published four empty repos with exit
0 after dropping 82 of 82 QA as `missing_image`. The most frequent reason is named, with what
usually causes it, and the run exits 2 (a configuration problem: the family's source or columns).
"""

from __future__ import annotations

from collections import Counter

from rs.errors import UsageError

__all__ = ["NothingKept", "check_something_kept"]

LIKELY_CAUSES = {
    "missing_image": "the image column holds no image: source.columns.image names another column (the question's?), or "
                     "its paths are relative to another folder than the one the source reads them from",
    "no_image": "the image column is empty in every record: source.columns.image names the wrong column",
    "multiple_images": "every record holds several images: a family of one image per question needs another source shape",
    "undecodable_image": "the image column holds bytes that are not an image: source.columns.image names the wrong column",
    "empty_image": "the image column is empty: source.columns.image names the wrong column",
    "empty_question": "the question column is empty: source.columns.question names the wrong column",
    "empty_answer": "the answer column is empty: source.columns.answer names the wrong column",
    "foreign_source": "the source is not the dataset this family's cleaning was written for",
}


class NothingKept(UsageError):
    """Cleaning dropped every QA of the family."""


def check_something_kept(family: str, kept: int, dropped: Counter[str] | dict[str, int]) -> None:
    """Raise `NothingKept` when cleaning kept no QA, naming the most frequent reason and its likely cause."""
    if kept > 0:
        return
    total = sum(dropped.values())
    if not total:
        raise NothingKept(f"{family}: the source gave no QA to clean: nothing to sample",
                          hint="check source.path / source.split and --limit (`rs families preview` shows the first records)")
    reason, count = Counter(dropped).most_common(1)[0]
    cause = LIKELY_CAUSES.get(reason, "see the family's exclusions.jsonl, every dropped QA with its reason")
    raise NothingKept(f"{family}: cleaning dropped every QA ({total} of {total}), most often as {reason} ({count}): nothing "
                      "to sample", hint=f"likely: {cause}; `rs families preview {family}` shows the first records as read, "
                                        "`rs families validate --source 20` checks each column's type")
