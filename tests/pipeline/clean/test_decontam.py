"""Decontamination: the evaluation sets in families.yaml, the index, the methods, and what cleaning does with a match."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from PIL import Image

from rs.families import FamilyConfigError, default_families_path, load_families
from rs.families.schema import DecontaminationActions, EvaluationSetConfig
from rs.pipeline.clean import Cleaner, ExclusionWriter
from rs.pipeline.clean.decontam.hamming import HammingIndex
from rs.pipeline.clean.decontam.hashing import image_hashes
from rs.pipeline.clean.decontam.index import load_or_build
from rs.pipeline.publish.cards.decontam import card_sets, pair_files, plan_lines, summary
from rs.registry import SOURCES
from rs.sources.synthetic.evaluation import SyntheticEvaluationConfig, SyntheticEvaluationSource

FAMILY = """\
defaults:
  model: {id: some/model}
evaluation:
  Tiny-val:
    source: {kind: synthetic_eval, seed: 1, num_images: 20, train_seed: 0, train_images: 12, questions_per_image: 3,
             image_overlap: 0.5, question_overlap: 0.6}
families:
  Tiny:
    source: {kind: synthetic, seed: 0, num_images: 12, questions_per_image: 3}
    decontamination: DECONTAMINATION
    instruction: "\\nAnswer briefly."
    verifier: {name: exact}
    card: {pretty_name: Tiny, description: A test family., license: mit, citation: none}
