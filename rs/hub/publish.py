"""`publish_folder`: make a Hub dataset repo hold exactly a local folder, visible to readers in one step.

Each attempt re-reads the Hub and schedules its commits again (`commits.schedule_commits`), so what an earlier attempt or an
earlier run committed is found there and not committed again; the retry loops are in `retry`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from huggingface_hub import HfApi, constants

from rs import __version__
from rs.hub import pulls
from rs.hub.commits import CommitSchedule, operations, schedule_commits
from rs.hub.diff import REPO_TYPE, FileChange, LocalFile, scan_folder, selected
from rs.hub.limits import DEFAULT_FILES_PER_COMMIT, check_files_per_commit
from rs.hub.pulls import Pull
from rs.hub.result import PublishResult, format_changes
from rs.hub.retry import MainMoved, retrying, through_rate_limit
from rs.hub.tokens import optional_token, resolve_token
from rs.util.progress import progress as progress_bar
from rs.util.sizes import format_bytes

logger = logging.getLogger("rs.hub")

DEFAULT_COMMIT_MESSAGE = "Publish dataset"
T = TypeVar("T")


def _summary(changes: Sequence[FileChange]) -> str:
    counts = {
        action: sum(1 for c in changes if c.action == action) for action in ("add", "change", "delete", "unchanged")
    }
    return (
        f"{counts['add']} added, {counts['change']} changed, {counts['delete']} deleted, "
        f"{counts['unchanged']} unchanged"
    )


def _commit_url(api: HfApi, repo_id: str, oid: str) -> str:
    return f"{api.endpoint}/datasets/{repo_id}/commit/{oid}"


def _pull_url(api: HfApi, repo_id: str, num: int) -> str:
    return f"{api.endpoint}/datasets/{repo_id}/discussions/{num}"


class _Publisher:
    """One `publish_folder` call: the attempts share what was created and committed, and the progress bar."""

    def __init__(
        self,
        api: HfApi,
        folder: Path,
        repo_id: str,
        local: dict[str, LocalFile],
        *,
        token: str,
        private: bool,
        only: Sequence[str] | None,
        delete_extra: bool,
        commit_message: str,
        files_per_commit: int,
        show_progress: bool,
    ):
        self.api, self.folder, self.repo_id, self.local, self.token = api, folder, repo_id, local, token
        self.private, self.only, self.delete_extra = private, only, delete_extra
        self.commit_message, self.files_per_commit, self.show_progress = (
            commit_message,
            files_per_commit,
            show_progress,
        )
        self.repo_ready = False
        self.made = 0  # commits acknowledged by the Hub, over all attempts
        self.in_flight = False  # a commit or merge was sent and its answer not (yet) seen
        self.pending: tuple[list[FileChange], str | None] | None = (
            None  # the changes (and main's head) of an attempt whose write failed
        )
        self.bar: Any = None
        self.files_done = self.files_total = 0
        self.pull_url: str | None = None

    # -- the attempt

    def attempt(self, n: int) -> PublishResult:
        if not self.repo_ready:
            through_rate_limit(
                lambda: self.api.create_repo(self.repo_id, repo_type=REPO_TYPE, private=self.private, exist_ok=True),
                repo_id=self.repo_id,
                what="creating the repo",
                token=self.token,
            )
            self.repo_ready = True
        schedule = schedule_commits(
            self.api,
            self.repo_id,
            self.local,
            only=self.only,
            delete_extra=self.delete_extra,
            files_per_commit=self.files_per_commit,
        )
        if self.private and schedule.remote.private is False:
            logger.warning(
                "%s already exists and is public; publishing leaves its visibility unchanged.", self.repo_id
            )
        for pull, reason in schedule.stale:
            pulls.close(self.api, self.repo_id, pull, reason, token=self.token)
        if not schedule.todo:
            return self._nothing_to_do(schedule)
        self.pending = (schedule.changes, schedule.remote.head)
        self._start_bar(schedule)
        logger.info(
            "Publishing %s to %s (attempt %d): %s; %d commit(s)%s",
            self.folder,
            self.repo_id,
            n,
            _summary(schedule.changes),
            schedule.commits,
            " through a pull request" if schedule.via_pull_request else "",
        )
        if not schedule.via_pull_request:
            info = self._commit(
                schedule.work,
                self.commit_message,
                description=_summary(schedule.changes),
                parent_commit=schedule.remote.head,
            )
            logger.info("%s: committed %s", self.repo_id, info.commit_url)
            return PublishResult(self.repo_id, schedule.changes, info.commit_url, commits=self.made)
        return self._through_pull_request(schedule)

    def _nothing_to_do(self, schedule: CommitSchedule) -> PublishResult:
        if self.pending is not None and schedule.remote.head != self.pending[1]:
            # The last attempt failed after the server applied its commit or merge (a lost answer): report
            # that rather than "nothing to do", and do not commit the same change again.
            logger.info(
                "%s: the previous attempt's commit reached the Hub despite the error; not repeating it.", self.repo_id
            )
            return PublishResult(
                self.repo_id,
                self.pending[0],
                _commit_url(self.api, self.repo_id, schedule.remote.head or ""),
                commits=self.made + int(self.in_flight),
                merges=int(self.pull_url is not None),
                pull_request=self.pull_url,
            )
        logger.info("%s is up to date (%s); nothing to commit.", self.repo_id, _summary(schedule.changes))
        return PublishResult(self.repo_id, schedule.changes, None)

    def _through_pull_request(self, schedule: CommitSchedule) -> PublishResult:
        assert schedule.build is not None and schedule.remote.head is not None
        pull, parent = schedule.resume, schedule.work_head
        if pull is not None:
            self.pull_url = _pull_url(self.api, self.repo_id, pull.num)
            logger.info(
                "%s: resuming pull request #%d (%s): %d file(s) still to commit",
                self.repo_id,
                pull.num,
                self.pull_url,
                len(schedule.work),
            )
        batches = schedule.batches()
        for index, batch in enumerate(batches, 1):
            if pull is None:
                title = pulls.title(self.commit_message, schedule.build, schedule.remote.head)
                info = self._commit(
                    batch,
                    title,
                    description=_summary(schedule.changes),
                    parent_commit=schedule.remote.head,
                    create_pr=True,
                )
                pull = Pull(
                    info.pr_num,
                    title,
                    schedule.build[: pulls.MARK_LENGTH],
                    schedule.remote.head[: pulls.MARK_LENGTH],
                    "open",
                )
                self.pull_url = info.pr_url or _pull_url(self.api, self.repo_id, pull.num)
                logger.info(
                    "%s: opened pull request #%d (%s); main moves when it is merged",
                    self.repo_id,
                    pull.num,
                    self.pull_url,
                )
            else:
                part = f"part {index}/{len(batches)}" + (" of the rest" if schedule.resume is not None else "")
                info = self._commit(
                    batch,
                    f"{self.commit_message} ({part})",
                    description=_summary(batch),
                    parent_commit=parent,
                    revision=pull.ref,
                )
            parent = info.oid
        assert pull is not None
        # Merging gives this build only if main is still where the pull request was opened from.
        head = self.api.repo_info(self.repo_id, repo_type=REPO_TYPE).sha
        if not pull.based_on(head):
            raise MainMoved(f"main moved to {head} while pull request #{pull.num} was filled")
        self.in_flight = True
        pulls.merge(self.api, self.repo_id, pull, token=self.token)
        self.in_flight = False
        self.made += 1
        merged = self.api.repo_info(self.repo_id, repo_type=REPO_TYPE).sha or ""
        logger.info("%s: merged pull request #%d: main is now %s", self.repo_id, pull.num, merged)
        return PublishResult(
            self.repo_id,
            schedule.changes,
            _commit_url(self.api, self.repo_id, merged),
            commits=self.made,
            merges=1,
            pull_request=self.pull_url,
        )

    # -- one commit

    def _commit(
        self,
        batch: list[FileChange],
        message: str,
        *,
        description: str,
        parent_commit: str | None,
        revision: str | None = None,
        create_pr: bool = False,
    ) -> Any:
        """Commit `batch` (resent as is after a 429), then count it on the bar."""

        def send() -> Any:
            return self.api.create_commit(
                self.repo_id,
                operations(batch, self.local),
                commit_message=message,
                commit_description=description,
                repo_type=REPO_TYPE,
                revision=revision,
                create_pr=create_pr,
                parent_commit=parent_commit,
            )

        self.in_flight = True
        info = through_rate_limit(send, repo_id=self.repo_id, what="a commit", token=self.token)
        self.in_flight = False
        self.made += 1
        self.files_done += len(batch)
        if self.bar is not None:
            self.bar.update(sum(c.size for c in batch if c.action != "delete"))
            self.bar.set_postfix(files=f"{self.files_done}/{self.files_total}", commits=self.made)
        return info

    # -- progress

    def _start_bar(self, schedule: CommitSchedule) -> None:
        """One bar per repo, in bytes uploaded, with files and commits beside; sized by the first schedule."""
        if self.bar is not None:
            return
        self.files_total = len(schedule.work)
        total = sum(c.size for c in schedule.work if c.action != "delete")
        self.bar = progress_bar(
            total, f"uploading {self.repo_id}", unit="B", unit_scale=True, enabled=self.show_progress
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def publish_folder(
    folder: str | Path,
    repo_id: str,
    *,
    token: str | None = None,
    private: bool = False,
    only: Sequence[str] | None = None,
    delete_extra: bool = True,
    dry_run: bool = False,
    commit_message: str = DEFAULT_COMMIT_MESSAGE,
    endpoint: str | None = None,
    max_attempts: int = 5,
    files_per_commit: int = DEFAULT_FILES_PER_COMMIT,
    progress: bool = False,
) -> PublishResult:
    """Make the dataset repo `repo_id` hold exactly the files of `folder`; readers see the old files or the new, never a mix.

    Creates the repo (`private` only applies then), uploads added and changed files, deletes remote
    files that are not in `folder` (unless `delete_extra=False`; never `.gitattributes`). Up to
    `files_per_commit` operations go in one commit on main pinned to the head the changes were read
    against; more go in commits of that size on a pull request, merged once complete (see
    `rs.hub.commits`). Nothing is committed when nothing changed. A run interrupted midway, run again,
    resumes its pull request and uploads only what it lacks. `only` limits everything to matching
    paths (exact, glob or `folder/`). `dry_run` only compares (the result's `commits` says how many it
    would make): it creates nothing and works without a token for public repos. `progress`: a bar of
    the bytes and files uploaded.

    Raises MissingTokenError without a token (except in a dry run) and PublishError when the Hub refuses
    or keeps failing after `max_attempts` (a wait for a rate limit is not a failed attempt).
    """
    check_files_per_commit(files_per_commit)
    folder = Path(folder)
    local = scan_folder(folder)

    if dry_run and constants.HF_HUB_OFFLINE:
        return _offline_dry_run(folder, repo_id, local, only=only)
    if dry_run:
        return _dry_run(
            folder,
            repo_id,
            local,
            token=token,
            only=only,
            delete_extra=delete_extra,
            endpoint=endpoint,
            max_attempts=max_attempts,
            files_per_commit=files_per_commit,
        )

    token = resolve_token(token)
    api = HfApi(endpoint=endpoint, token=token, library_name="rs", library_version=__version__)
    publisher = _Publisher(
        api,
        folder,
        repo_id,
        local,
        token=token,
        private=private,
        only=only,
        delete_extra=delete_extra,
        commit_message=commit_message,
        files_per_commit=files_per_commit,
        show_progress=progress,
    )
    try:
        return _interruptible(
            lambda: retrying(
                publisher.attempt,
                repo_id=repo_id,
                token=token,
                max_attempts=max_attempts,
                progress=lambda: publisher.made,
            )
        )
    finally:
        publisher.close()


def _interruptible(call: Callable[[], T]) -> T:
    """`call()` in a thread of its own, waited for in a way Ctrl-C or SIGTERM interrupts at once.

    `huggingface_hub` uploads several files from a thread pool and, interrupted, waits for every upload in flight
    (`ThreadPoolExecutor.shutdown(wait=True)`): a first Ctrl-C during a publish to a slow Hub waited as long as the
    slowest upload. Waited for from here, the stop is immediate; what the abandoned uploads send is never committed
    (the commit comes after them, in the abandoned thread), and the next run uploads only what the Hub lacks.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as err:  # handed to the waiting thread as it is
            outcome["error"] = err

    worker = threading.Thread(target=run, name="rs-publish")  # not a daemon, nor are the upload threads it starts:
    # a stopped command sees them there and leaves without waiting for them (`rs.cli.signals.leave`)
    worker.start()
    while (
        worker.is_alive()
    ):  # in short waits: a signal the kernel hands to another thread is seen by this one only when
        worker.join(0.1)  # it runs Python again, and an endless join of a lock never returns to run it
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _offline_dry_run(
    folder: Path, repo_id: str, local: dict[str, LocalFile], *, only: Sequence[str] | None
) -> PublishResult:
    """A dry run without the Hub (HF_HUB_OFFLINE): every local file in scope, to upload unless the Hub already holds it.

    What the Hub holds now (so what is unchanged or deleted), an open pull request and the commits are not known here;
    the caller says so. Nothing is sent: offline, `huggingface_hub` refuses every request anyway.
    """
    changes = [FileChange(path, "upload", file.size) for path, file in sorted(local.items()) if selected(path, only)]
    result = PublishResult(repo_id, changes, None, offline=True)
    logger.info(
        "Dry run of %s offline, nothing published (%s to upload at most, not compared with the Hub):\n%s",
        folder,
        format_bytes(sum(c.size for c in changes)),
        format_changes(result, dry_run=True),
    )
    return result


