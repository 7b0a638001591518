"""Decontamination: is a training image or question in an evaluation set the family's card names?

Datasets built from benchmark train splits train models evaluated on their test splits; the same scene, chart
or page can sit on both sides (re-encoded, resized, cropped, pulled in through a pool), and a question can
recur word for word. Each family says which evaluation sets (top-level `evaluation:` in families.yaml) it is
checked against and what a match does; cleaning asks `Decontaminator` about every record's decoded image and
every QA item, and counts what it found per set and method for the card.

    hashing.py   pixel digests, perceptual hashes, normalised question n-grams
    hamming.py   multi-index hashing: near-duplicate hashes without comparing every pair
    bands.py     MinHash LSH over the stored signatures: near-duplicate questions' candidates
    methods.py   the four methods, their versions and measured thresholds
    index.py     an evaluation set's index, built once from its stream and cached
"""

from __future__ import annotations

import base64
import io
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from .hashing import ImageHashes, colour_distance, colour_signature, exact_key, overlap, shingles
from .index import THUMBNAIL, EvaluationIndex, load_or_build, thumbnail_png
from .methods import (
    COLOUR_DISTANCE,
    ITEM_OVERLAP,
    METHODS,
    NEAR_IMAGE,
    NEAR_QUESTION,
    NGRAM,
    QUESTION_OVERLAP,
    SAME_IMAGE,
    SAME_ITEM,
    SAME_QUESTION,
    versions,
)

__all__ = ["Decontaminator", "Match", "METHODS", "versions"]

REASON = "eval_overlap"
"""The reason a dropped item is recorded with in exclusions.jsonl."""


@dataclass(frozen=True)
class Match:
    """A training image or question found in an evaluation set: `distance` is 0 for equal pixels or words, the
    pHash bits for a near-duplicate image (and `same_item`), 1 - n-gram overlap for a fuzzy question."""

    set: str
    method: str
    distance: float
    eval_record: str
    eval_image: int = -1

    def flag(self) -> str:
        """How the match is written in an item's flags: `eval_overlap:<set>:<method>:<distance>`."""
        return f"{REASON}:{self.set}:{self.method}:{self.distance:g}"


def parse_flag(flag: str) -> dict[str, Any] | None:
    """The `contamination` entry of a flag `Match.flag` wrote, else None."""
    parts = flag.split(":")
    if len(parts) < 4 or parts[0] != REASON:
        return None
    return {"set": ":".join(parts[1:-2]), "method": parts[-2], "distance": float(parts[-1])}


