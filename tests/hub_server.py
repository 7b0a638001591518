"""A small in-memory Hugging Face Hub for tests: the write and read endpoints the real clients use.

The real `huggingface_hub` and `datasets` clients run against it unchanged (point them at `.url`; see
tests/hub/test_hub.py for the constants to patch). It keeps, per repo, the full list of commits with the
operations each one applied, so a test can assert "exactly one commit, with exactly these changes".
The state (commits, pull-request refs, merges, the commit rate limit) is in hub_state.py.

What it speaks (t = models | datasets | spaces):
- POST   /api/repos/create, DELETE /api/repos/delete, GET /api/whoami-v2, POST /api/validate-yaml
- GET    /api/t/{ns}/{name}[/revision/{rev}]            repo info: sha, private, siblings (+ blobs=1)
- POST   /api/t/{ns}/{name}/preupload/{rev}             regular | lfs, with the current remote oid
- POST   /api/t/{ns}/{name}/commit/{rev}[?create_pr=1]  NDJSON: header, file, lfsFile, deletedFile, deletedFolder;
                                                        rev may be `refs/pr/N`; create_pr opens a pull request
                                                        from parentCommit (else main) and answers pullRequestUrl
- GET    /api/t/{ns}/{name}/tree/{rev}[/{path}]         recursive and expand
- POST   /api/t/{ns}/{name}/paths-info/{rev}
- GET    /api/t/{ns}/{name}/discussions                 type, status (open includes draft), author, p: 50 a page
- GET    /api/t/{ns}/{name}/discussions/{num}           details: events, changes.base, mergeCommitId
- POST   /api/t/{ns}/{name}/discussions/{num}/status    {"status": "open"|"closed", "comment"?}
- POST   /api/t/{ns}/{name}/discussions/{num}/merge     one commit on main: the PR's changes, "<title> (#N)"
- HEAD/GET /[t/]{ns}/{name}/resolve/{rev}/{path}        X-Repo-Commit, ETag, Content-Length, Range
- POST   /[t/]{ns}/{name}.git/info/lfs/objects/batch, and PUT /lfs/{t}/{ns}/{name}/{sha256} (the href it hands
         out); LFS objects are stored per repo, as on the Hub: an object already in the repo gets no upload action

Each behaviour was checked against what `huggingface_hub` 2.4 sends and reads (`_commit_api._send_commit`,
`HfApi.get_repo_discussions` / `get_discussion_details` / `change_discussion_status` / `merge_pull_request`,
`utils._http` for 429) and the Hub's docs (storage-limits: < 10k entries per folder; rate-limits: 429).

Failure injection (consumed in order, one fault per matching request):
- `fail_next("commit", status=503)`: answer the next commit with a 503 and change nothing;
- `fail_next("commit", status=503, after_apply=True)`: apply the commit, then answer 503 (a lost response);
- `fail_next("commit", drop_connection=True)`: close the connection without answering;
- `fail_next("commit", status=429, retry_after=30)`: a rate-limit answer with `Retry-After`;
- `conflict_next_commit()`: someone else commits first, so the next commit's parentCommit is stale (412);
- `commit_limit=(n, window_s)` (constructor): the Hub's commit quota, on `clock` (a test can drive it);
- `after_commit`: called with (repo, commit) once a commit is applied and before it is answered (a test
  kills its client there);
- `before_request`: called with the endpoint's name (`lfs_upload`, `commit`, ...) before a request is handled (a test
  holds a slow Hub there).

Counted for tests: `uploads[(repo_id, sha256)]`, each file content received (an LFS PUT, or a regular
file inside a commit payload).

Not emulated: Xet (run clients with HF_HUB_DISABLE_XET=1), branches other than main, discussions that are
not pull requests, LFS multipart uploads, pagination of trees (every tree fits in one page).
"""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import hashlib
import json
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml
from hub_state import (
    URL_PREFIXES,
    Blob,
    Commit,
    CommitLimiter,
    HttpError,
    PullRequest,
    Repo,
    git_blob_sha1,
    make_commit,
    merge,
    now_iso,
)

__all__ = ["Blob", "Commit", "HttpError", "HubServer", "PullRequest", "Repo", "git_blob_sha1", "running_hub"]

logger = logging.getLogger(__name__)

