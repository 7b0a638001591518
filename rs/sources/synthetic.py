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
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import logging
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator, Literal, Mapping, Sequence, TypeVar

from PIL import Image, ImageDraw

from rs.registry import SOURCES, KindConfig
from rs.sources.base import QAItem, SourceRecord

logger = logging.getLogger(__name__)
T = TypeVar("T")

# --- vocabulary -------------------------------------------------------------------------------

SHAPES = ("cube", "sphere", "cylinder")
COLORS = ("gray", "red", "blue", "green", "brown", "purple", "cyan", "yellow")
SIZES = ("small", "large")
MATERIALS = ("rubber", "metal")

ATTRIBUTE_ORDER = ("size", "color", "material", "shape")
"""CLEVR's adjective order in a noun phrase: 'small red metal cube'."""

ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "size": SIZES,
    "color": COLORS,
    "material": MATERIALS,
    "shape": SHAPES,
}
"""Attribute -> its canonical values; answers to attribute questions are always one of these."""

SYNONYMS: dict[str, tuple[str, ...]] = {
    "small": ("small", "tiny"),
    "large": ("large", "big"),
    "rubber": ("rubber", "matte"),
    "metal": ("metal", "shiny", "metallic"),
    "cube": ("cube", "block"),
    "sphere": ("sphere", "ball"),
    "cylinder": ("cylinder",),
    "thing": ("thing", "object"),
}
"""CLEVR's surface synonyms; questions vary wording, answers stay canonical."""

# CLEVR's own RGB values for its eight colours.
RGB: dict[str, tuple[int, int, int]] = {
    "gray": (87, 87, 87),
    "red": (173, 35, 35),
    "blue": (42, 75, 215),
    "green": (29, 105, 20),
    "brown": (129, 74, 25),
    "purple": (129, 38, 192),
    "cyan": (41, 208, 208),
    "yellow": (255, 238, 51),
}

# --- question templates -----------------------------------------------------------------------
# {p}: plural noun phrase ("red cubes"), {s}: singular ("small rubber sphere"), {a_s}: with article.

COUNT_TEMPLATES = (
    "How many {p} are there?",
    "What number of {p} are there?",
    "How many {p} are visible?",
)
EXIST_TEMPLATES = (
    "Are there any {p}?",
    "Is there {a_s}?",
    "Are any {p} visible?",
)
QUERY_TEMPLATES: dict[str, tuple[str, ...]] = {
    "color": ("What color is the {s}?", "What is the color of the {s}?", "The {s} is what color?"),
    "shape": ("What shape is the {s}?", "What is the shape of the {s}?", "What shape does the {s} have?"),
    "size": ("What size is the {s}?", "What is the size of the {s}?", "How big is the {s}?"),
    "material": ("What material is the {s}?", "What is the {s} made of?", "What is the material of the {s}?"),
}
COMPARE_COUNT_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("Are there more {a} than {b}?", ">"),
    ("Are there fewer {a} than {b}?", "<"),
    ("Is the number of {a} greater than the number of {b}?", ">"),
    ("Is the number of {a} less than the number of {b}?", "<"),
    ("Is the number of {a} the same as the number of {b}?", "="),
    ("Are there the same number of {a} and {b}?", "="),
    ("Are there an equal number of {a} and {b}?", "="),
)
COMPARE_ATTRIBUTE_TEMPLATES: dict[str, tuple[str, ...]] = {
    "color": (
        "Is the {a} the same color as the {b}?",
        "Does the {a} have the same color as the {b}?",
        "Do the {a} and the {b} have the same color?",
    ),
    "shape": (
        "Is the {a} the same shape as the {b}?",
        "Does the {a} have the same shape as the {b}?",
        "Do the {a} and the {b} have the same shape?",
    ),
    "size": (
        "Is the {a} the same size as the {b}?",
        "Does the {a} have the same size as the {b}?",
        "Do the {a} and the {b} have the same size?",
    ),
    "material": (
        "Is the {a} made of the same material as the {b}?",
        "Does the {a} have the same material as the {b}?",
        "Are the {a} and the {b} made of the same material?",
    ),
}
SUBTRACT_TEMPLATES = (
    "Subtract all {a}. How many {t} are left?",
    "Subtract all {a}. Subtract all {b}. How many {t} are left?",
)
ADD_TEMPLATES = ("Add {k} {a}. How many {t} exist?",)