@dataclass
class SetStats:
    """What one evaluation set matched in the family: images and QA items per method, and what was done."""

    images: Counter[str] = field(default_factory=Counter)
    items: Counter[str] = field(default_factory=Counter)
    dropped_items: int = 0
    flagged_items: int = 0
    example: dict[str, Any] | None = None
    """The first image match: the training image's SHA-256, the evaluation record, the method and distance."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "images": dict(self.images),
            "items": dict(self.items),
            "dropped_items": self.dropped_items,
            "flagged_items": self.flagged_items,
            "example": self.example,
        }


class Decontaminator:
    """A family's evaluation sets, loaded (or built) once, asked about each training image and question."""

    def __init__(self, config: Any, *, base_dir: Path, cache: Path | None = None):
        self.config = config
        self.actions = config.actions()
        self.indexes: dict[str, EvaluationIndex] = {
            name: load_or_build(name, set_config, base_dir=base_dir, root=cache)
            for name, set_config in getattr(config, "sets", {}).items()
        }
        self.stats = {name: SetStats() for name in self.indexes}
        self.colour_distance = COLOUR_DISTANCE
        """Largest colour distance of a near-duplicate (`bench/decontaminate.py colour` sets it to infinity to measure
        the structure alone)."""
        self._colours: dict[tuple[str, int], bytes | None] = {}

    def action(self, method: str) -> str:
        return getattr(self.actions, METHODS[method].kind)

    def image_matches(self, hashes: ImageHashes) -> list[Match]:
        """The evaluation images this training image is (same pixels) or nearly is (pHash), closest first, per set."""
        found = []
        for name, index in self.indexes.items():
            same = index.pixels.get(hashes.pixels)
            if same is not None:
                found.append(Match(name, SAME_IMAGE.name, 0, index.record_ids[same], same))
            if not len(index.codes):
                continue
            _, images, distances = index.hamming().search(np.array(hashes.phash, dtype=np.uint64))
            best: dict[int, int] = {}
            for image, distance in zip(images.tolist(), distances.tolist()):
                if image != same:  # another copy of the scene in the set: found too
                    best[image] = min(distance, best.get(image, 64))
            found += [
                Match(name, NEAR_IMAGE.name, d, index.record_ids[i], i)
                for i, d in sorted(best.items(), key=lambda e: e[1])
                if self._same_colours(name, index, i, hashes.colour)
            ]
        return found

    def _same_colours(self, name: str, index: EvaluationIndex, image: int, colour: bytes) -> bool:
        """Whether an evaluation image a training image's pHash is near has its colours too (pHash sees grey alone).

        The evaluation image's signature is read from its thumbnail in the index, which it is taken of on both sides
        (`hashing.COLOUR_FROM`); an index without the thumbnail leaves the structure to decide, as before."""
        key = (name, image)
        if key not in self._colours:
            thumb = index.thumbnail(image)
            if thumb is None:
                self._colours[key] = None
            else:
                with Image.open(io.BytesIO(thumb)) as im:
                    self._colours[key] = colour_signature(im)
        theirs = self._colours[key]
        return theirs is None or not colour or colour_distance(colour, theirs) <= self.colour_distance

    def question_matches(self, question: str, images: list[Match]) -> list[Match]:
        """`same_item` (an overlapping question asked of a matched evaluation image), else per set `same_question`
        (equal normalised words) or `near_question` (n-grams mostly shared)."""
        grams = shingles(question, NGRAM)
        found = []
        for match in images:
            index = self.indexes[match.set]
            if any(overlap(grams, index.grams(q)) >= ITEM_OVERLAP for q in index.image_questions(match.eval_image)):
                found.append(Match(match.set, SAME_ITEM.name, match.distance, match.eval_record, match.eval_image))
        key = exact_key(question)
        for name, index in self.indexes.items():
            if any(m.set == name for m in found):
                continue
            q, method, distance = index.exact.get(key), SAME_QUESTION.name, 0.0
            if q is None and grams:
                best = max(
                    ((overlap(grams, index.grams(c)), c) for c in index.near_questions(grams)),
                    default=(0.0, None),
                )
                if best[0] >= QUESTION_OVERLAP:
                    q, method, distance = best[1], NEAR_QUESTION.name, round(1 - best[0], 3)
            if q is not None:
                image = int(np.searchsorted(index.question_start, q, side="right") - 1)
                found.append(Match(name, method, distance, index.record_ids[image], image))
        return found

    def count_images(self, matches: list[Match], sha: str, image: bytes) -> None:
        """Count a training image matched per set (by its closest method); the first one becomes the card's example."""
        for name in {m.set for m in matches}:
            first = next(m for m in matches if m.set == name)
            stats = self.stats[name]
            stats.images[first.method] += 1
            if stats.example is None:
                pair = pair_png(image, self.indexes[name].thumbnail(first.eval_image))
                stats.example = {
                    "image_sha256": sha,
                    "eval_record": first.eval_record,
                    "eval_image": first.eval_image,
                    "method": first.method,
                    "distance": first.distance,
                    "pair_png": base64.b64encode(pair).decode() if pair else None,
                }

    def count_item(self, matches: list[Match], dropped: bool) -> None:
        for name in {m.set for m in matches}:
            stats = self.stats[name]
            stats.items[next(m for m in matches if m.set == name).method] += 1
            if dropped:
                stats.dropped_items += 1
            else:
                stats.flagged_items += 1

    def report(self) -> dict[str, Any]:
        """Per set: counts, the index's size, the example; with the methods' thresholds and the actions (the card's table)."""
        return {
            "sets": {
                name: {
                    **self.stats[name].to_dict(),
                    "eval_images": int(np.unique(index.code_images).size),
                    "eval_questions": len(index.questions),
                    "fingerprint": index.fingerprint[:16],
                }
                for name, index in self.indexes.items()
            },
            "methods": {
                m.name: {
                    "version": m.version,
                    "compares": m.compares,
                    "threshold": m.threshold,
                    "action": self.action(m.name),
                }
                for m in METHODS.values()
            },
        }


def pair_png(training: bytes, evaluation: bytes | None) -> bytes | None:
    """The training image's thumbnail beside the evaluation image's, for the card (None without the latter)."""
    if evaluation is None:
        return None
    try:
        with (
            Image.open(io.BytesIO(training)) as a,
            Image.open(io.BytesIO(thumbnail_png(Image.open(io.BytesIO(evaluation))))) as b,
        ):
            left = Image.open(io.BytesIO(thumbnail_png(a)))
            canvas = Image.new("RGB", (2 * THUMBNAIL + 8, THUMBNAIL), "white")
            canvas.paste(left, (0, 0))
            canvas.paste(b.convert("RGB"), (THUMBNAIL + 8, 0))
    except OSError:
        return None
    out = io.BytesIO()
    canvas.save(out, format="PNG")
    return out.getvalue()
