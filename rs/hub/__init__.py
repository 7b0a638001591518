"""Publishing a local folder, laid out exactly like a Hub dataset repo, so that readers see it change in one step.

Why not `HfApi.upload_folder`: in huggingface_hub 2.x it is the large-upload pipeline, which splits a
big upload into several commits on the target branch (readers would see a half-published dataset in
between), sizes them adaptively between 20 and 1,000 files starting near 250 (the Hub's guidance is
around 50-100), and leaves its pull request unmerged when asked for one. Here:

- every local file is compared with the remote tree by hash, so unchanged files are neither
  uploaded nor committed, and an unchanged re-run makes no commit at all (`diff`);
- a change of up to `files_per_commit` files is ONE `create_commit` pinned with `parent_commit` to the
  head the changes were read against; a larger one fills a pull request in commits of that size and
  merges it once complete, so main moves once either way (`commits`, `pulls`);
- every retry after a server error, a lost answer or a conflict reads the Hub again first, so a
  commit the server applied is found there and not made twice; a 429 is waited out as the server
  asks and the same request sent again (`retry`);
- a run killed midway, run again, finds its pull request by the build named in its title, commits
  only what it lacks and merges; a pull request of an older build is closed, never merged.

Uploads themselves go through `create_commit`, so they take the client's path (Xet where available,
else LFS): bytes already stored in the repo are not sent again.
"""

from rs.hub.diff import FileChange, file_changes
from rs.hub.limits import DEFAULT_FILES_PER_COMMIT, MAX_FILES_PER_COMMIT, check_files_per_commit
from rs.hub.publish import DEFAULT_COMMIT_MESSAGE, publish_folder
from rs.hub.result import PublishResult, describe_commits, format_changes
from rs.hub.retry import PublishError
from rs.hub.tokens import MissingTokenError, resolve_token

__all__ = [
    "DEFAULT_COMMIT_MESSAGE",
    "DEFAULT_FILES_PER_COMMIT",
    "MAX_FILES_PER_COMMIT",
    "FileChange",
    "MissingTokenError",
    "PublishError",
    "PublishResult",
    "check_files_per_commit",
    "describe_commits",
    "file_changes",
    "format_changes",
    "publish_folder",
    "resolve_token",
]