def _dry_run(
    folder: Path,
    repo_id: str,
    local: dict[str, LocalFile],
    *,
    token: str | None,
    only: Sequence[str] | None,
    delete_extra: bool,
    endpoint: str | None,
    max_attempts: int,
    files_per_commit: int,
) -> PublishResult:
    dry_token = optional_token(token)
    if dry_token is None:
        logger.warning(
            "%s: no Hugging Face token, comparing with the public view of the Hub (a private repo looks missing).",
            repo_id,
        )
    api = HfApi(endpoint=endpoint, token=dry_token or False, library_name="rs", library_version=__version__)

    def attempt(_: int) -> PublishResult:
        schedule = schedule_commits(
            api, repo_id, local, only=only, delete_extra=delete_extra, files_per_commit=files_per_commit
        )
        for pull, reason in schedule.stale:
            logger.info("%s: would close pull request #%d (%s)", repo_id, pull.num, reason)
        resumed = _pull_url(api, repo_id, schedule.resume.num) if schedule.resume is not None else None
        result = PublishResult(
            repo_id,
            schedule.changes,
            None,
            commits=schedule.commits,
            merges=int(schedule.via_pull_request),
            pull_request=resumed,
        )
        upload = sum(c.size for c in schedule.work if c.action != "delete")
        logger.info(
            "Dry run of %s, nothing published (%s to upload):\n%s",
            folder,
            format_bytes(upload),
            format_changes(result, dry_run=True),
        )
        return result

    return _interruptible(lambda: retrying(attempt, repo_id=repo_id, token=dry_token, max_attempts=max_attempts))
