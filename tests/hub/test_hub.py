"""rs.hub through the REAL huggingface_hub / datasets clients, against the in-memory emulator in hub_server.py.

Every test but the last runs with the clients pointed at a local emulator and with name resolution
blocked for anything but 127.0.0.1, so a client that would reach the real Hub fails loudly instead.
The last test talks to the real Hub and only runs with RS_LIVE_HUB_TOKEN and RS_LIVE_HUB_NAMESPACE set.
"""

from __future__ import annotations

import functools
import io
import logging
import os
import traceback
import uuid
from pathlib import Path

import datasets
import httpx2
import huggingface_hub
import huggingface_hub.constants as hf_constants
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hub_clients import TOKEN, local_files, point_clients_at
from hub_server import HubServer, running_hub
from huggingface_hub import CommitOperationAdd, HfApi
from huggingface_hub.errors import HfHubHTTPError
from PIL import Image

import rs.hub
import rs.hub.retry
from rs.hub import FileChange, MissingTokenError, PublishError, file_changes, format_changes, publish_folder
from rs.util.sizes import format_bytes

# huggingface_hub's own LFS PUT passes a file object as `data=`, which httpx2 deprecates: not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")

REPO = "rs-test/tinyclevr-accepted"
SHARDS = ("data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet")
README = """---
license: cc-by-4.0
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*
---
# TinyCLEVR accepted

Rejection-sampled answers.
"""


def _write_shard(path: Path, ids: list[int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {"id": ids, "question": [f"How many cubes in scene {i}?" for i in ids], "answer": [str(i % 4) for i in ids]}
    )
    pq.write_table(table, path)


def _png(color: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), color).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An assembled repo, laid out exactly as on the Hub."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "README.md").write_text(README)
    _write_shard(root / SHARDS[0], [0, 1, 2])
    _write_shard(root / SHARDS[1], [3, 4])
    (root / "images").mkdir()
    (root / "images" / "example-1.png").write_bytes(_png((255, 0, 0)))
    return root


ALL_FILES = sorted(["README.md", *SHARDS, "images/example-1.png"])


# --------------------------------------------------------------------------------------------- tests


def test_publish_is_one_commit_and_reads_back(hub: HubServer, folder: Path, tmp_path: Path) -> None:
    result = publish_folder(folder, REPO, private=True, commit_message="rs: publish tinyclevr")

    commits = hub.commits(REPO)
    assert len(commits) == 2  # the Hub's creation commit (.gitattributes), then exactly one of ours
    ours = commits[-1]
    assert ours.title == "rs: publish tinyclevr" and ours.parent == commits[0].oid
    assert ours.added == ALL_FILES and ours.deleted == []
    assert {op["path"]: op["lfs"] for op in ours.operations} == {
        "README.md": False,
        SHARDS[0]: True,
        SHARDS[1]: True,
        "images/example-1.png": False,
    }
    assert hub.repo(REPO).private is True

    assert result.repo_id == REPO and result.commit_url is not None and result.commit_url.endswith(ours.oid)
    assert result.changes == [FileChange(p, "add", (folder / p).stat().st_size) for p in ALL_FILES]

    remote = hub.files(REPO)
    assert remote.pop(".gitattributes")
    assert remote == local_files(folder)
    for path in (SHARDS[1], "images/example-1.png"):  # through the client's download path too
        downloaded = huggingface_hub.hf_hub_download(REPO, path, repo_type="dataset", cache_dir=tmp_path / "dl")
        assert Path(downloaded).read_bytes() == (folder / path).read_bytes()

    ds = datasets.load_dataset(REPO, split="train", cache_dir=str(tmp_path / "ds_cache"))
    assert ds.num_rows == 5 and sorted(ds["id"]) == [0, 1, 2, 3, 4]
    assert set(hub.auth_headers) == {f"Bearer {TOKEN}"}  # the token is sent on every call, and only it


