"""An evaluation set's index: built once from a stream of its records, cached under its versions, queried per item.

Building reads the set's source one record at a time (decoding each image once, for its pixel digest and
perceptual hashes); what is kept is small per item (a digest, two 64-bit hashes, the normalised question and its
MinHash signature) and a 96-pixel thumbnail on disk for the cards. The index is cached in
`$RS_CACHE_DIR/decontamination/<set>-<fingerprint>/`, the fingerprint being the set's source configuration and
the methods' versions: a second build, or another family checked against the same set, loads it.

The cache is read back, so it holds data only, never code: JSON, parquet tables, `.npy` arrays (read with
`allow_pickle=False`) and the thumbnails' SQLite file, sealed with checksums like every store of a build
(`rs.util.checksums`). A folder that does not match them (a flipped bit, a truncated thumbnail database, a file
planted beside them) is said in one line and built again, as a damaged store is.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import socket
import sqlite3
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from glob import escape as glob_escape
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from rs.errors import RsError, UsageError
from rs.pipeline.clean.causes import LIKELY_CAUSES
from rs.registry import SOURCES
from rs.sources.base import RefusedImage
from rs.util.checksums import damage, seal

from .bands import BandIndex
from .hamming import HammingIndex
from .hashing import exact_key, image_hashes, shingles
from .methods import INDEX_VERSION, LSH_THRESHOLD, NGRAM, NUM_PERM, PHASH_DISTANCE, versions

logger = logging.getLogger(__name__)

THUMBNAIL = 96

META = "index.json"
THUMBS = "thumbs.sqlite"
TABLES = ("records", "pixels", "questions", "exact")
ARRAYS = ("codes", "code_images", "signatures", "signed")


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
    signatures: np.ndarray = field(default_factory=lambda: np.zeros((0, NUM_PERM), dtype=np.uint32))
    """The MinHash signature of each question that has n-grams (`signed[i]` is the question of row i)."""
    scheme: str = ""
    """datasketch's name for how the signatures were hashed: a query's must be the same (`read_index` checks)."""
    signed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    undecodable: int = 0
    """Images missing or that did not decode: their record's questions are indexed, the image is not."""
    unusable: Counter[str] = field(default_factory=Counter)
    """Records without an image that opens, by why (cleaning's reasons: `missing_image`, `undecodable_image`, ...)."""
    thumbnails: Path | None = None
    _hamming: HammingIndex | None = None
    _bands: BandIndex | None = None

    @property
    def images(self) -> int:
        """Records indexed (an image each, or its questions alone where it has none that decodes)."""
        return len(self.record_ids)

    def hamming(self) -> HammingIndex:
        if self._hamming is None:
            self._hamming = HammingIndex(self.codes, self.code_images, PHASH_DISTANCE)
        return self._hamming

    def near_questions(self, grams: set[str]) -> set[int]:
        """The questions whose MinHash shares a band with that of `grams`: candidates for `near_question`."""
        if self._bands is None:
            self._bands = BandIndex(self.signatures, self.signed, threshold=LSH_THRESHOLD, num_perm=NUM_PERM)
        return self._bands.query(minhash(grams).hashvalues)

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
    index = EvaluationIndex(name, fingerprint, thumbnails=folder / THUMBS)
    codes: list[int] = []
    owners: list[int] = []
    signatures: list[np.ndarray] = []
    signed: list[int] = []
    schemes: set[str] = set()
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
                signature = minhash(grams)
                signatures.append(signature.hashvalues)
                schemes.add(signature.scheme)
                signed.append(q)
    db.commit()
    db.close()
    index.codes = np.array(codes, dtype=np.uint64)
    index.code_images = np.array(owners, dtype=np.int64)
    index.signatures = np.array(signatures).reshape(-1, NUM_PERM) if signatures else index.signatures
    index.signed = np.array(signed, dtype=np.int64)
    index.scheme = schemes.pop() if schemes else ""
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


class IndexDamaged(Exception):
    """A cached index whose files do not hold what `save_index` wrote: it is built again."""


def save_index(index: EvaluationIndex, folder: Path) -> None:
    """Write `index` into `folder` (where its thumbnails already are) as data files, then seal the folder."""
    meta = {
        "layout": INDEX_VERSION,
        "name": index.name,
        "fingerprint": index.fingerprint,
        "undecodable": index.undecodable,
        "unusable": dict(index.unusable),
        "minhash_scheme": index.scheme,
    }
    (folder / META).write_text(json.dumps(meta, sort_keys=True), encoding="utf-8")
    tables = {
        "records": {"record_id": pa.array(index.record_ids, pa.string()), "question_start": index.question_start},
        "pixels": {"pixels": pa.array(list(index.pixels), pa.string()), "image": list(index.pixels.values())},
        "questions": {"grams": pa.array(index.questions, pa.string())},
        "exact": {"key": pa.array(list(index.exact), pa.string()), "question": list(index.exact.values())},
    }
    for name, columns in tables.items():
        pq.write_table(
            pa.table({k: pa.array(v, pa.int64()) if isinstance(v, list) else v for k, v in columns.items()}),
            folder / f"{name}.parquet",
        )
    for name in ARRAYS:
        np.save(folder / f"{name}.npy", getattr(index, name), allow_pickle=False)
    seal(folder)


