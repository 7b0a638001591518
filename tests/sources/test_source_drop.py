"""A source stream that drops part-way, as the Hub does after many records: retried, resumed where it stopped, the accounting exact.

The boundary patched is the network: `datasets.load_dataset` returns a real streaming
`IterableDataset` (`from_generator`) over the family's records whose generator raises
`ConnectionResetError` at given record positions, as a reset connection surfaces from a stream.
Resuming is `datasets`' own: `state_dict` / `load_state_dict` restart the generator and skip what
was read. A source that keeps dropping stops the clean stage with what to do, and nothing of it is
kept as complete.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

import datasets
import pytest
from datasets import Features, Image, Value
from faults import assert_same_published, publish_family, write_families

import rs.sources.resumable
from rs.families import load_families
from rs.pipeline.publish.stage import publish
from rs.sources.hub import SourceUnreachable
from rs.sources.resumable import RETRIES, SourceUnavailable

HUB_SOURCE = "{kind: hub, path: pools/shapes, revision: 0123abc, columns: {id: id}}"
FEATURES = Features({"id": Value("string"), "image": Image(), "question": Value("string"), "answer": Value("string")})


def hub_families(folder: Path) -> Path:
    """Alpha, its source a Hub dataset (`pools/shapes` at a pinned revision) instead of local files."""
    families = write_families(folder, names=("Alpha",))
    families.write_text(
        families.read_text().replace("{kind: files, path: Alpha/train.jsonl, columns: {id: id}}", HUB_SOURCE)
    )
    return families


def stream(folder: Path, drops: Callable[[int], bool]) -> Callable[..., datasets.IterableDataset]:
    """A `load_dataset` for `pools/shapes`: a real IterableDataset whose connection resets before record i when `drops(i)`."""

    def records() -> Iterator[dict[str, Any]]:
        for position, line in enumerate((folder / "Alpha" / "train.jsonl").read_text().splitlines()):
            if drops(position):
                raise ConnectionResetError(104, "Connection reset by peer")
            record = json.loads(line)
            record["image"] = {"bytes": (folder / "Alpha" / record["image"]).read_bytes(), "path": None}
            yield record

    def load_dataset(path: str, name: str | None = None, **kwargs: Any) -> datasets.IterableDataset:
        assert path == "pools/shapes" and kwargs["revision"] == "0123abc" and kwargs["streaming"]
        return datasets.IterableDataset.from_generator(records, features=FEATURES)

    return load_dataset


def once_at(*positions: int) -> Callable[[int], bool]:
    """The connection resets before each of these records, as many times as it is named."""
    left = Counter(positions)

    def drops(position: int) -> bool:
        if left[position]:
            left[position] -= 1
            return True
        return False

    return drops


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The families file, and Alpha published from a stream that never drops."""
    folder = tmp_path_factory.mktemp("families")
    families = hub_families(folder)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(datasets, "load_dataset", stream(folder, lambda position: False))
        publish(
            load_families(families)["Alpha"],
            out=folder / "ref" / "out",
            build_root=folder / "ref" / "build",
            cache_path=folder / "ref" / "cache.sqlite",
            progress=False,
        )
    return families, folder / "ref" / "out" / "tester"


def test_a_dropped_stream_is_resumed_after_its_last_record_and_the_accounting_closes(
    reference, tmp_path: Path, monkeypatch, caplog
) -> None:
    families, published = reference
    monkeypatch.setattr(rs.sources.resumable, "BACKOFF_S", 0.01)
    monkeypatch.setattr(datasets, "load_dataset", stream(families.parent, once_at(5, 11, 11)))
    with caplog.at_level(logging.WARNING, logger="rs.sources.resumable"):
        publish_family(families, tmp_path)
    reset = "(ConnectionResetError: [Errno 104] Connection reset by peer); resuming there in"
    assert (
        [r.getMessage() for r in caplog.records if "the stream dropped" in r.getMessage()]
        == [
            f"pools/shapes (train): the stream dropped after record 5 {reset} 0.01 s (retry 1 of 6)",
            f"pools/shapes (train): the stream dropped after record 11 {reset} 0.01 s (retry 1 of 6)",
            f"pools/shapes (train): the stream dropped after record 11 {reset} 0.02 s (retry 2 of 6)",  # in a row: it waits longer
        ]
    )
    clean = json.loads((tmp_path / "build" / "Alpha" / "clean.json").read_text())
    assert (
        clean["source_records"] == clean["source_items"] == 16 == clean["kept_items"] + clean["dropped_items"]
    )  # none read twice, none skipped
    assert_same_published(
        published, tmp_path / "out" / "tester"
    )  # the same records, ids and accounting as the unbroken stream


def test_a_stream_that_keeps_dropping_stops_the_clean_stage_and_the_same_command_finishes_later(
    reference, tmp_path: Path, monkeypatch
) -> None:
    families, published = reference
    monkeypatch.setattr(rs.sources.resumable, "BACKOFF_S", 0.01)
    monkeypatch.setattr(datasets, "load_dataset", stream(families.parent, lambda position: position == 7))
    with pytest.raises(SourceUnavailable) as caught:
        publish_family(families, tmp_path)
    assert str(caught.value) == (
        f"the source pools/shapes (train) kept dropping the connection: {RETRIES + 1} tries in a row failed "
        "after record 7 (ConnectionResetError: [Errno 104] Connection reset by peer)"
    )
    assert caught.value.hint.startswith("check the network (or the Hub's status page) and run the same command again")
    build = tmp_path / "build" / "Alpha"
    assert sorted(p.name for p in build.iterdir()) == [
        ".clean.lock",
        ".lock",
    ]  # no clean store, report or exclusions half-written

    monkeypatch.setattr(
        datasets, "load_dataset", stream(families.parent, lambda position: False)
    )  # the network is back
    publish_family(families, tmp_path)
    assert_same_published(published, tmp_path / "out" / "tester")


def test_a_hub_source_out_of_reach_is_a_plain_error_before_any_record(tmp_path: Path, monkeypatch) -> None:
    """`rs families preview` (and a build) on a Hub source with no network: what could not be reached, not a traceback."""
    from rs.cli.families import main

    families = hub_families(tmp_path)

    def unreachable(path: str, name: str | None = None, **kwargs: Any) -> datasets.IterableDataset:
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises(SourceUnreachable) as caught:
        main(["preview", "Alpha", "--config", str(families)])
    assert str(caught.value) == (
        "cannot reach the source pools/shapes (train) on the Hub "
        "(ConnectionError: Couldn't reach 'pools/shapes' on the Hub (LocalEntryNotFoundError))"
    )
    assert caught.value.hint.startswith("check the network (or the Hub's status page) and run the same command again")