def test_unchanged_folder_makes_no_commit(hub: HubServer, folder: Path) -> None:
    publish_folder(folder, REPO)
    calls = {name: hub.endpoint_calls(name) for name in ("commit", "preupload", "lfs_upload")}

    again = publish_folder(folder, REPO)

    assert len(hub.commits(REPO)) == 2
    assert again.commit_url is None and not again.committed
    assert [c.action for c in again.changes] == ["unchanged"] * 4
    # Nothing is uploaded or even pre-uploaded: the diff found every hash equal.
    assert {name: hub.endpoint_calls(name) for name in calls} == calls
    assert {c.action for c in file_changes(HfApi(), folder, REPO)} == {"unchanged"}


def test_changed_shard_and_removed_file_make_one_commit(hub: HubServer, folder: Path) -> None:
    publish_folder(folder, REPO)
    _write_shard(folder / SHARDS[1], [3, 4, 5])
    (folder / "images" / "example-1.png").unlink()

    result = publish_folder(folder, REPO)

    commits = hub.commits(REPO)
    assert len(commits) == 3
    assert commits[-1].added == [SHARDS[1]] and commits[-1].deleted == ["images/example-1.png"]
    assert {c.path: c.action for c in result.changes} == {
        "README.md": "unchanged",
        SHARDS[0]: "unchanged",
        SHARDS[1]: "change",
        "images/example-1.png": "delete",
    }
    assert hub.endpoint_calls("lfs_upload") == 3  # two shards at first, then only the changed one
    remote = hub.files(REPO)
    assert ".gitattributes" in remote  # remote-only, never deleted
    assert remote[SHARDS[1]] == (folder / SHARDS[1]).read_bytes() and "images/example-1.png" not in remote


def test_only_readme_touches_only_the_readme(hub: HubServer, folder: Path) -> None:
    publish_folder(folder, REPO)
    (folder / "README.md").write_text(README + "\nNew card text.\n")
    _write_shard(folder / SHARDS[0], [10, 11])
    (folder / "images" / "example-1.png").unlink()

    result = publish_folder(folder, REPO, only=["README.md"])

    assert [(c.path, c.action) for c in result.changes] == [("README.md", "change")]
    last = hub.commits(REPO)[-1]
    assert last.added == ["README.md"] and last.deleted == []
    remote = hub.files(REPO)
    assert remote["README.md"] == (folder / "README.md").read_bytes()
    assert remote[SHARDS[0]] != (folder / SHARDS[0]).read_bytes() and "images/example-1.png" in remote


def test_only_patterns_restrict_deletes_too(hub: HubServer, folder: Path) -> None:
    publish_folder(folder, REPO)
    (folder / "images" / "example-1.png").unlink()
    (folder / "images" / "example-2.png").write_bytes(_png((0, 0, 255)))
    _write_shard(folder / SHARDS[0], [10, 11])

    publish_folder(folder, REPO, only=["README.md", "images/*.png"])

    last = hub.commits(REPO)[-1]
    assert last.added == ["images/example-2.png"] and last.deleted == ["images/example-1.png"]
    assert hub.files(REPO)[SHARDS[0]] != (folder / SHARDS[0]).read_bytes()


def test_remote_extras_kept_when_asked(hub: HubServer, folder: Path) -> None:
    publish_folder(folder, REPO)
    (folder / "images" / "example-1.png").unlink()

    result = publish_folder(folder, REPO, delete_extra=False)

    assert result.commit_url is None and "delete" not in {c.action for c in result.changes}
    assert len(hub.commits(REPO)) == 2 and "images/example-1.png" in hub.files(REPO)


def test_invalid_card_metadata_is_refused_before_any_upload(hub: HubServer, folder: Path) -> None:
    (folder / "README.md").write_text("---\nconfigs: [unclosed\n---\n# Card\n")

    with pytest.raises(PublishError, match="Fix the YAML header of README.md"):
        publish_folder(folder, REPO)

    assert hub.endpoint_calls("lfs_upload") == 0 and len(hub.commits(REPO)) == 1


