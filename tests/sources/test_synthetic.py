"""The synthetic CLEVR generator: determinism, rendering, answer correctness, noise, folder export.

Answers are checked against an independent reading of the question text (a small parser written
here, not the generator's own code), so a template/answer mismatch in the generator is caught.
"""

from __future__ import annotations

import io
import json
import random
import re
import time

import pytest
from PIL import Image, ImageChops

from rs.sources.base import SourceRecord
from rs.sources.synthetic import (
    NOISE_KINDS,
    Scene,
    SceneObject,
    SyntheticSource,
    clevr_questions,
    clevrmath_questions,
    generate_scene,
    render_scene,
    write_image_folder,
)

# --- an independent reader of the generated questions --------------------------------------

WORDS = {
    "small": ("size", "small"),
    "tiny": ("size", "small"),
    "large": ("size", "large"),
    "big": ("size", "large"),
    "rubber": ("material", "rubber"),
    "matte": ("material", "rubber"),
    "metal": ("material", "metal"),
    "shiny": ("material", "metal"),
    "metallic": ("material", "metal"),
    "cube": ("shape", "cube"),
    "block": ("shape", "cube"),
    "sphere": ("shape", "sphere"),
    "ball": ("shape", "sphere"),
    "cylinder": ("shape", "cylinder"),
    "thing": None,
    "object": None,
    **{c: ("color", c) for c in ("gray", "red", "blue", "green", "brown", "purple", "cyan", "yellow")},
}


def parse_phrase(text: str) -> dict[str, str]:
    flt: dict[str, str] = {}
    for word in text.split():
        key = word if word in WORDS else word.removesuffix("s")
        attr = WORDS[key]  # KeyError: a word outside the closed vocabulary
        if attr is not None:
            flt[attr[0]] = attr[1]
    return flt


def select(scene: Scene, flt: dict[str, str]) -> list[SceneObject]:
    return [o for o in scene.objects if all(getattr(o, a) == v for a, v in flt.items())]


def the(scene: Scene, text: str) -> SceneObject:
    found = select(scene, parse_phrase(text))
    assert len(found) == 1, f"'the {text}' is not unique"
    return found[0]


def yn(flag: bool) -> str:
    return "yes" if flag else "no"


def answer(scene: Scene, q: str) -> str:
    """What the question asks, computed from the scene by reading the text."""
    n = lambda text: len(select(scene, parse_phrase(text)))  # noqa: E731
    if q.startswith("Subtract"):
        removed = [parse_phrase(p) for p in re.findall(r"Subtract all (.+?)\.", q)]
        target = parse_phrase(re.search(r"How many (.+) are left\?$", q).group(1))
        left = [o for o in select(scene, target) if not any(o in select(scene, f) for f in removed)]
        return str(len(left))
    if m := re.fullmatch(r"Add (\d+) (.+)\. How many (.+) exist\?", q):
        k, added, target = int(m.group(1)), parse_phrase(m.group(2)), parse_phrase(m.group(3))
        assert all(a in added for a in target), "the added objects' membership must be decidable"
        same = all(added[a] == v for a, v in target.items())
        return str(len(select(scene, target)) + (k if same else 0))
    if m := re.fullmatch(r"(?:How many|What number of) (.+) are (?:there|visible)\?", q):
        return str(n(m.group(1)))
    if m := re.fullmatch(r"(?:Are there any|Is there an?|Are any) (.+?)(?: visible)?\?", q):
        return yn(n(m.group(1)) > 0)
    if m := re.fullmatch(r"Are there (more|fewer) (.+) than (.+)\?", q):
        a, b = n(m.group(2)), n(m.group(3))
        return yn(a > b if m.group(1) == "more" else a < b)
    if m := re.fullmatch(r"Is the number of (.+) (greater than|less than|the same as) the number of (.+)\?", q):
        a, b = n(m.group(1)), n(m.group(3))
        return yn({"greater than": a > b, "less than": a < b, "the same as": a == b}[m.group(2)])
    if m := re.fullmatch(r"Are there (?:the same|an equal) number of (.+) and (.+)\?", q):
        return yn(n(m.group(1)) == n(m.group(2)))
    for pattern in (
        r"Is the (?P<a>.+) the same (?P<attr>color|shape|size) as the (?P<b>.+)\?",
        r"Does the (?P<a>.+) have the same (?P<attr>\w+) as the (?P<b>.+)\?",
        r"Do the (?P<a>.+) and the (?P<b>.+) have the same (?P<attr>\w+)\?",
        r"Is the (?P<a>.+) made of the same (?P<attr>material) as the (?P<b>.+)\?",
        r"Are the (?P<a>.+) and the (?P<b>.+) made of the same (?P<attr>material)\?",
    ):
        if m := re.fullmatch(pattern, q):
            attr = m.group("attr")
            return yn(getattr(the(scene, m.group("a")), attr) == getattr(the(scene, m.group("b")), attr))
    for pattern in (
        r"What (?P<attr>color|shape|size|material) is the (?P<s>.+)\?",
        r"What is the (?P<attr>color|shape|size|material) of the (?P<s>.+)\?",
        r"The (?P<s>.+) is what (?P<attr>color)\?",
        r"What (?P<attr>shape) does the (?P<s>.+) have\?",
        r"How (?P<attr>big) is the (?P<s>.+)\?",
        r"What is the (?P<s>.+) made of\?",
    ):
        if m := re.fullmatch(pattern, q):
            attr = {"big": "size", None: "material"}.get(m.groupdict().get("attr"), m.groupdict().get("attr"))
            return getattr(the(scene, m.group("s")), attr)
    raise AssertionError(f"unreadable question: {q!r}")


