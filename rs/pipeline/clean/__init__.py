"""Stage 1: from a family's source records to clean rows, each one image with its QA.

    records ─ record checks ─ item filters ─ group by image ─ row checks ─ rows

Every source QA item ends in exactly one place, kept or dropped with a reason, and
`CleaningReport.check()` proves it at the end of every run.
"""

from __future__ import annotations

import io
import logging
import re
import unicodedata
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from PIL import Image, UnidentifiedImageError

from rs.errors import RsError
from rs.families.schema import FamilyConfig
from rs.pipeline.clean.decontam import METHODS, Decontaminator, parse_flag
from rs.pipeline.clean.decontam import REASON as EVAL_OVERLAP
from rs.pipeline.clean.decontam.hashing import ImageHashes, image_hashes
from rs.prompt import Instructions
from rs.records import QAItem, Row
from rs.registry import CLEANING
from rs.sources.base import MAX_IMAGE_BYTES, RefusedImage, SourceRecord, sha256_hex

from .base import ExclusionWriter, ItemFilter, StepCard, StepStats, UndeclaredReason
from .decode import decode_problem
from .filters import RequiredFields, StripInstruction
from .group import ImageGrouper
from .row_size import CARD as ROW_SIZE_CARD
from .row_size import NAME as ROW_SIZE
from .row_size import REASON as ROW_TOO_LARGE
from .row_size import RowSize

__all__ = [
    "AccountingError",
    "Cleaner",
    "CleaningReport",
    "ExclusionWriter",
    "POLICY_VERSION",
    "StepCard",
    "UndeclaredReason",
    "step_cards",
    "step_reasons",
]

logger = logging.getLogger(__name__)

POLICY_VERSION = "5"  # 4: clean_meta.contamination (rs.pipeline.clean.decontam); 5: by key, text and row bounds


class AccountingError(RsError, RuntimeError):
    """Source items do not add up to kept + dropped: a bug, never to be published over."""