def test_503_on_commit_is_retried(hub: HubServer, folder: Path, sleeps: list[float]) -> None:
    hub.fail_next("commit", status=503)

    result = publish_folder(folder, REPO)

    assert len(hub.commits(REPO)) == 2 and result.committed
    assert hub.endpoint_calls("commit") == 2 and sleeps == [1.0]


def test_503_after_the_commit_was_applied_makes_no_duplicate(
    hub: HubServer, folder: Path, sleeps: list[float]
) -> None:
    hub.fail_next("commit", status=503, after_apply=True)

    result = publish_folder(folder, REPO)

    commits = hub.commits(REPO)
    assert len(commits) == 2  # applied once; the retry read the Hub again, found it there and committed nothing
    assert hub.endpoint_calls("commit") == 1 and sleeps == [1.0]
    assert result.commit_url is not None and result.commit_url.endswith(commits[-1].oid)
    assert {c.action for c in result.changes} == {"add"}


def test_dropped_connection_on_commit_is_retried(hub: HubServer, folder: Path) -> None:
    hub.fail_next("commit", drop_connection=True)

    publish_folder(folder, REPO)

    assert len(hub.commits(REPO)) == 2 and hub.endpoint_calls("commit") == 2


def test_a_conflict_is_compared_again_against_the_new_head(hub: HubServer, folder: Path) -> None:
    publish_folder(folder, REPO)
    (folder / "README.md").write_text(README + "\nv2\n")
    hub.conflict_next_commit(files={"NOTES.md": b"someone else's file\n"})

    publish_folder(folder, REPO)

    first, ours_v1, theirs, ours_v2 = hub.commits(REPO)
    assert theirs.author == "someone-else" and ours_v2.parent == theirs.oid  # 412 first, then compared again
    assert ours_v2.added == ["README.md"] and ours_v2.deleted == ["NOTES.md"]
    assert hub.endpoint_calls("commit") == 3


def test_gives_up_after_max_attempts(hub: HubServer, folder: Path, sleeps: list[float]) -> None:
    hub.fail_next("commit", status=503, times=3)

    with pytest.raises(PublishError, match="after 3 attempts") as info:
        publish_folder(folder, REPO, max_attempts=3)

    assert "Re-running is safe" in str(info.value)
    assert len(hub.commits(REPO)) == 1 and sleeps == [1.0, 2.0]


def test_refused_commit_is_not_retried(hub: HubServer, folder: Path, sleeps: list[float]) -> None:
    hub.fail_next("commit", status=403)

    with pytest.raises(PublishError, match="write access to 'rs-test'"):
        publish_folder(folder, REPO)

    assert hub.endpoint_calls("commit") == 1 and sleeps == []


