"""Decontamination, measured: precision and recall per method on a synthetic set with known overlaps, and scale.

    python bench/decontaminate.py quality [--train 400 --eval 300]
    python bench/decontaminate.py scale [--train 1000000 --eval 100000]
    python bench/decontaminate.py colour [--images 60]

`quality`: a noise-free synthetic training pool and a `synthetic_eval` split of it (rs.sources.synthetic.evaluation:
some scenes recur re-saved, re-encoded, resized, cropped 2-5% or brightened, some questions recur verbatim or
reworded; the other scenes are new ones of the same renderer, the hard negatives). Every training image and question
is asked through `rs.pipeline.clean.decontam.Decontaminator`, as cleaning asks it, and each answer is scored against the truth:

- images: a (training image, evaluation image) pair is a true overlap when the evaluation image is that training
  scene transformed; recall per transform;
- questions (`same_question`, `near_question`): a training question is a true overlap when an evaluation question was copied from it
  (verbatim or reworded) or has the same normalised words; recall per rewording;
- items (`same_item`): a training QA is a true overlap when its scene recurs and its question was copied to it (or
  the copy is asked the same normalised words).

`colour`: `near_image` on images whose colours alone differ, of three kinds: the renderer's scenes, drawn shapes on a
plain ground (a red circle, a purple one) and natural-like images (windows of a photograph, matplotlib's
grace_hopper.jpg, and 1/f colour noise, which has a natural image's spectrum). Each original is an evaluation image; the
training side asks its copies (re-encoded, resized, cropped, brightened, darkened: true near-duplicates) and its colour
variants (one object recoloured, hues turned 30-180 degrees, red and blue swapped: other images). Precision and recall
with the colour check and, for comparison, with pHash alone.

`scale`: the near-duplicate index alone, on synthetic 64-bit hashes: `--eval` evaluation images (three hashes each, as
the index keeps) and `--train` training images (three hashes each, as cleaning asks) searched at the measured distance,
with 1% of the training images planted within it of an evaluation image; time and peak RSS. Plus the per-image cost of
the hashes themselves on rendered scenes.
"""

from __future__ import annotations