def obj(size, color, material, shape, x=500, y=500) -> SceneObject:
    return SceneObject(shape=shape, color=color, size=size, material=material, x=x, y=y)


@pytest.fixture
def scene() -> Scene:
    return Scene(
        [
            obj("large", "blue", "metal", "cube"),
            obj("large", "blue", "rubber", "sphere"),
            obj("small", "blue", "rubber", "cylinder"),
            obj("large", "red", "rubber", "cube"),
            obj("small", "red", "metal", "cube"),
            obj("small", "gray", "metal", "sphere"),
            obj("large", "green", "rubber", "cylinder"),
        ]
    )


# --- answers ---------------------------------------------------------------------------------


def test_reader_on_hand_written_questions(scene):
    """The reader itself, on questions whose answers were worked out by hand."""
    expected = {
        "How many red cubes are there?": "2",
        "What number of small metal things are there?": "2",
        "How many objects are there?": "7",
        "Are there any large cylinders?": "yes",
        "Is there a small green thing?": "no",
        "What color is the small rubber sphere?": None,  # not in the scene: 'the' must fail
        "What color is the small cylinder?": "blue",
        "What is the large red object made of?": "rubber",
        "Are there more cubes than spheres?": "yes",
        "Is the number of red objects the same as the number of cylinders?": "yes",
        "Is the large cube the same color as the small sphere?": None,  # two large cubes
        "Is the green thing the same size as the large sphere?": "yes",
        "Subtract all red cubes. How many objects are left?": "5",
        # Big blue things: cube, sphere. Large rubber objects: sphere (again), red cube, green cylinder.
        "Subtract all big blue things. Subtract all large rubber objects. How many objects are left?": "3",
        "Subtract all blue things. How many cylinders are left?": "1",
        "Add 2 small rubber spheres. How many objects exist?": "9",
        "Add 1 red cube. How many cubes exist?": "4",
        "Add 3 cylinders. How many spheres exist?": "2",
    }
    for question, want in expected.items():
        if want is None:
            with pytest.raises(AssertionError):
                answer(scene, question)
        else:
            assert answer(scene, question) == want, question


@pytest.mark.parametrize("style", ["clevr", "clevrmath"])
def test_generated_answers_are_right_for_a_hand_built_scene(scene, style):
    generate = clevr_questions if style == "clevr" else clevrmath_questions
    seen_qtypes = set()
    double_subtract_overlap = False
    for i in range(300):
        for q, a, qtype in generate(scene, random.Random(i), 5):
            assert answer(scene, q) == a, (q, a)
            seen_qtypes.add(qtype)
            removed = [parse_phrase(p) for p in re.findall(r"Subtract all (.+?)\.", q)]
            if len(removed) == 2 and set(map(id, select(scene, removed[0]))) & set(map(id, select(scene, removed[1]))):
                double_subtract_overlap = True
    if style == "clevr":
        assert seen_qtypes == {"count", "exist", "query_attribute", "compare_count", "compare_attribute"}
    else:
        assert seen_qtypes == {"subtract", "add"}
        assert double_subtract_overlap, "no double subtraction with an object removed by both was drawn"


