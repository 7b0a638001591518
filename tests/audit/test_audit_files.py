"""`rs audit` on a real family (TinyCLEVR with every repo it can have) whose cards and files are changed on purpose.

Every number a card prints is either checked or not printed: each single-number edit of each card must fail the
audit. An image whose bytes no longer hash to its `image_sha256` fails it in every mode. An audit during a publish is
refused, naming the publish (exit 3). A target that is not what rs writes is exit 2 naming the file, never a traceback
with exit 1, which says the numbers disagree.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rs.audit import audit
from rs.cli import run
from rs.cli.main import main as rs_main

pytestmark = [pytest.mark.vllm]

REPOS = ("TinyCLEVR_RS_think", "TinyCLEVR_RS_nothink", "TinyCLEVR_rejected", "TinyCLEVR_RS_pairs")
REPOS += ("TinyCLEVR_RS_samples", "TinyCLEVR_RS_rl")


@pytest.fixture
def family(tinyclevr_every_repo: Path, tmp_path: Path) -> Path:
    """A copy of the published family's folder (out/local), to change."""
    shutil.copytree(tinyclevr_every_repo / "out" / "local", tmp_path / "local")
    return tmp_path / "local"


def test_the_published_family_passes_and_has_every_repo(tinyclevr_every_repo: Path) -> None:
    local = tinyclevr_every_repo / "out" / "local"
    assert sorted(p.name for p in local.iterdir() if not p.name.startswith(".")) == sorted(REPOS)
    for name in REPOS:
        result = audit(local / name, build=tinyclevr_every_repo / "build")
        assert result.ok, result.render()


@pytest.mark.slow
@pytest.mark.parametrize("name", REPOS)
def test_every_single_number_edit_of_a_card_fails_the_audit(family: Path, name: str) -> None:
    """Every run of digits on the card (front matter and text: counts, rates, thresholds, parameters, the licence, the
    examples, the digests) made one more, one at a time, the other cards and files left as published: each edit is
    a finding (the issue found 29 of 60 edits of the think card and 5 of 16 of the samples card passing). The think
    card's every number; the other cards' every number on their own lines, a sixth of those on lines the think card
    shares (3,880 audits became about 1,500)."""
    card = family / name / "README.md"
    text = card.read_text(encoding="utf-8")
    passed = []
    edits = list(re.finditer(r"\d+", text))
    assert len(edits) > 400
    if name != "TinyCLEVR_RS_think":
        # A line the think card has too is edited there, every number: here every number of this card's own lines and
        # every sixth of the shared ones (a check this card's audit skipped would lose a whole section, not one number).
        think = set((family / "TinyCLEVR_RS_think" / "README.md").read_text(encoding="utf-8").splitlines())
        lines = text.splitlines()
        shared = [m for m in edits if lines[text.count("\n", 0, m.start())] in think]
        edits = [m for m in edits if m not in shared] + shared[::6]
        assert len(edits) > 90
    try:
        for match in edits:
            card.write_text(
                text[: match.start()] + str(int(match.group()) + 1) + text[match.end() :], encoding="utf-8"
            )
            if audit(family / name).ok:
                line = text.count("\n", 0, match.start()) + 1
                passed.append(f"README.md:{line}: {match.group()!r} in {text.splitlines()[line - 1][:120]!r}")
    finally:
        card.write_text(text, encoding="utf-8")
    assert not passed, f"{len(passed)} of {len(edits)} single-number edits pass the audit:\n" + "\n".join(passed)


def _rewrite_shard(repo: Path, change) -> None:
    shard = next((repo / "data").glob("*.parquet"))
    table = pq.read_table(shard)
    rows = table.to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)


def _flip_last_byte(image: dict) -> None:
    data = image["bytes"]
    image["bytes"] = data[:-1] + bytes([data[-1] ^ 1])


@pytest.mark.parametrize("name", ["TinyCLEVR_RS_think", "TinyCLEVR_RS_rl", "TinyCLEVR_RS_samples"])
def test_an_image_whose_bytes_do_not_hash_to_its_image_sha256_fails_in_every_mode(
    family: Path, tinyclevr_every_repo: Path, name: str
) -> None:
    column = "images" if name.endswith("_rl") else "image"

    def flip(rows: list[dict]) -> None:
        image = rows[1][column][0] if column == "images" else rows[1][column]
        _flip_last_byte(image)

    _rewrite_shard(family / name, flip)
    for build in (None, tinyclevr_every_repo / "build"):
        result = audit(family / name, build=build)
        found = [f for f in result.findings if "image_sha256" in f.where]
        assert [f.where for f in found] == [f"{name}/data/train-00000-of-00001.parquet row 1 image_sha256"], (
            result.render()
        )
        assert "the SHA-256 of the image bytes of row 1" in found[0].what


def test_an_audit_during_a_publish_is_refused_naming_it(family: Path, capsys) -> None:
    """A publish holds `.rs-publish/<FAMILY>.lock` for its whole run: the audit is refused (exit 3), naming it; a
    stopped publish's journal (switches not all made) is refused too; once the lock is free the audit runs."""
    lock = family / ".rs-publish" / "TinyCLEVR.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDWR)\nfcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\ntime.sleep(60)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(SystemExit) as exit_:
            run(lambda: rs_main(["audit", str(family / "TinyCLEVR_RS_think")]))
        err = capsys.readouterr().err
        assert exit_.value.code == 3, err
        assert f"TinyCLEVR's repos are being published by process {holder.pid}" in err
    finally:
        holder.kill()
        holder.wait()
    journal = family / ".rs-publish" / "TinyCLEVR" / "journal.json"
    journal.parent.mkdir()
    journal.write_text(json.dumps({"family": "TinyCLEVR", "repos": []}))
    with pytest.raises(SystemExit) as exit_:
        run(lambda: rs_main(["audit", str(family / "TinyCLEVR_RS_think")]))
    assert exit_.value.code == 3 and "was stopped while it switched the repos in" in capsys.readouterr().err
    journal.unlink()
    assert rs_main(["audit", str(family / "TinyCLEVR_RS_think")]) == 0
    # and a publish that starts while the audit reads is refused by the audit's shared lock
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        with pytest.raises(BlockingIOError):
            other = os.open(lock, os.O_RDWR)
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(other)
    finally:
        os.close(fd)


