"""Several processes over disjoint shards share one cache; the full stage then finds everything cached."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import ROOT
from family_yaml import MINIMAL, ONE_WORD, family_yaml

from rs.store import read_clean_rows

FAMILY = family_yaml(
    "Sharded",
    MINIMAL,
    source={"seed": 5, "num_images": 30, "questions_per_image": 3},
    instruction=ONE_WORD,
    model={"id": "replayed/model"},
    engine={"kind": "replay", "replay_path": "replay.jsonl", "batch_size": 8},
    card={"pretty_name": "S", "citation": "c"},
)


@pytest.mark.slow
def test_disjoint_shards_in_parallel_then_full_run_is_cached(tmp_path: Path) -> None:
    (tmp_path / "families.yaml").write_text(FAMILY)
    from rs.sources.synthetic import SyntheticSource

    lines = []
    for record in SyntheticSource(seed=5, num_images=30, questions_per_image=3):
        for q in record.qa:
            lines.append(
                json.dumps({"key": q.key, "text": f"<think>look</think>{q.answer if q.turn % 2 else 'no idea'}"})
            )
    (tmp_path / "replay.jsonl").write_text("\n".join(lines))

    def cmd(*extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "rs.sample",
            "Sharded",
            "--config",
            str(tmp_path / "families.yaml"),
            "--build-dir",
            str(tmp_path / "build"),
            "--cache",
            str(tmp_path / "cache.sqlite"),
            *extra,
        ]

    workers = [
        subprocess.Popen(cmd("--shard", f"{i}/3"), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(3)
    ]
    reports = []
    for w in workers:
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0, err[-2000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    total = sum(len(row.qa) for row in read_clean_rows(tmp_path / "build" / "Sharded" / "clean"))
    assert sum(r["items"] for r in reports) == total and all(r["items"] > 0 for r in reports)
    assert sum(r["sampling_engine_calls"] for r in reports) == total  # disjoint: each item asked once

    full = subprocess.run(cmd(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert full.returncode == 0, full.stderr[-2000:]
    report = json.loads(full.stdout.strip().splitlines()[-1])
    assert report["items"] == total and report["sampling_engine_calls"] == 0


@pytest.mark.parametrize(
    ("shard", "message"),
    [
        ("3/2", "--shard 3/2: I counts the shards from 0 to N - 1 (here 0/2 to 1/2)"),
        ("0/0", "--shard 0/0: N is the number of shards, at least 1"),
        ("x", "--shard expects I/N, e.g. 0/4"),
    ],
)
def test_a_shard_outside_its_count_is_a_usage_error(shard: str, message: str, capsys) -> None:
    from rs.cli.sample import main

    with pytest.raises(SystemExit) as exit:
        main(["TinyCLEVR", f"--shard={shard}"])
    assert exit.value.code == 2 and message in capsys.readouterr().err


def test_the_clean_lock_is_waited_for_and_re_entered_by_its_holder(tmp_path: Path) -> None:
    import threading

    from rs.util.locks import clean_lock

    order: list[str] = []

    def second() -> None:
        with clean_lock(tmp_path):
            order.append("second")

    with clean_lock(tmp_path):
        with clean_lock(tmp_path):  # the same thread again: no deadlock
            order.append("first")
        waiting = threading.Thread(target=second)
        waiting.start()
        waiting.join(timeout=0.5)
        assert waiting.is_alive()  # another shard waits while one cleans
        order.append("first done")
    waiting.join(timeout=30)
    assert order == ["first", "first done", "second"]
