"""`rs.publish` of a whole family to the Hub, through the real client against the local Hub emulator."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest

from rs.publish import publish
from rs.schema import SPLITS
from test_cards import family  # noqa: F401  (the Hostile family fixture)
from test_hub import TOKEN, blocked_hosts, hub, sleeps  # noqa: F401  (emulator fixtures)

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")


def to_hub(hostile, tmp_path: Path, **kwargs):
    hostile.config.publish.target = "hub"
    return publish(hostile, build_root=tmp_path / "build", cache_path=tmp_path / "cache.sqlite", progress=False, **kwargs)


def test_family_publishes_once_completely_and_then_makes_no_commit(family, tmp_path: Path, hub) -> None:  # noqa: F811
    hub.fail_next("commit", status=503)  # a transient server error on the first commit
    outcome = to_hub(family, tmp_path)
    for split in SPLITS:
        repo_id = f"tester/{family.repo_name(split)}"
        commits = [c for c in hub.commits(repo_id) if c.parent is not None]
        assert len(commits) == 1, (split, commits)
        files = hub.files(repo_id)
        assert set(outcome["report"].splits[split].files) == {p.split("/", 1)[1] for p in files if p.startswith("data/")}
        assert {"README.md", "rs/stats.json", "rs/examples.json"} <= set(files)
        loaded = datasets.load_dataset(repo_id, split="train")
        assert loaded.num_rows == outcome["report"].splits[split].rows
    assert all(TOKEN not in value or value == f"Bearer {TOKEN}" for value in hub.auth_headers)

    again = to_hub(family, tmp_path)
    for split in SPLITS:
        assert len([c for c in hub.commits(f"tester/{family.repo_name(split)}") if c.parent is not None]) == 1
        assert again["results"][split].commit_url is None


def test_commit_conflict_then_cards_only_touches_only_the_cards(family, tmp_path: Path, hub) -> None:  # noqa: F811
    hub.conflict_next_commit()  # someone else commits first: the parent is stale
    to_hub(family, tmp_path)
    repo_id = f"tester/{family.repo_name('rejected')}"
    assert "README.md" in hub.files(repo_id)
    before = len(hub.commits(repo_id))
    (tmp_path / "families.yaml").write_text((tmp_path / "families.yaml").read_text())
    family.config.card.description = "A new description."
    outcome = to_hub(family, tmp_path, cards_only=True)
    commits = hub.commits(repo_id)
    assert len(commits) == before + 1
    assert set(commits[-1].added) == {"README.md"} and not commits[-1].deleted
    assert "A new description." in hub.files(repo_id)["README.md"].decode()
    assert outcome["results"]["rejected"].commit_url


def test_dry_run_creates_nothing(family, tmp_path: Path, hub) -> None:  # noqa: F811
    outcome = to_hub(family, tmp_path, dry_run=True)
    assert {c.action for r in outcome["results"].values() for c in r.changes} == {"add"}
    assert not any(key[1].startswith("tester/") for key in hub.repos)  # no repo was even created


def test_cards_only_on_a_machine_without_the_build(family, tmp_path: Path, hub) -> None:  # noqa: F811
    import shutil

    to_hub(family, tmp_path)
    repo_id = f"tester/{family.repo_name('think')}"
    card = hub.files(repo_id)["README.md"]
    before = len(hub.commits(repo_id))
    shutil.rmtree(tmp_path / "build")  # another machine: only the published repos
    family.config.card.description = "Regenerated elsewhere."
    to_hub(family, tmp_path, cards_only=True)
    commits = hub.commits(repo_id)
    assert len(commits) == before + 1 and set(commits[-1].added) == {"README.md"}
    assert hub.files(repo_id)["README.md"] != card and b"Regenerated elsewhere." in hub.files(repo_id)["README.md"]
