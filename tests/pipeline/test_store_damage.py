"""A build folder trusted no more than the cache: a store damaged in place is found and rebuilt, never published as is.

Each store of a finished build (the clean rows, the items, the recovery samples, a split) gets one byte
changed in place, its size unchanged, or the items store is deleted or truncated; the same publish
then says in one line which store it rebuilds and from what, and publishes the bytes of an undamaged run.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from faults import assert_same_published, publish_family, write_families

from rs.util.checksums import MANIFEST, damage, seal


def flip_one_byte(path: Path) -> None:
    """One byte in the middle of `path` changed where it lies: the size and the name stay."""
    with path.open("r+b") as fh:
        fh.seek(path.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0x5A]))


def truncate(path: Path) -> None:
    with path.open("r+b") as fh:
        fh.truncate(path.stat().st_size // 3)


def delete_store(folder: Path) -> None:
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()


DAMAGES = {
    "clean byte": ("clean/rows-00000.parquet", flip_one_byte, "the clean store"),
    "items byte": ("items/items-00000.parquet", flip_one_byte, "the items store"),
    "recovery byte": ("recovery/recovery-00000.parquet", flip_one_byte, "the recovery store"),
    "think split byte": ("splits/think/train-00000-of-00001.parquet", flip_one_byte, "the think split"),
    "rejected split byte": ("splits/rejected/train-00000-of-00001.parquet", flip_one_byte, "the rejected split"),
    "items truncated": ("items/items-00000.parquet", truncate, "the items store"),
    "items deleted": ("items", delete_store, "the items store"),
}


@pytest.fixture(scope="module")
def families(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The families file (Alpha with a recovery pass) and a folder where Alpha was published without a fault."""
    folder = tmp_path_factory.mktemp("damage")
    path = write_families(folder, names=("Alpha",))
    path.write_text(
        path.read_text().replace("    publish:", "    recovery: {samples: 2, temperature: 0.7}\n    publish:")
    )
    publish_family(path, folder / "ref")
    return path, folder / "ref"


@pytest.mark.parametrize("name", DAMAGES)
def test_a_store_damaged_in_place_is_rebuilt_and_the_publish_is_unchanged(
    families, tmp_path: Path, caplog, name: str
) -> None:
    path, ref = families
    publish_family(path, tmp_path)
    relative, hurt, what = DAMAGES[name]
    target = tmp_path / "build" / "Alpha" / relative
    assert target.exists(), relative
    hurt(target)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        publish_family(path, tmp_path)
    said = [r.getMessage() for r in caplog.records if "cannot be used as it is" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"Alpha: {what} ") and "rebuilt from" in said[0], said
    assert_same_published(ref / "out", tmp_path / "out")
    store = tmp_path / "build" / "Alpha" / relative.rsplit("/", 1)[0]
    assert damage(store) is None  # rebuilt whole, and sealed again


def test_a_manifest_names_the_first_problem(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "a.parquet").write_bytes(b"abc")
    assert damage(store) == f"it has no {MANIFEST} (written by an older rs, or not whole)"
    seal(store)
    assert damage(store) is None
    (store / "a.parquet").write_bytes(b"abd")
    assert damage(store) == "a.parquet does not match its checksum"
    (store / "a.parquet").unlink()
    assert damage(store) == "a.parquet is missing"
    seal(store)
    (store / "b.parquet").write_bytes(b"")
    assert damage(store) == "b.parquet is not one of its files"
    assert damage(tmp_path / "nowhere") == "it is missing"