CLEVR_QTYPES: dict[str, float] = {
    "count": 0.25,
    "exist": 0.2,
    "query_attribute": 0.25,
    "compare_count": 0.15,
    "compare_attribute": 0.15,
}
"""CLEVR-style question types and how often each is drawn."""
CLEVRMATH_QTYPES: dict[str, float] = {"subtract": 0.6, "add": 0.4}
STYLES = ("clevr", "clevrmath", "mixed")

# --- noise ------------------------------------------------------------------------------------

ITEM_NOISE = (
    "off_task",
    "sentence_answer",
    "flattened_mc",
    "empty_field",
    "foreign_source",
    "wrong_image_ref",
    "duplicate_qa",
)
"""Per-item noise kinds, rolled in this order for every clean item (so adding one never shifts another)."""
IMAGE_NOISE = ("duplicate_image", "corrupt_image", "empty_image")
NOISE_KINDS = ITEM_NOISE + IMAGE_NOISE

FOREIGN_SOURCES = ("vqav2", "visual7w", "localized_narratives", "cocoqa", "aokvqa")
"""What `foreign_source` writes in `QAItem.source`: names of other Cauldron subsets."""

_NUMBER_WORDS = ("One", "Two", "Three", "Four", "Five")
OFF_TASK_TEMPLATES: tuple[tuple[str, str, dict[str, tuple[str, ...]]], ...] = (
    (
        "How many airplanes with propellers can be identified in this photo?",
        "{n} {plane} with propellers can be identified in the photo.",
        {},
    ),
    ("What is the man on the left holding?", "The man on the left is holding {thing}.",
     {"thing": ("an umbrella", "a tennis racket", "a cup of coffee", "a kite")}),
    ("What color is the bus parked near the curb?", "The bus parked near the curb is {c}.",
     {"c": ("red", "white", "yellow", "blue")}),
    ("What is the weather like in this picture?", "The weather appears to be {w}.",
     {"w": ("sunny and clear", "overcast and rainy", "snowy and cold", "foggy")}),
    ("What does the sign in the photo say?", 'The sign in the photo says "{t}".',
     {"t": ("STOP", "Main Street", "No Parking", "Open 24 Hours")}),
    ("How many people are sitting on the bench?", "There are {n_lower} people sitting on the bench.", {}),
    ("What kind of animal is lying on the couch?", "A {a} is lying on the couch.",
     {"a": ("dog", "cat", "puppy", "kitten")}),
    ("Where was this photo most likely taken?", "This photo was most likely taken {where}.",
     {"where": ("at a train station", "in a kitchen", "on a beach", "in a city park")}),
    ("What is the woman in the red dress doing?", "The woman in the red dress is {doing}.",
     {"doing": ("talking on the phone", "walking her dog", "reading a book", "riding a bicycle")}),
    ("What time of day does it appear to be in the image?", "It appears to be {when} in the image.",
     {"when": ("early morning", "late afternoon", "night", "midday")}),
    ("What brand name is written on the side of the truck?", 'The side of the truck says "{b}".',
     {"b": ("Coca-Cola", "FedEx", "Budweiser", "Pepsi")}),
    ("Why is the giraffe bending its neck?", "The giraffe is bending its neck to {why}.",
     {"why": ("eat leaves from the ground", "drink water", "reach the fence")}),
)
"""General-VQA rows with nothing to do with a CLEVR scene, answered by a full sentence."""

# Flattened multiple choice: the question, then options in prose. `{q}` is a clean query_attribute question.
MC_FORMATS = (
    "{q} Options: {comma}.",                       # e.g. "Options: red, blue, green, cyan."
    "{q} Choose from: {paren}",                    # e.g. "Choose from: (a) cube (b) sphere (c) cylinder"
    "{q} Select one: {or_list}",                   # e.g. "Select one: cube, sphere or cylinder"
    "{q}\n{lines}\nAnswer with the option's letter from the given choices directly.",  # "A. cube\nB. sphere"
)
_MC_OPTION_COUNT = {"color": 4, "shape": 3, "size": 2, "material": 2}

# --- scene graph ------------------------------------------------------------------------------

SCENE_EXTENT = 1000
"""Scene coordinates run 0..SCENE_EXTENT: x across the image, y from the back of the floor to the front."""
MIN_OBJECTS, MAX_OBJECTS = 3, 10
_MAX_OVERLAP = 0.15  # max share of the smaller object's box another object's box may cover
_PLACEMENT_TRIES = 60


@dataclass(slots=True)
class SceneObject:
    """One object: its attributes (canonical words) and where it stands on the floor."""

    shape: str
    color: str
    size: str
    material: str
    x: int
    """Horizontal centre, 0 (left edge of the image) .. SCENE_EXTENT (right edge)."""
    y: int
    """Depth, 0 (back of the floor, drawn small and high) .. SCENE_EXTENT (front)."""