import argparse
import io
import resource
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def quality(n_train: int, n_eval: int) -> None:
    from PIL import Image

    from rs.families.schema import DecontaminationActions, DecontaminationConfig, EvaluationSetConfig
    from rs.pipeline.clean.decontam import Decontaminator
    from rs.pipeline.clean.decontam.hashing import exact_key, image_hashes
    from rs.sources.synthetic.evaluation import SyntheticEvaluationConfig, SyntheticEvaluationSource

    source_config = SyntheticEvaluationConfig(
        kind="synthetic_eval",
        seed=7,
        num_images=n_eval,
        train_seed=0,
        train_images=n_train,
        image_overlap=0.4,
        question_overlap=0.5,
    )
    evaluation = SyntheticEvaluationSource(source_config)
    config = DecontaminationConfig(against=["bench"], action=DecontaminationActions("flag", "flag", "flag"))
    config.sets = {"bench": EvaluationSetConfig(source=source_config)}
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        d = Decontaminator(config, base_dir=ROOT, cache=Path(cache))
        built = time.perf_counter() - start

        # the truth
        copies: dict[int, list[tuple[int, str]]] = defaultdict(list)  # train image -> (eval image, transform)
        copied_q: dict[tuple[int, int], list[str]] = defaultdict(list)  # (train record, turn) -> how it was copied
        item_truth: set[tuple[int, int]] = set()
        eval_keys: set[str] = set()
        for i in range(n_eval):
            truth, record = evaluation.truth(i), evaluation.record(i)
            eval_keys.update(exact_key(item.question) for item in record.qa)
            if truth.train_index is not None:
                copies[truth.train_index].append((i, truth.transform or ""))
            donor = (
                truth.train_index
            )  # a new scene's copies come from a random record: found through the question text
            for turn, how in truth.copied_questions:
                if donor is not None:
                    copied_q[(donor, turn)].append(how)
                    item_truth.add((donor, turn))
        # a new scene's copied questions: recover their donor by replaying the draw
        for i in range(n_eval):
            truth = evaluation.truth(i)
            if truth.train_index is None and truth.copied_questions:
                rng, _ = evaluation._draw(i)
                donor = rng.randrange(n_train)
                for turn, how in truth.copied_questions:
                    copied_q[(donor, turn)].append(how)

        pairs = Counter()
        found_transform, total_transform = Counter(), Counter()
        q_counts, q_recall, q_total = Counter(), Counter(), Counter()
        item_counts = Counter()
        by_method = Counter()
        start = time.perf_counter()
        for j in range(n_train):
            record = evaluation.train.record(j)
            with Image.open(io.BytesIO(record.images[0])) as im:
                im.load()
                hashes = image_hashes(im)
            matches = d.image_matches(hashes)
            truth_eval = {i: how for i, how in copies.get(j, [])}
            for m in matches:
                correct = m.eval_image in truth_eval
                pairs[(m.method, correct)] += 1
            found = {m.eval_image for m in matches}
            for i, how in truth_eval.items():
                total_transform[how] += 1
                found_transform[how] += i in found
            copy_keys = {exact_key(q.question) for i in truth_eval for q in evaluation.record(i).qa}
            for item in record.qa:
                qm = d.question_matches(item.question, matches)
                alone = d.question_matches(item.question, [])  # same_question on its own, whatever the image
                positive_q = (j, item.turn) in copied_q or exact_key(item.question) in eval_keys
                predicted_q = bool(alone)
                q_counts[(predicted_q, positive_q)] += 1
                for m in alone:
                    by_method[(m.method, positive_q)] += 1
                for how in copied_q.get((j, item.turn), []):
                    q_total[how] += 1
                    q_recall[how] += predicted_q
                positive_item = (j, item.turn) in item_truth or exact_key(item.question) in copy_keys
                predicted_item = any(m.method == "same_item" for m in qm)
                item_counts[(predicted_item, positive_item)] += 1
        searched = time.perf_counter() - start

    print(
        f"# decontamination quality: {n_train} training images x {n_eval} evaluation images "
        f"(index built in {built:.1f}s, training side checked in {searched:.1f}s)"
    )
    print("\n| method | predicted pairs | precision | recall |")
    print("|---|---|---|---|")
    true_pairs = sum(total_transform.values())
    for method in ("same_image", "near_image"):
        tp, fp = pairs[(method, True)], pairs[(method, False)]
        print(f"| {method} | {tp + fp} | {tp / max(1, tp + fp):.4f} | (with the other image method) |")
    tp_all = pairs[("same_image", True)] + pairs[("near_image", True)]
    fp_all = pairs[("same_image", False)] + pairs[("near_image", False)]
    print(
        f"| image (both) | {tp_all + fp_all} | {tp_all / max(1, tp_all + fp_all):.4f} | {tp_all / max(1, true_pairs):.4f} |"
    )
    for method in ("same_question", "near_question"):
        tp, fp = by_method[(method, True)], by_method[(method, False)]
        print(f"| {method} | {tp + fp} | {tp / max(1, tp + fp):.4f} | (with the other question method) |")
    for name, counts in (("question (both)", q_counts), ("same_item", item_counts)):
        tp, fp, fn = counts[(True, True)], counts[(True, False)], counts[(False, True)]
        print(f"| {name} | {tp + fp} | {tp / max(1, tp + fp):.4f} | {tp / max(1, tp + fn):.4f} |")
    print("\n| image transformation | copies | recall |")
    print("|---|---|---|")
    for how in sorted(total_transform):
        print(f"| {how} | {total_transform[how]} | {found_transform[how] / total_transform[how]:.4f} |")
    print("\n| question copy | copies | recall (same_question or near_question) |")
    print("|---|---|---|")
    for how in sorted(q_total):
        print(f"| {how} | {q_total[how]} | {q_recall[how] / q_total[how]:.4f} |")


