"""The benchmark scripts run and print their table (their figures are for people, not for asserts)."""

from __future__ import annotations

import subprocess
import sys

from checkout import ROOT


def test_verifier_bench_compares_with_an_older_tree_in_one_process() -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "verifiers.py"),
            "--n",
            "2000",
            "--repeat",
            "2",
            "--only",
            "alnum,mcq",
            "--against",
            "HEAD",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert out.returncode in (0, 1), out.stderr  # 1: a target missed on a busy machine, still a complete table
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[2:]}
    assert set(rows) == {"alnum", "mcq"}, out.stdout
    for row in rows.values():
        assert row[1] == "2,000" and row[6].endswith("x"), row  # pairs, ..., ratio against HEAD


def test_verifier_bench_names_a_bad_revision() -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "verifiers.py"),
            "--n",
            "10",
            "--only",
            "alnum",
            "--against",
            "no-such-rev",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert out.returncode != 0 and "--against no-such-rev" in out.stderr