@dataclass(slots=True)
class Scene:
    objects: list[SceneObject] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"objects": [asdict(o) for o in self.objects]}

    @classmethod
    def from_dict(cls, data: Mapping) -> Scene:
        return cls([SceneObject(**o) for o in data["objects"]])


def _geometry(obj: SceneObject) -> tuple[float, float, float, float]:
    """(centre x, ground y, width, height) as fractions of the image side.

    Far objects sit higher and smaller (a cheap perspective); the floor starts at 0.42 of the height.
    At 160 px the smallest (small, at the back) object is ~21 px wide, the largest ~43 px.
    """
    t = obj.y / SCENE_EXTENT
    scale = 0.78 + 0.22 * t
    w = (0.165 if obj.size == "small" else 0.27) * scale
    h = w * (1.05 if obj.shape == "cylinder" else 1.0)
    return obj.x / SCENE_EXTENT, 0.42 + 0.5 * t, w, h


def _box(obj: SceneObject) -> tuple[float, float, float, float]:
    cx, gy, w, h = _geometry(obj)
    return cx - w / 2, gy - h, cx + w / 2, gy


def _too_close(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    ix = min(a[2], b[2]) - max(a[0], b[0])
    iy = min(a[3], b[3]) - max(a[1], b[1])
    if ix <= 0 or iy <= 0:
        return False
    smaller = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return ix * iy > _MAX_OVERLAP * smaller


def generate_scene(rng: random.Random) -> Scene:
    """Draw 3-10 objects with random attributes, placed so that none hides much of another.

    Placement is rejection sampling in image space (boxes in fractions of the side), so whether a
    scene is valid does not depend on the render size. An object that finds no place is dropped;
    if fewer than 3 remain the scene is redrawn.
    """
    while True:
        target = rng.randint(MIN_OBJECTS, MAX_OBJECTS)
        objects: list[SceneObject] = []
        boxes: list[tuple[float, float, float, float]] = []
        for _ in range(target):
            obj = SceneObject(
                shape=rng.choice(SHAPES),
                color=rng.choice(COLORS),
                size=rng.choice(SIZES),
                material=rng.choice(MATERIALS),
                x=0,
                y=0,
            )
            for _ in range(_PLACEMENT_TRIES):
                obj.y = rng.randint(0, SCENE_EXTENT)
                half = _geometry(obj)[2] / 2
                lo, hi = 0.03 + half, 0.97 - half
                obj.x = round((lo + rng.random() * (hi - lo)) * SCENE_EXTENT)
                box = _box(obj)
                if not any(_too_close(box, other) for other in boxes):
                    objects.append(obj)
                    boxes.append(box)
                    break
        if len(objects) >= MIN_OBJECTS:
            return Scene(objects)


# --- rendering --------------------------------------------------------------------------------


def _shade(rgb: tuple[int, int, int], f: float) -> tuple[int, int, int]:
    """Darken (f < 1) or lighten towards white (f > 1) a colour."""
    if f <= 1:
        return tuple(int(c * f) for c in rgb)  # type: ignore[return-value]
    k = f - 1
    return tuple(int(c + (255 - c) * k) for c in rgb)  # type: ignore[return-value]


@lru_cache(maxsize=8)
def _background(size: int) -> Image.Image:
    """Wall and floor gradient, drawn once per size and copied per image (saves ~0.3 ms each)."""
    img = Image.new("RGB", (size, size))
    draw = ImageDraw.Draw(img)
    horizon = int(size * 0.3)
    for row in range(size):
        if row < horizon:
            v = 178 + int(14 * row / max(horizon, 1))
            color = (v, v, v + 2)
        else:
            t = (row - horizon) / max(size - horizon, 1)
            v = 140 + int(52 * t)
            color = (v, v - 1, v - 4)
        draw.line([(0, row), (size, row)], fill=color)
    return img


def _draw_object(draw: ImageDraw.ImageDraw, obj: SceneObject, size: int) -> None:
    cx, gy, w, h = (v * size for v in _geometry(obj))
    base = RGB[obj.color]
    metal = obj.material == "metal"
    x0 = cx - w / 2
    # Soft contact shadow on the floor, offset to the right as if lit from the upper left.
    draw.ellipse([x0 + 0.1 * w, gy - 0.12 * w, x0 + 1.15 * w, gy + 0.06 * w], fill=(112, 111, 108))
    if obj.shape == "cube":
        s, d = 0.78 * w, 0.22 * w
        top = gy - s
        draw.rectangle([x0, top, x0 + s, gy], fill=base)
        draw.polygon([(x0, top), (x0 + d, top - d), (x0 + s + d, top - d), (x0 + s, top)], fill=_shade(base, 1.3))
        draw.polygon([(x0 + s, gy), (x0 + s, top), (x0 + s + d, top - d), (x0 + s + d, gy - d)], fill=_shade(base, 0.65))
        if metal:
            # A diagonal sheen across the front face and a glint on the top edge.
            draw.polygon([(x0 + 0.1 * s, gy), (x0 + 0.35 * s, gy), (x0 + 0.75 * s, top), (x0 + 0.5 * s, top)],
                         fill=_shade(base, 1.45))
            draw.ellipse([x0 + 0.15 * w, top - 0.6 * d, x0 + 0.3 * w, top - 0.2 * d], fill=(250, 250, 250))
    elif obj.shape == "sphere":
        top = gy - w
        draw.ellipse([x0, top, x0 + w, gy], fill=_shade(base, 0.7))
        draw.ellipse([x0 + 0.06 * w, top + 0.04 * w, x0 + 0.86 * w, top + 0.84 * w], fill=base)
        draw.ellipse([x0 + 0.16 * w, top + 0.12 * w, x0 + 0.6 * w, top + 0.56 * w], fill=_shade(base, 1.15))
        if metal:
            draw.ellipse([x0 + 0.24 * w, top + 0.18 * w, x0 + 0.42 * w, top + 0.36 * w], fill=(252, 252, 252))
    else:  # cylinder
        e = 0.3 * w
        top = gy - h
        draw.ellipse([x0, gy - e, x0 + w, gy], fill=_shade(base, 0.8))
        draw.rectangle([x0, top + e / 2, x0 + w, gy - e / 2], fill=base)
        draw.rectangle([x0 + 0.72 * w, top + e / 2, x0 + w, gy - e / 2], fill=_shade(base, 0.7))
        draw.ellipse([x0, top, x0 + w, top + e], fill=_shade(base, 1.3))
        if metal:
            draw.rectangle([x0 + 0.2 * w, top + e, x0 + 0.3 * w, gy - e * 0.7], fill=_shade(base, 1.6))
            draw.ellipse([x0 + 0.2 * w, top + 0.25 * e, x0 + 0.38 * w, top + 0.6 * e], fill=(250, 250, 250))


def render_scene(scene: Scene, *, image_size: int = 160) -> bytes:
    """Render to PNG bytes: deterministic for a scene (no timestamps, `optimize=False`).

    Objects are painted back to front (painter's algorithm), so nearer objects occlude farther ones.
    """
    if image_size < 32:
        raise ValueError(f"image_size must be at least 32, got {image_size}")
    img = _background(image_size).copy()
    draw = ImageDraw.Draw(img)
    for obj in sorted(scene.objects, key=lambda o: (o.y, o.x)):
        _draw_object(draw, obj, image_size)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=False, compress_level=6)
    return buf.getvalue()


