"""Hostile paths and files in an image folder: refused with a reason, never read, and the rest of the family published.

The folder's metadata names a file outside it (`../`), an absolute path elsewhere, a symlink that
leaves it, a FIFO (reading it would block), a sparse 100 MiB "image", and PNGs whose headers declare
a decompression bomb. Python's audit hook sees every file the process opens: none of those is
opened; their QA are dropped as `unsafe_image_path` or `image_too_large` with what was refused, and
publishing the same folder again gives the same bytes.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import sys
import zlib
from pathlib import Path

import pytest
from conftest import png
from faults import assert_same_published

from rs.families import load_families
from rs.pipeline.publish.stage import publish

FAMILY = """families:
  Wary:
    source: {kind: files, path: pool, columns: {id: id}}
    instruction: "\\nAnswer with one word."
    verifier: {name: exact}
    model: {id: replayed/model, revision: r1}
    engine: {kind: replay, replay_path: replay.jsonl}
    judge: {calibration_samples: 4, min_negative_agreement: 0.5}
    publish: {namespace: tester, target: local}
    card: {pretty_name: Wary, description: A folder that tries to make the build read what it should not., license: mit, citation: c}
"""

_opened: list[str] = []
_watching = False


def _audit(event: str, args: tuple) -> None:
    if _watching and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _opened.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # hooks cannot be removed: this one records only while a test watches


def png_declaring(width: int, height: int) -> bytes:
    """A small, valid PNG header declaring `width` x `height` pixels: a few bytes that would decode into gigabytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    )


TOO_LARGE = "is too large to be an image (over 89,478,485 pixels declared, or over 67,108,864 bytes)"


@pytest.fixture
def pool(tmp_path: Path) -> dict[str, Path]:
    """families.yaml and the folder, with the files that must never be read."""
    folder, elsewhere = tmp_path / "pool", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    secrets = {"parent": tmp_path / "secret.png", "absolute": elsewhere / "secret.png"}
    for path in secrets.values():
        path.write_bytes(png((1, 2, 3), size=12))  # images: they would decode, and be published
    (folder / "a.png").write_bytes(png((200, 0, 0)))
    (folder / "b.png").write_bytes(png((0, 0, 200), size=20))
    (folder / "link.png").symlink_to(secrets["parent"])
    os.mkfifo(folder / "fifo.png")
    with open(folder / "huge.png", "wb") as fh:
        fh.truncate(100 * 2**20)  # sparse: no room taken, but 100 MiB to read
    (folder / "bomb.png").write_bytes(png_declaring(100_000, 100_000))  # Pillow itself refuses to open this one
    (folder / "wide.png").write_bytes(png_declaring(10_000, 10_000))  # over the limit, under Pillow's own refusal
    names = {
        "a": "a.png",
        "b": "b.png",
        "parent": "../secret.png",
        "absolute": str(secrets["absolute"]),
        "link": "link.png",
        "fifo": "fifo.png",
        "huge": "huge.png",
        "bomb": "bomb.png",
        "wide": "wide.png",
    }
    lines, replay = [], []
    for key, name in names.items():
        for turn, (question, answer) in enumerate([("What colour is it?", "red"), ("Is it round?", "no")]):
            lines.append({"file_name": name, "id": f"{key}-{turn}", "question": question, "answer": answer})
            replay.append({"key": f"{key}-{turn}#0", "text": f"<think>hm</think>{answer if turn else 'blue'}"})
    (folder / "metadata.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    (tmp_path / "replay.jsonl").write_text("\n".join(json.dumps(r) for r in replay) + "\n")
    (tmp_path / "families.yaml").write_text(FAMILY)
    return {
        "families": tmp_path / "families.yaml",
        **secrets,
        "link": folder / "link.png",
        "fifo": folder / "fifo.png",
        "huge": folder / "huge.png",
    }


def test_hostile_paths_and_files_are_refused_unread_with_their_reason(
    pool: dict[str, Path], tmp_path: Path, caplog
) -> None:
    global _watching
    family = load_families(pool["families"])["Wary"]
    _opened.clear()
    _watching = True
    try:
        with caplog.at_level(logging.WARNING, logger="rs.pipeline.clean"):
            publish(
                family,
                out=tmp_path / "out",
                build_root=tmp_path / "build",
                cache_path=tmp_path / "cache.sqlite",
                progress=False,
            )
    finally:
        _watching = False
    never = {str(pool[k]) for k in ("parent", "absolute", "fifo", "huge")} | {os.path.realpath(pool["link"])}
    assert [
        path for path in _opened if os.path.realpath(path) in never or path in never
    ] == []  # not one of them opened

    build = tmp_path / "build" / "Wary"
    excluded = {
        line["key"]: (line["reason"], line.get("detail"))
        for line in map(json.loads, (build / "exclusions.jsonl").read_text().splitlines())
    }
    folder = pool["link"].parent
    expected = {
        "parent": ("unsafe_image_path", f"../secret.png leaves {folder} by its path"),
        "absolute": ("unsafe_image_path", f"{pool['absolute']} leaves {folder} by its path"),
        "link": ("unsafe_image_path", f"link.png leaves {folder} through a symlink"),
        "fifo": ("unsafe_image_path", "fifo.png is not a regular file"),
        "huge": ("image_too_large", "huge.png is 104.9 MB, over 67.1 MB"),
        "bomb": ("image_too_large", f"bomb.png {TOO_LARGE}"),  # refused from its header, never decoded
        "wide": ("image_too_large", f"wide.png {TOO_LARGE}"),
    }
    assert excluded == {f"{key}-{turn}#0": why for key, why in expected.items() for turn in (0, 1)}
    clean = json.loads((build / "clean.json").read_text())
    assert clean["dropped"] == {"image_too_large": 6, "unsafe_image_path": 8} and clean["kept_items"] == 4
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "image refused unread (unsafe_image_path): " + f"../secret.png leaves {folder}" in warned
    assert f"image dropped (image_too_large): wide.png {TOO_LARGE}" in warned

    secret = pool["parent"].read_bytes()
    published = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert published and not any(secret in p.read_bytes() for p in published)  # no byte of them published
    assert (
        json.loads((tmp_path / "out" / "tester" / "Wary_rejected" / "rs" / "stats.json").read_text())["cleaning"][
            "dropped"
        ]
        == clean["dropped"]
    )

    publish(
        family,
        out=tmp_path / "again",
        build_root=tmp_path / "build2",
        cache_path=tmp_path / "cache2.sqlite",
        progress=False,
    )
    assert_same_published(tmp_path / "out" / "tester", tmp_path / "again" / "tester")
