"""A synthetic evaluation split with known overlaps with a synthetic training pool (kind `synthetic_eval`).

Decontamination (`rs.pipeline.clean.decontam`) is only as good as it is measured, and a measure needs the truth. This
split holds, by construction: scenes of the training pool that recur transformed (re-saved with the same
pixels, re-encoded as JPEG, resized, cropped a few percent, brightened), some with the training record's
questions verbatim or lightly reworded; and new scenes of the same kind (the hard negatives: the same
objects, background and renderer), some asked a training question word for word. `truth(i)` says what
image `i` is, so `bench/decontaminate.py` counts precision and recall per method.

Everything depends only on the seeds: image `i` is drawn from `random.Random(f"{seed}:eval:{i}")`.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal

from PIL import Image, ImageEnhance

from rs.records import QAItem
from rs.registry import SOURCES, KindConfig
from rs.sources.base import SourceRecord
from rs.util.config_checks import ConfigValueError, at_least

from . import SyntheticSource
from .questions import questions_for
from .scenes import generate_scene, render_scene

TRANSFORMS = ("same_pixels", "jpeg", "resize", "crop", "brighten")
"""How a recurring training scene is changed: `same_pixels` is the same image saved again (other file bytes)."""
REWORDINGS = ("case", "spacing", "prefix", "suffix")


@dataclass(frozen=True)
class Truth:
    """What evaluation image `index` is, by construction."""

    train_index: int | None
    """The training record whose scene recurs here; None for a new scene (a hard negative)."""
    transform: str | None
    copied_questions: tuple[tuple[int, str], ...]
    """(turn, how) of each question copied from a training record: `verbatim` or a rewording's name."""