# --- scene queries ----------------------------------------------------------------------------

Filter = dict[str, str]
"""Attribute -> canonical value an object must have; {} matches everything."""


def matches(obj: SceneObject, flt: Mapping[str, str]) -> bool:
    return all(getattr(obj, attr) == value for attr, value in flt.items())


def count(scene: Scene, flt: Mapping[str, str]) -> int:
    return sum(matches(o, flt) for o in scene.objects)


def _noun_phrase(flt: Mapping[str, str], rng: random.Random, *, plural: bool) -> str:
    """'big blue things', 'small metallic ball': adjectives in CLEVR order, synonyms drawn by rng."""
    words = [rng.choice(SYNONYMS.get(flt[a], (flt[a],))) for a in ATTRIBUTE_ORDER[:3] if a in flt]
    noun = rng.choice(SYNONYMS[flt.get("shape", "thing")])
    words.append(noun + "s" if plural else noun)
    return " ".join(words)


def _with_article(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def _filter_of(obj: SceneObject, attrs: Sequence[str]) -> Filter:
    return {a: getattr(obj, a) for a in ATTRIBUTE_ORDER if a in attrs}


def _sample_filter(scene: Scene, rng: random.Random, *, from_scene: float = 0.7) -> Filter:
    """A 1-3 attribute filter: usually one some object satisfies (non-zero counts), else random."""
    k = rng.choices((1, 2, 3), weights=(4, 4, 2))[0]
    attrs = rng.sample(ATTRIBUTE_ORDER, k)
    if rng.random() < from_scene:
        return _filter_of(rng.choice(scene.objects), attrs)
    return {a: rng.choice(ATTRIBUTES[a]) for a in ATTRIBUTE_ORDER if a in attrs}


def _unique_description(scene: Scene, obj: SceneObject, rng: random.Random, exclude: str | None = None) -> Filter | None:
    """A filter that picks out `obj` alone, never naming `exclude` (the attribute being asked about).

    Usually the shortest such description, sometimes an over-specified one, as in CLEVR.
    """
    attrs = [a for a in ATTRIBUTE_ORDER if a != exclude]
    unique = [
        flt
        for k in range(1, len(attrs) + 1)
        for combo in itertools.combinations(attrs, k)
        if count(scene, flt := _filter_of(obj, combo)) == 1
    ]
    if not unique:
        return None
    shortest = [f for f in unique if len(f) == len(unique[0])]
    return rng.choice(shortest if rng.random() < 0.6 else unique)


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


# --- CLEVR questions --------------------------------------------------------------------------

QA = tuple[str, str, str]


def _q_count(scene: Scene, rng: random.Random) -> QA:
    flt = {} if rng.random() < 0.05 else _sample_filter(scene, rng)
    q = rng.choice(COUNT_TEMPLATES).format(p=_noun_phrase(flt, rng, plural=True))
    return q, str(count(scene, flt)), "count"


def _q_exist(scene: Scene, rng: random.Random) -> QA:
    # Aim for yes and no equally often: random filters alone match too often to give many "no".
    want_yes = rng.random() < 0.5
    for _ in range(10):
        flt = _sample_filter(scene, rng, from_scene=1.0 if want_yes else 0.0)
        if (count(scene, flt) > 0) == want_yes:
            break
    template = rng.choice(EXIST_TEMPLATES)
    q = template.format(p=_noun_phrase(flt, rng, plural=True), a_s=_with_article(_noun_phrase(flt, rng, plural=False)))
    return q, _yes_no(count(scene, flt) > 0), "exist"


def _q_query(scene: Scene, rng: random.Random) -> QA | None:
    attr = rng.choice(ATTRIBUTE_ORDER)
    obj = rng.choice(scene.objects)
    desc = _unique_description(scene, obj, rng, exclude=attr)
    if desc is None:
        return None
    q = rng.choice(QUERY_TEMPLATES[attr]).format(s=_noun_phrase(desc, rng, plural=False))
    return q, getattr(obj, attr), "query_attribute"


def _q_compare_count(scene: Scene, rng: random.Random) -> QA | None:
    template, relation = rng.choice(COMPARE_COUNT_TEMPLATES)
    a = _sample_filter(scene, rng)
    ca = count(scene, a)
    # Draw the second set until the answer is the one aimed at ("same number" is rarely true by chance).
    want = rng.random() < 0.5
    for _ in range(20):
        b = _sample_filter(scene, rng)
        cb = count(scene, b)
        answer = {">": ca > cb, "<": ca < cb, "=": ca == cb}[relation]
        if b != a and answer == want:
            break
    if a == b:
        return None
    q = template.format(a=_noun_phrase(a, rng, plural=True), b=_noun_phrase(b, rng, plural=True))
    return q, _yes_no(answer), "compare_count"


def _q_compare_attribute(scene: Scene, rng: random.Random) -> QA | None:
    attr = rng.choice(ATTRIBUTE_ORDER)
    first = rng.choice(scene.objects)
    others = [o for o in scene.objects if o is not first]
    same = [o for o in others if getattr(o, attr) == getattr(first, attr)]
    # Sometimes force a partner that shares the attribute: with chance matches, yes and no come out even.
    second = rng.choice(same if same and rng.random() < 0.2 else others)
    da = _unique_description(scene, first, rng, exclude=attr)
    db = _unique_description(scene, second, rng, exclude=attr)
    if da is None or db is None:
        return None
    q = rng.choice(COMPARE_ATTRIBUTE_TEMPLATES[attr]).format(
        a=_noun_phrase(da, rng, plural=False), b=_noun_phrase(db, rng, plural=False)
    )
    return q, _yes_no(getattr(first, attr) == getattr(second, attr)), "compare_attribute"


_CLEVR_GENERATORS = {
    "count": _q_count,
    "exist": _q_exist,
    "query_attribute": _q_query,
    "compare_count": _q_compare_count,
    "compare_attribute": _q_compare_attribute,
}


# --- CLEVRMath questions ----------------------------------------------------------------------


def _target_phrase(rng: random.Random, shape: str | None) -> str:
    """What a CLEVRMath question counts at the end: all objects, or one shape."""
    return _noun_phrase({"shape": shape} if shape else {}, rng, plural=True)


def _q_subtract(scene: Scene, rng: random.Random) -> QA:
    removed = [_sample_filter(scene, rng, from_scene=0.85)]
    if rng.random() < 0.4:
        second = _sample_filter(scene, rng, from_scene=0.85)
        if second != removed[0]:
            removed.append(second)
    target = rng.choice(SHAPES) if rng.random() < 0.25 else None
    if {"shape": target} in removed:
        target = None  # "Subtract all cubes. How many cubes are left?" is always 0
    # An object matched by both subtractions is removed once: count the survivors, not the removals.
    left = sum(
        1
        for o in scene.objects
        if not any(matches(o, f) for f in removed) and (target is None or o.shape == target)
    )
    phrases = [_noun_phrase(f, rng, plural=True) for f in removed]
    template = SUBTRACT_TEMPLATES[len(removed) - 1]
    q = template.format(a=phrases[0], b=phrases[-1], t=_target_phrase(rng, target))
    return q, str(left), "subtract"


def _q_add(scene: Scene, rng: random.Random) -> QA:
    k = rng.randint(1, 3)
    added = _sample_filter(scene, rng, from_scene=0.5)
    if rng.random() < 0.7:
        added.setdefault("shape", rng.choice(SHAPES))  # CLEVRMath mostly adds named shapes
    target = None
    if rng.random() < 0.25 and "shape" in added:
        target = added["shape"] if rng.random() < 0.5 else rng.choice(SHAPES)
    if target is None:
        answer = len(scene.objects) + k
    else:
        answer = count(scene, {"shape": target}) + (k if added["shape"] == target else 0)
    q = ADD_TEMPLATES[0].format(k=k, a=_noun_phrase(added, rng, plural=k > 1), t=_target_phrase(rng, target))
    return q, str(answer), "add"


_CLEVRMATH_GENERATORS = {"subtract": _q_subtract, "add": _q_add}


def _draw_questions(scene: Scene, rng: random.Random, n: int, generators: Mapping, weights: Mapping[str, float]) -> list[QA]:
    """n distinct questions; a generator may decline (no unique referent) and another type is drawn."""
    out: list[QA] = []
    seen: set[str] = set()
    kinds, w = list(weights), list(weights.values())
    for _ in range(max(n, 1) * 30):
        if len(out) >= n:
            break
        qa = generators[rng.choices(kinds, weights=w)[0]](scene, rng)
        if qa is not None and qa[0] not in seen:
            seen.add(qa[0])
            out.append(qa)
    if len(out) < n:
        logger.debug("only %d of %d distinct questions for a %d-object scene", len(out), n, len(scene.objects))
    return out


def clevr_questions(scene: Scene, rng: random.Random, n: int) -> list[QA]:
    """n distinct CLEVR-style (question, answer, qtype) triples, answers computed from the scene."""
    return _draw_questions(scene, rng, n, _CLEVR_GENERATORS, CLEVR_QTYPES)


def clevrmath_questions(scene: Scene, rng: random.Random, n: int) -> list[QA]:
    """n distinct CLEVRMath-style subtract/add triples, answers computed from the scene."""
    return _draw_questions(scene, rng, n, _CLEVRMATH_GENERATORS, CLEVRMATH_QTYPES)


def _questions_for(scene: Scene, rng: random.Random, n: int, style: str) -> list[QA]:
    if style == "clevr":
        return clevr_questions(scene, rng, n)
    if style == "clevrmath":
        return clevrmath_questions(scene, rng, n)
    n_math = sum(rng.random() < 0.5 for _ in range(n))
    qa = clevr_questions(scene, rng, n - n_math) + clevrmath_questions(scene, rng, n_math)
    rng.shuffle(qa)
    return qa


# --- noise items ------------------------------------------------------------------------------


def _off_task(rng: random.Random) -> tuple[str, str]:
    question, answer, slots = rng.choice(OFF_TASK_TEMPLATES)
    n = rng.randrange(len(_NUMBER_WORDS))
    fills = {k: rng.choice(v) for k, v in slots.items()}
    fills |= {"n": _NUMBER_WORDS[n], "n_lower": _NUMBER_WORDS[max(n, 1)].lower(),
              "plane": "airplane" if n == 0 else "airplanes"}
    return question, answer.format(**fills)


_SHAPE_ADJECTIVE = {"cube": "cubic", "sphere": "round", "cylinder": "cylindrical"}


def _sentence_qa(scene: Scene, rng: random.Random) -> QA:
    """A clean question whose reference is a correct full sentence rather than a word."""
    kind = rng.choice(("query_attribute", "query_attribute", "count", "exist"))
    if kind == "query_attribute":
        attr = rng.choice(ATTRIBUTE_ORDER)
        obj = rng.choice(scene.objects)
        desc = _unique_description(scene, obj, rng, exclude=attr)
        if desc is not None:
            if attr == "shape" and rng.random() < 0.5:
                desc = _filter_of(obj, [*desc, "shape"])  # the real rows often name what they ask about
            s = _noun_phrase(desc, rng, plural=False)
            value = getattr(obj, attr)
            q = rng.choice(QUERY_TEMPLATES[attr]).format(s=s)
            if attr == "shape":
                a = rng.choice((f"The {s} has a {_SHAPE_ADJECTIVE[value]} shape.", f"The {s} is a {value}."))
            elif attr == "material":
                a = f"The {s} is made of {value}."
            else:
                a = f"The {s} is {value}."
            return q, a, "query_attribute"
    flt = _sample_filter(scene, rng)
    n = count(scene, flt)
    p, s = _noun_phrase(flt, rng, plural=True), _noun_phrase(flt, rng, plural=False)
    if kind == "exist":
        q = rng.choice(EXIST_TEMPLATES).format(p=p, a_s=_with_article(s))
        return q, (f"Yes, there is {_with_article(s)}." if n else f"No, there are no {p}."), "exist"
    q = rng.choice(COUNT_TEMPLATES).format(p=p)
    a = f"There is 1 {s}." if n == 1 else (f"There are no {p}." if n == 0 else f"There are {n} {p}.")
    return q, a, "count"


def _flattened_mc(scene: Scene, rng: random.Random) -> tuple[str, str, bool] | None:
    """A query_attribute question with options in prose; ~10% have a reference matching no option.

    None when no object of the scene can be described uniquely (then nothing is injected).
    """
    for _ in range(10):
        attr = rng.choice(ATTRIBUTE_ORDER)
        obj = rng.choice(scene.objects)
        if (desc := _unique_description(scene, obj, rng, exclude=attr)) is not None:
            break
    else:
        return None
    question = rng.choice(QUERY_TEMPLATES[attr]).format(s=_noun_phrase(desc, rng, plural=False))
    value = getattr(obj, attr)
    distractors = [v for v in ATTRIBUTES[attr] if v != value]
    options = [value, *rng.sample(distractors, _MC_OPTION_COUNT[attr] - 1)]
    rng.shuffle(options)
    fmt = rng.randrange(len(MC_FORMATS))
    text = MC_FORMATS[fmt].format(
        q=question,
        comma=", ".join(options),
        paren=" ".join(f"({chr(97 + i)}) {o}" for i, o in enumerate(options)),
        or_list=(", ".join(options[:-1]) + " or " + options[-1]),
        lines="\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(options)),
    )
    index = options.index(value)
    # Format 2 answers by letter or by text; format 4 asks for the letter; the others by text.
    by_letter = fmt == 3 or (fmt == 1 and rng.random() < 0.5)
    broken = rng.random() < 0.1
    if by_letter:
        i = len(options) if broken else index
        answer = chr(65 + i) if fmt == 3 else f"({chr(97 + i)})"
    elif broken:
        outside = [v for v in ATTRIBUTES[attr] if v not in options]
        answer = rng.choice(outside or [v for a in ATTRIBUTE_ORDER if a != attr for v in ATTRIBUTES[a]])
    else:
        answer = value
    return text, answer, broken


def _redraw(draw: Callable[[], T], taken: set[tuple[str, str]], tries: int = 8) -> T:
    """Call `draw` until its (question, answer) is not in `taken` (or tries run out)."""
    for _ in range(tries):
        value = draw()
        if value is None or (value[0], value[1]) not in taken:
            return value
    return value


# --- the source -------------------------------------------------------------------------------


def _validate_noise(noise: Mapping[str, float] | None) -> dict[str, float]:
    noise = dict(noise or {})
    unknown = sorted(set(noise) - set(NOISE_KINDS))
    if unknown:
        raise ValueError(f"unknown noise kind(s) {unknown}; valid kinds: {', '.join(NOISE_KINDS)}")
    for kind, p in noise.items():
        if not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"noise probability for {kind!r} must be in [0, 1], got {p!r}")
    return {kind: float(noise.get(kind, 0.0)) for kind in NOISE_KINDS}


