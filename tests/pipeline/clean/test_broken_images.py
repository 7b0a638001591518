"""Images whose structure checks out but whose pixels do not decode, and a file that is not there.

A truncated JPEG passes `Image.verify()` (it does not read a JPEG's scan data), and so does a PNG
whose compressed pixel data is garbage under valid chunk checksums. Cleaning decodes every image in
full, so both (and a truncated PNG) are dropped as `undecodable_image`, a missing file as
`missing_image`; none reaches the engine or a published row, and the rest of the family is published.
"""

from __future__ import annotations

import io
import json
import logging
import random
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image

from rs.families import load_families
from rs.pipeline.clean import image_problem
from rs.pipeline.publish.stage import publish

FAMILY = """families:
  Broken:
    source: {kind: files, path: pool, columns: {id: id}}
    instruction: "\\nAnswer with one word."
    verifier: {name: exact}
    model: {id: replayed/model, revision: r1}
    engine: {kind: replay, replay_path: replay.jsonl}
    judge: {calibration_samples: 4, min_negative_agreement: 0.5}
    publish: {namespace: tester, target: local}
    card: {pretty_name: Broken, description: A folder of images that do not decode., license: mit, citation: c}
"""


def noisy(fmt: str, seed: int, size: int = 64) -> bytes:
    """An image of noise (so that its pixel data is most of the file) in `fmt`."""
    rng = random.Random(seed)
    image = Image.frombytes("RGB", (size, size), bytes(rng.randrange(256) for _ in range(size * size * 3)))
    buf = io.BytesIO()
    image.save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


def png_with_bad_pixels() -> bytes:
    """A PNG whose IDAT holds bytes that are no zlib stream, under a correct CRC: every chunk checks out."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", b"\x78\x9c" + b"\xff" * 60)
        + chunk(b"IEND", b"")
    )


BROKEN = {
    "cut.jpg": lambda: noisy("JPEG", 1)[: len(noisy("JPEG", 1)) // 2],
    "cut.png": lambda: noisy("PNG", 2)[: len(noisy("PNG", 2)) // 2],
    "garbled.png": png_with_bad_pixels,
}


@pytest.mark.parametrize("name", ["cut.jpg", "garbled.png"])
def test_the_structure_check_alone_passes_these_files(name: str) -> None:
    """What made the full decode necessary: `verify()` finds nothing wrong with them."""
    with Image.open(io.BytesIO(BROKEN[name]())) as im:
        im.verify()


@pytest.mark.parametrize("name", list(BROKEN))
def test_an_image_whose_pixels_do_not_decode_is_undecodable(name: str) -> None:
    assert image_problem(BROKEN[name]()) == "undecodable_image"
    assert image_problem(noisy("JPEG", 3)) is None and image_problem(noisy("PNG", 4)) is None


def test_a_family_drops_broken_and_missing_images_in_cleaning_and_publishes_the_rest(tmp_path: Path, caplog) -> None:
    folder = tmp_path / "pool"
    folder.mkdir()
    files = {
        "good.jpg": noisy("JPEG", 5),
        "good.png": noisy("PNG", 6),
        **{name: make() for name, make in BROKEN.items()},
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    names = [*files, "gone.png"]  # the last one is named but not there
    lines, replay = [], []
    for i, name in enumerate(names):
        for turn, (question, answer) in enumerate([("What is it?", "noise"), ("Is it round?", "no")]):
            lines.append({"file_name": name, "id": f"{i}-{turn}", "question": question, "answer": answer})
            replay.append({"key": f"{i}-{turn}#0", "text": f"<think>hm</think>{answer if turn else 'blue'}"})
    (folder / "metadata.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    (tmp_path / "replay.jsonl").write_text("\n".join(json.dumps(r) for r in replay) + "\n")
    (tmp_path / "families.yaml").write_text(FAMILY)
    family = load_families(tmp_path / "families.yaml")["Broken"]

    with caplog.at_level(logging.WARNING, logger="rs.pipeline.clean"):
        publish(
            family,
            out=tmp_path / "out",
            build_root=tmp_path / "build",
            cache_path=tmp_path / "cache.sqlite",
            progress=False,
        )
    warned = [r.getMessage() for r in caplog.records if "undecodable_image" in r.getMessage()]
    assert {line.split("(undecodable_image): ", 1)[1] for line in warned} == {
        f"{n} does not decode as an image" for n in BROKEN
    }

    build = tmp_path / "build" / "Broken"
    excluded = {
        line["key"]: (line["reason"], line.get("detail"))
        for line in map(json.loads, (build / "exclusions.jsonl").read_text().splitlines())
    }
    expected = {names.index(n): ("undecodable_image", f"{n} does not decode as an image") for n in BROKEN} | {
        names.index("gone.png"): ("missing_image", "gone.png: no such file")
    }
    assert excluded == {f"{i}-{turn}#0": why for i, why in expected.items() for turn in (0, 1)}
    clean = json.loads((build / "clean.json").read_text())
    assert clean["dropped"] == {"undecodable_image": 6, "missing_image": 2} and clean["kept_items"] == 4
    published = [p.read_bytes() for p in (tmp_path / "out" / "tester").rglob("*.parquet")]
    assert published and not any(
        files[name] in data for name in BROKEN for data in published
    )  # in no row, rejected included
    assert all(files[name] in b"".join(published) for name in ("good.jpg", "good.png"))
    stats = json.loads((tmp_path / "out" / "tester" / "Broken_rejected" / "rs" / "stats.json").read_text())
    assert "engine_error" not in {k for k, v in stats["totals"]["rejected_by_reason"].items() if v}