"""


def write(tmp_path: Path, decontamination: str) -> Path:
    path = tmp_path / "families.yaml"
    path.write_text(FAMILY.replace("DECONTAMINATION", decontamination), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("RS_CACHE_DIR", str(cache))
    return cache


def test_multi_index_hashing_finds_exactly_what_comparing_every_pair_finds() -> None:
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 2**62, 2000, dtype=np.int64).astype(np.uint64) << np.uint64(2)
    queries = rng.integers(0, 2**62, 400, dtype=np.int64).astype(np.uint64) << np.uint64(2)
    for i in range(150):  # neighbours at every distance up to 7
        bits = rng.choice(64, size=i % 8, replace=False)
        queries[i] = codes[i] ^ np.uint64(sum(1 << int(b) for b in bits))
    for radius in (0, 4, 6):
        q, ids, dist = HammingIndex(codes, np.arange(len(codes)), radius).search(queries)
        found = set(zip(q.tolist(), ids.tolist(), dist.tolist()))
        distances = np.bitwise_count(queries[:, None] ^ codes[None, :])
        brute = {(int(a), int(b), int(distances[a, b])) for a, b in zip(*np.nonzero(distances <= radius))}
        assert found == brute and len(brute) >= 150 * (radius + 1) // 8


def test_the_synthetic_evaluation_split_recurs_training_scenes_as_its_truth_says() -> None:
    config = SyntheticEvaluationConfig(
        kind="synthetic_eval", seed=1, num_images=30, train_images=20, image_overlap=0.5
    )
    evaluation = SyntheticEvaluationSource(config)
    seen = set()
    for i in range(30):
        truth, record = evaluation.truth(i), evaluation.record(i)
        with Image.open(io.BytesIO(record.images[0])) as im:
            hashes = image_hashes(im)
        if truth.train_index is None:
            continue
        seen.add(truth.transform)
        with Image.open(io.BytesIO(evaluation.train.record(truth.train_index).images[0])) as im:
            original = image_hashes(im)
        assert (hashes.pixels == original.pixels) == (truth.transform == "same_pixels")
        assert min(bin(a ^ b).count("1") for a in hashes.phash for b in original.phash) <= 4
    assert seen == {"same_pixels", "jpeg", "resize", "crop", "brighten"}


def test_unknown_evaluation_set_is_named_with_file_line_and_a_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, "{against: [Tiny-vall]}")
    with pytest.raises(FamilyConfigError) as err:
        load_families(path)
    assert str(err.value) == (
        f"{path}:10: families.Tiny.decontamination.against[0]: unknown evaluation set 'Tiny-vall' "
        "(did you mean 'Tiny-val'?); defined sets: Tiny-val"
    )
    with pytest.raises(
        FamilyConfigError,
        match=r"families\.yaml:10: families\.Tiny\.decontamination\.actoin: unknown key "
        r"\(did you mean 'action'\?\)",
    ):
        load_families(write(tmp_path, "{against: [Tiny-val], actoin: drop}"))
    with pytest.raises(
        FamilyConfigError, match=r"decontamination\.action\.image: 'keep' is not valid; expected one of 'drop', 'flag'"
    ):
        load_families(write(tmp_path, "{against: [Tiny-val], action: {image: keep}}"))
    text = FAMILY.replace("DECONTAMINATION", "{against: [Tiny-val]}").replace(
        "kind: synthetic_eval", "kind: synthetic_evl"
    )
    (tmp_path / "families.yaml").write_text(text)
    with pytest.raises(
        FamilyConfigError, match=r"families\.yaml:5: evaluation\.Tiny-val\.source\.kind: 'synthetic_evl' is not valid"
    ):
        load_families(tmp_path / "families.yaml")


def test_the_shipped_families_name_every_benchmark_evaluation_split() -> None:
    families = load_families(default_families_path())
    against = {
        name: family.config.decontamination.against
        for name, family in families.items()
        if family.config.decontamination is not None
    }
    assert against["TinyCLEVR"] == ["TinyCLEVR-val"]
    for name in ("CLEVR", "CLEVRMath", "ChartQA", "DocVQA", "TextVQA", "AI2D", "ScienceQA", "IIIT5K"):
        assert against[name], name
    assert families["TinyCLEVR"].config.decontamination.actions() == DecontaminationActions("drop", "drop", "flag")


def _clean(path: Path) -> tuple[Cleaner, list, list[dict]]:
    family = load_families(path)["Tiny"]
    source = SOURCES.get("synthetic").from_config(family.config.source, base_dir=path.parent)
    exclusions = path.parent / "exclusions.jsonl"
    with ExclusionWriter(exclusions) as writer:
        cleaner = Cleaner(family.config, source.provenance(), exclusions=writer, base_dir=path.parent)
        rows = list(cleaner.rows(source))
    return cleaner, rows, [json.loads(line) for line in exclusions.read_text().splitlines()]


def test_cleaning_drops_the_rows_of_matched_images_and_flags_matched_questions(
    tmp_path: Path, own_cache: Path
) -> None:
    cleaner, rows, excluded = _clean(write(tmp_path, "{against: [Tiny-val]}"))
    evaluation = SyntheticEvaluationSource(
        load_families(tmp_path / "families.yaml")["Tiny"].config.decontamination.sets["Tiny-val"].source
    )
    recurring = {evaluation.truth(i).train_index for i in range(20)} - {None}
    dropped_records = {e["key"].split("#")[0] for e in excluded if e["reason"] == "eval_overlap"}
    assert dropped_records == {f"synthetic-clevr-{j:08d}" for j in recurring} and recurring
    assert all(e["step"] == "decontamination" and e["detail"].startswith("eval_overlap:Tiny-val:") for e in excluded)
    kept_records = {rid for row in rows for rid in row.record_ids}
    assert not kept_records & dropped_records
    flagged = [c for row in rows for c in row.clean_meta["contamination"]]
    assert flagged and all(
        c["set"] == "Tiny-val" and c["method"] in ("same_question", "near_question") for c in flagged
    )
    report = cleaner.report.decontamination["sets"]["Tiny-val"]
    assert sum(report["images"].values()) == len(recurring)
    assert report["dropped_items"] == len(excluded)
    assert report["flagged_items"] == sum(len({c["key"] for c in row.clean_meta["contamination"]}) for row in rows)
    assert report["example"]["pair_png"]
    # what the card, the publish summary and rs plan say of it
    (card,) = card_sets(cleaner.report.decontamination)
    rows = {row["method"]: row for row in card["rows"]}
    assert (
        rows["near_image"]["threshold"] == "Hamming distance <= 4 and colour distance <= 16"
        and rows["same_question"]["action"] == "flag"
    )
    assert sum(row["images"] for row in rows.values()) == len(recurring) and rows["same_image"]["action"] == "drop"
    ((path, png),) = pair_files(cleaner.report.decontamination)
    assert path == card["pair_path"] == "images/decontamination-Tiny-val.png"
    assert Image.open(io.BytesIO(png)).size == (2 * 96 + 8, 96)
    assert summary(cleaner.report.decontamination) == (
        f"  decontamination: Tiny-val: {len(recurring)} images and "
        f"{sum(report['items'].values())} QA matched, {len(excluded)} dropped, "
        f"{report['flagged_items']} flagged"
    )
    assert plan_lines(cleaner.report.decontamination, "the sample")[0] == "evaluation overlap in the sample:"
    # the index was cached under its versions: a second run loads it, building nothing
    assert len(list((own_cache / "decontamination").glob("Tiny-val-*/index.json"))) == 1


def test_flag_keeps_every_item_and_says_what_matched(tmp_path: Path) -> None:
    cleaner, rows, excluded = _clean(write(tmp_path, "{against: [Tiny-val], action: flag}"))
    assert not [e for e in excluded if e["reason"] == "eval_overlap"]
    methods = {c["method"] for row in rows for c in row.clean_meta["contamination"]}
    assert {"same_image", "near_image", "same_item"} <= methods
    near = [c for row in rows for c in row.clean_meta["contamination"] if c["method"] == "near_image"]
    assert all(0 <= c["distance"] <= 4 for c in near)


def test_an_index_is_built_once_and_streamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = EvaluationSetConfig(source=SyntheticEvaluationConfig(kind="synthetic_eval", num_images=4, train_images=4))
    first = load_or_build("x", config, base_dir=tmp_path, root=tmp_path / "idx")
    monkeypatch.setattr("rs.pipeline.clean.decontam.index.build_index", lambda *a, **k: pytest.fail("built again"))
    again = load_or_build("x", config, base_dir=tmp_path, root=tmp_path / "idx")
    assert again.record_ids == first.record_ids and again.thumbnail(0)


def test_an_evaluation_set_that_gives_no_image_is_refused_with_why_and_nothing_is_cached(tmp_path: Path) -> None:
    """Decontamination against a set of no image (its image column names the question's, or its file is empty) checked
    every training image against nothing, and the card said they were checked."""
    from rs.pipeline.clean.decontam.index import EvaluationSetEmpty
    from rs.sources.files import FilesSourceConfig
    from rs.sources.mapping import Columns

    lines = [{"image": f"img/{i}.png", "question": f"What is shape {i}?", "answer": "red"} for i in range(3)]
    (tmp_path / "img").mkdir()
    for i in range(2):  # the third image is missing, the first two are not images
        (tmp_path / "img" / f"{i}.png").write_bytes(b"not a png")
    (tmp_path / "val.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    (tmp_path / "empty.jsonl").write_text("")
    for path, said, hint in (
        (
            "val.jsonl",
            "gave no image that opens (3 of 3 records), most often undecodable_image (2)",
            "likely, in evaluation.v: the image column holds bytes that are not an image",
        ),
        ("empty.jsonl", "gave no record", "check evaluation.v.source (its path, split or name)"),
    ):
        config = EvaluationSetConfig(source=FilesSourceConfig(kind="files", path=path, columns=Columns()))
        with pytest.raises(EvaluationSetEmpty, match=rf"^the evaluation set v \({path}\) {re.escape(said)}") as err:
            load_or_build("v", config, base_dir=tmp_path, root=tmp_path / "idx")
        assert err.value.exit_code == 2 and err.value.hint.startswith(hint)
    assert not list((tmp_path / "idx").glob("*/index.json"))  # refused before it is cached: fixed, it is read again


# The real evaluation sets' layouts: a few rows with the columns each dataset's card lists, laid out as a Hub
# dataset repo (parquet under data/, the split declared in README.md's configs), read by the shipped set's source.
LAYOUTS = {
    "CLEVR-val": {
        "question_index": [0, 1],
        "question": ["How many cubes?", "Is there a ball?"],
        "answer": ["2", "yes"],
    },
    "CLEVR-Math-test": {
        "id": ["a", "b"],
        "question": ["Subtract all cubes. How many objects are left?"] * 2,
        "label": [3, 1],
    },
    "ChartQA-val": {"query": ["What is the peak?", "Which year?"], "label": [["12"], ["2019"]]},
    "ChartQA-test": {"query": ["What is the peak?", "Which year?"], "label": [["12"], ["2019"]]},
    "DocVQA-val": {
        "questionId": [1, 2],
        "question": ["What is the date?", "Who signed?"],
        "answers": [["1999"], ["J. Doe"]],
    },
    "DocVQA-test": {"questionId": [1, 2], "question": ["What is the date?", "Who signed?"], "answers": [[], []]},
    "TextVQA-val": {
        "question_id": [1, 2],
        "image_id": ["i1", "i2"],
        "question": ["What brand?", "What number?"],
        "answers": [["sony"] * 10, ["7"] * 10],
    },
    "AI2D-test": {
        "question": ["Which is a producer?", "What eats grass?"],
        "options": [["a", "b"], ["c", "d"]],
        "answer": ["0", "1"],
    },
    "ScienceQA-test": {
        "question": ["Which is a mammal?", "Which is hot?"],
        "choices": [["cat", "fish"], ["ice", "fire"]],
        "answer": [0, 1],
    },
    "IIIT5K-test": {"label": ["HOTEL", "EXIT"]},
    "MathVista-testmini": {"pid": ["1", "2"], "question": ["What is x?", "How many?"], "answer": ["2", "5"]},
}


def _fixture(folder: Path, source, columns: dict, *, without_image: bool = False) -> None:
    import datasets

    image_column = source.columns.image
    images = []
    for i in range(2):
        out = io.BytesIO()
        Image.new("RGB", (40, 30), (40 * i, 90, 200)).save(out, format="PNG")
        images.append({"bytes": out.getvalue(), "path": None} if i == 0 or not without_image else None)
    data = datasets.Dataset.from_dict({**columns, image_column: images}).cast_column(image_column, datasets.Image())
    (folder / "data").mkdir(parents=True)
    data.to_parquet(str(folder / "data" / f"{source.split}-00000-of-00001.parquet"))
    config = {
        "config_name": source.name or "default",
        "data_files": [{"split": source.split, "path": f"data/{source.split}-*"}],
    }
    (folder / "README.md").write_text(f"---\n{yaml.safe_dump({'configs': [config]})}---\n")


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_the_real_evaluation_sets_load_from_their_layout(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    shipped = load_families(default_families_path())
    sets = {
        n: s for f in shipped.values() if f.config.decontamination for n, s in f.config.decontamination.sets.items()
    }
    if name == "MathVista-testmini":  # named by no family yet: read from the top-level block
        raw = yaml.safe_load(default_families_path().read_text())["evaluation"][name]
        assert raw["source"]["path"] == "AI4Math/MathVista"
        from rs.sources.hub import HubSourceConfig
        from rs.sources.mapping import Columns

        src = raw["source"]
        source = HubSourceConfig(
            kind="hub", path=src["path"], split=src["split"], shape="flat", columns=Columns(**src["columns"])
        )
    else:
        source = sets[name].source
    folder = tmp_path / "repo"
    text_only = name == "ScienceQA-test"  # ScienceQA's test split has questions without an image: still indexed
    _fixture(folder, source, LAYOUTS[name], without_image=text_only)
    local = EvaluationSetConfig(source=dataclasses.replace(source, path=str(folder)))
    index = load_or_build(name, local, base_dir=tmp_path, root=tmp_path / "idx")
    assert index.images == 2 and len(index.questions) == 2 and len(index.pixels) == 2 - text_only
    assert index.undecodable == text_only and index.exact and min(index.exact.values()) == 0


def _tiny_set() -> EvaluationSetConfig:
    return EvaluationSetConfig(
        source=SyntheticEvaluationConfig(kind="synthetic_eval", num_images=6, train_images=4, questions_per_image=3)
    )


def _same_index(a: object, b: object) -> None:
    for name in ("record_ids", "pixels", "questions", "question_start", "exact", "unusable", "scheme"):
        assert getattr(a, name) == getattr(b, name), name
    for name in ("codes", "code_images", "signatures", "signed"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.thumbnail(0) == b.thumbnail(0) and a.thumbnail(0)  # type: ignore[attr-defined]


def test_the_cached_index_is_data_sealed_with_checksums_and_answers_as_built(tmp_path: Path) -> None:
    """No executable format is read back from the cache (the index was a pickle: anyone who could write the cache ran
    code as the user); what is read answers every query as the index built in memory does."""
    from datasketch import MinHashLSH

    from rs.pipeline.clean.decontam.index import minhash
    from rs.pipeline.clean.decontam.methods import LSH_THRESHOLD, NUM_PERM
    from rs.util.checksums import MANIFEST

    built = load_or_build("x", _tiny_set(), base_dir=tmp_path, root=tmp_path / "idx")
    (folder,) = (tmp_path / "idx").iterdir()
    suffixes = {p.suffix for p in folder.iterdir() if p.name != MANIFEST}
    assert suffixes == {".json", ".parquet", ".npy", ".sqlite"}
    assert (folder / MANIFEST).read_text().count("\n") == len(list(folder.iterdir())) - 1
    read = load_or_build("x", _tiny_set(), base_dir=tmp_path, root=tmp_path / "idx")
    _same_index(built, read)
    # the candidates of a near question are datasketch's own LSH's, for a question of the set and for one reworded
    lsh = MinHashLSH(threshold=LSH_THRESHOLD, num_perm=NUM_PERM)
    for q in range(len(built.questions)):
        if built.grams(q):
            lsh.insert(q, minhash(built.grams(q)))
    probes = [built.grams(q) for q in range(len(built.questions))]
    probes += [set(list(grams)[1:]) | {"a new gram"} for grams in probes if len(grams) > 2]
    assert sum(bool(lsh.query(minhash(grams))) for grams in probes) > len(built.questions)
    for grams in probes:
        assert read.near_questions(grams) == built.near_questions(grams) == set(lsh.query(minhash(grams)))


class _Planted:
    """A pickle that runs a command when loaded (what anyone able to write the cache could plant)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        import os

        return (os.system, (f"touch {self.marker}",))


def _damaged_then_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture, harm: Any, said: str) -> None:
    built = load_or_build("x", _tiny_set(), base_dir=tmp_path, root=tmp_path / "idx")
    (folder,) = (tmp_path / "idx").iterdir()
    harm(folder)
    caplog.clear()
    with caplog.at_level("WARNING", logger="rs.pipeline.clean.decontam.index"):
        again = load_or_build("x", _tiny_set(), base_dir=tmp_path, root=tmp_path / "idx")
    (warning,) = [r.getMessage() for r in caplog.records]
    assert f"evaluation index {folder} of x cannot be used as it is: {said}; built again" in warning
    _same_index(built, again)
    assert load_or_build("x", _tiny_set(), base_dir=tmp_path, root=tmp_path / "idx").record_ids == built.record_ids
    assert not caplog.records[1:]  # the rebuilt one is whole: read without a word