@dataclass(kw_only=True)
class SyntheticSourceConfig(KindConfig):
    kind: Literal["synthetic"]
    seed: int = 0
    num_images: int = 100
    questions_per_image: int = 4
    style: Literal["clevr", "clevrmath", "mixed"] = "mixed"
    image_size: int = 160
    noise: dict[str, float] = field(default_factory=dict)
    """Injected defects per kind (off_task, flattened_mc, corrupt_image, ...), for exercising cleaning."""


@SOURCES.register("synthetic")
class SyntheticSource:
    """A stream of CLEVR-style records: one rendered scene and its questions per record.

    Implements `rs.sources.base.Source`. Records are built lazily, one at a time, so a pool of any
    size streams in constant memory; `record(i)` builds any single record directly (for sharding).

    Noise is left in the data only, as in real pools. `noise_counts` counts what was injected
    (reset at the start of each pass, updated as records are consumed), so tests can compare the
    cleaning stage's counts with the truth. Injected off-task items have `qtype=None`.
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
        if num_images < 0 or questions_per_image < 1:
            raise ValueError("num_images must be >= 0 and questions_per_image >= 1")
        if image_size < 32:
            raise ValueError(f"image_size must be at least 32, got {image_size}")
        self.seed = seed
        self.num_images = num_images
        self.questions_per_image = questions_per_image
        self.style = style
        self.image_size = image_size
        self.noise = _validate_noise(noise)
        self.name = name
        self.noise_counts: Counter[str] = Counter()

    Config = SyntheticSourceConfig

    @classmethod
    def from_config(cls, config: SyntheticSourceConfig, *, base_dir: Path) -> SyntheticSource:
        return cls(seed=config.seed, num_images=config.num_images, questions_per_image=config.questions_per_image,
                   style=config.style, image_size=config.image_size, noise=config.noise)

    @staticmethod
    def label(config: SyntheticSourceConfig) -> str:
        """How `rs families list` names this source."""
        return f"synthetic seed={config.seed} images={config.num_images}"

    def __len__(self) -> int:
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
        clean = _questions_for(scene, random.Random(f"{self.seed}:{index}:qa"), self.questions_per_image, self.style)
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
                question, answer = _redraw(lambda: _off_task(rng), taken)
                qt = None
                injected["off_task"] += 1
            elif "sentence_answer" in hit:
                question, answer, qt = _redraw(lambda: _sentence_qa(scene, rng), taken)
                injected["sentence_answer"] += 1
            elif "flattened_mc" in hit and (mc := _redraw(lambda: _flattened_mc(scene, rng), taken)) is not None:
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
            item = QAItem(question=question, answer=answer, record_id=record_id, turn=len(items),
                          source=source, image_ref=ref, qtype=qt)
            items.append(item)
            if "duplicate_qa" in hit:
                items.append(QAItem(question=question, answer=answer, record_id=record_id, turn=len(items),
                                    source=source, image_ref=ref, qtype=qt))
                injected["duplicate_qa"] += 1
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


def _parse_noise(pairs: Sequence[str]) -> dict[str, float]:
    noise = {}
    for pair in pairs:
        kind, sep, p = pair.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"--noise expects KIND=P, got {pair!r}")
        noise[kind] = float(p)
    return noise


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rs.sources.synthetic", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--num-images", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--style", choices=STYLES, default="mixed")
    parser.add_argument("--questions-per-image", type=int, default=4)
    parser.add_argument("--image-size", type=int, default=160)
    parser.add_argument("--name", default="synthetic-clevr")
    parser.add_argument("--noise", action="append", default=[], metavar="KIND=P",
                        help=f"inject noise (repeatable); kinds: {', '.join(NOISE_KINDS)}")
    args = parser.parse_args(argv)
    try:
        source = SyntheticSource(
            seed=args.seed, num_images=args.num_images, questions_per_image=args.questions_per_image,
            style=args.style, image_size=args.image_size, noise=_parse_noise(args.noise), name=args.name,
        )
    except (ValueError, argparse.ArgumentTypeError) as err:
        parser.error(str(err))
    start = time.perf_counter()
    out = write_image_folder(source, args.out_dir)
    n_qa = sum(1 for _ in open(out / "metadata.jsonl", encoding="utf-8"))
    injected = ", ".join(f"{k}={v}" for k, v in sorted(source.noise_counts.items())) or "none"
    print(f"wrote {args.num_images} images, {n_qa} QA to {out} in {time.perf_counter() - start:.2f}s (noise: {injected})")


if __name__ == "__main__":
    main()