@dataclass
class CleaningReport:
    """What cleaning did to a family (`clean.json`): the numbers behind the card's cleaning section."""

    source_records: int = 0
    source_items: int = 0
    kept_items: int = 0
    rows: int = 0
    merged_records: int = 0
    """Records whose image had already been seen, merged into that image's row."""
    dropped: Counter[str] = field(default_factory=Counter)
    steps: dict[str, StepStats] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    """Dataset, config, split and revision the source was read from."""
    fingerprint: str | None = None
    """The configuration the clean stage ran under (`rs.pipeline.clean.stage`); None until the stage records it."""
    seconds: float = 0.0
    decontamination: dict[str, Any] | None = None
    """What the evaluation sets matched (`rs.pipeline.clean.decontam.Decontaminator.report`); None when the family is checked against none."""

    @property
    def dropped_items(self) -> int:
        return sum(self.dropped.values())

    def check(self) -> None:
        total = self.kept_items + self.dropped_items
        if total != self.source_items:
            raise AccountingError(
                f"cleaning lost track of items: {self.source_items} from the source, "
                f"{self.kept_items} kept + {self.dropped_items} dropped = {total}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "provenance": self.provenance,
            "source_records": self.source_records,
            "source_items": self.source_items,
            "kept_items": self.kept_items,
            "dropped_items": self.dropped_items,
            "rows": self.rows,
            "merged_records": self.merged_records,
            "dropped": dict(sorted(self.dropped.items())),
            "steps": {name: stats.to_dict() for name, stats in self.steps.items()},
            "seconds": round(self.seconds, 3),
            "decontamination": self.decontamination,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CleaningReport:
        """Read a `to_dict` back (`dropped_items` is derived)."""
        plain = {k: v for k, v in data.items() if k not in ("dropped_items", "dropped", "steps")}
        return cls(
            **plain,
            dropped=Counter(data["dropped"]),
            steps={name: StepStats.from_dict(stats) for name, stats in data["steps"].items()},
        )


MAX_IMAGE_PIXELS = 89_478_485
"""An image declaring more pixels than this (Pillow's own bomb threshold, about 9,459 x 9,459) is refused
(`image_too_large`) before its pixels are decoded: a few kilobytes of PNG can declare gigabytes of them."""


def image_problem(image: bytes | RefusedImage | None, inspect: Any = None) -> str | None:
    """Why an image cannot be used, or None; the bytes travel on.

    The header and the file's structure are checked first (size, declared pixels, `verify`), so that
    no bomb is decoded; then the pixel data is decoded in full (`rs.pipeline.clean.decode`).
    """
    if isinstance(image, RefusedImage):
        return image.reason
    if not image:
        return "empty_image"
    if len(image) > MAX_IMAGE_BYTES:
        return "image_too_large"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # judged just below, not warned about
            im = Image.open(io.BytesIO(image))
        with im:
            if im.width * im.height > MAX_IMAGE_PIXELS:
                return "image_too_large"
            im.verify()
    except Image.DecompressionBombError:
        return "image_too_large"
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        return "undecodable_image"
    return decode_problem(image, inspect)


_READ_PROBLEMS = {
    "image_too_large": f"is too large to be an image (over {MAX_IMAGE_PIXELS:,} pixels declared, or over "
    f"{MAX_IMAGE_BYTES:,} bytes)",
    "undecodable_image": "does not decode as an image",
}
"""What an image read in full was dropped for, said with its path in the exclusions and the log."""


def _read_problem(record: SourceRecord, reason: str) -> str | None:
    """The detail of an image dropped after it was read (`_READ_PROBLEMS`): its path (or its record), and why."""
    if reason not in _READ_PROBLEMS:
        return None
    path = record.image_paths[0] if record.image_paths else None
    return f"{path if path else f'the image of record {record.record_id}'} {_READ_PROBLEMS[reason]}"


_LOGGED_REFUSALS = 10
"""Refused images named in the log per reason (every one is in exclusions.jsonl)."""

RECORDS_CARD = StepCard(
    "Image check",
    "A row is exactly one image whose bytes decode; QA attached to records with no image, several images, or an image that does not decode are dropped.",
)
DECONTAMINATION_CARD = StepCard(
    "Decontamination",
    "Every image and question is looked up in the evaluation sets the family "
    "is checked against (table below): a match is dropped (`eval_overlap`) or kept and flagged in "
    "`clean_meta.contamination`, as the family's `decontamination.action` says.",
)
DEDUP_CARD = StepCard(
    "Deduplication",
    "The same question asked again of the same image, compared after normalising case, whitespace "
    "and the spacing around punctuation, is kept once; when its copies give different answers the "
    "ground truth is in doubt, and every copy is dropped (conflicting duplicate).",
)
RECORD_REASONS = {
    "no_image": "the record has no image: a row is exactly one image",
    "multiple_images": "the record has several images: a row is exactly one image",
    "empty_image": "the image bytes are empty",
    "undecodable_image": "the image does not decode: cleaning decodes every image's pixel data in full "
    "(`rs/pipeline/clean/decode.py`), as the engine will, so a truncated or corrupt JPEG or PNG is dropped here, never "
    "sent to the engine nor published",
    "missing_image": "a files source names an image file that is not there",
    "unreadable_image": "a files source names an image file that cannot be read (permission denied)",
    "unsafe_image_path": "the image path leads out of the source's folder (`../`, absolute, a symlink) or is not a "
    "regular file: never opened",
    "image_too_large": "a file over 64 MiB, or an image declaring more than 89,478,485 pixels (Pillow's bomb "
    "threshold): never decoded",
}
DEDUP_REASONS = {
    "duplicate_qa": "the same question again on the same image, with the same answer: the first copy is kept "
    "(questions and answers compared after Unicode normalisation, case folding, collapsing whitespace and removing the "
    "space before closing punctuation: `what color is the square ?` is `What color is the square?`)",
    "conflicting_duplicate": 'the same question again on the same image with another answer ("purple", then '
    '"yellow"): the ground truth is in doubt, so every copy is dropped, the first too',
}
DECONTAMINATION_REASONS = {
    EVAL_OVERLAP: "the image (or the item, or with `action: drop` the question) is in an evaluation set the family is "
    "checked against; `detail` says which set, method and distance",
}
ROW_SIZE_REASONS = {
    ROW_TOO_LARGE: "the image and its questions weigh more than half the row-group target (`shard.row_group_bytes` less "
    "its margin): a row larger than a row group cannot be published and would fail the family's write; `detail` gives "
    "the weight",
}


_SPACE_BEFORE = re.compile(r"\s+([?.!,;:)\]}])")
_SPACE_AFTER = re.compile(r"([(\[{])\s+")


def same_text(text: str) -> str:
    """A question or answer as deduplication compares it: Unicode-normalised, case-folded, whitespace collapsed,
    no space before closing punctuation or after opening brackets ("what color is the square ?" = "What color is the square?")."""
    text = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    return _SPACE_AFTER.sub(r"\1", _SPACE_BEFORE.sub(r"\1", text))


def optional_steps() -> list[tuple[str, type[ItemFilter]]]:
    """The registered steps as `(key under cleaning:, step class)`, in pipeline order."""
    return sorted(CLEANING.items(), key=lambda entry: (entry[1].order, entry[0]))


def step_reasons() -> dict[str, dict[str, str]]:
    """Every reason each step may drop an item for, with its meaning, by the step's name, in pipeline order: what
    exclusions.jsonl can hold (a drop for another reason stops the run: `UndeclaredReason`)."""
    return {
        "records": RECORD_REASONS,
        RequiredFields.name: RequiredFields.reasons,
        StripInstruction.name: StripInstruction.reasons,
        **{step.name: step.reasons for _, step in optional_steps()},
        "decontamination": DECONTAMINATION_REASONS,
        "dedup": DEDUP_REASONS,
        ROW_SIZE: ROW_SIZE_REASONS,
    }


def step_cards() -> dict[str, StepCard]:
    """What the card says of each step, by the step's name in the stats, in pipeline order."""
    return {
        "records": RECORDS_CARD,
        RequiredFields.name: RequiredFields.card,
        StripInstruction.name: StripInstruction.card,
        **{step.name: step.card for _, step in optional_steps()},
        "decontamination": DECONTAMINATION_CARD,
        "dedup": DEDUP_CARD,
        ROW_SIZE: ROW_SIZE_CARD,
    }


class Cleaner:
    """The family's cleaning policies, in order, over a stream of source records."""

    def __init__(
        self,
        config: FamilyConfig,
        provenance: dict[str, Any],
        *,
        exclusions: ExclusionWriter | None = None,
        work_dir: str | Path | None = None,
        base_dir: str | Path | None = None,
    ):
        c = config.cleaning
        self.provenance = provenance
        self.exclusions = exclusions or ExclusionWriter(None)
        self.work_dir = work_dir
        self.filters: list[ItemFilter] = [RequiredFields(), StripInstruction(Instructions.of(config).all())]
        for key, step in optional_steps():
            if (step_config := c.step(key)).enabled:
                self.filters.append(step(step_config))
        self.dedup = c.dedup
        self.report = CleaningReport(provenance=dict(provenance))
        self.report.steps = {"records": StepStats(), **{f.name: f.stats for f in self.filters}}
        self.decontam: Decontaminator | None = None
        if config.decontamination is not None:  # the evaluation sets' indexes: loaded from the cache or built now
            self.decontam = Decontaminator(config.decontamination, base_dir=Path(base_dir or "."))
            self.report.steps["decontamination"] = StepStats()
        if self.dedup:
            self.report.steps["dedup"] = StepStats()
        self.row_size = RowSize(config.shard.row_group_target(), Instructions.of(config))
        self.report.steps[ROW_SIZE] = self.row_size.stats
        self.reasons = {**step_reasons(), **{f.name: f.reasons for f in self.filters}}

    def policy(self) -> dict[str, Any]:
        steps = (
            [f"{f.name}@{f.version}" for f in self.filters] + (["dedup@2"] if self.dedup else []) + [f"{ROW_SIZE}@1"]
        )
        if self.decontam is not None:
            steps += [m.key for m in METHODS.values()]
        return {"name": "rs.clean", "version": POLICY_VERSION, "steps": steps}

    def _drop(self, item: QAItem, reason: str, step: str, image_sha256: str | None, detail: str | None = None) -> None:
        if reason not in self.reasons.get(step, {}):
            raise UndeclaredReason(step, reason, self.reasons.get(step, {}))
        self.report.dropped[reason] += 1
        self.exclusions.write(item, reason=reason, step=step, image_sha256=image_sha256, detail=detail)

    def _record(self, record: SourceRecord) -> tuple[bytes, str, list[QAItem]] | None:
        """Record-level checks: one image per row, and an image that decodes."""
        stats = self.report.steps["records"]
        stats.seen += 1
        hashed: list[ImageHashes] = []  # taken from the decoded pixels while image_problem holds them
        self.report.source_records += 1
        self.report.source_items += len(record.qa)
        reason = None
        if len(record.images) != 1:
            reason = "no_image" if not record.images else "multiple_images"
        else:
            inspect = (lambda im: hashed.append(image_hashes(im))) if self.decontam is not None else None
            reason = image_problem(record.images[0], inspect)
        if reason is not None:
            refused = (
                record.images[0] if len(record.images) == 1 and isinstance(record.images[0], RefusedImage) else None
            )
            detail = refused.detail if refused is not None else _read_problem(record, reason)
            if detail is not None and stats.dropped[reason] < _LOGGED_REFUSALS:
                how = "refused unread" if refused is not None else "dropped"
                logger.warning("record %s: image %s (%s): %s", record.record_id, how, reason, detail)
            stats.dropped[reason] += len(record.qa)
            for item in record.qa:
                self._drop(item, reason, "records", None, detail=detail)
            return None
        image = record.images[0]
        sha = sha256_hex(image)
        image_id = record.image_ids[0] if record.image_ids else None
        kept = []
        for item in record.qa:
            for f in self.filters:
                if (reason := f(item, sha, image_id)) is not None:
                    self._drop(item, reason, f.name, sha)
                    break
            else:
                kept.append(item)
        if self.decontam is not None and kept:
            kept = self._decontaminate(hashed[0] if hashed else None, sha, image, kept)
        return image, sha, kept

    def _decontaminate(self, hashes: ImageHashes | None, sha: str, image: bytes, items: list[QAItem]) -> list[QAItem]:
        """Drop or flag what the evaluation sets hold: a matched image drops its whole row (action `drop`)."""
        assert self.decontam is not None
        d, stats = self.decontam, self.report.steps["decontamination"]
        images = d.image_matches(hashes) if hashes is not None else []
        if images:
            d.count_images(images, sha, image)
        row_drop = [m for m in images if d.action(m.method) == "drop"]
        kept = []
        for item in items:
            stats.seen += 1
            matches = images + d.question_matches(item.question, images)
            drop = row_drop or [m for m in matches if d.action(m.method) == "drop"]
            if drop:
                d.count_item(drop, dropped=True)
                stats.dropped[EVAL_OVERLAP] += 1
                self._drop(item, EVAL_OVERLAP, "decontamination", sha, detail=drop[0].flag())
                continue
            if matches:
                d.count_item(matches, dropped=False)
                for m in matches:
                    item.flags.append(m.flag())
                    stats.marked[m.method] += 1
            kept.append(item)
        return kept

    def _dedup(self, row: Row) -> Row:
        """One copy of a question asked again of the same image; none when the copies disagree on the answer.

        Questions (and answers) are compared as `same_text` sees them: "what color is the square ?" is
        "What color is the square?". Copies that give different answers leave the ground truth in doubt:
        keeping the first would be a choice nobody made, so every copy is dropped as `conflicting_duplicate`.
        """
        stats = self.report.steps["dedup"]
        answers: dict[str, set[str]] = {}
        for item in row.qa:
            answers.setdefault(same_text(item.question), set()).add(same_text(item.answer))
        seen: set[str] = set()
        kept = []
        for item in row.qa:
            stats.seen += 1
            question = same_text(item.question)
            if len(answers[question]) > 1:
                reason = "conflicting_duplicate"
            elif question in seen:
                reason = "duplicate_qa"
            else:
                seen.add(question)
                kept.append(item)
                continue
            stats.dropped[reason] += 1
            self._drop(item, reason, "dedup", row.image_sha256)
        row.qa = kept
        return row

    def rows(self, records: Iterable[SourceRecord], *, limit: int | None = None) -> Iterator[Row]:
        """Clean a stream of records into rows; `limit` stops reading at the first record of image `limit + 1`.

        So a limited row holds every question its image has in the records read up to there, as the full build's row does.
        """
        policy = self.policy()
        with ImageGrouper(self.work_dir) as grouper:
            for record in records:
                if limit is not None and grouper.images >= limit and not _shows_one_of(record, grouper):
                    break
                if (checked := self._record(record)) is None:
                    continue
                image, sha, items = checked
                grouper.add(sha, image, record.record_id, items)
            self.report.merged_records = grouper.merged_records
            for row in grouper.rows():
                if self.dedup:
                    row = self._dedup(row)
                if not row.qa:
                    continue
                if (detail := self.row_size.problem(row)) is not None:  # one item too large never fails the family
                    for item in row.qa:
                        self._drop(item, ROW_TOO_LARGE, ROW_SIZE, row.image_sha256, detail=detail)
                    logger.warning("image %s dropped (%s): %s", row.image_sha256[:12], ROW_TOO_LARGE, detail)
                    continue
                self.report.rows += 1
                self.report.kept_items += len(row.qa)
                row.clean_meta = {
                    "source": dict(self.provenance),
                    "record_ids": row.record_ids,
                    "policy": policy,
                    "rewrites": [f"{item.key}:{r}" for item in row.qa for r in item.rewrites],
                    "flags": [f"{item.key}:{f}" for item in row.qa for f in item.flags],
                    "contamination": [
                        {"key": item.key, **entry}  # the question once, in `qa`: a long one is not stored twice
                        for item in row.qa
                        for f in item.flags
                        if (entry := parse_flag(f)) is not None
                    ],
                }
                yield row
        if self.decontam is not None:
            self.report.decontamination = self.decontam.report()
        self.report.check()


def _shows_one_of(record: SourceRecord, grouper: ImageGrouper) -> bool:
    """Whether the record's one image is one the grouper already holds."""
    image = record.images[0] if len(record.images) == 1 else None
    return isinstance(image, bytes) and sha256_hex(image) in grouper