def test_a_pickle_planted_in_the_cache_is_never_loaded(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import pickle

    marker = tmp_path / "ran"

    def plant(folder: Path) -> None:
        for name in ("index.pkl", "index.json"):  # beside the files, and in place of one
            (folder / name).write_bytes(pickle.dumps(_Planted(marker)))

    _damaged_then_rebuilt(tmp_path, caplog, plant, "index.json does not match its checksum")
    assert not marker.exists()
    assert not list((tmp_path / "idx").glob("*/index.pkl"))


@pytest.mark.parametrize(
    "file, said",
    [
        ("codes.npy", "codes.npy does not match its checksum"),
        ("thumbs.sqlite", "thumbs.sqlite does not match its checksum"),
        ("records.parquet", "records.parquet does not match its checksum"),
    ],
)
def test_a_flipped_bit_in_the_index_is_named_and_the_index_built_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, file: str, said: str
) -> None:
    """One flipped bit changed every card's decontamination table, or named another evaluation image, with no word."""

    def flip(folder: Path) -> None:
        data = bytearray((folder / file).read_bytes())
        data[len(data) // 2] ^= 0x10
        (folder / file).write_bytes(bytes(data))

    _damaged_then_rebuilt(tmp_path, caplog, flip, said)


def test_a_truncated_thumbnail_database_is_named_and_the_index_built_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def truncate(folder: Path) -> None:
        with (folder / "thumbs.sqlite").open("r+b") as fh:
            fh.truncate(100)

    _damaged_then_rebuilt(tmp_path, caplog, truncate, "thumbs.sqlite does not match its checksum")


def test_a_sealed_index_whose_numbers_do_not_add_up_is_built_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Resealed after an edit, the checksums hold: the numbers are still checked, so a query never reads past an array
    (an `IndexError` in the middle of cleaning)."""
    from rs.util.checksums import seal

    def point_past_the_end(folder: Path) -> None:
        owners = np.load(folder / "code_images.npy")
        owners[0] = 10_000
        np.save(folder / "code_images.npy", owners)
        seal(folder)

    _damaged_then_rebuilt(tmp_path, caplog, point_past_the_end, "a hash names an image it does not hold")


def test_half_built_indexes_of_dead_processes_are_removed_on_the_next_start(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    config = _tiny_set()
    load_or_build("x", config, base_dir=tmp_path, root=tmp_path / "idx")
    (folder,) = (tmp_path / "idx").iterdir()
    host = socket.gethostname()
    stale = folder.with_name(f"{folder.name}.tmp-{host}-{dead.stdout.strip()}")
    alive = folder.with_name(f"{folder.name}.tmp-{host}-1")  # pid 1 runs as long as the machine
    elsewhere = folder.with_name(f"{folder.name}.tmp-another-host-{dead.stdout.strip()}")
    for tmp in (stale, alive, elsewhere):
        (tmp / "part").mkdir(parents=True)
    load_or_build("x", config, base_dir=tmp_path, root=tmp_path / "idx")
    assert not stale.exists() and alive.exists() and elsewhere.exists()


def test_a_flagged_question_is_stored_once_its_entry_names_its_key(tmp_path: Path) -> None:
    """`clean_meta.contamination` names a flagged item by its key (as `flags` does), not by a copy of its question: a
    long question stored twice per row once pushed a row group over its limit and failed the family."""
    _, rows, _ = _clean(write(tmp_path, "{against: [Tiny-val], action: flag}"))
    entries = [(row, c) for row in rows for c in row.clean_meta["contamination"]]
    assert entries
    for row, entry in entries:
        assert set(entry) == {"key", "set", "method", "distance"}
        (item,) = [q for q in row.qa if q.key == entry["key"]]
        assert any(f.startswith(f"eval_overlap:{entry['set']}:{entry['method']}:") for f in item.flags)
        assert item.question not in json.dumps(row.clean_meta)
