"""What the Hub and its dataset viewer accept: the documented figures the configuration, the
pre-publish check and the uploads all use, in one module with no dependencies (families.yaml is
validated against them without importing the Hub client).

Read in the Hub's documentation (huggingface.co/docs/hub/storage-limits, hub-docs at 242f4a1,
2026-08-22): fewer than 100,000 files per repo, no more than 10,000 entries per folder, files under
200 GB (500 GB is the hard limit), around 50-100 files per commit; commits are rate-limited per repo
(the server's 429 names 128 an hour).
"""

from __future__ import annotations

DEFAULT_FILES_PER_COMMIT = 50
MAX_FILES_PER_COMMIT = 100  # the Hub's guidance: "Commit size <100 files", "keep around 50-100 files per commit"
MAX_FILES_PER_REPO = 100_000
MAX_ENTRIES_PER_FOLDER = 10_000
MAX_FILE_BYTES = 500 * 10**9
RECOMMENDED_FILE_BYTES = 200 * 10**9
COMMITS_PER_HOUR = 128  # the Hub's commit quota per repo, as its 429 message names it


def check_files_per_commit(value: int, *, name: str = "files_per_commit") -> int:
    """`value` if it is a number of files per commit within the Hub's guidance, else ValueError saying so."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_FILES_PER_COMMIT:
        raise ValueError(
            f"{name} must be a whole number from 1 to {MAX_FILES_PER_COMMIT} (the Hub's guidance: keep "
            f"around 50-100 files per commit; default {DEFAULT_FILES_PER_COMMIT}), got {value!r}"
        )
    return value
