"""A small in-memory Hugging Face Hub for tests: the write and read endpoints the real clients use.

The real `huggingface_hub` and `datasets` clients run against it unchanged (point them at `.url`; see
tests/test_hub.py for the constants to patch). It keeps, per repo, the full list of commits with the
operations each one applied, so a test can assert "exactly one commit, with exactly these changes".

What it speaks (t = models | datasets | spaces):
- POST   /api/repos/create, DELETE /api/repos/delete, GET /api/whoami-v2, POST /api/validate-yaml
- GET    /api/t/{ns}/{name}[/revision/{rev}]            repo info: sha, private, siblings (+ blobs=1)
- POST   /api/t/{ns}/{name}/preupload/{rev}             regular | lfs, with the current remote oid
- POST   /api/t/{ns}/{name}/commit/{rev}                NDJSON: header, file, lfsFile, deletedFile, deletedFolder
- GET    /api/t/{ns}/{name}/tree/{rev}[/{path}]         recursive and expand
- POST   /api/t/{ns}/{name}/paths-info/{rev}
- HEAD/GET /[t/]{ns}/{name}/resolve/{rev}/{path}        X-Repo-Commit, ETag, Content-Length, Range
- POST   /[t/]{ns}/{name}.git/info/lfs/objects/batch, and PUT /lfs/{sha256} (the upload href it hands out)

Failure injection (consumed in order, one fault per matching request):
- `fail_next("commit", status=503)`: answer the next commit with a 503 and change nothing;
- `fail_next("commit", status=503, after_apply=True)`: apply the commit, then answer 503 (a lost response);
- `fail_next("commit", drop_connection=True)`: close the connection without answering;
- `conflict_next_commit()`: someone else commits first, so the next commit's parentCommit is stale (412).

Not emulated: Xet (run clients with HF_HUB_DISABLE_XET=1), branches other than main, pull requests, LFS
multipart uploads, pagination (every listing fits in one page).
"""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import hashlib
import itertools
import json
import logging
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

logger = logging.getLogger(__name__)

LFS_THRESHOLD = 1024 * 1024  # bytes; the real Hub's limit for regular files is larger, a small one exercises LFS
LFS_PATTERNS = ("*.parquet", "*.arrow")
REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
URL_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
GITATTRIBUTES = b"*.parquet filter=lfs diff=lfs merge=lfs -text\n*.arrow filter=lfs diff=lfs merge=lfs -text\n"
STALE_PARENT_MESSAGE = "A commit has happened since. Please refresh and try again."


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a regular file: what the Hub reports as `oid` for non-LFS files."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


# --------------------------------------------------------------------------------------------- storage


@dataclass
class Blob:
    """File content plus the ids the Hub derives from it."""

    data: bytes
    lfs: bool
    sha1: str = field(init=False)  # git blob id of the content (regular) or of the LFS pointer (lfs)
    sha256: str = field(init=False)
    pointer_size: int = field(init=False)

    def __post_init__(self) -> None:
        self.sha256 = hashlib.sha256(self.data).hexdigest()
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {len(self.data)}\n"
        self.pointer_size = len(pointer)
        self.sha1 = git_blob_sha1(pointer.encode() if self.lfs else self.data)

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def etag(self) -> str:
        """What resolve answers as ETag: sha256 for LFS files (as X-Linked-Etag on the Hub), git id otherwise."""
        return self.sha256 if self.lfs else self.sha1

    @property
    def preupload_oid(self) -> str:
        """The oid preupload reports: it must equal the client's local oid for an unchanged file."""
        return self.sha256 if self.lfs else git_blob_sha1(self.data)


