"""`rs.pipeline.publish` of a whole family to the Hub, through the real client against the local Hub emulator."""

from __future__ import annotations

import math
from pathlib import Path

import datasets
import pytest
from hub_clients import TOKEN
from replay_family import write_hostile_family

from rs.cli.publish import summary
from rs.families.loader import FamilyConfigError, load_families
from rs.pipeline.publish.repo_check import RepoCheckError, check_repo
from rs.pipeline.publish.stage import publish
from rs.splits import SPLITS

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")


@pytest.fixture
def family(tmp_path: Path, images: dict[str, bytes]):
    return write_hostile_family(tmp_path, images)


def to_hub(hostile, tmp_path: Path, **kwargs):
    hostile.config.publish.target = "hub"
    return publish(
        hostile, build_root=tmp_path / "build", cache_path=tmp_path / "cache.sqlite", progress=False, **kwargs
    )


@pytest.mark.slow
def test_family_publishes_once_completely_and_then_makes_no_commit(family, tmp_path: Path, hub) -> None:
    hub.fail_next("commit", status=503)  # a transient server error on the first commit
    outcome = to_hub(family, tmp_path)
    for split in SPLITS:
        repo_id = f"tester/{family.repo_name(split)}"
        commits = [c for c in hub.commits(repo_id) if c.parent is not None]
        assert len(commits) == 1, (split, commits)
        files = hub.files(repo_id)
        assert set(outcome.report.splits[split].files) == {p.split("/", 1)[1] for p in files if p.startswith("data/")}
        assert {"README.md", "rs/stats.json", "rs/examples.json"} <= set(files)
        loaded = datasets.load_dataset(repo_id, split="train")
        assert loaded.num_rows == outcome.report.splits[split].rows
    assert all(TOKEN not in value or value == f"Bearer {TOKEN}" for value in hub.auth_headers)

    again = to_hub(family, tmp_path)
    for split in SPLITS:
        assert len([c for c in hub.commits(f"tester/{family.repo_name(split)}") if c.parent is not None]) == 1
        assert again.results[split].commit_url is None


def test_commit_conflict_then_cards_only_touches_only_the_cards(family, tmp_path: Path, hub) -> None:
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
    assert outcome.results["rejected"].commit_url


def sampled(hostile, tmp_path: Path) -> None:
    """The family's clean and sample stages, as `rs sample` runs them: a dry run then plans the repos (it samples nothing)."""
    from rs.context import BuildContext
    from rs.pipeline.sample.stage import SampleStage
    from rs.pipeline.stage import ensure

    ensure(SampleStage(), BuildContext(hostile, tmp_path / "build", tmp_path / "cache.sqlite", progress=False))


def test_dry_run_creates_nothing(family, tmp_path: Path, hub) -> None:
    sampled(family, tmp_path)
    outcome = to_hub(family, tmp_path, dry_run=True)
    assert {c.action for r in outcome.results.values() for c in r.changes} == {"add"}
    assert not any(key[1].startswith("tester/") for key in hub.repos)  # no repo was even created


@pytest.mark.slow
def test_cards_only_on_a_machine_without_the_build(family, tmp_path: Path, hub) -> None:
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


@pytest.mark.slow
def test_a_family_over_files_per_commit_goes_through_pull_requests_and_cards_only_stays_one_commit(
    family, tmp_path: Path, hub
) -> None:
    family.config.publish.files_per_commit = 2  # the assembled repos hold 7-9 files: several commits each
    sampled(family, tmp_path)
    dry = to_hub(family, tmp_path, dry_run=True)
    lines = summary(family, dry, dry_run=True).splitlines()
    for split in SPLITS:
        result = dry.results[split]
        assert result.merges == 1 and result.commits == math.ceil(len(result.changes) / 2) + 1
        assert any(
            line.endswith(
                f"would make {result.commits} commits: {result.commits - 1} on a new pull request, then its merge)"
            )
            and family.repo_name(split) in line
            for line in lines
        )

    outcome = to_hub(family, tmp_path)

    for split in SPLITS:
        repo_id = f"tester/{family.repo_name(split)}"
        [pull] = hub.pulls(repo_id)
        main = [c for c in hub.commits(repo_id) if c.parent is not None]
        assert pull.status == "merged" and [c.oid for c in main] == [pull.merge_commit]  # main moved once
        assert all(len(c.operations) <= 2 for c in pull.commits)
        assert outcome.results[split].commits == len(pull.commits) + 1
        assert datasets.load_dataset(repo_id, split="train").num_rows == outcome.report.splits[split].rows
    assert "; 0 commit" not in summary(family, outcome, dry_run=False)

    family.config.card.description = "A new description."
    to_hub(family, tmp_path, cards_only=True)
    for split in SPLITS:
        repo_id = f"tester/{family.repo_name(split)}"
        assert len(hub.pulls(repo_id)) == 1  # no pull request for a card
        assert (
            set(hub.commits(repo_id)[-1].added) == {"README.md"} and hub.commits(repo_id)[-1].author == "emulator-user"
        )


def test_files_per_commit_is_checked_in_families_yaml_and_before_the_upload(family, tmp_path: Path) -> None:
    text = (tmp_path / "families.yaml").read_text()
    assert "publish: {" in text
    (tmp_path / "bad.yaml").write_text(text.replace("publish: {", "publish: {files_per_commit: 500, ", 1))
    with pytest.raises(
        FamilyConfigError,
        match=r"bad\.yaml:[0-9]+: .*publish: files_per_commit must be a whole number "
        r"from 1 to 100 .*got 500",
    ):
        load_families(tmp_path / "bad.yaml")

    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    (repo / "README.md").write_text("card")
    with pytest.raises(RepoCheckError, match=r"publish\.files_per_commit must be a whole number from 1 to 100"):
        check_repo(repo, row_group_bytes=1_000_000, files_per_commit=0)


def test_the_check_says_up_front_when_a_repo_needs_more_commits_than_the_hourly_quota(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo = tmp_path / "repo"
    (repo / "images").mkdir(parents=True)
    for i in range(300):
        (repo / "images" / f"example-{i:04d}.png").write_bytes(b"x")
    check_repo(repo, row_group_bytes=1, files_per_commit=50)
    assert "commits" not in caplog.text
    check_repo(repo, row_group_bytes=1, files_per_commit=2)
    assert "up to 151 commits of 2 files; the Hub allows about 128 an hour per repo" in caplog.text
