"""A `--limit` trial never replaces a release (a publish of every image) in a local folder without `--force`, and the
terminal says which one a publish is. Before, `--limit 2` into an `--out` holding the full publish replaced it with
exit 0 and no word (only the card's first line said "A trial build")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from replay_family import RECOVERY_CASES

from rs.errors import UsageError

RELEASE = "  published as a release: every image of the source"
TRIAL = "  published as a TRIAL, not a release: only the first 2 images of the source were read (--limit 2); its cards say so"


def _rows(out: Path) -> int:
    return json.loads((out / "local" / "Shapes_rejected" / "rs" / "stats.json").read_text())["totals"]["source_qa"]


def test_a_trial_does_not_replace_a_release_without_force(family, tmp_path: Path, capsys) -> None:
    from rs.cli.publish import main

    config = family(RECOVERY_CASES, judge={"enabled": False}).path
    out = tmp_path / "out"
    args = ["Shapes", "--config", str(config), "--out", str(out)]
    args += ["--build-dir", str(tmp_path / "build"), "--cache", str(tmp_path / "cache.sqlite")]
    assert main(args) == 0
    assert RELEASE in capsys.readouterr().out.splitlines() and _rows(out) == 5
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    with pytest.raises(UsageError) as err:
        main([*args, "--limit", "2"])
    assert f"{out / 'local' / 'Shapes_RS_think'} holds a release of Shapes" in err.value.message
    assert "--limit 2" in err.value.message and "--force" in err.value.hint
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # nothing changed

    assert main([*args, "--limit", "2", "--force"]) == 0  # asked for: the trial replaces the release, and says so
    assert TRIAL in capsys.readouterr().out.splitlines() and _rows(out) == 2
    assert main([*args, "--limit", "2"]) == 0  # a trial over a trial needs no --force
    assert main(args) == 0  # nor a release over a trial
    assert RELEASE in capsys.readouterr().out.splitlines() and _rows(out) == 5


def test_a_trial_into_a_new_folder_says_it_is_a_trial(family, tmp_path: Path, capsys) -> None:
    from rs.cli.publish import main

    config = family(RECOVERY_CASES, judge={"enabled": False}).path
    paths = ["--build-dir", str(tmp_path / "build"), "--cache", str(tmp_path / "cache.sqlite")]
    assert main(["Shapes", "--config", str(config), "--out", str(tmp_path / "trial"), "--limit", "2", *paths]) == 0
    assert TRIAL in capsys.readouterr().out.splitlines() and _rows(tmp_path / "trial") == 2