@dataclass
class Commit:
    oid: str
    parent: str | None
    title: str
    description: str
    files: dict[str, Blob]  # the whole tree after this commit
    operations: list[dict[str, Any]]  # {"op": "add"|"delete", "path": ..., "lfs"/"size" for adds}
    author: str
    date: str

    @property
    def added(self) -> list[str]:
        return sorted(op["path"] for op in self.operations if op["op"] == "add")

    @property
    def deleted(self) -> list[str]:
        return sorted(op["path"] for op in self.operations if op["op"] == "delete")


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    commits: list[Commit] = field(default_factory=list)
    created_at: str = field(default_factory=_now)

    @property
    def head(self) -> Commit:
        return self.commits[-1]

    def resolve(self, revision: str) -> Commit | None:
        """`main` (or `HEAD`) is the head; a full or >= 7-char commit id is that commit."""
        if revision in ("main", "HEAD", "refs/heads/main"):
            return self.head
        if len(revision) >= 7:
            for commit in reversed(self.commits):
                if commit.oid.startswith(revision.lower()):
                    return commit
        return None

    @property
    def url_path(self) -> str:
        return f"{URL_PREFIXES[self.repo_type]}{self.repo_id}"


@dataclass
class Fault:
    endpoint: str
    status: int = 503
    after_apply: bool = False
    drop_connection: bool = False
    retry_after: int | None = None
    message: str = "Service Unavailable (injected by the hub emulator)"


