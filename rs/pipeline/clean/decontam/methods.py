"""The five ways a training item is found in an evaluation set, each with its version and threshold.

A method's `version` goes into the clean stage's fingerprint (`rs.pipeline.clean.stage.CleanStage.fingerprint`) and into each
cached evaluation index's key: a changed method re-checks every item. Thresholds were chosen by measurement on
TinyCLEVR's synthetic evaluation split (`bench/decontaminate.py`, README "Decontamination"): the near-duplicate
distance catches the transformed copies (re-encoded, resized, cropped 2-5%, brightened) while the closest hard
negatives (other scenes of the same renderer) lie at 6 bits and more. pHash sees no colour, so a near-duplicate must
also have the same colours (COLOUR_DISTANCE), measured on scenes, drawn shapes and natural-like images whose colours
alone differ (`bench/decontaminate.py colour`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    """One registered method: its name (the `method` of a match), version, what it compares and its threshold."""

    name: str
    version: str
    kind: str
    """The action key it answers to (`decontamination.action`): image, item or question."""
    compares: str
    threshold: str

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"


PHASH_DISTANCE = 4
"""Most differing bits of two 64-bit pHashes (the closest pair of their whole-image and centre-crop hashes) of one image.
Measured on TinyCLEVR's scenes: every transformed copy within 4 bits, the closest other scenes of the renderer at 6."""
COLOUR_DISTANCE = 16.0
"""Largest colour distance (`hashing.colour_distance`: CIELAB a*b* over lightness, of the closest cells) of two images
`near_image` matches. Measured (`bench/decontaminate.py colour`, 60 originals of each kind): of 900 copies (re-encoded,
resized, cropped 2-5%, brightened, darkened) of scenes, drawn shapes and natural-like images, the colour check loses 2
that pHash matched (a brightened pale drawing, a cropped photograph); of 1,080 colour variants (one object or region
recoloured, hues turned 30-180 degrees, red and blue swapped) it matches 39 where pHash alone matched 668: a swap that
leaves purple, green or grey as they were, a region turned where it had hardly any colour."""
NGRAM = 3
"""Word n-grams a question is cut into for the fuzzy match (questions of CLEVR's kind are 5-20 words)."""
QUESTION_OVERLAP = 0.9
"""Least overlap coefficient of two questions' n-grams for `near_question` (a copy with a sentence added: 1.0;
one word changed in a 14-word templated question: 0.75). A templated benchmark has other questions that contain
one another ("Subtract all red cubes. How many ..." in "Subtract all red cubes. Subtract all balls. How many ..."):
measured precision on CLEVR-style questions is in the README, and the match is flagged, not dropped, by default."""
ITEM_OVERLAP = QUESTION_OVERLAP
"""Least n-gram overlap of a question with one asked of the matched evaluation image for `same_item` (measured: at 0.5
a third of the matches were other questions of the same template about the same scene)."""
LSH_THRESHOLD = 0.3
"""Jaccard threshold of the MinHash LSH that proposes candidates (checked exactly against QUESTION_OVERLAP after)."""
NUM_PERM = 64

SAME_IMAGE = Method("same_image", "1", "image", "SHA-256 of the decoded RGB pixels and size", "equal")
NEAR_IMAGE = Method(
    "near_image",
    "2",
    "image",
    "pHash (64 bits) of the auto-contrasted, equalised grey image and its 2.5% and 5% centre crops, and the colours "
    "(CIELAB chroma of an 8x8 grid)",
    f"Hamming distance <= {PHASH_DISTANCE} and colour distance <= {COLOUR_DISTANCE:g}",
)
SAME_ITEM = Method(
    "same_item",
    "1",
    "item",
    f"a near-duplicate image and a question sharing word {NGRAM}-grams with one asked of it",
    f"image as near_image; n-gram overlap >= {ITEM_OVERLAP}",
)
SAME_QUESTION = Method(
    "same_question", "1", "question", "normalised words (case, punctuation and spacing aside)", "equal"
)
NEAR_QUESTION = Method(
    "near_question",
    "1",
    "question",
    f"word {NGRAM}-grams, candidates by MinHash LSH",
    f"n-gram overlap >= {QUESTION_OVERLAP}",
)

METHODS = {m.name: m for m in (SAME_IMAGE, NEAR_IMAGE, SAME_ITEM, SAME_QUESTION, NEAR_QUESTION)}
"""Every method by name, in the order a card lists them."""

VERSION = "3"
"""The decontamination code as a whole (`rs/pipeline/clean/decontam/`): tracked by rs/pipeline/versions.lock.json like every deciding piece
(`rs.pipeline.versions`); bump it, or a method's own version, when what is matched changes."""

INDEX_VERSION = "3"
"""The layout of a cached evaluation index (`rs.pipeline.clean.decontam.index`); 2: a record without a usable image keeps
its questions; 3: data files sealed with checksums (JSON, parquet, `.npy`), no pickle."""


def versions() -> dict[str, str]:
    """Each method's version, and the index layout's: what a fingerprint holds."""
    return {**{m.name: m.version for m in METHODS.values()}, "index": INDEX_VERSION, "code": VERSION}
