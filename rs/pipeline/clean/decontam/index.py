"""An evaluation set's index: built once from a stream of its records, cached under its versions, queried per item.

Building reads the set's source one record at a time (decoding each image once, for its pixel digest and
perceptual hashes); what is kept is small per item (a digest, two 64-bit hashes, the normalised question and its
MinHash band keys) and a 96-pixel thumbnail on disk for the cards. The index is cached in
`$RS_CACHE_DIR/decontamination/<set>-<fingerprint>/`, the fingerprint being the set's source configuration and
the methods' versions: a second build, or another family checked against the same set, loads it.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import pickle
import shutil
import sqlite3
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from rs.errors import RsError, UsageError
from rs.pipeline.clean.causes import LIKELY_CAUSES
from rs.registry import SOURCES
from rs.sources.base import RefusedImage

from .hamming import HammingIndex
from .hashing import exact_key, image_hashes, shingles
from .methods import LSH_THRESHOLD, NGRAM, NUM_PERM, PHASH_DISTANCE, versions

logger = logging.getLogger(__name__)

THUMBNAIL = 96


def cache_root() -> Path:
    """`$RS_CACHE_DIR/decontamination`, else ~/.cache/rs/decontamination."""
    return Path(os.environ.get("RS_CACHE_DIR") or Path.home() / ".cache" / "rs") / "decontamination"


def set_fingerprint(source_config: Any) -> str:
    """What an index depends on: the set's source block and the methods' versions."""
    data = {"source": asdict(source_config), "versions": versions()}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def minhash(grams: set[str]) -> Any:
    from datasketch import MinHash

    m = MinHash(num_perm=NUM_PERM, seed=1)
    m.update_batch([g.encode() for g in grams])
    return m


@dataclass
class EvaluationIndex:
    """One evaluation set's keys; `thumbnails` is the sqlite file of its images' thumbnails."""

    name: str
    fingerprint: str
    record_ids: list[str] = field(default_factory=list)
    pixels: dict[str, int] = field(default_factory=dict)
    codes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    code_images: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    questions: list[str] = field(default_factory=list)
    """Each question's normalised n-grams joined by a newline (`shingles`), in image order."""
    question_start: list[int] = field(default_factory=list)
    """Image i's questions are questions[question_start[i]:question_start[i + 1]]."""
    exact: dict[str, int] = field(default_factory=dict)
    """Normalised question key -> its first question number."""
    lsh: Any = None
    undecodable: int = 0
    """Images missing or that did not decode: their record's questions are indexed, the image is not."""
    unusable: Counter[str] = field(default_factory=Counter)
    """Records without an image that opens, by why (cleaning's reasons: `missing_image`, `undecodable_image`, ...)."""
    thumbnails: Path | None = None
    _hamming: HammingIndex | None = None

    @property
    def images(self) -> int:
        """Records indexed (an image each, or its questions alone where it has none that decodes)."""
        return len(self.record_ids)

    def hamming(self) -> HammingIndex:
        if self._hamming is None:
            self._hamming = HammingIndex(self.codes, self.code_images, PHASH_DISTANCE)
        return self._hamming

    def grams(self, question: int) -> set[str]:
        return set(self.questions[question].split("\n")) if self.questions[question] else set()

    def image_questions(self, image: int) -> range:
        end = self.question_start[image + 1] if image + 1 < len(self.question_start) else len(self.questions)
        return range(self.question_start[image], end)

    def thumbnail(self, image: int) -> bytes | None:
        if self.thumbnails is None or not self.thumbnails.exists():
            return None
        with sqlite3.connect(self.thumbnails) as db:
            found = db.execute("SELECT png FROM thumbs WHERE image = ?", (image,)).fetchone()
        return found[0] if found else None


def thumbnail_png(im: Image.Image) -> bytes:
    small = im.convert("RGB")
    small.thumbnail((THUMBNAIL, THUMBNAIL))
    out = io.BytesIO()
    small.save(out, format="PNG")
    return out.getvalue()


def _hash(image: Any) -> tuple[Any, bytes | None]:
    """An evaluation image's hashes and thumbnail, or (None, None) when it is missing or does not decode."""
    if not isinstance(image, bytes) or not image:
        return None, None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(image)) as im:
                im.load()
                return image_hashes(im), thumbnail_png(im)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return None, None