@dataclass(kw_only=True)
class SyntheticEvaluationConfig(KindConfig):
    kind: Literal["synthetic_eval"]
    seed: int = 1
    """The evaluation split's own seed (new scenes and the draws below)."""
    num_images: int = 32
    train_seed: int = 0
    """The training pool it overlaps: a `synthetic` source's seed, size, style, questions and image size."""
    train_images: int = 48
    questions_per_image: int = 4
    style: Literal["clevr", "clevrmath", "mixed"] = "mixed"
    image_size: int = 160
    image_overlap: float = 0.4
    """Share of the evaluation images that are a training scene, transformed."""
    question_overlap: float = 0.5
    """Share of the images (recurring or new) asked a training record's questions, verbatim or reworded."""

    def __post_init__(self) -> None:
        at_least("num_images", self.num_images, 0, what="evaluation scenes")
        at_least("train_images", self.train_images, 1, what="scenes of the training pool it overlaps")
        for name in ("image_overlap", "question_overlap"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigValueError(name, f"must be a share from 0 to 1, got {value!r}")


def transform(png: bytes, how: str, rng: random.Random) -> bytes:
    """The image changed as `how` says, as a copy pulled into another dataset would be."""
    with Image.open(io.BytesIO(png)) as im:
        im = im.convert("RGB")
    out = io.BytesIO()
    if how == "same_pixels":
        im.save(out, format="PNG", compress_level=1)
        return out.getvalue()
    if how == "jpeg":
        im.save(out, format="JPEG", quality=rng.randint(60, 90))
        return out.getvalue()
    if how == "resize":
        scale = rng.choice((0.5, 0.75, 1.25, 1.6))
        im = im.resize((max(8, round(im.width * scale)), max(8, round(im.height * scale))), Image.Resampling.BICUBIC)
    elif how == "crop":
        share = rng.uniform(0.02, 0.05)
        dx, dy = round(im.width * share), round(im.height * share)
        im = im.crop((dx, dy, im.width - dx, im.height - dy))
    elif how == "brighten":
        im = ImageEnhance.Brightness(im).enhance(rng.uniform(1.1, 1.3))
    else:
        raise ValueError(f"unknown transform {how!r}; expected one of {', '.join(TRANSFORMS)}")
    im.save(out, format="PNG")
    return out.getvalue()


def reword(question: str, how: str) -> str:
    """A light rewording that keeps the question's words: what a copy edited by hand or by a template looks like."""
    if how == "case":
        return question.lower().rstrip("?").strip()
    if how == "spacing":
        return "  ".join(question.replace("?", " ?").split(" "))
    if how == "prefix":
        return f"Look at the image. {question}"
    if how == "suffix":
        return f"{question} Answer briefly."
    raise ValueError(f"unknown rewording {how!r}; expected one of {', '.join(REWORDINGS)}")


@SOURCES.register("synthetic_eval")
class SyntheticEvaluationSource:
    """The evaluation split: one record per image, its QA, and `truth(i)` for the measure."""

    Config = SyntheticEvaluationConfig

    def __init__(self, config: SyntheticEvaluationConfig):
        self.config = config
        c = config
        self.train = SyntheticSource(
            seed=c.train_seed,
            num_images=c.train_images,
            questions_per_image=c.questions_per_image,
            style=c.style,
            image_size=c.image_size,
        )

    @classmethod
    def from_config(cls, config: SyntheticEvaluationConfig, *, base_dir: Path) -> SyntheticEvaluationSource:
        return cls(config)

    @staticmethod
    def label(config: SyntheticEvaluationConfig) -> str:
        return f"synthetic evaluation seed={config.seed} images={config.num_images} (overlaps train seed={config.train_seed})"

    def provenance(self) -> dict[str, str | None]:
        c = self.config
        return {
            "dataset": "rs-synthetic/synthetic-clevr-eval",
            "config": c.style,
            "split": "validation",
            "revision": f"seed={c.seed}",
        }

    def size(self) -> int:
        return self.config.num_images

    def _draw(self, index: int) -> tuple[random.Random, Truth]:
        c = self.config
        rng = random.Random(f"{c.seed}:eval:{index}")
        recurs = rng.random() < c.image_overlap
        train_index = rng.randrange(c.train_images) if recurs else None
        how = TRANSFORMS[index % len(TRANSFORMS)] if recurs else None
        copied: list[tuple[int, str]] = []
        if rng.random() < c.question_overlap:
            for turn in range(c.questions_per_image):
                if rng.random() < 0.5:
                    copied.append((turn, rng.choice(("verbatim", *REWORDINGS))))
        return rng, Truth(train_index, how, tuple(copied))

    def truth(self, index: int) -> Truth:
        """What image `index` is, by construction (the same draws as `record`)."""
        return self._draw(index)[1]

    def record(self, index: int) -> SourceRecord:
        c = self.config
        rng, truth = self._draw(index)
        if truth.train_index is not None:
            scene = self.train.scene(truth.train_index)
            image = transform(render_scene(scene, image_size=c.image_size), truth.transform or "same_pixels", rng)
        else:
            scene = generate_scene(random.Random(f"{c.seed}:eval-scene:{index}"))
            image = render_scene(scene, image_size=c.image_size)
        own = questions_for(scene, random.Random(f"{c.seed}:eval:{index}:qa"), c.questions_per_image, c.style)
        # a copied question comes from the recurring scene's own record, or from any training record for a new scene
        donor = truth.train_index if truth.train_index is not None else rng.randrange(c.train_images)
        donor_qa = self.train.record(donor).qa if truth.copied_questions else []
        copied = dict(truth.copied_questions)
        record_id = f"synthetic-clevr-eval-{index:08d}"
        items = []
        for turn, (question, answer, qtype) in enumerate(own):
            if turn in copied and turn < len(donor_qa):
                how = copied[turn]
                question = donor_qa[turn].question if how == "verbatim" else reword(donor_qa[turn].question, how)
                # on a new scene the training answer need not hold: the split measures overlap, it is never answered
                answer = donor_qa[turn].answer
            items.append(
                QAItem(
                    question=question,
                    answer=answer,
                    record_id=record_id,
                    turn=turn,
                    source="synthetic-clevr-eval",
                    qtype=qtype,
                )
            )
        return SourceRecord(record_id=record_id, images=[image], qa=items)

    def __iter__(self) -> Iterator[SourceRecord]:
        for index in range(self.config.num_images):
            yield self.record(index)
