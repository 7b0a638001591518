"""What decontamination compares: digests and perceptual hashes of decoded pixels, and normalised question words.

Computed from the decoded image cleaning already holds (`rs.pipeline.clean.decode`), so no image is decoded twice.
The perceptual hash is pHash (`imagehash.phash`, 64 bits) of the image in grey, auto-contrasted (2% cut at each end)
and its histogram equalised (a brightened copy then hashes as the original), taken of the whole image and of two centre crops (2.5% and 5% off
each side): a copy cropped by a few percent lies within a few bits of one of the other's three hashes (measured:
`bench/decontaminate.py`).

pHash sees structure only: a red circle and a purple one on the same ground hash alike. A near-duplicate is therefore
also required to have the same colours where it has its structure: `colour_signature` keeps the chroma (CIELAB a*, b*,
without the lightness, which a brightened copy changes) of an 8x8 grid of the image, and `colour_distance` compares two
grids cell by cell, each cell with the best of its neighbours in the other (a crop of a few percent moves a cell's
content by less than one cell).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

CROPS = (0.0, 0.025, 0.05)
"""Shares cut from each side before hashing: the whole image, and two centre crops."""
_WORD = re.compile(r"\w+")
COLOUR_FROM = 96
"""The signature is taken of the image reduced to fit this square, as the index's thumbnail is (`index.THUMBNAIL`,
`index.thumbnail_png`): an evaluation image's signature taken of its stored thumbnail is the image's own, bit for bit."""
COLOUR_GRID = 8
"""Cells per side of the colour signature."""
COLOUR_BYTES = len(CROPS) * COLOUR_GRID * COLOUR_GRID * 2
"""A signature's size: a* and b* of each cell of each crop (CROPS, as the pHashes), one signed byte each."""


@dataclass(frozen=True)
class ImageHashes:
    """The image keys: `pixels` (SHA-256 of the decoded RGB pixels and size), `phash` (one 64-bit hash per crop),
    `colour` (`colour_signature`, COLOUR_BYTES bytes)."""

    pixels: str
    phash: tuple[int, ...]
    colour: bytes = b""


def pixel_digest(im: Image.Image) -> str:
    """The same picture whatever its file: PNG re-saved, metadata stripped, another container all give one digest."""
    rgb = im if im.mode == "RGB" else im.convert("RGB")
    digest = hashlib.sha256(f"{rgb.width}x{rgb.height}:".encode())
    digest.update(rgb.tobytes())
    return digest.hexdigest()


def perceptual_hashes(im: Image.Image) -> tuple[int, ...]:
    """pHash of the image and of its centre crops, after histogram equalisation (brightening moves no bits but clipped ones)."""
    import imagehash

    grey = ImageOps.equalize(ImageOps.autocontrast(im.convert("L"), cutoff=2))
    out = []
    for share in CROPS:
        dx, dy = round(grey.width * share), round(grey.height * share)
        part = grey.crop((dx, dy, grey.width - dx, grey.height - dy)) if share else grey
        out.append(int(str(imagehash.phash(part, hash_size=8)), 16))
    return tuple(out)


def _lab_chroma(rgb: np.ndarray) -> np.ndarray:
    """CIELAB a* and b* (D65) of sRGB values in 0..1, shape (..., 3) -> (..., 2)."""
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = linear @ np.array(
        [[0.4124564, 0.2126729, 0.0193339], [0.3575761, 0.7151522, 0.1191920], [0.1804375, 0.0721750, 0.9503041]]
    )
    xyz = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    # a* and b* over L* + 16 (116 f(Y)): a brighter or darker copy scales the three alike, so their ratio stays
    scale = 60 / (116 * f[..., 1])
    return np.stack([500 * (f[..., 0] - f[..., 1]) * scale, 200 * (f[..., 1] - f[..., 2]) * scale], axis=-1)


def colour_signature(im: Image.Image) -> bytes:
    """The chroma of the image and of its centre crops (CROPS) on a COLOUR_GRID x COLOUR_GRID grid: a* and b* of each
    cell's mean colour, as int8.

    Taken of the image reduced as the index's thumbnail is, so that the evaluation side can be read back from it. The
    crops align a copy cropped by a few percent with the original, cell for cell, as they do for the pHashes."""
    small = im.convert("RGB")
    small.thumbnail((COLOUR_FROM, COLOUR_FROM))
    out = []
    for share in CROPS:
        dx, dy = round(small.width * share), round(small.height * share)
        part = small.crop((dx, dy, small.width - dx, small.height - dy)) if share else small
        cells = np.asarray(part.resize((COLOUR_GRID, COLOUR_GRID), Image.Resampling.BOX), dtype=np.float64) / 255
        out.append(np.clip(np.rint(_lab_chroma(cells)), -127, 127).astype(np.int8).tobytes())
    return b"".join(out)


def colour_distance(a: bytes, b: bytes) -> float:
    """How far apart two signatures' colours are: for the closest pair of their crops, the largest chroma difference
    (CIELAB a*b* units) of a cell of one from the closest of the 3x3 cells around it in the other, either way. A colour
    changed in one place shows as that place's difference; a re-encoding, a resize or a brightening moves every cell a
    little."""
    shape = (len(CROPS), COLOUR_GRID, COLOUR_GRID, 2)
    one, other = (np.frombuffer(x, dtype=np.int8).reshape(shape).astype(np.float64) for x in (a, b))
    return min(_grid_distance(x, y) for x in one for y in other)


def _grid_distance(*grids: np.ndarray) -> float:
    """The largest difference of a cell of either grid from the closest of the 3x3 cells around it in the other."""

    def directed(one: np.ndarray, other: np.ndarray) -> float:
        padded = np.pad(other, ((1, 1), (1, 1), (0, 0)), constant_values=np.inf)
        best = np.full((COLOUR_GRID, COLOUR_GRID), np.inf)
        for dy in range(3):
            for dx in range(3):
                near = padded[dy : dy + COLOUR_GRID, dx : dx + COLOUR_GRID]
                with np.errstate(invalid="ignore"):
                    best = np.fmin(best, np.linalg.norm(one - near, axis=-1))
        return float(best.max())

    return max(directed(grids[0], grids[1]), directed(grids[1], grids[0]))


def image_hashes(im: Image.Image) -> ImageHashes:
    """Every key of a decoded image."""
    return ImageHashes(pixel_digest(im), perceptual_hashes(im), colour_signature(im))


def words(text: str) -> list[str]:
    """A question as compared: Unicode-normalised, case-folded, punctuation and spacing gone."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def exact_key(text: str) -> str:
    """The key of a question's normalised words: the same for "How many cubes?" and "how many  cubes"."""
    return hashlib.blake2b(" ".join(words(text)).encode(), digest_size=12).hexdigest()


def shingles(text: str, n: int) -> set[str]:
    """Word n-grams of a question (the whole question when it is shorter than n words)."""
    w = words(text)
    if len(w) < n:
        return {" ".join(w)} if w else set()
    return {" ".join(w[i : i + n]) for i in range(len(w) - n + 1)}


def overlap(a: set[str], b: set[str]) -> float:
    """The overlap coefficient |a & b| / min(|a|, |b|): 1 when one question's n-grams are all in the other's
    (a copy with a sentence added before or after), below 1 when a word differs."""
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))
