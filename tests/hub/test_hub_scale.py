"""Publishing a repo of a thousand shards through the REAL huggingface_hub client, against the Hub emulator.

Bounded commits on a pull request and one merge on main; a run killed half-way (SIGKILL at a commit
boundary, in a child process) resumed without uploading anything twice; a storm of 429s waited out as
the Hub asks; stale pull requests closed, never merged; an unchanged re-run that makes no commit.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hub_clients import TOKEN, local_files, point_clients_at
from hub_server import Commit, HubServer, Repo, running_hub
from hub_state import COMMIT_QUOTA_MESSAGE

import rs.hub.retry
from rs.hub import PublishError, format_changes, publish_folder

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")

REPO = "rs-test/large"
SHARDS = 1_000
PER_COMMIT = 50
OLD = {
    "README.md": b"---\nlicense: mit\n---\n# old build\n",
    **{f"data/train-{i:05d}-of-00003.parquet": f"old shard {i}".encode() for i in range(3)},
}


def _write_repo(root: Path, shards: int, *, salt: str = "") -> Path:
    """An assembled repo of `shards` one-row parquet files (each distinct) and a card."""
    (root / "data").mkdir(parents=True)
    (root / "README.md").write_text(f"---\nlicense: mit\n---\n# {shards} shards {salt}\n")
    for i in range(shards):
        pq.write_table(
            pa.table({"id": [i], "text": [f"row {i} {salt}"]}),
            root / "data" / f"train-{i:05d}-of-{shards:05d}.parquet",
        )
    return root


@pytest.fixture(scope="module")
def thousand(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_repo(tmp_path_factory.mktemp("large") / "repo", SHARDS)


def _copy(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / "repo"))


def _main_files(server: HubServer) -> dict[str, bytes]:
    files = server.files(REPO)
    files.pop(".gitattributes")
    return files


def _watch_main(server: HubServer) -> list[dict[str, bytes]]:
    """Every state of main a reader could see, recorded after each commit the emulator applies."""
    seen: list[dict[str, bytes]] = []

    def record(repo: Repo, commit: Commit) -> None:
        if repo.repo_id == REPO:
            seen.append({p: b.data for p, b in repo.head.files.items() if p != ".gitattributes"})

    server.after_commit = record
    return seen


def _assert_uploaded_once(server: HubServer, folder: Path) -> None:
    counts = {key: n for key, n in server.uploads.items() if key[0] == REPO}
    assert max(counts.values()) == 1, sorted((n, sha) for (_, sha), n in counts.items() if n > 1)[:5]


# --------------------------------------------------------------------------------------------- tests


def test_a_thousand_shards_go_up_in_bounded_commits_and_main_moves_once(
    hub: HubServer, thousand: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hub.seed(REPO, OLD)
    old = _main_files(hub)
    readers = _watch_main(hub)
    operations = SHARDS + 1 + 3  # the new shards and card, the old shards deleted
    expected = math.ceil(operations / PER_COMMIT)

    dry = publish_folder(thousand, REPO, dry_run=True, files_per_commit=PER_COMMIT)
    assert (dry.commits, dry.merges) == (expected + 1, 1)
    assert f"; would make {expected + 1} commits: {expected} on a new pull request, then its merge" in format_changes(
        dry, dry_run=True
    )
    assert hub.endpoint_calls("commit") == 0 and hub.pulls(REPO) == []

    caplog.set_level(logging.INFO)
    result = publish_folder(thousand, REPO, files_per_commit=PER_COMMIT, progress=True)

    [pull] = hub.pulls(REPO)
    assert pull.status == "merged" and len(pull.commits) == expected
    assert all(len(c.operations) <= PER_COMMIT for c in pull.commits)
    assert sum(len(c.operations) for c in pull.commits) == operations
    merge = hub.commits(REPO)[-1]
    assert hub.commits(REPO)[-2].author == "seed" and merge.oid == pull.merge_commit  # main moved once
    assert merge.title.endswith(f"(#{pull.num})")
    assert _main_files(hub) == local_files(thousand)
    assert readers and all(state in (old, local_files(thousand)) for state in readers)  # old or new, never a mix
    assert readers[-1] == local_files(thousand) and readers.count(local_files(thousand)) == 1
    assert (result.commits, result.merges) == (expected + 1, 1) and result.commit_url.endswith(merge.oid)
    assert result.pull_request.endswith(f"/discussions/{pull.num}")
    _assert_uploaded_once(hub, thousand)
    assert re.search(
        rf"uploading {REPO}: ([0-9.]+kB)/\1 \([0-9.]+kB/s, done in .*\[files={operations}/{operations}, "
        rf"commits={expected}\]",
        caplog.text,
    )  # the bar's log line: bytes, files and commits

    calls = {name: hub.endpoint_calls(name) for name in ("commit", "preupload", "lfs_batch", "lfs_upload", "merge")}
    again = publish_folder(thousand, REPO, files_per_commit=PER_COMMIT)

    assert again.commits == 0 and not again.committed and hub.commits(REPO)[-1] is merge
    assert {name: hub.endpoint_calls(name) for name in calls} == calls  # nothing sent, not even a preupload
    assert len(hub.pulls(REPO)) == 1


CHILD = """
import sys
from rs.hub import publish_folder
publish_folder(sys.argv[1], sys.argv[2], files_per_commit=int(sys.argv[3]))
"""


def _child_env(server: HubServer, home: Path) -> dict[str, str]:
    """The environment of a separate `rs` process pointed at the emulator (its clients read it at import)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(
        HF_ENDPOINT=server.url,
        HF_TOKEN=TOKEN,
        HF_HOME=str(home),
        HF_HUB_DISABLE_XET="1",
        HF_HUB_OFFLINE="0",
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        NO_PROXY="127.0.0.1,localhost",
    )
    return env