def build_index(name: str, records: Any, fingerprint: str, folder: Path) -> EvaluationIndex:
    """Stream `records` (SourceRecords) into an index whose thumbnails go to `folder`."""
    from datasketch import MinHashLSH

    index = EvaluationIndex(
        name,
        fingerprint,
        lsh=MinHashLSH(threshold=LSH_THRESHOLD, num_perm=NUM_PERM),
        thumbnails=folder / "thumbs.sqlite",
    )
    codes: list[int] = []
    owners: list[int] = []
    db = sqlite3.connect(index.thumbnails)
    db.execute("CREATE TABLE thumbs (image INTEGER PRIMARY KEY, png BLOB NOT NULL)")
    for record in records:
        # a record is one entry: its questions are indexed even when it has no usable image (a text-only question)
        number = len(index.record_ids)
        index.record_ids.append(record.record_id)
        why = [] if record.images else ["no_image"]
        for image in record.images:
            hashes, thumb = _hash(image)
            if hashes is None:
                index.undecodable += 1
                why.append(_unusable(image))
                continue
            why = []
            index.pixels.setdefault(hashes.pixels, number)
            codes.extend(hashes.phash)
            owners.extend([number] * len(hashes.phash))
            db.execute("INSERT OR IGNORE INTO thumbs VALUES (?, ?)", (number, thumb))
        if why:  # none of its images opens
            index.unusable[why[0]] += 1
        index.question_start.append(len(index.questions))
        for item in record.qa:
            q = len(index.questions)
            grams = shingles(item.question, NGRAM)
            index.questions.append("\n".join(sorted(grams)))
            index.exact.setdefault(exact_key(item.question), q)
            if grams:
                index.lsh.insert(q, minhash(grams), check_duplication=False)
    db.commit()
    db.close()
    index.codes = np.array(codes, dtype=np.uint64)
    index.code_images = np.array(owners, dtype=np.int64)
    return index


def _unusable(image: Any) -> str:
    """Why an evaluation record's image value gave no image, in cleaning's words."""
    if isinstance(image, RefusedImage):
        return image.reason
    if image is None:
        return "no_image"
    return "empty_image" if not image else "undecodable_image"


class EvaluationSetUnreadable(RsError):
    """An evaluation set a family is checked against could not be read: nothing of the family is cleaned without it."""


class EvaluationSetEmpty(UsageError):
    """An evaluation set that gave no image to check against: its source or columns are wrong (exit 2), and decontamination
    would check the family's images against nothing while the card said they were checked."""


def check_images(name: str, label: str, index: EvaluationIndex) -> None:
    """Refuse an evaluation set of which no image opened, naming the most frequent reason and its likely cause."""
    if len(index.codes):
        return
    if not index.images:
        raise EvaluationSetEmpty(
            f"the evaluation set {name} ({label}) gave no record: decontamination would check the images "
            "against nothing",
            hint=f"check evaluation.{name}.source (its path, split or name)",
        )
    reason, count = index.unusable.most_common(1)[0]
    cause = LIKELY_CAUSES.get(reason, f"evaluation.{name}.source does not read the images its records hold")
    raise EvaluationSetEmpty(
        f"the evaluation set {name} ({label}) gave no image that opens ({index.images} of {index.images} records), most often "
        f"{reason} ({count}): decontamination would check the images against nothing",
        hint=f"likely, in evaluation.{name}: {cause}",
    )


def load_or_build(name: str, set_config: Any, *, base_dir: Path, root: Path | None = None) -> EvaluationIndex:
    """The set's index from the cache, or built from its source and cached (written whole, then renamed)."""
    fingerprint = set_fingerprint(set_config.source)
    folder = (root or cache_root()) / f"{name}-{fingerprint[:16]}"
    path = folder / "index.pkl"
    label = SOURCES.get(set_config.source.kind).label(set_config.source)
    if path.exists():
        try:
            with path.open("rb") as fh:
                index = pickle.load(fh)
            if index.fingerprint == fingerprint and (len(index.codes) or getattr(index, "unusable", None)):
                index.thumbnails = folder / "thumbs.sqlite"
                check_images(name, label, index)
                return index
            # else an index of no image, cached before the reasons were counted: read again, to say why
        # ImportError: pickled by a version of rs whose modules were laid out otherwise, an expected upgrade
        except ImportError as err:
            logger.debug("evaluation index %s was written by another version of rs (%s): building it again", path, err)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError) as err:
            logger.warning("evaluation index %s unreadable (%s): building it again", path, err)
    source = SOURCES.get(set_config.source.kind).from_config(set_config.source, base_dir=base_dir)
    tmp = folder.with_name(folder.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        try:
            index = build_index(name, iter(source), fingerprint, tmp)
        except (RsError, OSError, ValueError, ConnectionError) as err:
            raise EvaluationSetUnreadable(
                f"cannot read the evaluation set {name} ({label}) to index it: {getattr(err, 'message', err)}",
                hint="a family checked against it (decontamination.against) needs it once: run where the Hub is reachable, "
                "or put the dataset in the local Hugging Face cache; its index is cached after",
            ) from err
        check_images(name, label, index)  # before it is cached: a set fixed in the YAML has another fingerprint anyway
        index._hamming = None
        with (tmp / "index.pkl").open("wb") as fh:
            pickle.dump(index, fh, protocol=pickle.HIGHEST_PROTOCOL)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    index.thumbnails = folder / "thumbs.sqlite"
    logger.info(
        "evaluation set %s: indexed %d records: %d images, %d questions",
        name,
        index.images,
        int(np.unique(index.code_images).size),
        len(index.questions),
    )
    return index