def _truncate_shard(repo: Path) -> None:
    shard = next((repo / "data").glob("*.parquet"))
    shard.write_bytes(shard.read_bytes()[:5000])


MALFORMED = {  # what is done to the think repo (or a sibling), what the error names
    "no front matter": (
        lambda r: (r / "README.md").write_text((r / "README.md").read_text().split("\n", 1)[1]),
        "TinyCLEVR_RS_think/README.md: no YAML front matter",
    ),
    "not UTF-8": (
        lambda r: (r / "README.md").write_bytes((r / "README.md").read_bytes() + b"\xff\xfe"),
        "TinyCLEVR_RS_think/README.md: not UTF-8 text",
    ),
    "stats.json not JSON": (
        lambda r: (r / "rs" / "stats.json").write_text('{"family": "TinyCLEVR",'),
        "TinyCLEVR_RS_think/rs/stats.json: not JSON (line 1, column 24",
    ),
    "stats.json not an object": (
        lambda r: (r / "rs" / "stats.json").write_text("[1]"),
        "TinyCLEVR_RS_think/rs/stats.json: holds a JSON list",
    ),
    "stats.json not a report": (
        lambda r: (r / "rs" / "stats.json").write_text('{"family": "TinyCLEVR"}'),
        "TinyCLEVR_RS_think/rs/stats.json",
    ),
    "front matter not YAML": (
        lambda r: (r / "README.md").write_text("---\nlicense: [\n---\n" + (r / "README.md").read_text()),
        "TinyCLEVR_RS_think/README.md: its front matter is not YAML",
    ),
    "a truncated shard": (
        _truncate_shard,
        "TinyCLEVR_RS_think/data/train-00000-of-00001.parquet: not a whole parquet",
    ),
    "a sibling's truncated shard": (
        lambda r: _truncate_shard(r.parent / "TinyCLEVR_RS_samples"),
        "TinyCLEVR_RS_samples/data/train-00000-of-00001.parquet: not a whole parquet",
    ),
    "examples.json not JSON": (
        lambda r: (r / "rs" / "examples.json").write_text("[{"),
        "TinyCLEVR_RS_think/rs/examples.json: not JSON",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_input_is_exit_2_naming_the_file(family: Path, case: str, capsys) -> None:
    damage, said = MALFORMED[case]
    damage(family / "TinyCLEVR_RS_think")
    with pytest.raises(SystemExit) as exit_:
        run(lambda: rs_main(["audit", str(family / "TinyCLEVR_RS_think")]))
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: ") and said in err, err
    assert "Traceback" not in err


def test_build_names_a_changed_generation_a_changed_solution_a_damaged_store(
    family: Path, tinyclevr_every_repo: Path, tmp_path: Path
) -> None:
    """`--build`: the samples repo's generations against the build's items and recovery stores, the RL repo's `solution`
    against the cleaned question's reference, each shard against the build's sealed copy, each store against its
    checksums."""
    said: dict[str, str] = {}

    def answer(rows: list[dict]) -> None:
        g = rows[0]["generations"][0]
        said["samples"] = g["text"]
        g["text"] = g["text"] + " "

    def solution(rows: list[dict]) -> None:
        said["rl"] = rows[0]["solution"]
        rows[0]["solution"] = rows[0]["solution"] + "0"

    _rewrite_shard(family / "TinyCLEVR_RS_samples", answer)
    _rewrite_shard(family / "TinyCLEVR_RS_rl", solution)
    build = tinyclevr_every_repo / "build"
    result = audit(family / "TinyCLEVR_RS_think", build=build)
    found = {(f.where, f.what.split(" of ")[0]): (f.stated, f.truth) for f in result.findings}
    assert found[("TinyCLEVR_RS_samples/data row 0", "the greedy generation's text")] == (
        said["samples"] + " ",
        said["samples"],
    ), result.render()
    assert found[("TinyCLEVR_RS_rl/data row 0", "solution")] == (said["rl"] + "0", said["rl"]), result.render()
    shas = [f for f in result.findings if f.what.startswith("the SHA-256 of TinyCLEVR_RS_")]
    assert sorted(f.where for f in shas) == [
        "TinyCLEVR_RS_rl/data/train-00000-of-00001.parquet",
        "TinyCLEVR_RS_samples/data/train-00000-of-00001.parquet",
    ], result.render()
    assert audit(family / "TinyCLEVR_RS_think").ok  # without the build, the think repo's own files agree

    damaged = tmp_path / "build"
    shutil.copytree(build, damaged)
    store = damaged / "TinyCLEVR" / "items"
    shard = sorted(store.glob("*.parquet"))[0]
    data = bytearray(shard.read_bytes())
    data[100] ^= 1
    shard.write_bytes(bytes(data))
    result = audit(tinyclevr_every_repo / "out" / "local" / "TinyCLEVR_RS_think", build=damaged)
    assert [str(f) for f in result.findings] == [
        f"{store}: the build's items store: {shard.name} does not match its checksum: the store is not what the build "
        "sealed (rebuild the family to restore it)"
    ], result.render()