def test_a_dry_run_says_the_changes_and_changes_nothing(
    hub: HubServer, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = publish_folder(folder, REPO, dry_run=True)

    assert not hub.has_repo(REPO) and hub.endpoint_calls("create_repo") == 0
    assert fresh.commit_url is None
    assert fresh.changes == [FileChange(p, "add", (folder / p).stat().st_size) for p in ALL_FILES]

    publish_folder(folder, REPO)
    _write_shard(folder / SHARDS[1], [3, 4, 5, 6])
    (folder / "images" / "example-1.png").unlink()
    monkeypatch.delenv("HF_TOKEN")  # a dry run works without a login (public view)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    seen = len(hub.auth_headers)

    again = publish_folder(folder, REPO, dry_run=True)

    assert len(hub.commits(REPO)) == 2 and hub.endpoint_calls("commit") == 1
    assert len(hub.auth_headers) == seen  # sent anonymously
    text = format_changes(again)
    shard, png = format_bytes((folder / SHARDS[1]).stat().st_size), format_bytes(len(_png((255, 0, 0))))
    assert (
        text.splitlines()[0] == f"datasets/{REPO}: 1 to change ({shard}), 1 to delete ({png}), 2 unchanged; 1 commit"
    )
    assert f"~ change    {SHARDS[1]}" in text and "- delete    images/example-1.png" in text
    assert "add" not in text and "README.md" not in text  # unchanged files are not listed
    lines_only = format_changes(again.changes)
    assert lines_only.splitlines() == text.splitlines()[1:]


def test_missing_token_says_how_to_log_in(hub: HubServer, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)

    with pytest.raises(MissingTokenError, match=r"hf auth login.*HF_TOKEN"):
        publish_folder(folder, REPO)

    assert hub.requests == []


def test_token_never_logged_or_raised(
    hub: HubServer, folder: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="huggingface_hub")
    monkeypatch.setattr(hf_constants, "HF_DEBUG", True)  # the client then logs each request as a curl command
    hub.fail_next("commit", status=503)
    result = publish_folder(folder, REPO)
    (folder / "README.md").write_text(README + "\nv2\n")
    hub.fail_next("commit", status=401)

    with pytest.raises(PublishError) as info:
        publish_folder(folder, REPO, token=TOKEN)

    assert any(f"Bearer {TOKEN}" == value for value in hub.auth_headers)  # it was sent...
    assert "curl" in caplog.text and "POST" in caplog.text  # ...the client did log its requests...
    assert TOKEN not in caplog.text  # ...but never the token
    assert TOKEN not in "".join(traceback.format_exception(info.value))
    assert TOKEN not in repr(result) and TOKEN not in format_changes(result)


def test_emulator_serves_what_the_clients_read(hub: HubServer, folder: Path) -> None:
    """The emulator endpoints publish_folder itself does not exercise: paths-info, Range, LFS by size."""
    big = bytes(range(256)) * 6000  # 1.5 MB: LFS by size, although not *.parquet
    (folder / "images" / "big.bin").write_bytes(big)
    publish_folder(folder, REPO)
    api = HfApi()

    assert {op["path"]: op["lfs"] for op in hub.commits(REPO)[-1].operations}["images/big.bin"] is True
    infos = {
        info.path: type(info).__name__
        for info in api.get_paths_info(REPO, ["README.md", "data", "missing.txt"], repo_type="dataset")
    }
    assert infos == {"README.md": "RepoFile", "data": "RepoFolder"}
    assert api.file_exists(REPO, "images/big.bin", repo_type="dataset")
    assert not api.file_exists(REPO, "images/missing.png", repo_type="dataset")
    assert sorted(f.path for f in api.list_repo_tree(REPO, "data", repo_type="dataset")) == list(SHARDS)
    fs = huggingface_hub.HfFileSystem(skip_instance_cache=True)
    with fs.open(f"datasets/{REPO}/images/big.bin", "rb", block_size=4096) as file:  # ranged GETs
        file.seek(1_000_000)
        assert file.read(10) == big[1_000_000:1_000_010]
    assert hub.ranges_served and all(r.endswith(f"/{len(big)}") for r in hub.ranges_served)


def test_emulator_pull_requests_answer_the_clients_own_calls(hub: HubServer, tmp_path: Path) -> None:
    """Pull-request refs, listing, details, status, merge and the Hub's limits, as `HfApi` sends and reads them."""
    api = HfApi()
    api.create_repo(REPO, repo_type="dataset")
    base = api.repo_info(REPO, repo_type="dataset").sha
    info = api.create_commit(
        REPO,
        [CommitOperationAdd("data/a.parquet", b"a" * 10)],
        commit_message="Add a",
        repo_type="dataset",
        create_pr=True,
        parent_commit=base,
    )
    assert (info.pr_num, info.pr_revision) == (1, "refs/pr/1")
    assert api.repo_info(REPO, repo_type="dataset").sha == base  # main untouched
    assert api.repo_info(REPO, repo_type="dataset", revision="refs/pr/1").sha == info.oid
    with pytest.raises(HfHubHTTPError) as stale:  # commits to the ref are pinned like commits to main
        api.create_commit(
            REPO,
            [CommitOperationAdd("b.txt", b"b")],
            commit_message="b",
            repo_type="dataset",
            revision="refs/pr/1",
            parent_commit=base,
        )
    assert stale.value.response.status_code == 412
    api.create_commit(
        REPO,
        [CommitOperationAdd("b.txt", b"b")],
        commit_message="b",
        repo_type="dataset",
        revision="refs/pr/1",
        parent_commit=info.oid,
    )
    path = huggingface_hub.hf_hub_download(
        REPO, "b.txt", repo_type="dataset", revision="refs/pr/1", cache_dir=tmp_path / "dl"
    )
    assert Path(path).read_bytes() == b"b"
    for i in range(55):  # more than one page of the listing (50)
        api.create_commit(
            REPO,
            [CommitOperationAdd(f"x{i}.txt", b"x")],
            commit_message=f"PR {i}",
            repo_type="dataset",
            create_pr=True,
        )
    listed = list(
        api.get_repo_discussions(REPO, repo_type="dataset", discussion_type="pull_request", discussion_status="open")
    )
    assert [d.num for d in listed] == list(range(56, 0, -1)) and listed[-1].title == "Add a"  # newest first
    details = api.get_discussion_details(REPO, 1, repo_type="dataset")
    assert details.target_branch == "refs/heads/main" and [e.type for e in details.events] == ["commit", "commit"]

    api.merge_pull_request(REPO, 1, repo_type="dataset", comment="done")

    merged = api.get_discussion_details(REPO, 1, repo_type="dataset")
    assert merged.status == "merged" and merged.merge_commit_oid == api.repo_info(REPO, repo_type="dataset").sha
    assert hub.commits(REPO)[-1].title == "Add a (#1)" and hub.commits(REPO)[-1].added == ["b.txt", "data/a.parquet"]
    closed = api.change_discussion_status(REPO, 2, "closed", repo_type="dataset", comment="stale")
    assert closed.new_status == "closed"
    assert [d.num for d in api.get_repo_discussions(REPO, repo_type="dataset", discussion_status="closed")] == [
        2,
        1,
    ]  # merged too
    api.create_commit(
        REPO, [CommitOperationAdd("b.txt", b"theirs")], commit_message="c", repo_type="dataset", revision="refs/pr/3"
    )
    api.create_commit(REPO, [CommitOperationAdd("b.txt", b"main's")], commit_message="m", repo_type="dataset")
    with pytest.raises(HfHubHTTPError) as conflict:  # both sides changed b.txt since #3 was opened
        api.merge_pull_request(REPO, 3, repo_type="dataset")
    assert conflict.value.response.status_code == 409

    hub.seed(REPO, {f"many/{i:05d}.txt": b"" for i in range(10_000)})
    with pytest.raises(HfHubHTTPError, match="10,000 per folder"):
        api.create_commit(
            REPO, [CommitOperationAdd("many/one-more.txt", b"x")], commit_message="x", repo_type="dataset"
        )


def test_the_commit_quota_answers_429_with_retry_after(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, blocked_hosts: list[str]
) -> None:
    now = [0.0]
    with running_hub(commit_limit=(2, 3600.0), clock=lambda: now[0]) as server:
        point_clients_at(monkeypatch, server.url, tmp_path / "hf_home")
        api = HfApi()
        api.create_repo(REPO, repo_type="dataset")
        commit = functools.partial(api.create_commit, REPO, commit_message="c", repo_type="dataset")
        commit([CommitOperationAdd("a.txt", b"a")])
        now[0] = 600.0
        commit([CommitOperationAdd("b.txt", b"b")])
        with pytest.raises(HfHubHTTPError, match="exceeded our hourly quotas for action: commit") as refused:
            commit([CommitOperationAdd("c.txt", b"c")])
        assert refused.value.response.status_code == 429 and refused.value.response.headers["Retry-After"] == "3000"
        assert rs.hub.retry.retry_after(refused.value) == 3000.0
        now[0] = 3600.0  # the first commit left the window
        commit([CommitOperationAdd("c.txt", b"c")])
        assert len(server.commits(REPO)) == 4


def test_rate_limit_headers_are_read_as_the_client_reads_them() -> None:
    request = httpx2.Request("POST", "http://127.0.0.1/api/datasets/a/b/commit/main")

    def error(headers: dict[str, str]) -> HfHubHTTPError:
        return HfHubHTTPError("429", response=httpx2.Response(429, headers=headers, request=request))

    assert rs.hub.retry.retry_after(error({"RateLimit": '"api";r=0;t=55'})) == 55.0
    assert rs.hub.retry.retry_after(error({"RateLimit": '"api";r=3;t=55'})) is None  # not the reason for the 429
    assert rs.hub.retry.retry_after(error({"Retry-After": "7", "RateLimit": '"api";r=0;t=55'})) == 7.0
    assert rs.hub.retry.retry_kind(error({})) == "rate_limited"


def test_rs_audit_reads_a_family_from_the_hub(hub: HubServer, tmp_path: Path) -> None:
    """`rs audit NAMESPACE/REPO` downloads the repo and its siblings with snapshot_download and checks them as a folder."""
    from replay_family import RECOVERY_CASES, write_family

    from rs.audit import audit
    from rs.pipeline.publish.stage import publish as publish_family

    family = write_family(
        tmp_path / "family",
        RECOVERY_CASES,
        judge={"calibration_samples": 4},
        recovery={"samples": 2, "temperature": 0.7},
    )
    outcome = publish_family(
        family,
        out=tmp_path / "out",
        build_root=tmp_path / "build",
        cache_path=tmp_path / "cache.sqlite",
        progress=False,
    )
    api = HfApi()
    for where in outcome.where.values():
        api.create_repo(f"rs-test/{Path(where).name}", repo_type="dataset")
        api.upload_folder(repo_id=f"rs-test/{Path(where).name}", repo_type="dataset", folder_path=where)
    result = audit("rs-test/Shapes_RS_think")
    assert result.ok and result.checked > 40 and not result.notes, result.render()
    card = tmp_path / "out" / "local" / "Shapes_RS_think" / "README.md"
    card.write_text(
        card.read_text().replace(
            "| accepted / rejected (whole family) | 4 / 1 |", "| accepted / rejected (whole family) | 5 / 0 |"
        )
    )
    api.upload_file(
        path_or_fileobj=str(card), path_in_repo="README.md", repo_id="rs-test/Shapes_RS_think", repo_type="dataset"
    )
    broken = audit("rs-test/Shapes_RS_think")
    assert [f.what for f in broken.findings] == ["accepted / rejected (whole family)"], broken.render()


@pytest.mark.skipif(
    not (os.environ.get("RS_LIVE_HUB_TOKEN") and os.environ.get("RS_LIVE_HUB_NAMESPACE")),
    reason="set RS_LIVE_HUB_TOKEN and RS_LIVE_HUB_NAMESPACE to publish to the real Hub",
)
def test_live_hub_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token, namespace = os.environ["RS_LIVE_HUB_TOKEN"], os.environ["RS_LIVE_HUB_NAMESPACE"]
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)  # tests/conftest.py sets HF_HUB_OFFLINE=1
    monkeypatch.setattr(hf_constants, "ENDPOINT", "https://huggingface.co")
    repo_id = f"{namespace}/rs-live-test"
    root = tmp_path / "live"
    (root / "data").mkdir(parents=True)
    (root / "README.md").write_text(README.replace("TinyCLEVR accepted", f"rs live test {uuid.uuid4().hex[:8]}"))
    _write_shard(root / "data" / "train-00000-of-00001.parquet", [0, 1])
    api = HfApi(token=token)
    try:
        first = publish_folder(root, repo_id, token=token, private=True, max_attempts=3)
        assert first.committed
        assert api.repo_info(repo_id, repo_type="dataset").private is True
        assert publish_folder(root, repo_id, token=token, private=True).commit_url is None
        assert sorted(api.list_repo_files(repo_id, repo_type="dataset")) == sorted(
            [".gitattributes", "README.md", "data/train-00000-of-00001.parquet"]
        )
    finally:
        api.delete_repo(repo_id, repo_type="dataset", missing_ok=True)
