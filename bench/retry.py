"""The hand-written retry loops (`rs.hub.retry`, `rs.sources.resumable`) against tenacity (issue 45).

    python bench/retry.py            # lines of code, import time, installed size
    python bench/retry.py --tests    # and the retry tests, run once as they are and once with tenacity's loops swapped in

The tenacity prototypes are `bench/retry_tenacity.py`; `--tests` swaps them into every process the tests start (a
`sitecustomize` on PYTHONPATH that replaces `rs.hub.retry.through_rate_limit` / `retrying` and
`rs.sources.resumable.resumable`, where they are and in every module that imported them already) and prints each run's pass count and time.
It needs tenacity, which rs does not depend on (`python -m pip install tenacity`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from library_costs import code_lines, import_seconds, installed_bytes, run_tests  # noqa: E402

from rs.hub import retry  # noqa: E402
from rs.sources import resumable  # noqa: E402

TESTS = [
    "tests/hub/test_hub.py",
    "tests/hub/test_hub_scale.py",
    "tests/pipeline/publish/test_publish_faults.py",
    "tests/hub/test_offline.py",
    "tests/sources/test_sources.py",
    "tests/sources/test_source_drop.py",
]
SWAP = """\
import sys
import retry_tenacity
import rs.hub.retry, rs.sources.resumable
swaps = {rs.hub.retry.through_rate_limit: retry_tenacity.through_rate_limit, rs.hub.retry.retrying: retry_tenacity.retrying,
         rs.sources.resumable.resumable: retry_tenacity.resumable}
for module in list(sys.modules.values()):  # the callers imported already (rs.hub imports its publish) hold the old ones
    if getattr(module, "__name__", "").startswith("rs."):
        for name, value in list(vars(module).items()):
            if callable(value) and value in swaps:
                setattr(module, name, swaps[value])
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", action="store_true", help=f"also run {', '.join(TESTS)} with each")
    args = parser.parse_args()
    try:
        import retry_tenacity as proto
    except ModuleNotFoundError as err:
        if err.name != "tenacity":
            raise
        sys.exit(
            "bench/retry.py compares rs's retry loops with tenacity, which rs does not depend on: python -m pip install tenacity"
        )

    hand = [retry.through_rate_limit, retry.retrying, resumable.resumable]
    lib = [proto.through_rate_limit, proto.retrying, proto.resumable]
    print("lines of code (no blank lines, comments or docstrings):")
    for mine, theirs in zip(hand, lib):
        print(
            f"  {mine.__module__}.{mine.__name__}: hand-written {code_lines(mine)}, with tenacity {code_lines(theirs)}"
        )
    print(f"  together: hand-written {code_lines(*hand)}, with tenacity {code_lines(*lib)}")
    print(
        f"import time (-X importtime, least of 5): rs.hub.retry {import_seconds('rs.hub.retry') * 1e3:.0f} ms, "
        f"after it, tenacity {import_seconds('tenacity', after='rs.hub.retry') * 1e3:.0f} ms more; installed: tenacity {installed_bytes('tenacity') / 2**10:.0f} KiB "
        "(no dependency of its own)"
    )
    if args.tests:
        for swap in (False, True):
            summary, seconds = run_tests(TESTS, SWAP if swap else None)
            print(f"  {'tenacity' if swap else 'hand-written'}: {summary} ({seconds:.0f} s wall)")


if __name__ == "__main__":
    main()
