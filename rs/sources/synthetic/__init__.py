"""CLEVR-style synthetic scenes, rendered with Pillow, with questions answered from the scene graph.

Why a generator of our own: tests, benchmarks and the offline `TinyCLEVR` demo family need a pool
whose ground truth is known exactly and that needs no network. Every answer is computed from the
scene graph, so a verifier that disagrees with a reference is wrong, not the data; and the optional
noise injection reproduces the pollution seen in real pools (off-task rows, sentence references,
flattened multiple choice, broken images...) with exact counts to check the cleaning stage against.

Everything depends only on the seed and the options: image `i` is drawn from
`random.Random(f"{seed}:{i}")`, its questions from `f"{seed}:{i}:qa"` and its noise from
`f"{seed}:{i}:image-noise"` / `f"{seed}:{i}:item-noise"`, so image `i` is the same whatever
`num_images`, style or noise is, and a pool can be streamed or sharded by index.

    scenes.py     the vocabulary, drawing a scene graph from a seed, rendering it
    questions.py  CLEVR and CLEVR-Math questions answered from the graph
    noise.py      the defects injected on purpose
    __init__.py   the source (registered as kind `synthetic`) and the image-folder writer
    __main__.py   `python -m rs.sources.synthetic OUT_DIR`: a pool on disk
"""

from __future__ import annotations

import difflib
import json
import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Literal, Mapping

from rs.records import QAItem
from rs.registry import SOURCES, KindConfig
from rs.sources.base import SourceRecord
from rs.util.config_checks import ConfigValueError, at_least

from .noise import (
    FOREIGN_SOURCES,
    ITEM_NOISE,
    NOISE_KINDS,
    flattened_mc,
    guessable,
    off_task,
    redraw,
    sentence_qa,
    wrong_reference,
)
from .questions import (  # noqa: F401  re-exported: what a test or the demo trainer asks a scene about
    ADD_TEMPLATES,
    COMPARE_ATTRIBUTE_TEMPLATES,
    COMPARE_COUNT_TEMPLATES,
    COUNT_TEMPLATES,
    EXIST_TEMPLATES,
    QA,
    QUERY_TEMPLATES,
    STYLES,
    SUBTRACT_TEMPLATES,
    clevr_questions,
    clevrmath_questions,
    count,
    matches,
    questions_for,
)
from .scenes import ATTRIBUTE_ORDER, ATTRIBUTES, SYNONYMS, Scene, SceneObject, generate_scene, object_box, render_scene  # noqa: F401  re-exported

__all__ = [
    "NOISE_KINDS",
    "STYLES",
    "Scene",
    "SceneObject",
    "SyntheticSource",
    "SyntheticSourceConfig",
    "clevr_questions",
    "clevrmath_questions",
    "count",
    "generate_scene",
    "matches",
    "questions_for",
    "render_scene",
    "write_image_folder",
]

logger = logging.getLogger(__name__)


# --- the source -------------------------------------------------------------------------------


MIN_IMAGE_SIZE = 32
"""Smallest side a scene is rendered at: below it, objects are a few pixels."""


def _validate_noise(noise: Mapping[str, float] | None) -> dict[str, float]:
    """Every noise kind's probability (0 where not given); `ConfigValueError` names a misspelt kind or a value outside [0, 1]."""
    noise = dict(noise or {})
    for kind, p in noise.items():
        if kind not in NOISE_KINDS:
            close = difflib.get_close_matches(str(kind), NOISE_KINDS, n=1)
            mean = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigValueError(f"noise.{kind}", f"unknown noise kind{mean}; valid kinds: {', '.join(NOISE_KINDS)}")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ConfigValueError(f"noise.{kind}", f"must be a probability from 0 to 1, got {p!r}")
    return {kind: float(noise.get(kind, 0.0)) for kind in NOISE_KINDS}


def _validate_counts(num_images: int, questions_per_image: int, image_size: int) -> None:
    """The source's sizes, checked where families.yaml is validated and again when the source is built in code."""
    at_least("num_images", num_images, 0, what="scenes in the pool")
    at_least("questions_per_image", questions_per_image, 1, what="questions asked of each scene")
    at_least("image_size", image_size, MIN_IMAGE_SIZE, what="pixels per side")


@dataclass(kw_only=True)
class SyntheticSourceConfig(KindConfig):
    kind: Literal["synthetic"]
    seed: int = 0
    num_images: int = 100
    questions_per_image: int = 4
    style: Literal["clevr", "clevrmath", "mixed"] = "mixed"
    image_size: int = 160
    noise: dict[str, float] = field(default_factory=dict)
    """Injected defects per kind (off_task, flattened_mc, corrupt_image, ...), for exercising cleaning; and
    `wrong_reference`, clean questions given a wrong reference of the right kind, for measuring the suspect references
    (the truth is the source's, `SyntheticSource.planted`, never in the data); `guessable`, questions that state their
    answer, for measuring the no-image pass's mark (`SyntheticSource.guessable`)."""

    def __post_init__(self) -> None:
        _validate_counts(self.num_images, self.questions_per_image, self.image_size)
        _validate_noise(self.noise)


@SOURCES.register("synthetic")
class SyntheticSource:
    """A stream of CLEVR-style records: one rendered scene and its questions per record.

    Implements `rs.sources.base.Source`. Records are built lazily, one at a time, so a pool of any
    size streams in constant memory; `record(i)` builds any single record directly (for sharding).

    Noise is left in the data only, as in real pools. `noise_counts` counts what was injected
    (reset at the start of each pass, updated as records are consumed), so tests can compare the
    cleaning stage's counts with the truth. Injected off-task items have `qtype=None`. The references planted wrong
    (`wrong_reference`) are known to the source alone (`planted`): a bench reads them, the published repo cannot.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        num_images: int = 100,
        questions_per_image: int = 4,
        style: str = "mixed",
        image_size: int = 160,
        noise: dict[str, float] | None = None,
        name: str = "synthetic-clevr",
    ) -> None:
        if style not in STYLES:
            raise ValueError(f"style must be one of {STYLES}, got {style!r}")
        _validate_counts(num_images, questions_per_image, image_size)
        self.seed = seed
        self.num_images = num_images
        self.questions_per_image = questions_per_image
        self.style = style
        self.image_size = image_size
        self.noise = _validate_noise(noise)
        self.name = name
        self.noise_counts: Counter[str] = Counter()
        self._truth: dict[tuple[int, int], str] = {}
        """(image, turn) -> the true answer, for the references planted wrong of the records built so far."""
        self._guessable: set[tuple[int, int]] = set()
        """(image, turn) of the questions planted guessable (`noise.guessable`) of the records built so far."""

    Config = SyntheticSourceConfig

    @classmethod
    def from_config(cls, config: SyntheticSourceConfig, *, base_dir: Path) -> SyntheticSource:
        return cls(
            seed=config.seed,
            num_images=config.num_images,
            questions_per_image=config.questions_per_image,
            style=config.style,
            image_size=config.image_size,
            noise=config.noise,
        )

    @staticmethod
    def label(config: SyntheticSourceConfig) -> str:
        """How `rs families list` names this source."""
        return f"synthetic seed={config.seed} images={config.num_images}"

    def __len__(self) -> int:
        return self.num_images

    def size(self) -> int:
        """Records (one scene each) in the source."""
        return self.num_images

    def provenance(self) -> dict[str, str | None]:
        return {
            "dataset": f"rs-synthetic/{self.name}",
            "config": self.style,
            "split": "train",
            "revision": f"seed={self.seed}",
        }

    def image_id(self, index: int) -> str:
        return f"{self.name}-img-{index:08d}"

    def scene(self, index: int) -> Scene:
        """The scene drawn for image `index` (before any duplicate_image noise)."""
        return generate_scene(random.Random(f"{self.seed}:{index}"))

    def __iter__(self) -> Iterator[SourceRecord]:
        self.noise_counts.clear()
        previous: tuple[int, Scene, bytes] | None = None  # last image, so duplicate_image needs no re-render
        for index in range(self.num_images):
            record, previous, injected = self._build(index, previous)
            self.noise_counts.update(injected)
            yield record

    def planted(self) -> dict[str, tuple[str, str]]:
        """The items whose reference `wrong_reference` planted: item key -> (the planted reference, the true answer)."""
        out: dict[str, tuple[str, str]] = {}
        for index in range(self.num_images):
            for item in self.record(index).qa:
                if (true := self._true_answer(index, item)) is not None:
                    out[item.key] = (item.answer, true)
        return out

    def guessable(self) -> set[str]:
        """The keys of the items `guessable` planted: questions that state their answer (what a text-only reader can
        answer); a bench reads them, the published repo cannot."""
        out: set[str] = set()
        for index in range(self.num_images):
            out.update(item.key for item in self.record(index).qa if (index, item.turn) in self._guessable)
        return out

    def _true_answer(self, index: int, item: QAItem) -> str | None:
        """The true answer of an item whose reference was planted wrong; None for any other item."""
        return self._truth.get((index, item.turn))

    def record(self, index: int) -> SourceRecord:
        """Record `index` on its own, identical to the one the stream yields."""
        if not 0 <= index < self.num_images:
            raise IndexError(index)
        return self._build(index, None)[0]

    # - internals -

    def _image_rolls(self, index: int) -> tuple[bool, bool, bool, float]:
        rng = random.Random(f"{self.seed}:{index}:image-noise")
        dup, corrupt, empty, frac = rng.random(), rng.random(), rng.random(), rng.uniform(0.2, 0.8)
        return (
            index > 0 and dup < self.noise["duplicate_image"],
            corrupt < self.noise["corrupt_image"],
            empty < self.noise["empty_image"],
            frac,
        )

    def _scene_index(self, index: int) -> int:
        """Which scene image `index` shows: its own, or, under duplicate_image, the previous image's."""
        while index > 0 and self._image_rolls(index)[0]:
            index -= 1
        return index

    def _build(
        self, index: int, previous: tuple[int, Scene, bytes] | None
    ) -> tuple[SourceRecord, tuple[int, Scene, bytes], Counter[str]]:
        injected: Counter[str] = Counter()
        dup, corrupt, empty, frac = self._image_rolls(index)
        src = index
        if dup:
            injected["duplicate_image"] += 1
            src = previous[0] if previous is not None else self._scene_index(index - 1)
        if previous is not None and previous[0] == src:
            scene, png = previous[1], previous[2]
        else:
            scene = self.scene(src)
            png = render_scene(scene, image_size=self.image_size)
        image: bytes = png
        if corrupt:
            injected["corrupt_image"] += 1
            image = png[: max(1, int(len(png) * frac))]
        elif empty:
            injected["empty_image"] += 1
            image = b""

        record_id = f"{self.name}-{index:08d}"
        image_id = self.image_id(index)
        clean = questions_for(scene, random.Random(f"{self.seed}:{index}:qa"), self.questions_per_image, self.style)
        items = self._with_item_noise(index, scene, clean, record_id, image_id, injected)
        record = SourceRecord(record_id=record_id, images=[image], qa=items, image_ids=[image_id])
        return record, (src, scene, png), injected

    def _with_item_noise(
        self, index: int, scene: Scene, clean: list[QA], record_id: str, image_id: str, injected: Counter[str]
    ) -> list[QAItem]:
        p = self.noise
        rolls_rng = random.Random(f"{self.seed}:{index}:item-noise")
        items: list[QAItem] = []
        for j, (question, answer, qtype) in enumerate(clean):
            rolls = {kind: rolls_rng.random() for kind in ITEM_NOISE}  # always all rolled: kinds stay independent
            hit = {kind for kind, r in rolls.items() if r < p[kind]}
            rng = random.Random(f"{self.seed}:{index}:{j}:noise-content")
            qt: str | None = qtype
            source, ref = self.name, image_id
            # Replacements are exclusive: the first that fires (and applies) wins. A replacement is
            # redrawn if it repeats an earlier item, so exact repeats come from duplicate_qa alone.
            taken = {(it.question, it.answer) for it in items}
            if "off_task" in hit:
                question, answer = redraw(lambda: off_task(rng), taken)
                qt = None
                injected["off_task"] += 1
            elif "sentence_answer" in hit:
                question, answer, qt = redraw(lambda: sentence_qa(scene, rng), taken)
                injected["sentence_answer"] += 1
            elif "flattened_mc" in hit and (mc := redraw(lambda: flattened_mc(scene, rng), taken)) is not None:
                question, answer, broken = mc
                qt = "query_attribute"
                injected["flattened_mc"] += 1
                injected["flattened_mc_broken"] += broken
            if "empty_field" in hit:
                if rng.random() < 0.5:
                    question = ""
                else:
                    answer = ""
                injected["empty_field"] += 1
            if "foreign_source" in hit:
                source = rng.choice(FOREIGN_SOURCES)
                injected["foreign_source"] += 1
            if "wrong_image_ref" in hit:
                # Another image of the pool (a pool of one has no other: point past its end).
                other = rng.randrange(max(self.num_images, 2) - 1)
                ref = self.image_id(other + (other >= index))
                injected["wrong_image_ref"] += 1
            true = None
            if p["wrong_reference"] and not hit & {"off_task", "sentence_answer", "flattened_mc", "empty_field"}:
                planting = random.Random(f"{self.seed}:{index}:{j}:wrong-reference")  # its own: shifts no other roll
                if planting.random() < p["wrong_reference"] and (wrong := wrong_reference(answer, planting)):
                    true, answer = answer, wrong
                    injected["wrong_reference"] += 1
            planted = False
            if (
                p["guessable"]
                and true is None
                and not hit & {"off_task", "sentence_answer", "flattened_mc", "empty_field"}
            ):
                plant = random.Random(f"{self.seed}:{index}:{j}:guessable")  # its own: shifts no other roll
                if plant.random() < p["guessable"] and (guess := guessable(scene, plant)) is not None:
                    question, answer, qt = guess
                    planted = True
                    injected["guessable"] += 1
            item = QAItem(
                question=question,
                answer=answer,
                record_id=record_id,
                turn=len(items),
                source=source,
                image_ref=ref,
                qtype=qt,
            )
            items.append(item)
            if true is not None:
                self._truth[(index, item.turn)] = true
            if planted:
                self._guessable.add((index, item.turn))
            if "duplicate_qa" in hit:
                items.append(
                    QAItem(
                        question=question,
                        answer=answer,
                        record_id=record_id,
                        turn=len(items),
                        source=source,
                        image_ref=ref,
                        qtype=qt,
                    )
                )
                injected["duplicate_qa"] += 1
                if true is not None:
                    self._truth[(index, items[-1].turn)] = true
                    injected["wrong_reference"] += 1
                if planted:
                    self._guessable.add((index, items[-1].turn))
                    injected["guessable"] += 1
        return items