def test_generated_answers_are_right_for_random_scenes():
    for i in range(200):
        rng = random.Random(f"t:{i}")
        scene = generate_scene(rng)
        for q, a, _ in clevr_questions(scene, rng, 6) + clevrmath_questions(scene, rng, 4):
            assert answer(scene, q) == a, (scene.to_dict(), q, a)


CLOSED_VOCABULARY = (
    set(
        "how many what number of are there visible any is a an the color shape size material does have "
        "big made more fewer than greater less same as and equal do subtract all left add exist".split()
    )
    | set(WORDS)
    | {w + "s" for w in WORDS}
)


def test_clean_questions_use_only_the_closed_vocabulary():
    source = SyntheticSource(seed=5, num_images=150, questions_per_image=6)
    answers = set()
    for record in source:
        for item in record.qa:
            words = re.findall(r"[a-z]+", item.question.lower())
            assert set(words) <= CLOSED_VOCABULARY, item.question
            assert item.qtype is not None and item.source == source.name
            answers.add(item.answer)
    assert answers <= {
        "yes",
        "no",
        "small",
        "large",
        "rubber",
        "metal",
        "cube",
        "sphere",
        "cylinder",
        "gray",
        "red",
        "blue",
        "green",
        "brown",
        "purple",
        "cyan",
        "yellow",
    } | {str(n) for n in range(20)}


# --- determinism, rendering --------------------------------------------------------------------


def _as_tuples(records: list[SourceRecord]):
    return [
        (r.record_id, r.images, r.image_ids, [(q.question, q.answer, q.qtype, q.turn, q.image_ref) for q in r.qa])
        for r in records
    ]


def test_same_seed_same_bytes_and_qa_and_image_i_independent_of_num_images():
    short = _as_tuples(list(SyntheticSource(seed=7, num_images=5)))
    long = _as_tuples(list(SyntheticSource(seed=7, num_images=12)))
    assert short == long[:5]
    assert _as_tuples(list(SyntheticSource(seed=7, num_images=5))) == short
    assert _as_tuples(list(SyntheticSource(seed=8, num_images=5))) != short
    source = SyntheticSource(seed=7, num_images=12)
    assert _as_tuples([source.record(9)]) == long[9:10]  # random access (sharding) = streaming
    # The image does not depend on the question style either.
    assert [r.images for r in SyntheticSource(seed=7, num_images=5, style="clevrmath")] == [r[1] for r in short]


def test_pngs_decode_at_the_requested_size():
    for size in (160, 96):
        for record in SyntheticSource(seed=1, num_images=10, image_size=size):
            (png,) = record.images
            assert png.startswith(b"\x89PNG")
            with Image.open(io.BytesIO(png)) as img:
                img.load()
                assert img.size == (size, size) and img.mode == "RGB"
            assert record.image_ids == [f"synthetic-clevr-img-{int(record.record_id[-8:]):08d}"]
            assert all(q.image_ref == record.image_ids[0] and q.record_id == record.record_id for q in record.qa)
            assert [q.turn for q in record.qa] == list(range(len(record.qa)))


def test_scenes_have_3_to_10_objects_at_least_20px_wide():
    counts = {len(generate_scene(random.Random(i)).objects) for i in range(300)}
    assert min(counts) == 3 and max(counts) == 10
    empty = Image.open(io.BytesIO(render_scene(Scene([]))))
    for shape in ("cube", "sphere", "cylinder"):  # the smallest possible object: small, at the very back
        png = render_scene(Scene([obj("small", "gray", "rubber", shape, x=500, y=0)]))
        left, top, right, bottom = ImageChops.difference(Image.open(io.BytesIO(png)), empty).getbbox()
        assert right - left >= 20, shape


def test_render_time(record_property):
    """Reported, not asserted: the target is < 3 ms per 160-px image."""
    scenes = [generate_scene(random.Random(i)) for i in range(200)]
    render_scene(scenes[0])
    start = time.perf_counter()
    for s in scenes:
        render_scene(s)
    ms = (time.perf_counter() - start) / len(scenes) * 1000
    start = time.perf_counter()
    n = sum(1 for _ in SyntheticSource(seed=0, num_images=200))
    per_s = n / (time.perf_counter() - start)
    record_property("render_ms_per_image", round(ms, 3))
    record_property("records_per_s", round(per_s, 1))
    print(f"\nrender: {ms:.2f} ms/image (160 px); stream: {per_s:.0f} records/s")