LFS_THRESHOLD = 1024 * 1024  # bytes; the real Hub's limit for regular files is larger, a small one exercises LFS
LFS_PATTERNS = ("*.parquet", "*.arrow")
REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
GITATTRIBUTES = b"*.parquet filter=lfs diff=lfs merge=lfs -text\n*.arrow filter=lfs diff=lfs merge=lfs -text\n"
STALE_PARENT_MESSAGE = "A commit has happened since. Please refresh and try again."
DISCUSSIONS_PAGE = 50
USER = "emulator-user"


@dataclass
class Fault:
    endpoint: str
    status: int = 503
    after_apply: bool = False
    drop_connection: bool = False
    retry_after: int | None = None
    message: str = "Service Unavailable (injected by the hub emulator)"


# ---------------------------------------------------------------------------------------------- server


class HubServer:
    """The emulator's state and its HTTP server (127.0.0.1, a free port). Use `running_hub()`."""

    def __init__(
        self,
        *,
        lfs_threshold: int = LFS_THRESHOLD,
        lfs_patterns: tuple[str, ...] = LFS_PATTERNS,
        commit_limit: tuple[int, float] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.lfs_threshold = lfs_threshold
        self.lfs_patterns = lfs_patterns
        self.limiter = CommitLimiter(*commit_limit, clock=clock) if commit_limit else None
        self.lock = threading.RLock()
        self.repos: dict[tuple[str, str], Repo] = {}
        self.lfs_objects: dict[tuple[str, str, str], bytes] = {}  # (repo type, repo id, sha256) -> content
        self.uploads: Counter[tuple[str, str]] = Counter()  # (repo id, sha256) -> times its content was received
        self.after_commit: Callable[[Repo, Commit], None] | None = None
        self.before_request: Callable[[str], None] | None = None
        self.faults: list[Fault] = []
        self.pending_conflicts: list[tuple[dict[str, bytes], list[str]]] = []
        self.auth_headers: list[str] = []  # every Authorization value received, in order
        self.requests: list[tuple[str, str, str]] = []  # (endpoint, method, path)
        self.unhandled: list[str] = []  # "METHOD path" of requests no route matched
        self.ranges_served: list[str] = []  # Content-Range of every 206 answer
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._httpd.hub = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> HubServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="hub-emulator", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- inspection helpers for tests

    def repo(self, repo_id: str, repo_type: str = "dataset") -> Repo:
        return self.repos[(repo_type, repo_id)]

    def has_repo(self, repo_id: str, repo_type: str = "dataset") -> bool:
        return (repo_type, repo_id) in self.repos

    def commits(self, repo_id: str, repo_type: str = "dataset") -> list[Commit]:
        """The commits of main, oldest first; the first is the repo creation commit (it adds .gitattributes)."""
        return list(self.repo(repo_id, repo_type).commits)

    def pulls(self, repo_id: str, repo_type: str = "dataset") -> list[PullRequest]:
        """The repo's pull requests, oldest first."""
        return [pull for _, pull in sorted(self.repo(repo_id, repo_type).pulls.items())]

    def files(self, repo_id: str, repo_type: str = "dataset", revision: str = "main") -> dict[str, bytes]:
        commit = self.repo(repo_id, repo_type).resolve(revision)
        assert commit is not None, f"unknown revision {revision}"
        return {path: blob.data for path, blob in commit.files.items()}

    def endpoint_calls(self, endpoint: str) -> int:
        return sum(1 for name, _, _ in self.requests if name == endpoint)

    # -- set-up helpers

    def seed(
        self,
        repo_id: str,
        files: dict[str, bytes],
        *,
        repo_type: str = "dataset",
        private: bool = False,
        message: str = "Seed",
    ) -> Commit:
        """Create the repo if needed and commit `files` directly (remote state for a test to start from)."""
        with self.lock:
            repo = self._create_repo(repo_type, repo_id, private)
            return repo.append(make_commit(repo.head, self._blobs(files), [], message, "", author="seed"))

    # -- failure injection

    def fail_next(
        self,
        endpoint: str,
        status: int = 503,
        *,
        after_apply: bool = False,
        times: int = 1,
        drop_connection: bool = False,
        retry_after: int | None = None,
    ) -> None:
        """Make the next `times` requests to `endpoint` fail (see the module docstring for names)."""
        with self.lock:
            for _ in range(times):
                self.faults.append(Fault(endpoint, status, after_apply, drop_connection, retry_after))

    def conflict_next_commit(self, files: dict[str, bytes] | None = None, deleted: list[str] | None = None) -> None:
        """Before the next commit is applied, someone else commits to main (by default an empty commit)."""
        with self.lock:
            self.pending_conflicts.append((dict(files or {}), list(deleted or [])))

    def _take_fault(self, endpoint: str) -> Fault | None:
        with self.lock:
            for index, fault in enumerate(self.faults):
                if fault.endpoint == endpoint:
                    return self.faults.pop(index)
        return None

    # -- repo state

    def _is_lfs(self, path: str, size: int) -> bool:
        return size > self.lfs_threshold or any(fnmatch.fnmatch(path, p) for p in self.lfs_patterns)

    def _blobs(self, files: dict[str, bytes]) -> dict[str, Blob]:
        return {path: Blob(data, lfs=self._is_lfs(path, len(data))) for path, data in files.items()}

    def _create_repo(self, repo_type: str, repo_id: str, private: bool) -> Repo:
        key = (repo_type, repo_id)
        if key not in self.repos:
            repo = self.repos[key] = Repo(repo_type, repo_id, private)
            repo.append(
                make_commit(
                    None, {".gitattributes": Blob(GITATTRIBUTES, lfs=False)}, [], "initial commit", "", author="hub"
                )
            )
        return self.repos[key]

    def _commit_quota(self, repo: Repo) -> None:
        if self.limiter is not None:
            self.limiter.check((repo.repo_type, repo.repo_id))

    def _committed(self, repo: Repo) -> None:
        if self.limiter is not None:
            self.limiter.record((repo.repo_type, repo.repo_id))


@contextlib.contextmanager
def running_hub(**kwargs: Any) -> Iterator[HubServer]:
    """Start an emulator on 127.0.0.1 (free port) for the duration of the block."""
    server = HubServer(**kwargs).start()
    try:
        yield server
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------------- routing

_API_REPO = r"^/api/(models|datasets|spaces)/([^/]+)/([^/]+)"
_ROUTES: list[tuple[tuple[str, ...], re.Pattern[str], str]] = [
    (("POST",), re.compile(r"^/api/repos/create$"), "create_repo"),
    (("DELETE",), re.compile(r"^/api/repos/delete$"), "delete_repo"),
    (("GET",), re.compile(r"^/api/whoami-v2$"), "whoami"),
    (("POST",), re.compile(r"^/api/validate-yaml$"), "validate_yaml"),
    (("POST",), re.compile(_API_REPO + r"/preupload/([^/]+)$"), "preupload"),
    (("POST",), re.compile(_API_REPO + r"/commit/([^/]+)$"), "commit"),
    (("GET",), re.compile(_API_REPO + r"/tree/([^/]+)(?:/(.*))?$"), "tree"),
    (("POST",), re.compile(_API_REPO + r"/paths-info/([^/]+)$"), "paths_info"),
    (("GET",), re.compile(_API_REPO + r"/discussions$"), "discussions"),
    (("GET",), re.compile(_API_REPO + r"/discussions/(\d+)$"), "discussion"),
    (("POST",), re.compile(_API_REPO + r"/discussions/(\d+)/status$"), "discussion_status"),
    (("POST",), re.compile(_API_REPO + r"/discussions/(\d+)/merge$"), "merge"),
    (("GET",), re.compile(_API_REPO + r"(?:/revision/([^/]+))?$"), "repo_info"),
    (("POST",), re.compile(r"^/(?:(datasets|spaces)/)?([^/]+)/([^/]+?)\.git/info/lfs/objects/batch$"), "lfs_batch"),
    (("PUT",), re.compile(r"^/lfs/(models|datasets|spaces)/([^/]+)/([^/]+)/([0-9a-f]{64})$"), "lfs_upload"),
    (("GET", "HEAD"), re.compile(r"^/(?:(datasets|spaces)/)?([^/]+)/([^/]+)/resolve/([^/]+)/(.+)$"), "resolve"),
]
_WRITES = {"create_repo", "delete_repo", "preupload", "commit", "lfs_batch", "discussion_status", "merge"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like the Hub: every answer carries Content-Length
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stalls
    server_version = "hub-emulator/1"

    # Quiet: http.server logs every request to stderr by default.
    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("hub emulator: " + format, *args)

    @property
    def hub(self) -> HubServer:
        return self.server.hub  # type: ignore[attr-defined]

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- plumbing

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _dispatch(self, method: str) -> None:
        split = urlsplit(self.path)
        self.query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        self.body = self._read_body()
        self._fault: Fault | None = None
        auth = self.headers.get("Authorization")
        for methods, pattern, name in _ROUTES:
            match = pattern.match(split.path)
            if match and method in methods:
                break
        else:
            with self.hub.lock:
                self.hub.unhandled.append(f"{method} {split.path}")
            self._send_error(HttpError(404, f"Not emulated: {method} {split.path}"))
            return
        with self.hub.lock:
            self.hub.requests.append((name, method, split.path))
            if auth is not None:
                self.hub.auth_headers.append(auth)
        if self.hub.before_request is not None:
            self.hub.before_request(name)
        fault = self.hub._take_fault(name)
        if fault is not None and fault.drop_connection:
            self.close_connection = True  # no answer at all: the client sees the connection drop
            return
        if fault is not None and not fault.after_apply:
            self._send_fault(fault)
            return
        self._fault = fault  # after_apply: run the handler, then answer with the fault instead
        try:
            if name in _WRITES and not auth:
                raise HttpError(401, "You must be authenticated to do this (send a Bearer token).")
            args = [unquote(g) if g is not None else None for g in match.groups()]
            getattr(self, f"_{name}")(*args)
        except HttpError as err:
            self._send_error(err)
        except Exception as exc:  # an emulator bug: make it loud in the client's error
            logger.exception("hub emulator failed on %s %s", method, split.path)
            self._send_error(HttpError(500, f"hub emulator crashed: {exc!r}"))

    def _send(
        self,
        status: int,
        body: bytes | dict | list | None = None,
        *,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        if self._fault is not None:  # the work is done, the answer is lost
            fault, self._fault = self._fault, None
            self._send_fault(fault)
            return
        self._write(status, body, headers=headers, content_type=content_type)

    def _write(
        self,
        status: int,
        body: bytes | dict | list | None,
        *,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else (body or b"")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        try:
            self.end_headers()
            if self.command != "HEAD":  # a body on HEAD corrupts the next response on a kept-alive connection
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client is gone (a test killed it): nobody to answer
            self.close_connection = True

    def _send_error(self, err: HttpError) -> None:
        headers = {"X-Error-Message": err.message.splitlines()[0], **err.headers}
        if err.code:
            headers["X-Error-Code"] = err.code
        self._write(err.status, {"error": err.message, **err.body}, headers=headers)

    def _send_fault(self, fault: Fault) -> None:
        headers = {"X-Error-Message": fault.message}
        if fault.retry_after is not None:
            headers["Retry-After"] = str(fault.retry_after)
        self._write(fault.status, {"error": fault.message}, headers=headers)

    def _json(self) -> Any:
        try:
            return json.loads(self.body or b"{}")
        except ValueError as exc:
            raise HttpError(400, f"Invalid JSON body: {exc}") from exc

    def _repo(self, repo_type: str, repo_id: str) -> Repo:
        repo = self.hub.repos.get((repo_type, repo_id))
        if repo is None or (repo.private and not self.headers.get("Authorization")):
            raise HttpError(404 if repo is None else 401, f"Repository not found: {repo_id}", "RepoNotFound")
        return repo

    def _commit_at(self, repo: Repo, revision: str) -> Commit:
        commit = repo.resolve(revision)
        if commit is None:
            raise HttpError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit

    # -- endpoints

    def _create_repo(self) -> None:
        payload = self._json()
        repo_type = payload.get("type") or "model"
        name, org = payload.get("name"), payload.get("organization")
        if repo_type not in URL_PREFIXES or not name:
            raise HttpError(400, "Invalid repo type or name")
        repo_id = f"{org}/{name}" if org else f"emulator-user/{name}"
        private = bool(payload.get("private")) or payload.get("visibility") == "private"
        url = f"{self.hub.url}/{URL_PREFIXES[repo_type]}{repo_id}"
        with self.hub.lock:
            if (repo_type, repo_id) in self.hub.repos:
                # The client needs "url" in the 409 body too, or create_repo(exist_ok=True) raises KeyError.
                self._send(409, {"error": "You already created this repo", "url": url})
                return
            self.hub._create_repo(repo_type, repo_id, private)
        self._send(200, {"url": url, "name": repo_id})

    def _delete_repo(self) -> None:
        payload = self._json()
        repo_type = payload.get("type") or "model"
        repo_id = f"{payload.get('organization')}/{payload.get('name')}"
        with self.hub.lock:
            if self.hub.repos.pop((repo_type, repo_id), None) is None:
                raise HttpError(404, f"Repository not found: {repo_id}", "RepoNotFound")
        self._send(200, {})

    def _whoami(self) -> None:
        if not self.headers.get("Authorization"):
            raise HttpError(401, "Invalid credentials in Authorization header")
        self._send(
            200,
            {
                "type": "user",
                "name": "emulator-user",
                "orgs": [],
                "auth": {"type": "access_token", "accessToken": {"role": "write"}},
            },
        )

    def _validate_yaml(self) -> None:
        content = self._json().get("content", "")
        match = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", content, re.S)
        errors = []
        if match:
            try:
                metadata = yaml.safe_load(match.group(1))
                if metadata is not None and not isinstance(metadata, dict):
                    errors.append({"message": "Metadata must be a YAML mapping"})
            except yaml.YAMLError as exc:
                errors.append({"message": f"Invalid YAML: {exc}"})
        self._send(400 if errors else 200, {"errors": errors, "warnings": []})

    def _repo_info(self, t: str, ns: str, name: str, revision: str | None) -> None:
        with self.hub.lock:
            repo = self._repo(REPO_TYPES[t], f"{ns}/{name}")
            commit = self._commit_at(repo, revision or "main")
            blobs = self.query.get("blobs", "").lower() in ("1", "true")
            siblings = []
            for path, blob in sorted(commit.files.items()):
                sibling: dict[str, Any] = {"rfilename": path}
                if blobs:
                    sibling.update(size=blob.size, blobId=blob.sha1)
                    if blob.lfs:
                        sibling["lfs"] = {"sha256": blob.sha256, "size": blob.size, "pointerSize": blob.pointer_size}
                siblings.append(sibling)
            body = {
                "_id": hashlib.md5(repo.repo_id.encode()).hexdigest()[:24],
                "id": repo.repo_id,
                "author": ns,
                "sha": commit.oid,
                "private": repo.private,
                "gated": False,
                "disabled": False,
                "createdAt": repo.created_at,
                "lastModified": commit.date,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "siblings": siblings,
            }
        self._send(200, body)

    def _preupload(self, t: str, ns: str, name: str, revision: str) -> None:
        files = self._json().get("files", [])
        with self.hub.lock:
            commit = self._commit_at(self._repo(REPO_TYPES[t], f"{ns}/{name}"), revision)
            answer = []
            for item in files:
                current = commit.files.get(item["path"])
                answer.append(
                    {
                        "path": item["path"],
                        "uploadMode": "lfs" if self.hub._is_lfs(item["path"], int(item.get("size", 0))) else "regular",
                        "shouldIgnore": False,  # required by the client
                        "oid": current.preupload_oid if current is not None else None,
                    }
                )
        self._send(200, {"files": answer, "commitOid": commit.oid})

    def _commit(self, t: str, ns: str, name: str, revision: str) -> None:
        lines = [json.loads(line) for line in self.body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HttpError(400, "The first NDJSON line must be the commit header")
        header = lines[0]["value"]
        create_pr = self.query.get("create_pr", "").lower() in ("1", "true")
        adds: dict[str, Blob] = {}
        deletes: list[tuple[str, bool]] = []
        with self.hub.lock:
            repo = self._repo(REPO_TYPES[t], f"{ns}/{name}")
            for line in lines[1:]:
                key, value = line.get("key"), line.get("value", {})
                if key == "file":
                    if value.get("encoding", "base64") != "base64":
                        raise HttpError(400, f"Unsupported encoding {value.get('encoding')!r}")
                    data = base64.b64decode(value["content"])
                    self.hub.uploads[(repo.repo_id, hashlib.sha256(data).hexdigest())] += 1
                    adds[value["path"]] = Blob(data, lfs=False)
                elif key == "lfsFile":
                    data = self.hub.lfs_objects.get((repo.repo_type, repo.repo_id, value["oid"]))
                    if data is None:
                        raise HttpError(422, f"LFS object {value['oid']} for {value['path']} was never uploaded")
                    adds[value["path"]] = Blob(data, lfs=True)
                elif key in ("deletedFile", "deletedFolder"):
                    deletes.append((value["path"], key == "deletedFolder"))
                else:
                    raise HttpError(400, f"Unknown commit operation {key!r}")
            pull = self._target_pull(repo, revision, create_pr)
            self.hub._commit_quota(repo)
            for files, deleted in self.hub.pending_conflicts:  # someone else got there first
                repo.append(
                    make_commit(
                        repo.head,
                        self.hub._blobs(files),
                        [(p, False) for p in deleted],
                        "Concurrent commit",
                        "",
                        author="someone-else",
                    )
                )
            self.hub.pending_conflicts.clear()
            tip = pull.head if pull is not None else repo.head
            parent = header.get("parentCommit")
            if create_pr:  # the pull request is opened from parentCommit, else from main
                tip = self._commit_at(repo, parent) if parent else repo.head
            elif parent and not tip.oid.startswith(parent.lower()):
                raise HttpError(412, STALE_PARENT_MESSAGE)
            summary, description = header.get("summary", ""), header.get("description", "")
            commit = make_commit(tip, adds, deletes, summary, description, author=USER)
            if create_pr:
                pull = PullRequest(repo.next_discussion_num(), summary, description, USER, base=tip)
                repo.pulls[pull.num] = pull
            repo.append(commit, pull)
            if pull is not None:
                pull.events.append(self._event("commit", {"subject": summary, "oid": commit.oid}))
            self.hub._committed(repo)
        if self.hub.after_commit is not None:
            self.hub.after_commit(repo, commit)
        answer = {
            "success": True,
            "commitOid": commit.oid,
            "hookOutput": "",
            "commitUrl": f"{self.hub.url}/{repo.url_path}/commit/{commit.oid}",
        }
        if create_pr and pull is not None:
            answer["pullRequestUrl"] = f"{self.hub.url}/{repo.url_path}/discussions/{pull.num}"
        self._send(200, answer)

    def _target_pull(self, repo: Repo, revision: str, create_pr: bool) -> PullRequest | None:
        """The pull request a commit to `revision` lands in (None: main); refuses branches that are not emulated."""
        if revision in ("main", "refs/heads/main"):
            return None
        match = re.fullmatch(r"refs/pr/(\d+)", revision)
        if match is None or create_pr:
            raise HttpError(
                400,
                f"Only main and pull-request refs are emulated, got {revision!r}"
                + (" with create_pr" if create_pr else ""),
            )
        pull = repo.pulls.get(int(match.group(1)))
        if pull is None:
            raise HttpError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return pull

    def _entries(self, repo: Repo, commit: Commit, prefix: str, *, recursive: bool, expand: bool) -> list[dict]:
        """Tree entries under `prefix` ("" = root): files and the directories their paths imply."""
        base = prefix.strip("/") + "/" if prefix.strip("/") else ""
        entries: dict[str, dict] = {}
        for path, blob in commit.files.items():
            if not path.startswith(base):
                continue
            parts = path[len(base) :].split("/")
            depth = len(parts) if recursive else 1
            for i in range(1, min(depth, len(parts) - 1) + 1):  # directories on the way
                dir_path = base + "/".join(parts[:i])
                entries.setdefault(dir_path, self._dir_entry(repo, commit, dir_path, expand))
            if recursive or len(parts) == 1:
                entries[path] = self._file_entry(repo, commit, path, blob, expand)
        if base and not entries:
            raise HttpError(404, f"Entry not found: {prefix}", "EntryNotFound")
        return sorted(entries.values(), key=lambda e: (e["type"] != "directory", e["path"]))

    def _last_commit(self, repo: Repo, commit: Commit, path: str) -> dict:
        for c in repo.history(commit):
            if any(op["path"] == path or op["path"].startswith(path + "/") for op in c.operations):
                return {"id": c.oid, "title": c.title, "date": c.date}
        return {"id": commit.oid, "title": commit.title, "date": commit.date}

    def _file_entry(self, repo: Repo, commit: Commit, path: str, blob: Blob, expand: bool) -> dict:
        entry: dict[str, Any] = {"type": "file", "oid": blob.sha1, "size": blob.size, "path": path}
        if blob.lfs:
            entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": blob.pointer_size}
        if expand:
            entry["lastCommit"] = self._last_commit(repo, commit, path)
        return entry

    def _dir_entry(self, repo: Repo, commit: Commit, path: str, expand: bool) -> dict:
        listing = "".join(f"{p}:{b.sha1}" for p, b in sorted(commit.files.items()) if p.startswith(path + "/"))
        entry: dict[str, Any] = {
            "type": "directory",
            "oid": hashlib.sha1(listing.encode()).hexdigest(),
            "size": 0,
            "path": path,
        }
        if expand:
            entry["lastCommit"] = self._last_commit(repo, commit, path)
        return entry

    def _tree(self, t: str, ns: str, name: str, revision: str, path: str | None) -> None:
        recursive = self.query.get("recursive", "").lower() in ("1", "true")
        expand = self.query.get("expand", "").lower() in ("1", "true")
        with self.hub.lock:
            repo = self._repo(REPO_TYPES[t], f"{ns}/{name}")
            commit = self._commit_at(repo, revision)
            entries = self._entries(repo, commit, path or "", recursive=recursive, expand=expand)
        self._send(200, entries)

    def _paths_info(self, t: str, ns: str, name: str, revision: str) -> None:
        form = parse_qs(self.body.decode())
        expand = form.get("expand", ["false"])[-1].lower() in ("1", "true")
        with self.hub.lock:
            repo = self._repo(REPO_TYPES[t], f"{ns}/{name}")
            commit = self._commit_at(repo, revision)
            answer = []
            for path in form.get("paths", []):
                path = path.strip("/")
                if path in commit.files:
                    answer.append(self._file_entry(repo, commit, path, commit.files[path], expand))
                elif any(p.startswith(path + "/") for p in commit.files):
                    answer.append(self._dir_entry(repo, commit, path, expand))
        self._send(200, answer)

    def _resolve(self, t: str | None, ns: str, name: str, revision: str, path: str) -> None:
        with self.hub.lock:
            repo = self._repo(REPO_TYPES[t or "models"], f"{ns}/{name}")
            commit = self._commit_at(repo, revision)
            blob = commit.files.get(path)
        if blob is None:
            raise HttpError(404, f"Entry not found: {path}", "EntryNotFound")
        headers = {"X-Repo-Commit": commit.oid, "ETag": f'"{blob.etag}"', "Accept-Ranges": "bytes"}
        if blob.lfs:
            headers.update({"X-Linked-Etag": f'"{blob.sha256}"', "X-Linked-Size": str(blob.size)})
        data, status = blob.data, 200
        match = re.match(r"^bytes=(\d*)-(\d*)$", self.headers.get("Range", "").strip())
        if match and blob.size:
            first, last = match.groups()
            if first == "":
                start, end = max(blob.size - int(last or 0), 0), blob.size - 1
            else:
                start, end = int(first), min(int(last) if last else blob.size - 1, blob.size - 1)
            if start >= blob.size or start > end:
                raise HttpError(416, f"Range not satisfiable for {blob.size} bytes")
            data, status = blob.data[start : end + 1], 206
            headers["Content-Range"] = f"bytes {start}-{end}/{blob.size}"
            with self.hub.lock:
                self.hub.ranges_served.append(headers["Content-Range"])
        self._send(status, data, headers=headers, content_type="application/octet-stream")

    def _lfs_batch(self, t: str | None, ns: str, name: str) -> None:
        payload = self._json()
        with self.hub.lock:
            repo = self._repo(REPO_TYPES[t or "models"], f"{ns}/{name}")
            objects = []
            for obj in payload.get("objects", []):
                answer: dict[str, Any] = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
                if (repo.repo_type, repo.repo_id, obj["oid"]) not in self.hub.lfs_objects:  # no "actions": stored
                    href = f"{self.hub.url}/lfs/{t or 'models'}/{ns}/{name}/{obj['oid']}"
                    answer["actions"] = {"upload": {"href": href, "header": {}}}
                objects.append(answer)
        self._send(200, {"transfer": "basic", "objects": objects}, content_type="application/vnd.git-lfs+json")

    def _lfs_upload(self, t: str, ns: str, name: str, oid: str) -> None:
        if hashlib.sha256(self.body).hexdigest() != oid:
            raise HttpError(400, f"Uploaded content does not match sha256 {oid}")
        repo_type, repo_id = REPO_TYPES[t], f"{ns}/{name}"
        with self.hub.lock:  # a pre-signed URL on the Hub: no Authorization header comes with it
            self.hub.lfs_objects[(repo_type, repo_id, oid)] = self.body
            self.hub.uploads[(repo_id, oid)] += 1
        self._send(200, b"", content_type="text/plain")

    # -- pull requests

    def _event(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": hashlib.sha1(f"{kind}{data}{time.monotonic_ns()}".encode()).hexdigest()[:24],
            "type": kind,
            "createdAt": now_iso(),
            "author": {"name": USER},
            "data": data,
        }

    def _pull(self, repo: Repo, num: str) -> PullRequest:
        pull = repo.pulls.get(int(num))
        if pull is None:
            raise HttpError(404, f"Discussion not found: {num}", "DiscussionNotFound")
        return pull

    def _summary(self, repo: Repo, pull: PullRequest) -> dict[str, Any]:
        return {
            "num": pull.num,
            "title": pull.title,
            "status": pull.status,
            "isPullRequest": True,
            "createdAt": pull.created_at,
            "author": {"name": pull.author},
            "numComments": 0,
            "repo": {"name": repo.repo_id, "type": repo.repo_type},
        }

    def _discussions(self, t: str, ns: str, name: str) -> None:
        kind, status, author = self.query.get("type"), self.query.get("status"), self.query.get("author")
        page = int(self.query.get("p", "0"))
        with self.hub.lock:
            repo = self._repo(REPO_TYPES[t], f"{ns}/{name}")
            pulls = [p for _, p in sorted(repo.pulls.items(), reverse=True)]  # newest first
            if kind == "discussion":
                pulls = []
            if status in ("open", "closed"):  # "open" lists drafts too, as the Hub does
                pulls = [p for p in pulls if (p.status in ("open", "draft")) == (status == "open")]
            if author:
                pulls = [p for p in pulls if p.author == author]
            start = page * DISCUSSIONS_PAGE
            shown = [self._summary(repo, p) for p in pulls[start : start + DISCUSSIONS_PAGE]]
        self._send(200, {"discussions": shown, "count": len(pulls), "start": start, "numClosedDiscussions": 0})

    def _discussion(self, t: str, ns: str, name: str, num: str) -> None:
        with self.hub.lock:
            repo = self._repo(REPO_TYPES[t], f"{ns}/{name}")
            pull = self._pull(repo, num)
            body = {
                **self._summary(repo, pull),
                "events": list(pull.events),
                "filesWithConflicts": [],
                "changes": {
                    "base": "refs/heads/main",
                    **({"mergeCommitId": pull.merge_commit} if pull.merge_commit else {}),
                },
            }
        self._send(200, body)

    def _discussion_status(self, t: str, ns: str, name: str, num: str) -> None:
        payload = self._json()
        new_status = payload.get("status")
        with self.hub.lock:
            pull = self._pull(self._repo(REPO_TYPES[t], f"{ns}/{name}"), num)
            if new_status not in ("open", "closed"):
                raise HttpError(400, f"Invalid status {new_status!r}")
            if pull.status == "merged":
                raise HttpError(400, "This pull request is already merged")
            pull.status = new_status
            event = self._event("status-change", {"status": new_status})
            pull.events.append(event)
            if payload.get("comment"):
                pull.events.append(
                    self._event("comment", {"edited": False, "hidden": False, "latest": {"raw": payload["comment"]}})
                )
        self._send(200, {"newStatus": event})

    def _merge(self, t: str, ns: str, name: str, num: str) -> None:
        payload = self._json()
        with self.hub.lock:
            repo = self._repo(REPO_TYPES[t], f"{ns}/{name}")
            pull = self._pull(repo, num)
            if pull.status != "open":
                raise HttpError(400, f"Only an open pull request can be merged; this one is {pull.status}")
            self.hub._commit_quota(repo)  # the merge is a commit on main
            commit = repo.append(merge(repo, pull, author=USER))
            pull.status, pull.merge_commit = "merged", commit.oid
            pull.events.append(self._event("status-change", {"status": "merged"}))
            if payload.get("comment"):
                pull.events.append(
                    self._event("comment", {"edited": False, "hidden": False, "latest": {"raw": payload["comment"]}})
                )
            self.hub._committed(repo)
        if self.hub.after_commit is not None:
            self.hub.after_commit(repo, commit)
        self._send(200, {})
