"""The one base class of the errors a user can cause and fix.

Every command maps an `RsError` in one place (`rs.cli.run`) to `error: <message>`, then
`hint: <hint>` when there is one, and the error's exit status: never a traceback. Status 2 is a
usage or configuration problem (fix the command or the YAML), 1 a run that could not finish
(re-running after the fix is safe). `rs audit` has one more: 3, the repos are being published (nothing was checked:
run it again when the publish is done; `rs.audit.busy.AuditBusy`); its 1 is "numbers disagree".
"""

from __future__ import annotations

from typing import ClassVar, Iterator


class RsError(Exception):
    """An error with a message for the user, an optional hint of what to do, and an exit status."""

    exit_code: ClassVar[int] = 1
    default_hint: ClassVar[str | None] = None
    show_log: ClassVar[bool] = False
    """Whether the command shows the end of its log file with the error (an engine's own account of its death)."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint

    def __str__(self) -> str:
        return self.message


class UsageError(RsError):
    """A command, a flag or a configuration that cannot work as given."""

    exit_code = 2


def causes(error: BaseException) -> Iterator[BaseException]:
    """`error`, then the error it was raised from or during, and so on (each once): libraries wrap the failure that
    decides what to do (a full disk, a dropped connection, a 429) in errors of their own."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__