PEAK = """
import sys, tracemalloc
from rs.sources.synthetic import SyntheticSource

next(iter(SyntheticSource(num_images=1, image_size=64)))  # warm caches (imports, fonts)
peaks = []
for n in (200, 2000):
    source = SyntheticSource(seed=2, num_images=n, questions_per_image=2, image_size=64)
    tracemalloc.start()
    for _ in source:
        pass
    peaks.append(tracemalloc.get_traced_memory()[1])
    tracemalloc.stop()
print(*peaks)
"""


def test_streaming_does_not_accumulate():
    """The peak memory of streaming 2,000 scenes is about that of 200. Measured in a fresh interpreter: tracemalloc
    counts every thread's allocations, and a test worker may hold threads left by earlier tests (it failed so once,
    80 KB against 424 KB, and passed alone)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", PEAK], capture_output=True, text=True, check=True).stdout
    small, large = map(int, out.split())
    assert large < small * 1.5 + 256 * 1024, (small, large)


# --- noise -------------------------------------------------------------------------------------


def _decodes(data: bytes) -> bool:
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
        return True
    except Exception:
        return False


MC_MARKERS = ("Options:", "Choose from:", "Select one:", "Answer with the option's letter")


def detect(records: list[SourceRecord], name: str = "synthetic-clevr") -> dict[str, int]:
    """Find each noise kind from the data alone, as the cleaning stage has to."""
    found = dict.fromkeys(NOISE_KINDS, 0)
    previous = None
    for r in records:
        image = r.images[0]
        found["empty_image"] += image == b""
        found["corrupt_image"] += image != b"" and not _decodes(image)
        found["duplicate_image"] += previous is not None and image == previous and image != b""
        previous = image
        for i, q in enumerate(r.qa):
            words = set(re.findall(r"[a-z]+", q.question.lower()))
            found["off_task"] += (
                bool(q.question) and not words <= CLOSED_VOCABULARY and not any(m in q.question for m in MC_MARKERS)
            )
            found["flattened_mc"] += any(m in q.question for m in MC_MARKERS)
            found["sentence_answer"] += " " in q.answer and words <= CLOSED_VOCABULARY
            found["empty_field"] += q.question == "" or q.answer == ""
            found["foreign_source"] += q.source != name
            found["wrong_image_ref"] += q.image_ref != r.image_ids[0]
            found["duplicate_qa"] += i > 0 and (q.question, q.answer) == (r.qa[i - 1].question, r.qa[i - 1].answer)
    return found


def test_no_noise_by_default():
    source = SyntheticSource(seed=3, num_images=60)
    assert detect(list(source)) == dict.fromkeys(NOISE_KINDS, 0)
    assert not source.noise_counts


@pytest.mark.parametrize("kind", NOISE_KINDS)
def test_each_noise_kind_appears_at_probability_one(kind):
    clean = list(SyntheticSource(seed=4, num_images=40))
    source = SyntheticSource(seed=4, num_images=40, noise={kind: 1.0})
    noisy = list(source)
    assert source.noise_counts[kind] > 0
    found = detect(noisy)
    if kind == "wrong_reference":  # the data alone cannot tell it, as the cleaning cannot: the scene can
        assert found == dict.fromkeys(NOISE_KINDS, 0)
        wrong = sum(answer(source.scene(i), q.question) != q.answer for i, r in enumerate(noisy) for q in r.qa)
        assert wrong == source.noise_counts[kind] == len(source.planted()) == sum(len(r.qa) for r in clean)
        return
    if kind == "guessable":  # a clean question that states its answer first, its reference right, known to the source
        planted = source.guessable()
        assert source.noise_counts[kind] == len(planted) > 0.8 * sum(len(r.qa) for r in clean)
        for i, r in enumerate(noisy):
            for q in r.qa:
                if q.key in planted:
                    stated, asked = q.question.split(". ", 1)
                    assert q.answer in stated.split() and answer(source.scene(i), asked) == q.answer
                    assert q.qtype == "query_attribute"
        assert SyntheticSource(seed=4, num_images=40).guessable() == set()
        return
    assert found[kind] > 0, found
    others = {k: v for k, v in found.items() if k != kind and v}
    if kind != "empty_field":  # an empty question reads as 'nothing off-vocabulary', nothing else
        assert not others, others
    n_items = sum(len(r.qa) for r in clean)
    if kind in ("off_task", "sentence_answer", "foreign_source", "wrong_image_ref", "duplicate_qa", "empty_field"):
        assert source.noise_counts[kind] == n_items
    if kind in ("corrupt_image", "empty_image"):
        assert source.noise_counts[kind] == len(clean) == found[kind]
    if kind == "duplicate_image":
        assert source.noise_counts[kind] == len(clean) - 1 == found[kind]
        # The QA on the duplicated image are about that image: the first scene.
        scene = source.scene(0)
        for r in noisy:
            for q in r.qa:
                assert answer(scene, q.question) == q.answer
    if kind == "off_task":
        assert all(q.qtype is None and q.answer.endswith(".") for r in noisy for q in r.qa)
    if kind == "wrong_image_ref":
        ids = {r.image_ids[0] for r in clean}
        assert all(q.image_ref in ids for r in noisy for q in r.qa)  # another image of the pool
        last = SyntheticSource(seed=4, num_images=2, questions_per_image=20, noise={kind: 1.0}).record(1)
        assert {q.image_ref for q in last.qa} == {"synthetic-clevr-img-00000000"}
    if kind not in ("duplicate_image", "corrupt_image", "empty_image"):
        assert [r.images for r in noisy] == [r.images for r in clean]  # item noise leaves images alone


def test_noise_counts_match_detection_and_are_deterministic():
    noise = {k: 0.15 for k in NOISE_KINDS}
    a, b = SyntheticSource(seed=9, num_images=80, noise=noise), SyntheticSource(seed=9, num_images=80, noise=noise)
    ra, rb = list(a), list(b)
    assert _as_tuples(ra) == _as_tuples(rb) and a.noise_counts == b.noise_counts
    assert all(a.noise_counts[k] > 0 for k in NOISE_KINDS)
    # Counts are injection events: a duplicated item repeats its other noise and an emptied question
    # hides its own, so leave those two out to compare one for one.
    c = SyntheticSource(seed=9, num_images=80, noise=noise | {"duplicate_qa": 0.0, "empty_field": 0.0})
    found = detect(list(c))
    for kind in ("foreign_source", "wrong_image_ref", "empty_image", "flattened_mc"):
        assert found[kind] == c.noise_counts[kind], kind
    list(a)
    assert a.noise_counts == b.noise_counts  # each pass recounts from zero


def test_sentence_answers_are_correct_sentences():
    source = SyntheticSource(seed=11, num_images=40, noise={"sentence_answer": 1.0})
    for record in source:
        for q in record.qa:
            assert q.answer[0].isupper() and q.answer.endswith(".") and " " in q.answer
            assert q.qtype in ("query_attribute", "count", "exist")


def test_flattened_mc_formats_and_broken_items():
    source = SyntheticSource(seed=12, num_images=150, noise={"flattened_mc": 1.0})
    broken = mc = 0
    for record in source:
        for q in record.qa:
            if not any(m in q.question for m in MC_MARKERS):
                continue  # a scene where no object can be described uniquely: left clean
            assert q.qtype == "query_attribute"
            mc += 1
            if m := re.search(r"Options: (.+)\.$", q.question):
                options = m.group(1).split(", ")
                letters = []
            elif m := re.search(r"Choose from: (.+)$", q.question):
                options = re.findall(r"\([a-e]\) (\w+)", m.group(1))
                letters = [f"({chr(97 + i)})" for i in range(len(options))]
            elif m := re.search(r"Select one: (.+)$", q.question):
                options = re.split(r", | or ", m.group(1))
                letters = []
            else:
                options = re.findall(r"^[A-E]\. (\w+)$", q.question, flags=re.M)
                letters = [chr(65 + i) for i in range(len(options))]
            assert len(options) >= 2
            broken += q.answer not in options + letters
    assert mc == source.noise_counts["flattened_mc"] > 0.95 * sum(len(r.qa) for r in source)
    assert broken == source.noise_counts["flattened_mc_broken"] > 0
    assert broken < 0.25 * source.noise_counts["flattened_mc"]


def test_invalid_noise_key_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid kinds: off_task, sentence_answer"):
        SyntheticSource(noise={"typo": 0.5})
    with pytest.raises(ValueError):
        SyntheticSource(noise={"off_task": 1.5})
    with pytest.raises(ValueError):
        SyntheticSource(style="vqa")


def test_provenance():
    assert SyntheticSource(seed=3, style="clevr", name="tiny").provenance() == {
        "dataset": "rs-synthetic/tiny",
        "config": "clevr",
        "split": "train",
        "revision": "seed=3",
    }


# --- image folder -------------------------------------------------------------------------------


def test_write_image_folder_loads_with_datasets(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    import datasets

    source = SyntheticSource(seed=6, num_images=6, questions_per_image=3, noise={"wrong_image_ref": 0.3})
    out = write_image_folder(source, tmp_path / "folder")
    lines = [json.loads(line) for line in (out / "metadata.jsonl").read_text().splitlines()]
    assert len(lines) == 18 and len(list(out.glob("*.png"))) == 6
    assert set(lines[0]) == {"file_name", "question", "answer", "question_id", "image_id", "qtype", "source"}
    assert lines[0]["file_name"] == lines[1]["file_name"] == "synthetic-clevr-img-00000000.png"

    ds = datasets.load_dataset("imagefolder", data_dir=str(out), split="train", cache_dir=str(tmp_path / "cache"))
    assert len(ds) == 18
    assert sorted(ds["question_id"]) == sorted(line["question_id"] for line in lines)
    row = ds[0]
    assert row["image"].size == (160, 160)
    assert {"question", "answer", "image_id", "qtype", "source"} <= set(row)


def test_cli(tmp_path, capsys):
    from rs.sources.synthetic.__main__ import main

    main([str(tmp_path / "cli"), "--num-images", "3", "--seed", "1", "--style", "clevr", "--noise", "duplicate_qa=1"])
    out = capsys.readouterr().out
    assert "wrote 3 images" in out and "duplicate_qa=" in out
    assert len((tmp_path / "cli" / "metadata.jsonl").read_text().splitlines()) == 24


def test_wrong_references_are_planted_of_the_right_kind_known_to_the_source_alone() -> None:
    """`noise: {wrong_reference: p}`: clean questions get a wrong value of their reference's kind; every other item and
    every other kind of noise is what it is without it; the truth is the source's (`planted`), not the data's."""
    noise = {"off_task": 0.1, "duplicate_qa": 0.1, "flattened_mc": 0.1}
    clean = SyntheticSource(seed=3, num_images=40, noise=noise)
    noisy = SyntheticSource(seed=3, num_images=40, noise={**noise, "wrong_reference": 0.2})
    planted = noisy.planted()
    before = {q.key: q for r in clean for q in r.qa}
    after = {q.key: q for r in noisy for q in r.qa}
    assert before.keys() == after.keys() and noisy.noise_counts["wrong_reference"] == len(planted) > 10
    assert {k: v for k, v in clean.noise_counts.items()} == {
        k: v for k, v in noisy.noise_counts.items() if k != "wrong_reference"
    }
    for key, item in after.items():
        if key not in planted:
            assert item == before[key]
            continue
        wrong, true = planted[key]
        assert item.answer == wrong != true == before[key].answer and item.question == before[key].question
        assert wrong.isdigit() == true.isdigit() and (true in ("yes", "no")) == (wrong in ("yes", "no"))
    assert SyntheticSource(seed=3, num_images=40, noise=noise).planted() == {}


def test_guessable_questions_shift_no_other_item_nor_a_planted_wrong_reference() -> None:
    """`noise: {guessable: p}`: a question planted guessable replaces a clean one (never a reference planted wrong, nor
    an item another kind replaced); every other item, count and wrong reference is what it is without it."""
    noise = {"off_task": 0.1, "duplicate_qa": 0.1, "flattened_mc": 0.1, "wrong_reference": 0.1}
    clean = SyntheticSource(seed=3, num_images=40, noise=noise)
    planted = SyntheticSource(seed=3, num_images=40, noise={**noise, "guessable": 0.2})
    before = {q.key: q for r in clean for q in r.qa}
    after = {q.key: q for r in planted for q in r.qa}
    guessed = planted.guessable()
    assert before.keys() == after.keys() and planted.noise_counts["guessable"] == len(guessed) > 10
    assert dict(clean.noise_counts) == {k: v for k, v in planted.noise_counts.items() if k != "guessable"}
    assert clean.planted() == planted.planted() and not guessed & set(planted.planted())
    for key, item in after.items():
        assert (item == before[key]) == (key not in guessed)