def test_killed_half_way_the_rerun_resumes_its_pull_request_and_uploads_nothing_twice(
    hub: HubServer, thousand: Path, tmp_path: Path
) -> None:
    hub.seed(REPO, OLD)
    old = _main_files(hub)
    expected = math.ceil((SHARDS + 1 + 3) / PER_COMMIT)
    child: list[subprocess.Popen] = []

    def kill_after_half(repo: Repo, commit: Commit) -> None:
        pulls = repo.pulls.values()
        if any(len(pull.commits) == expected // 2 and pull.head is commit for pull in pulls):
            os.kill(child[0].pid, signal.SIGKILL)  # applied on the Hub, its answer never read
            child[0].wait(timeout=30)

    hub.after_commit = kill_after_half
    child.append(
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(thousand), REPO, str(PER_COMMIT)],
            env=_child_env(hub, tmp_path / "hf_child"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    )
    output = child[0].communicate(timeout=240)[0].decode(errors="replace")

    assert child[0].returncode == -signal.SIGKILL, output[-3000:]
    [pull] = hub.pulls(REPO)
    assert pull.status == "open" and len(pull.commits) == expected // 2
    assert _main_files(hub) == old  # readers still see the old dataset
    uploaded_before = sum(n for (repo_id, _), n in hub.uploads.items() if repo_id == REPO)
    assert uploaded_before >= (expected // 2) * PER_COMMIT - 3

    hub.after_commit = None
    result = publish_folder(thousand, REPO, files_per_commit=PER_COMMIT)

    assert hub.pulls(REPO) == [pull] and pull.status == "merged"  # the same pull request, resumed
    assert len(pull.commits) == expected and all(len(c.operations) <= PER_COMMIT for c in pull.commits)
    assert (result.commits, result.merges) == (expected - expected // 2 + 1, 1)
    assert _main_files(hub) == local_files(thousand)
    assert [c.author for c in hub.commits(REPO)] == ["hub", "seed", "emulator-user"]  # one merge on main
    _assert_uploaded_once(hub, thousand)
    assert sum(n for (repo_id, _), n in hub.uploads.items() if repo_id == REPO) == SHARDS + 1  # each file once


@pytest.fixture
def limited_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, blocked_hosts: list[str]) -> Iterator[HubServer]:
    """An emulator with the Hub's commit quota (4 commits an hour per repo here) on a clock that waits advance."""
    now = [0.0]

    def wait(seconds: float) -> None:
        now[0] += seconds
        waits.append(seconds)

    waits: list[float] = []
    monkeypatch.setattr(rs.hub.retry, "_sleep", wait)
    with running_hub(commit_limit=(4, 3600.0), clock=lambda: now[0]) as server:
        point_clients_at(monkeypatch, server.url, tmp_path / "hf_home")
        server.waits = waits  # type: ignore[attr-defined]
        server.now = now  # type: ignore[attr-defined]
        yield server
        assert server.unhandled == []


def test_a_storm_of_429s_is_waited_out_as_the_hub_asks(limited_hub: HubServer, tmp_path: Path) -> None:
    server = limited_hub
    folder = _write_repo(tmp_path / "repo", 400)
    expected = math.ceil(401 / PER_COMMIT)  # 9 on the pull request, then the merge: 10 commits, 4 an hour

    result = publish_folder(folder, REPO, files_per_commit=PER_COMMIT, max_attempts=2)

    refused = server.limiter.refused
    assert server.waits == refused  # every 429 waited out, exactly as long as it asked
    assert refused == [3600, 3600] and server.now[0] == 7200  # 10 commits at 4 an hour: two waits of an hour
    [pull] = server.pulls(REPO)
    assert pull.status == "merged" and len(pull.commits) == expected  # no batch lost or sent twice
    assert (result.commits, result.merges) == (expected + 1, 1)
    assert _main_files(server) == local_files(folder)
    _assert_uploaded_once(server, folder)


def test_429s_do_not_use_up_the_attempts_and_are_answered_without_a_header_by_a_long_backoff(
    hub: HubServer, tmp_path: Path, sleeps: list[float]
) -> None:
    folder = _write_repo(tmp_path / "repo", 120)
    hub.fail_next("commit", status=429, retry_after=7, times=6)
    hub.fail_next("merge", status=429, times=2)  # no Retry-After: the commit quota is hourly, so minutes

    result = publish_folder(folder, REPO, files_per_commit=PER_COMMIT, max_attempts=2)

    assert sleeps == [7.0] * 6 + [60.0, 120.0]
    assert result.merges == 1 and len(hub.pulls(REPO)[0].commits) == 3
    assert _main_files(hub) == local_files(folder)

    hub.fail_next("commit", status=429, retry_after=1, times=rs.hub.retry.RATE_LIMIT_MAX_WAITS + 1)
    (folder / "README.md").write_text("changed\n")
    with pytest.raises(PublishError, match=r"kept refusing a commit .* 429 .* Run the command again later"):
        publish_folder(folder, REPO, files_per_commit=PER_COMMIT)
    assert COMMIT_QUOTA_MESSAGE.startswith("You have exceeded our hourly quotas")


def _fail_after(server: HubServer, commits: int, status: int = 403) -> None:
    """The Hub refuses the pull request's commit after `commits` of them (an error a retry cannot fix)."""

    def refuse(repo: Repo, commit: Commit) -> None:
        if any(len(pull.commits) == commits and pull.head is commit for pull in repo.pulls.values()):
            server.fail_next("commit", status=status)
            server.after_commit = None

    server.after_commit = refuse


def test_a_pull_request_of_an_older_build_is_closed_not_merged(hub: HubServer, tmp_path: Path) -> None:
    folder = _write_repo(tmp_path / "repo", 200)
    _fail_after(hub, 2)
    with pytest.raises(PublishError, match="write access"):
        publish_folder(folder, REPO, files_per_commit=PER_COMMIT)
    [older] = hub.pulls(REPO)
    assert older.status == "open" and len(older.commits) == 2 and len(hub.commits(REPO)) == 1
    for i in range(5):  # the next build changes five shards and the card
        pq.write_table(pa.table({"id": [i], "text": ["rebuilt"]}), folder / "data" / f"train-{i:05d}-of-00200.parquet")
    (folder / "README.md").write_text("---\nlicense: mit\n---\n# rebuilt\n")

    result = publish_folder(folder, REPO, files_per_commit=PER_COMMIT)

    older_now, newer = hub.pulls(REPO)
    assert older_now.status == "closed" and older_now.merge_commit is None
    assert any(e["type"] == "comment" and "older build" in e["data"]["latest"]["raw"] for e in older.events)
    assert newer.status == "merged" and result.pull_request.endswith(f"/discussions/{newer.num}")
    assert [c.title for c in hub.commits(REPO)][1:] == [f"{newer.title} (#{newer.num})"]  # only the new build merged
    assert _main_files(hub) == local_files(folder)
    _assert_uploaded_once(hub, folder)  # shards the closed pull request had uploaded were not sent again


def test_main_moving_under_the_pull_request_replaces_it(hub: HubServer, tmp_path: Path) -> None:
    folder = _write_repo(tmp_path / "repo", 200)
    _fail_after(hub, 1)
    with pytest.raises(PublishError):
        publish_folder(folder, REPO, files_per_commit=PER_COMMIT)
    hub.seed(REPO, {"NOTES.md": b"someone else's commit\n"})  # main moves: the pull request's base is stale

    hub.conflict_next_commit(files={"OTHER.md": b"and another, while the new pull request fills\n"})
    result = publish_folder(folder, REPO, files_per_commit=PER_COMMIT)

    statuses = [pull.status for pull in hub.pulls(REPO)]
    assert statuses == ["closed", "closed", "merged"]  # the stale one, the one main moved under, the merged one
    titles = [c.title for c in hub.commits(REPO)]
    assert titles[-1].endswith("(#3)") and titles.count("Concurrent commit") == 1
    assert _main_files(hub) == local_files(folder) and result.merges == 1


def test_lost_answers_neither_open_a_second_pull_request_nor_merge_twice(
    hub: HubServer, tmp_path: Path, sleeps: list[float]
) -> None:
    folder = _write_repo(tmp_path / "repo", 120)
    hub.fail_next("merge", status=503, after_apply=True)
    hub.fail_next("commit", status=503, after_apply=True)  # the pull request is opened, the answer lost
    hub.fail_next("commit", drop_connection=True)  # the next commit never reaches the Hub

    result = publish_folder(folder, REPO, files_per_commit=PER_COMMIT)

    [pull] = hub.pulls(REPO)  # found again by its title, not opened twice
    assert len(pull.commits) == 3 and hub.endpoint_calls("commit") == 4  # 3 applied, 1 dropped and sent again
    assert pull.status == "merged" and len(hub.commits(REPO)) == 2 and hub.endpoint_calls("merge") == 1
    assert result.committed and result.commit_url.endswith(pull.merge_commit) and result.merges == 1
    assert _main_files(hub) == local_files(folder)


def test_a_draft_pull_request_of_this_build_is_opened_then_merged(hub: HubServer, tmp_path: Path) -> None:
    """A draft cannot be merged (huggingface_hub's own tests open one first); pull requests made by
    `create_discussion` start as drafts, so one found in that state is opened before the merge."""
    folder = _write_repo(tmp_path / "repo", 120)
    _fail_after(hub, 1)
    with pytest.raises(PublishError):
        publish_folder(folder, REPO, files_per_commit=PER_COMMIT)
    [pull] = hub.pulls(REPO)
    pull.status = "draft"

    publish_folder(folder, REPO, files_per_commit=PER_COMMIT)

    assert pull.status == "merged" and [e["data"]["status"] for e in pull.events if e["type"] == "status-change"] == [
        "open",
        "merged",
    ]
    assert _main_files(hub) == local_files(folder)