def read_index(folder: Path, name: str, fingerprint: str) -> EvaluationIndex:
    """The index `save_index` wrote in `folder`, checked against its checksums and for consistency; `IndexDamaged`
    says why it cannot be used."""
    problem = damage(folder)
    if problem is not None:
        raise IndexDamaged(problem)
    try:
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
        tables = {t: pq.read_table(folder / f"{t}.parquet").to_pydict() for t in TABLES}
        arrays = {a: np.load(folder / f"{a}.npy", allow_pickle=False) for a in ARRAYS}
    except (OSError, ValueError, UnicodeDecodeError, pa.ArrowException) as err:
        raise IndexDamaged(f"it cannot be read ({err.__class__.__name__}: {err})") from None
    if not isinstance(meta, dict) or meta.get("layout") != INDEX_VERSION:
        raise IndexDamaged(
            f"it was written in another layout ({meta.get('layout') if isinstance(meta, dict) else meta!r})"
        )
    if meta.get("name") != name or meta.get("fingerprint") != fingerprint:
        raise IndexDamaged("it is another set's index")
    index = EvaluationIndex(
        name,
        fingerprint,
        record_ids=tables["records"]["record_id"],
        question_start=tables["records"]["question_start"],
        pixels=dict(zip(tables["pixels"]["pixels"], tables["pixels"]["image"])),
        questions=tables["questions"]["grams"],
        exact=dict(zip(tables["exact"]["key"], tables["exact"]["question"])),
        undecodable=int(meta.get("undecodable", 0)),
        unusable=Counter({str(k): int(v) for k, v in dict(meta.get("unusable") or {}).items()}),
        thumbnails=folder / THUMBS,
        scheme=str(meta.get("minhash_scheme", "")),
        **arrays,
    )
    if inconsistent := _inconsistency(index):
        raise IndexDamaged(inconsistent)
    if index.signed.size and index.scheme != minhash(set()).scheme:
        raise IndexDamaged(
            f"its MinHash signatures were hashed as {index.scheme!r}, this datasketch's as {minhash(set()).scheme!r}"
        )
    return index


def _inconsistency(index: EvaluationIndex) -> str | None:
    """What does not add up in a read index (every number in range), else None: a query never indexes past an array."""
    images, questions = len(index.record_ids), len(index.questions)
    starts = np.asarray(index.question_start, dtype=np.int64)
    checks = {
        "its records and their question offsets differ in number": len(starts) != images,
        "its question offsets are out of order": bool(len(starts))
        and (starts[0] != 0 or bool(np.any(np.diff(starts) < 0)) or starts[-1] > questions),
        "its hashes and their images differ in number": index.codes.shape != index.code_images.shape
        or index.codes.dtype != np.uint64,
        "a hash names an image it does not hold": bool(index.code_images.size)
        and (int(index.code_images.min()) < 0 or int(index.code_images.max()) >= images),
        "a pixel digest names an image it does not hold": any(not 0 <= i < images for i in index.pixels.values()),
        "a question key names a question it does not hold": any(not 0 <= q < questions for q in index.exact.values()),
        "its MinHash signatures do not match their questions": index.signatures.ndim != 2
        or index.signatures.shape != (len(index.signed), NUM_PERM)
        or (bool(index.signed.size) and (int(index.signed.min()) < 0 or int(index.signed.max()) >= questions)),
    }
    return next((problem for problem, found in checks.items() if found), None)


def load_or_build(name: str, set_config: Any, *, base_dir: Path, root: Path | None = None) -> EvaluationIndex:
    """The set's index from the cache, or built from its source and cached (written whole, then renamed); a cached
    index that does not match its checksums is said in one line and built again."""
    fingerprint = set_fingerprint(set_config.source)
    folder = (root or cache_root()) / f"{name}-{fingerprint[:16]}"
    label = SOURCES.get(set_config.source.kind).label(set_config.source)
    remove_stale_builds(folder)
    damaged = None
    if folder.exists():
        try:
            index = read_index(folder, name, fingerprint)
            check_images(name, label, index)
            return index
        except IndexDamaged as err:
            damaged = str(err)
            logger.warning(
                "evaluation index %s of %s cannot be used as it is: %s; built again from %s",
                folder,
                name,
                damaged,
                label,
            )
    source = SOURCES.get(set_config.source.kind).from_config(set_config.source, base_dir=base_dir)
    tmp = folder.with_name(f"{folder.name}{_BUILDING}{socket.gethostname()}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        try:
            index = build_index(name, iter(source), fingerprint, tmp)
        except (RsError, OSError, ValueError, ConnectionError) as err:
            cached = f" (its cached index {folder} is damaged: {damaged})" if damaged else ""
            raise EvaluationSetUnreadable(
                f"cannot read the evaluation set {name} ({label}) to index it{cached}: {getattr(err, 'message', err)}",
                hint="a family checked against it (decontamination.against) needs it once: run where the Hub is reachable, "
                "or put the dataset in the local Hugging Face cache; its index is cached after",
            ) from err
        check_images(name, label, index)  # before it is cached: a set fixed in the YAML has another fingerprint anyway
        save_index(index, tmp)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    index.thumbnails = folder / THUMBS
    logger.info(
        "evaluation set %s: indexed %d records: %d images, %d questions",
        name,
        index.images,
        int(np.unique(index.code_images).size),
        len(index.questions),
    )
    return index


_BUILDING = ".tmp-"
"""An index being built is `<folder>.tmp-<host>-<pid>`: renamed into place when whole."""


def remove_stale_builds(folder: Path) -> None:
    """Remove the half-built indexes of `folder` that a killed process of this host left (its pid no longer runs);
    another host's, on a shared cache, are left to it."""
    host = socket.gethostname()
    for tmp in folder.parent.glob(f"{glob_escape(folder.name)}{_BUILDING}*"):
        owner, _, pid = tmp.name[len(folder.name) + len(_BUILDING) :].rpartition("-")
        if owner in (host, "") and pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