class HttpError(Exception):
    """Raised by endpoint handlers: turned into a JSON error with the Hub's X-Error-* headers."""

    def __init__(self, status: int, message: str, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


# ---------------------------------------------------------------------------------------------- server


class HubServer:
    """The emulator's state and its HTTP server (127.0.0.1, a free port). Use `running_hub()`."""

    def __init__(self, *, lfs_threshold: int = LFS_THRESHOLD, lfs_patterns: tuple[str, ...] = LFS_PATTERNS):
        self.lfs_threshold = lfs_threshold
        self.lfs_patterns = lfs_patterns
        self.lock = threading.RLock()
        self.repos: dict[tuple[str, str], Repo] = {}
        self.lfs_objects: dict[str, bytes] = {}
        self.faults: list[Fault] = []
        self.pending_conflicts: list[tuple[dict[str, bytes], list[str]]] = []
        self.auth_headers: list[str] = []  # every Authorization value received, in order
        self.requests: list[tuple[str, str, str]] = []  # (endpoint, method, path)
        self.unhandled: list[str] = []  # "METHOD path" of requests no route matched
        self.ranges_served: list[str] = []  # Content-Range of every 206 answer
        self._counter = itertools.count(1)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._httpd.hub = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> HubServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="hub-emulator", daemon=True)
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
        """All commits, oldest first; the first is the repo creation commit (it adds .gitattributes)."""
        return list(self.repo(repo_id, repo_type).commits)

    def files(self, repo_id: str, repo_type: str = "dataset", revision: str = "main") -> dict[str, bytes]:
        commit = self.repo(repo_id, repo_type).resolve(revision)
        assert commit is not None, f"unknown revision {revision}"
        return {path: blob.data for path, blob in commit.files.items()}

    def endpoint_calls(self, endpoint: str) -> int:
        return sum(1 for name, _, _ in self.requests if name == endpoint)

    # -- set-up helpers

    def seed(self, repo_id: str, files: dict[str, bytes], *, repo_type: str = "dataset", private: bool = False,
             message: str = "Seed") -> Commit:
        """Create the repo if needed and commit `files` directly (remote state for a test to start from)."""
        with self.lock:
            repo = self._create_repo(repo_type, repo_id, private)
            adds = {path: Blob(data, lfs=self._is_lfs(path, len(data))) for path, data in files.items()}
            return self._apply(repo, adds, [], message, "", author="seed")

    # -- failure injection

    def fail_next(self, endpoint: str, status: int = 503, *, after_apply: bool = False, times: int = 1,
                  drop_connection: bool = False, retry_after: int | None = None) -> None:
        """Make the next `times` requests to `endpoint` fail (see the module docstring for names)."""
        with self.lock:
            for _ in range(times):
                self.faults.append(Fault(endpoint, status, after_apply, drop_connection, retry_after))

    def conflict_next_commit(self, files: dict[str, bytes] | None = None, deleted: list[str] | None = None) -> None:
        """Before the next commit is applied, someone else commits (by default an empty commit)."""
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

    def _create_repo(self, repo_type: str, repo_id: str, private: bool) -> Repo:
        key = (repo_type, repo_id)
        if key not in self.repos:
            repo = self.repos[key] = Repo(repo_type, repo_id, private)
            self._apply(repo, {".gitattributes": Blob(GITATTRIBUTES, lfs=False)}, [], "initial commit", "",
                        author="hub")
        return self.repos[key]

    def _apply(self, repo: Repo, adds: dict[str, Blob], deletes: list[tuple[str, bool]], title: str,
               description: str, *, author: str = "user") -> Commit:
        """Make one commit from the head. Raises HttpError (and changes nothing) on a missing delete target."""
        files = dict(repo.head.files) if repo.commits else {}
        operations: list[dict[str, Any]] = []
        for path, is_folder in deletes:
            if is_folder:
                prefix = path.rstrip("/") + "/"
                doomed = [p for p in files if p.startswith(prefix)]
            else:
                doomed = [path] if path in files else []
            if not doomed:
                raise HttpError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
            for p in doomed:
                del files[p]
                operations.append({"op": "delete", "path": p})
        for path, blob in adds.items():
            files[path] = blob
            operations.append({"op": "add", "path": path, "lfs": blob.lfs, "size": blob.size})
        parent = repo.head.oid if repo.commits else None
        seed = json.dumps([parent, title, operations, next(self._counter)]).encode()
        commit = Commit(hashlib.sha1(seed).hexdigest(), parent, title, description, files, operations, author,
                        _now())
        repo.commits.append(commit)
        return commit


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
    (("GET",), re.compile(_API_REPO + r"(?:/revision/([^/]+))?$"), "repo_info"),
    (("POST",), re.compile(r"^/(?:(datasets|spaces)/)?([^/]+)/([^/]+?)\.git/info/lfs/objects/batch$"), "lfs_batch"),
    (("PUT",), re.compile(r"^/lfs/([0-9a-f]{64})$"), "lfs_upload"),
    (("GET", "HEAD"), re.compile(r"^/(?:(datasets|spaces)/)?([^/]+)/([^/]+)/resolve/([^/]+)/(.+)$"), "resolve"),
]
_WRITES = {"create_repo", "delete_repo", "preupload", "commit", "lfs_batch"}


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

    def _send(self, status: int, body: bytes | dict | list | None = None, *, headers: dict[str, str] | None = None,
              content_type: str = "application/json") -> None:
        if self._fault is not None:  # the work is done, the answer is lost
            fault, self._fault = self._fault, None
            self._send_fault(fault)
            return
        self._write(status, body, headers=headers, content_type=content_type)

    def _write(self, status: int, body: bytes | dict | list | None, *, headers: dict[str, str] | None = None,
               content_type: str = "application/json") -> None:
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else (body or b"")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":  # a body on HEAD corrupts the next response on a kept-alive connection
            self.wfile.write(data)

    def _send_error(self, err: HttpError) -> None:
        headers = {"X-Error-Message": err.message.splitlines()[0]}
        if err.code:
            headers["X-Error-Code"] = err.code
        self._write(err.status, {"error": err.message}, headers=headers)

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
        self._send(200, {"type": "user", "name": "emulator-user", "orgs": [],
                         "auth": {"type": "access_token", "accessToken": {"role": "write"}}})

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
            body = {"_id": hashlib.md5(repo.repo_id.encode()).hexdigest()[:24], "id": repo.repo_id,
                    "author": ns, "sha": commit.oid, "private": repo.private, "gated": False, "disabled": False,
                    "createdAt": repo.created_at, "lastModified": commit.date, "downloads": 0, "likes": 0,
                    "tags": [], "siblings": siblings}
        self._send(200, body)

    def _preupload(self, t: str, ns: str, name: str, revision: str) -> None:
        files = self._json().get("files", [])
        with self.hub.lock:
            commit = self._commit_at(self._repo(REPO_TYPES[t], f"{ns}/{name}"), revision)
            answer = []
            for item in files:
                current = commit.files.get(item["path"])
                answer.append({
                    "path": item["path"],
                    "uploadMode": "lfs" if self.hub._is_lfs(item["path"], int(item.get("size", 0))) else "regular",
                    "shouldIgnore": False,  # required by the client
                    "oid": current.preupload_oid if current is not None else None,
                })
        self._send(200, {"files": answer, "commitOid": commit.oid})

    def _commit(self, t: str, ns: str, name: str, revision: str) -> None:
        if self.query.get("create_pr"):
            raise HttpError(400, "Pull requests are not emulated")
        lines = [json.loads(line) for line in self.body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HttpError(400, "The first NDJSON line must be the commit header")
        header = lines[0]["value"]
        adds: dict[str, Blob] = {}
        deletes: list[tuple[str, bool]] = []
        with self.hub.lock:
            repo = self._repo(REPO_TYPES[t], f"{ns}/{name}")
            for line in lines[1:]:
                key, value = line.get("key"), line.get("value", {})
                if key == "file":
                    if value.get("encoding", "base64") != "base64":
                        raise HttpError(400, f"Unsupported encoding {value.get('encoding')!r}")
                    adds[value["path"]] = Blob(base64.b64decode(value["content"]), lfs=False)
                elif key == "lfsFile":
                    data = self.hub.lfs_objects.get(value["oid"])
                    if data is None:
                        raise HttpError(422, f"LFS object {value['oid']} for {value['path']} was never uploaded")
                    adds[value["path"]] = Blob(data, lfs=True)
                elif key in ("deletedFile", "deletedFolder"):
                    deletes.append((value["path"], key == "deletedFolder"))
                else:
                    raise HttpError(400, f"Unknown commit operation {key!r}")
            if revision not in ("main", "refs/heads/main"):
                raise HttpError(400, "Only the main branch is emulated")
            for files, deleted in self.hub.pending_conflicts:  # someone else got there first
                others = {p: Blob(d, lfs=self.hub._is_lfs(p, len(d))) for p, d in files.items()}
                self.hub._apply(repo, others, [(p, False) for p in deleted], "Concurrent commit", "",
                                author="someone-else")
            self.hub.pending_conflicts.clear()
            parent = header.get("parentCommit")
            if parent and not repo.head.oid.startswith(parent.lower()):
                raise HttpError(412, STALE_PARENT_MESSAGE)
            commit = self.hub._apply(repo, adds, deletes, header.get("summary", ""), header.get("description", ""))
        self._send(200, {"success": True, "commitOid": commit.oid, "hookOutput": "",
                         "commitUrl": f"{self.hub.url}/{repo.url_path}/commit/{commit.oid}"})

    def _entries(self, repo: Repo, commit: Commit, prefix: str, *, recursive: bool, expand: bool) -> list[dict]:
        """Tree entries under `prefix` ("" = root): files and the directories their paths imply."""
        base = prefix.strip("/") + "/" if prefix.strip("/") else ""
        entries: dict[str, dict] = {}
        for path, blob in commit.files.items():
            if not path.startswith(base):
                continue
            parts = path[len(base):].split("/")
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
        index = repo.commits.index(commit)
        for c in reversed(repo.commits[: index + 1]):
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
        entry: dict[str, Any] = {"type": "directory", "oid": hashlib.sha1(listing.encode()).hexdigest(), "size": 0,
                                 "path": path}
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
            self._repo(REPO_TYPES[t or "models"], f"{ns}/{name}")
            objects = []
            for obj in payload.get("objects", []):
                answer: dict[str, Any] = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
                if obj["oid"] not in self.hub.lfs_objects:  # no "actions" = already stored upstream
                    answer["actions"] = {"upload": {"href": f"{self.hub.url}/lfs/{obj['oid']}", "header": {}}}
                objects.append(answer)
        self._send(200, {"transfer": "basic", "objects": objects}, content_type="application/vnd.git-lfs+json")

    def _lfs_upload(self, oid: str) -> None:
        if hashlib.sha256(self.body).hexdigest() != oid:
            raise HttpError(400, f"Uploaded content does not match sha256 {oid}")
        with self.hub.lock:
            self.hub.lfs_objects[oid] = self.body
        self._send(200, b"", content_type="text/plain")
