"""What decontamination compares: digests and perceptual hashes of decoded pixels, and normalised question words.

Computed from the decoded image cleaning already holds (`rs.pipeline.clean.decode`), so no image is decoded twice.
The perceptual hash is pHash (`imagehash.phash`, 64 bits) of the image in grey, auto-contrasted (2% cut at each end)
and its histogram equalised (a brightened copy then hashes as the original), taken of the whole image and of two centre crops (2.5% and 5% off
each side): a copy cropped by a few percent lies within a few bits of one of the other's three hashes (measured:
`bench/decontaminate.py`).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

from PIL import Image, ImageOps

CROPS = (0.0, 0.025, 0.05)
"""Shares cut from each side before hashing: the whole image, and two centre crops."""
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class ImageHashes:
    """The two image keys: `pixels` (SHA-256 of the decoded RGB pixels and size), `phash` (one 64-bit hash per crop)."""

    pixels: str
    phash: tuple[int, ...]


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


def image_hashes(im: Image.Image) -> ImageHashes:
    """Both keys of a decoded image."""
    return ImageHashes(pixel_digest(im), perceptual_hashes(im))


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
