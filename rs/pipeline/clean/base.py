"""Building blocks of the cleaning stage: filters that keep or drop with a reason, and the counts.

Shaped after datatrove's filters: a filter looks at one QA item and answers keep (None) or a drop
reason; every drop goes to the exclusion writer with its reason; each step keeps its own counts, so
that every source item ends in exactly one place and the card can say why.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, ClassVar

from rs.errors import RsError
from rs.records import QAItem


class UndeclaredReason(RsError):
    """A cleaning step dropped an item for a reason it does not declare (a plug-in's mistake): every reason is listed
    with its meaning, so that the documentation and the exclusions say the same."""

    def __init__(self, step: str, reason: str, declared: dict[str, str]):
        super().__init__(
            f"the cleaning step {step!r} dropped an item for {reason!r}, which it does not declare "
            f"(it declares {', '.join(map(repr, declared)) or 'none'})",
            hint=f"add {reason!r} with what it means to the step's `reasons` (rs.pipeline.clean.base.ItemFilter.reasons)",
        )


@dataclass(frozen=True)
class StepCard:
    """What a dataset card says of a cleaning step, above its counts."""

    title: str
    text: str
    shows_rewrites: bool = False
    """Whether the card lists the step's rewrites as examples."""


@dataclass
class StepStats:
    """Counts kept by one cleaning step."""

    seen: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    rewritten: Counter[str] = field(default_factory=Counter)
    marked: Counter[str] = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seen": self.seen,
            "dropped": dict(self.dropped),
            "rewritten": dict(self.rewritten),
            "marked": dict(self.marked),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepStats:
        return cls(data["seen"], Counter(data["dropped"]), Counter(data["rewritten"]), Counter(data["marked"]))


class ItemFilter:
    """One cleaning policy applied to one QA item at a time.

    `check` returns None to keep the item (possibly rewritten in place) or a drop reason. `name`
    and `version` are recorded in each row's `clean_meta`, so a published row says which policy
    admitted it; `card` is what the dataset card says of it.

    An optional step is registered with `rs.registry.CLEANING` under its key in `cleaning:`, with a
    `Config` dataclass (whose `enabled` field switches it on) and an `order`: steps run by ascending
    order, the always-on field and instruction checks first (10 and 20).
    """

    name: str = "filter"
    version: str = "1"
    order: ClassVar[int] = 100
    card: ClassVar[StepCard]
    reasons: ClassVar[dict[str, str]] = {}
    """Every reason `check` may drop an item for, with what it means: the documentation's reference lists them
    (`rs.reference`), and a reason not declared here stops the run (`UndeclaredReason`)."""

    def __init__(self) -> None:
        self.stats = StepStats()

    def check(self, item: QAItem, image_sha256: str, image_id: str | None) -> str | None:
        raise NotImplementedError

    def __call__(self, item: QAItem, image_sha256: str, image_id: str | None) -> str | None:
        self.stats.seen += 1
        reason = self.check(item, image_sha256, image_id)
        if reason is not None:
            if reason not in self.reasons:
                raise UndeclaredReason(self.name, reason, self.reasons)
            self.stats.dropped[reason] += 1
        return reason

    def rewrote(self, item: QAItem, what: str) -> None:
        item.rewrites.append(f"{self.name}:{what}")
        self.stats.rewritten[what] += 1

    def marked(self, item: QAItem, flag: str) -> None:
        item.flags.append(flag)
        self.stats.marked[flag] += 1


RECORDED_CHARS = 16_384
"""Characters of a dropped item's question or answer written to exclusions.jsonl: a longer one (`question_too_long`)
is recorded cut there, with its length, not stored whole a second time."""


def _clipped(text: str) -> str:
    if len(text) <= RECORDED_CHARS:
        return text
    return f"{text[:RECORDED_CHARS]}... [{len(text):,} characters, cut at {RECORDED_CHARS:,}]"


class ExclusionWriter:
    """Writes every dropped QA item, with its reason, as one JSON line; nothing vanishes silently."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self._fh: IO[str] | None = None

    def __enter__(self) -> "ExclusionWriter":
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("w", encoding="utf-8")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh:
            self._fh.close()
            self._fh = None

    def write(
        self, item: QAItem, *, reason: str, step: str, image_sha256: str | None, detail: str | None = None
    ) -> None:
        if self._fh is None:
            return
        record = {
            "key": item.key,
            "reason": reason,
            "step": step,
            "image_sha256": image_sha256,
            "question": _clipped(item.question),
            "answer": _clipped(item.answer),
            "source": item.source,
        }
        if detail is not None:  # what was refused, e.g. the path of an image left unread
            record["detail"] = detail
        self._fh.write(json.dumps(record, ensure_ascii=False) + "\n")