# --- image folder -----------------------------------------------------------------------------


def write_image_folder(source: SyntheticSource, out_dir: str | Path) -> Path:
    """Write PNGs plus a flat-VQA `metadata.jsonl` (one line per QA) in the `imagefolder` layout.

    The flat shape (the same `file_name` on every QA line of an image, `image_id` as the item
    recorded it) is how VQAv2-like pools look on disk, so the local-files source is exercised on
    the same shape. Broken images (noise) are written as they are: the folder mirrors the pool.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n_images = n_qa = 0
    with open(out / "metadata.jsonl", "w", encoding="utf-8") as meta:
        for record in source:
            file_names = []
            for image, image_id in zip(record.images, record.image_ids):
                file_name = f"{image_id or record.record_id}.png"
                (out / file_name).write_bytes(image or b"")
                file_names.append(file_name)
                n_images += 1
            for item in record.qa:
                row = {
                    "file_name": file_names[0],
                    "question": item.question,
                    "answer": item.answer,
                    "question_id": item.key,
                    "image_id": item.image_ref,
                    "qtype": item.qtype,
                    "source": item.source,
                }
                meta.write(json.dumps(row, ensure_ascii=False) + "\n")
                n_qa += 1
    logger.info("wrote %d images and %d QA lines to %s", n_images, n_qa, out)
    return out


from . import evaluation  # noqa: E402,F401  registers kind `synthetic_eval` (it builds on SyntheticSource above)
