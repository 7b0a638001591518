"""Names from the configuration that become Hub ids and folders: checked by the Hub client's own rules, and confined.

`publish.namespace` is the user or organisation of every repo id (`namespace/<FAMILY>_RS_think`), and the local
target lays the repos out the same way (`{out}/{namespace}/{repo}`): a namespace the Hub would refuse is refused when
the family is loaded, so that `../../escape`, `..`, an absolute path or `my space` never reaches a path. The rules are
`huggingface_hub.utils.validate_repo_id`'s (letters, digits, '-', '_', '.'; no leading or trailing '-' or '.'; no '--'
or '..'; at most 96 characters), applied to a repo id under the namespace, so the namespace holds no '/' either.
`confined` is the second line of defence where a folder is built from such a name.
"""

from __future__ import annotations

from pathlib import Path

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

_PROBE_REPO = "repo"
"""A valid repo name: the namespace is checked as the first part of `namespace/repo`."""


def namespace_problem(namespace: object) -> str | None:
    """Why `namespace` is no Hub user or organisation name (what would be valid), or None when it is one."""
    rule = (
        "a Hub user or organisation name: letters, digits, '-', '_' or '.', starting and ending with a letter or "
        "digit, without '--', '..' or '/', at most 96 characters (e.g. rs-datasets)"
    )
    if not isinstance(namespace, str) or not namespace:
        return f"must be {rule}, got {namespace!r}"
    try:
        validate_repo_id(f"{namespace}/{_PROBE_REPO}")
    except HFValidationError:
        return f"{namespace!r} is not {rule}"
    return None


class PathEscapeError(ValueError):
    """A path built from configuration that would leave the folder it belongs under."""


def confined(root: Path, *parts: str) -> Path:
    """`root / parts...`, refused (`PathEscapeError`) unless it lies strictly below `root`.

    Compared lexically after resolving both (`..`, an absolute part and a symbolic link inside are all followed),
    so a name that slipped past validation still cannot write elsewhere."""
    path = root.joinpath(*parts)
    base = root.resolve()
    resolved = path.resolve()
    if resolved == base or not resolved.is_relative_to(base):
        raise PathEscapeError(
            f"{'/'.join(parts)!r} under {root} leads to {resolved}, outside {base}: refused (nothing was written)"
        )
    return path
