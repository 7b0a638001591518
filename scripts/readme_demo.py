"""Keep the README's sample of `make demo` exactly what `make demo` prints.

    make readme-demo                                   # runs the demo, rewrites README.md's sample from what it printed
    make demo | .venv/bin/python scripts/readme_demo.py --check     # exit 1 (and a diff) when the README differs

It takes the summary's first lines (totals, the verifier's outcomes, rejections by reason, how the
answers ended, the judge's calibration and its verdict, the recovery pass) from the demo's stdout and the number of questions asked for a letter from the build's
stats.json, and puts them in the README's code block after "a summary of what happened, e.g.:" and
in the sentence after it. `tests/e2e/test_readme_demo.py` runs the demo as `make demo` does and checks
the README with `updated()`, all but the judge's figures (`portable()`), which depend on the CPU.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAMILY = "TinyCLEVR"
_BLOCK = re.compile(r"(then a summary of what happened, e\.g\.:\n\n```\n)(.*?)(\n```\n)", re.DOTALL)
_LETTERED = re.compile(r"The [\d,]+(\s+)questions with lettered options")


class ReadmeDrift(ValueError):
    """The README cannot take the demo's output as it is (a marker gone, prose that now says the opposite)."""


def summary(stdout: str, family: str = FAMILY) -> str:
    """The summary's lines before the repos', as the README shows them (the repos' lines name this machine's folders)."""
    lines = stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"{family}: ")), None)
    if start is None:
        raise ReadmeDrift(f"no line starting '{family}: ' in the demo's output: is it the output of `make demo`?")
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith(
            (
                "  recovery:",
                "  verifier:",
                "  decontamination:",
                "  rejected by reason:",
                "  answers ended:",
                "  judge calibration:",
                "  judge:",
            )
        ):
            break
        block.append(line)
    return "\n".join(block)


JUDGE_LINES = ("  rejected by reason:", "  judge calibration:", "  judge:")
"""The summary's lines whose figures are the judge's verdicts: near ties for the demo model, which was never trained to
judge, so a CPU other than the one that wrote the README may tip one (README.md, "The same bytes on any CPU")."""


def portable(text: str) -> str:
    """`text` with the numbers of the judge's lines masked: what every machine prints alike, and the tests compare."""
    return "\n".join(
        re.sub(r"\d[\d,.]*", "#", line) if line.startswith(JUDGE_LINES) else line for line in text.split("\n")
    )


def updated(readme: str, stdout: str, stats: dict) -> str:
    """The README with the demo's summary and its count of questions asked for a letter."""
    block = summary(stdout)
    if not _BLOCK.search(readme) or not _LETTERED.search(readme):
        raise ReadmeDrift(
            "README.md no longer has the demo's sample block or its 'The N questions with lettered options' sentence"
        )
    if "judge: BLOCKED" not in block and "its CORRECT verdicts promote nothing" in readme:
        raise ReadmeDrift(
            "the judge now passes its calibration in the demo, but the README says it promotes nothing: rewrite that paragraph"
        )
    readme = _BLOCK.sub(lambda m: m.group(1) + block + m.group(3), readme, count=1)
    lettered = stats["prompts"]["multiple_choice_items"]
    return _LETTERED.sub(lambda m: f"The {lettered:,}{m.group(1)}questions with lettered options", readme, count=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 with a diff when README.md differs"
    )
    parser.add_argument(
        "--build-dir", type=Path, default=ROOT / "build", help="where the demo's build is (default: ./build)"
    )
    args = parser.parse_args(argv)
    stdout = sys.stdin.read()
    stats = json.loads((args.build_dir / FAMILY / "stats.json").read_text())
    path = ROOT / "README.md"
    before = path.read_text(encoding="utf-8")
    after = updated(before, stdout, stats)
    if args.check:
        sys.stdout.writelines(
            difflib.unified_diff(before.splitlines(True), after.splitlines(True), "README.md", "README.md (demo)")
        )
        return int(before != after)
    path.write_text(after, encoding="utf-8")
    print("README.md: the demo's sample " + ("updated" if before != after else "already matched"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