COPIES = ("jpeg", "resize", "crop", "brighten", "darken")
"""What a copy of an image may have undergone and still be the same image."""
COLOUR_VARIANTS = ("recolour", "hue30", "hue60", "hue120", "hue180", "swap")
"""What makes another image of the same structure: its colours alone changed."""


def _colour_cases(kind: str, n: int) -> list[tuple[Any, dict[str, Any]]]:
    """`n` originals of `kind` (scenes, shapes, natural), each with its copies and colour variants by name."""
    import dataclasses
    import random

    import numpy as np
    from PIL import Image, ImageDraw, ImageEnhance

    from rs.sources.synthetic.scenes import COLORS, generate_scene, render_scene

    def decoded(data: bytes) -> Image.Image:
        with Image.open(io.BytesIO(data)) as im:
            return im.convert("RGB")

    def hue(im: Image.Image, degrees: int) -> Image.Image:
        hsv = np.asarray(im.convert("HSV")).copy()
        hsv[..., 0] = (hsv[..., 0].astype(int) + round(degrees / 360 * 256)) % 256
        return Image.fromarray(hsv, "HSV").convert("RGB")

    def copies(im: Image.Image, rng: random.Random) -> dict[str, Image.Image]:
        out = io.BytesIO()
        im.save(out, format="JPEG", quality=rng.randint(60, 90))
        scale = rng.choice((0.5, 0.75, 1.25, 1.6))
        share = rng.uniform(0.02, 0.05)
        dx, dy = round(im.width * share), round(im.height * share)
        return {
            "jpeg": decoded(out.getvalue()),
            "resize": im.resize((round(im.width * scale), round(im.height * scale)), Image.Resampling.BICUBIC),
            "crop": im.crop((dx, dy, im.width - dx, im.height - dy)),
            "brighten": ImageEnhance.Brightness(im).enhance(rng.uniform(1.1, 1.3)),
            "darken": ImageEnhance.Brightness(im).enhance(rng.uniform(0.75, 0.9)),
        }

    def variants(im: Image.Image, recoloured: Image.Image) -> dict[str, Image.Image]:
        r, g, b = im.split()
        turned = {f"hue{d}": hue(im, d) for d in (30, 60, 120, 180)}
        return {"recolour": recoloured, **turned, "swap": Image.merge("RGB", (b, g, r))}

    palette = [(220, 30, 30), (128, 0, 128), (30, 30, 220), (30, 160, 30), (230, 200, 20), (20, 190, 200)]
    photo = None
    if kind == "natural":
        import matplotlib

        photo = Image.open(Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg").convert("RGB")
    cases = []
    for i in range(n):
        rng = random.Random(f"{kind}:{i}")
        if kind == "scenes":
            scene = generate_scene(rng)
            im = decoded(render_scene(scene))
            other = dataclasses.replace(scene, objects=[dataclasses.replace(o) for o in scene.objects])
            front = max(other.objects, key=lambda o: o.y)  # the nearest object, drawn largest
            front.color = rng.choice([c for c in COLORS if c not in (front.color, "gray")])
            recoloured = decoded(render_scene(other))
        elif kind == "shapes":
            ground = tuple(rng.randint(170, 255) for _ in range(3))
            first, second = rng.sample(palette, 2)
            x, y, r = rng.randint(30, 98), rng.randint(30, 98), rng.randint(12, 30)
            shape = rng.choice(("circle", "square", "triangle"))

            def draw(colour: tuple[int, int, int]) -> Image.Image:
                im = Image.new("RGB", (128, 128), ground)
                pen = ImageDraw.Draw(im)
                if shape == "circle":
                    pen.ellipse((x - r, y - r, x + r, y + r), fill=colour)
                elif shape == "square":
                    pen.rectangle((x - r, y - r, x + r, y + r), fill=colour)
                else:
                    pen.polygon([(x, y - r), (x - r, y + r), (x + r, y + r)], fill=colour)
                return im

            im, recoloured = draw(first), draw(second)
        else:
            if i % 2 == 0 and photo is not None:  # a window of the photograph
                w = rng.randint(96, 220)
                x, y = rng.randint(0, photo.width - w), rng.randint(0, photo.height - w)
                im = photo.crop((x, y, x + w, y + w)).resize((160, 160), Image.Resampling.BICUBIC)
            else:  # 1/f colour noise: a natural image's power spectrum
                freq = np.fft.fftfreq(160)[:, None] ** 2 + np.fft.fftfreq(160)[None, :] ** 2
                freq[0, 0] = 1
                noise = np.random.default_rng(i)
                layers = []
                for _ in range(3):
                    z = np.fft.ifft2(np.fft.fft2(noise.standard_normal((160, 160))) / freq).real
                    layers.append((z - z.min()) / np.ptp(z) * 255)
                im = Image.fromarray(np.stack(layers, -1).astype(np.uint8), "RGB")
            mask = Image.new("L", im.size, 0)  # a region of it recoloured: its hue turned a third of the circle
            cx, cy, r = rng.randint(40, 120), rng.randint(40, 120), rng.randint(24, 40)
            ImageDraw.Draw(mask).ellipse((cx - r, cy - r, cx + r, cy + r), fill=255)
            recoloured = Image.composite(hue(im, 120), im, mask)
        cases.append((im, {**copies(im, rng), **variants(im, recoloured)}))
    return cases


def colour(n: int) -> dict[str, dict[str, float]]:
    """`near_image` on images whose colours alone differ: printed, and returned by kind (and `all`) for the tests."""
    import math

    from PIL import Image

    from rs.families.schema import DecontaminationConfig
    from rs.pipeline.clean.decontam import Decontaminator
    from rs.pipeline.clean.decontam.hashing import image_hashes
    from rs.pipeline.clean.decontam.index import build_index
    from rs.pipeline.clean.decontam.methods import COLOUR_DISTANCE, PHASH_DISTANCE
    from rs.sources.base import SourceRecord

    def png(im: Image.Image) -> bytes:
        out = io.BytesIO()
        im.save(out, format="PNG")
        return out.getvalue()

    figures: dict[str, dict[str, float]] = {}
    print(
        f"# near_image on colour-only differences: {n} originals of each kind, pHash distance <= {PHASH_DISTANCE}, "
        f"colour distance <= {COLOUR_DISTANCE:g}"
    )
    print("\n| images | check | matched copies (recall) | matched colour variants | precision | per variant matched |")
    print("|---|---|---|---|---|---|")
    totals: dict[str, Counter] = defaultdict(Counter)
    for kind in ("scenes", "shapes", "natural"):
        cases = _colour_cases(kind, n)
        with tempfile.TemporaryDirectory() as folder:
            records = (SourceRecord(f"{kind}-{i}", [png(im)], []) for i, (im, _) in enumerate(cases))
            index = build_index("bench", records, "bench", Path(folder))
            d = Decontaminator(DecontaminationConfig(against=[]), base_dir=ROOT)
            d.indexes, d.stats = {"bench": index}, {"bench": d.stats.get("bench")}
            for check, limit in (("pHash + colour", COLOUR_DISTANCE), ("pHash alone", math.inf)):
                d.colour_distance = limit
                matched, asked, wrong = Counter(), Counter(), 0
                for i, (_, derived) in enumerate(cases):
                    for name, im in derived.items():
                        found = {m.eval_image for m in d.image_matches(image_hashes(im)) if m.method == "near_image"}
                        asked[name] += 1
                        matched[name] += i in found
                        wrong += len(found - {i})  # another original matched: a false match whatever the variant
                copies_found = sum(matched[c] for c in COPIES)
                variants_found = sum(matched[v] for v in COLOUR_VARIANTS)
                copies_asked = sum(asked[c] for c in COPIES)
                variants_asked = sum(asked[v] for v in COLOUR_VARIANTS)
                precision = copies_found / max(1, copies_found + variants_found + wrong)
                per = ", ".join(f"{name} {matched[name]}/{asked[name]}" for name in (*COPIES, *COLOUR_VARIANTS))
                print(
                    f"| {kind} | {check} | {copies_found}/{copies_asked} ({copies_found / copies_asked:.3f}) | "
                    f"{variants_found}/{variants_asked} | {precision:.3f} | {per} |"
                )
                for key, value in (
                    ("copies", copies_found),
                    ("copies_asked", copies_asked),
                    ("variants", variants_found),
                    ("variants_asked", variants_asked),
                    ("wrong", wrong),
                ):
                    totals[check][key] += value
                if limit == COLOUR_DISTANCE:
                    figures[kind] = {
                        "recall": copies_found / copies_asked,
                        "precision": precision,
                        "variants_matched": variants_found / variants_asked,
                    }
    for check, t in totals.items():
        precision = t["copies"] / max(1, t["copies"] + t["variants"] + t["wrong"])
        print(
            f"| all | {check} | {t['copies']}/{t['copies_asked']} ({t['copies'] / t['copies_asked']:.3f}) | "
            f"{t['variants']}/{t['variants_asked']} | {precision:.3f} | |"
        )
        if check == "pHash + colour":
            figures["all"] = {
                "recall": t["copies"] / t["copies_asked"],
                "precision": precision,
                "variants_matched": t["variants"] / t["variants_asked"],
            }
    return figures


def scale(n_train: int, n_eval: int, batch: int) -> None:
    import numpy as np

    from rs.pipeline.clean.decontam.hamming import HammingIndex
    from rs.pipeline.clean.decontam.hashing import CROPS
    from rs.pipeline.clean.decontam.methods import PHASH_DISTANCE

    per = len(CROPS)  # hashes per image, on both sides, as the index keeps them and cleaning asks
    rng = np.random.default_rng(0)

    def random_codes(n: int) -> np.ndarray:
        return rng.integers(0, 2**32, size=n, dtype=np.uint64) << np.uint64(32) | rng.integers(
            0, 2**32, size=n, dtype=np.uint64
        )

    before = _rss_mb()
    start = time.perf_counter()
    codes = random_codes(per * n_eval)
    index = HammingIndex(codes, np.repeat(np.arange(n_eval), per), PHASH_DISTANCE)
    built = time.perf_counter() - start
    planted = found = matched_images = 0
    start = time.perf_counter()
    for first in range(0, n_train, batch):
        size = min(batch, n_train - first)
        queries = random_codes(per * size)
        plant = np.flatnonzero(rng.random(size) < 0.01)  # 1% of the images: one hash near an evaluation image's
        targets = rng.integers(0, len(codes), size=len(plant))
        for image, target in zip(plant, targets):
            bits = rng.choice(64, size=rng.integers(0, PHASH_DISTANCE + 1), replace=False)
            queries[per * image] = codes[target] ^ np.uint64(sum(1 << int(b) for b in bits))
        q, ids, _ = index.search(queries)
        hit = set(zip((q // per).tolist(), ids.tolist()))
        matched_images += len({image for image, _ in hit})
        planted += len(plant)
        found += sum((int(image), int(target) // per) in hit for image, target in zip(plant, targets))
    searched = time.perf_counter() - start
    print(
        f"# near-duplicate index at scale: {n_train:,} training images vs {n_eval:,} evaluation images "
        f"({per} random 64-bit hashes per image on each side), distance <= {PHASH_DISTANCE}, batches of {batch:,} images"
    )
    print(
        f"index built in {built:.2f}s; searched in {searched:.1f}s ({n_train / searched:,.0f} images/s); "
        f"{matched_images:,} training images matched; planted near-duplicates found {found:,}/{planted:,}; "
        f"peak RSS {_rss_mb():.0f} MB ({before:.0f} MB before the index)"
    )

    questions(n_eval, n_eval)

    from PIL import Image

    from rs.pipeline.clean.decontam.hashing import image_hashes
    from rs.sources.synthetic import SyntheticSource

    source = SyntheticSource(seed=0, num_images=200)
    images = [source.record(i).images[0] for i in range(200)]
    start = time.perf_counter()
    for data in images:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            image_hashes(im)
    seconds = (time.perf_counter() - start) / len(images)
    print(
        f"hashing a decoded 160x160 scene (pixel digest + {len(CROPS)} pHashes): {seconds * 1e3:.2f} ms; "
        f"{n_train:,} images: {seconds * n_train / 60:.1f} min on one core"
    )


def questions(n_train: int, n_eval: int) -> None:
    """The question side at scale: an LSH index of `n_eval` CLEVR-style questions, `n_train` training questions asked."""
    import random

    from datasketch import MinHashLSH

    from rs.pipeline.clean.decontam.hashing import exact_key, overlap, shingles
    from rs.pipeline.clean.decontam.index import minhash
    from rs.pipeline.clean.decontam.methods import LSH_THRESHOLD, NGRAM, NUM_PERM, QUESTION_OVERLAP
    from rs.sources.synthetic import generate_scene, questions_for

    def draw(seed: int, n: int) -> list[str]:
        out: list[str] = []
        i = 0
        while len(out) < n:
            scene = generate_scene(random.Random(f"{seed}:{i}"))
            out += [q for q, _, _ in questions_for(scene, random.Random(f"{seed}:{i}:qa"), 4, "mixed")]
            i += 1
        return out[:n]

    evaluation, training = draw(11, n_eval), draw(12, n_train)
    before = _rss_mb()
    start = time.perf_counter()
    lsh = MinHashLSH(threshold=LSH_THRESHOLD, num_perm=NUM_PERM)
    grams = [shingles(q, NGRAM) for q in evaluation]
    exact = {exact_key(q): i for i, q in enumerate(evaluation)}
    for i, g in enumerate(grams):
        lsh.insert(i, minhash(g), check_duplication=False)
    built = time.perf_counter() - start
    start = time.perf_counter()
    same = near = candidates = 0
    for q in training:
        if exact_key(q) in exact:
            same += 1
            continue
        g = shingles(q, NGRAM)
        found = lsh.query(minhash(g))
        candidates += len(found)
        near += any(overlap(g, grams[c]) >= QUESTION_OVERLAP for c in found)
    asked = time.perf_counter() - start
    print(
        f"# questions: {n_eval:,} evaluation questions indexed in {built:.1f}s; {n_train:,} training questions asked in "
        f"{asked:.1f}s ({n_train / asked:,.0f}/s; {candidates / max(1, n_train - same):.1f} LSH candidates each); "
        f"{same:,} equal, {near:,} near (CLEVR's templates repeat); peak RSS {_rss_mb():.0f} MB ({before:.0f} MB before)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    q = sub.add_parser("quality")
    q.add_argument("--train", type=int, default=400)
    q.add_argument("--eval", type=int, default=300)
    s = sub.add_parser("scale")
    s.add_argument("--train", type=int, default=1_000_000)
    s.add_argument("--eval", type=int, default=100_000)
    s.add_argument("--batch", type=int, default=2_000)
    c = sub.add_parser("colour")
    c.add_argument("--images", type=int, default=60, help="originals of each kind")
    args = parser.parse_args()
    if args.what == "quality":
        quality(args.train, args.eval)
    elif args.what == "colour":
        colour(args.images)
    else:
        scale(args.train, args.eval, args.batch)


if __name__ == "__main__":
    main()
