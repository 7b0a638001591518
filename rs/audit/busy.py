"""An audit of a local folder while a publish writes into it: refused, naming the publish, rather than read half-written.

A local publish (`rs.pipeline.publish.local`) holds `<folder>/.rs-publish/<FAMILY>.lock` (an flock) for its whole run
and switches the repos in one transaction: read meanwhile, a folder can be old while its sibling is new, and every
number that joins them would disagree falsely. The audit holds the same lock shared while it reads: a publish that
starts meanwhile is refused (naming this audit), and an audit that finds the lock held is refused, naming the
publish. A transaction a stopped publish committed but did not finish (its journal is there) is refused too: the
next publish of the family finishes it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rs.errors import RsError
from rs.util.locks import describe, holders

CONTROL = ".rs-publish"
"""`rs.pipeline.publish.local.CONTROL`: the folder beside the repos that holds each family's lock and transaction."""


class AuditBusy(RsError):
    """The repos are being written: nothing was audited (exit 3; 1 is "numbers disagree", 2 a target that cannot be read)."""

    exit_code = 3


@contextmanager
def not_being_published(folder: Path, family: str) -> Iterator[None]:
    """Hold the family's publish lock in `folder` (the folder beside the repo) shared while the audit reads, or raise
    `AuditBusy` naming the process that publishes. Nothing is created: a folder no publish locked has no lock file."""
    lock = folder / CONTROL / f"{family}.lock"
    fd = None
    if lock.is_file():
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:  # unreadable: the publish's own refusal will say so; the audit reads what is there
            fd = None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                pids = holders([lock])
                who = "; ".join(f"process {pid} ({describe(pid)})" for pid in pids) or "another process"
                raise AuditBusy(
                    f"{folder}: {family}'s repos are being published by {who}: read now, a card could be the old one "
                    "beside a new shard, and the audit would report disagreements that are not there",
                    hint="run the audit again when the publish has finished",
                ) from None
        journal = folder / CONTROL / family / "journal.json"
        if journal.is_file():
            raise AuditBusy(
                f"{folder}: a publish of {family} was stopped while it switched the repos in ({journal} names the "
                "switches not yet made): some repos may be new and others old",
                hint=f"run the family's publish into {folder} again (it finishes the switch first), then audit",
            )
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock
