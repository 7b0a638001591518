"""CLEVR-style scene graphs: the vocabulary, drawing a scene from a seed, rendering it with Pillow."""

from __future__ import annotations

import io
import random
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Mapping

from PIL import Image, ImageDraw

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


def object_box(obj: SceneObject) -> tuple[float, float, float, float]:
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
                box = object_box(obj)
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
        draw.polygon(
            [(x0 + s, gy), (x0 + s, top), (x0 + s + d, top - d), (x0 + s + d, gy - d)], fill=_shade(base, 0.65)
        )
        if metal:
            # A diagonal sheen across the front face and a glint on the top edge.
            draw.polygon(
                [(x0 + 0.1 * s, gy), (x0 + 0.35 * s, gy), (x0 + 0.75 * s, top), (x0 + 0.5 * s, top)],
                fill=_shade(base, 1.45),
            )
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
