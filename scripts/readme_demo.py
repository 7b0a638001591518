"""Keep the documentation's figures of `make demo` exactly what `make demo` prints.

    make readme-demo                                   # runs the demo, rewrites the figures from what it printed
    make demo | .venv/bin/python scripts/readme_demo.py --check     # exit 1 (and a diff) when a page differs

It takes the summary's first lines (totals, the verifier's outcomes, rejections by reason, how the
answers ended, the judge's calibration and its verdict, the recovery pass) from the demo's stdout and the number of
questions asked for a letter from the build's stats.json, and puts them in README.md's code block after "a summary of
what happened, e.g.:" and in the sentence after it (`updated`); the recovery paragraph's figures, the per-type accept
rates and the audit example's count (from `rs audit` of the demo's think repo) go to whichever page of docs/ holds
them (`updated_documents`). `tests/e2e/test_readme_demo.py` runs the demo as `make demo` does and checks every page,
all but the judge's figures (`portable()`), which depend on the CPU.
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
                "  adjudicator calibration:",
                "  suspect references:",
                "  no image:",
            )
        ):
            break
        block.append(line)
    return "\n".join(block)


JUDGE_LINES = (
    "  rejected by reason:",
    "  judge calibration:",
    "  judge:",
    "  adjudicator calibration:",
    "  suspect references:",
)
"""The summary's lines whose figures are the judge's (and the adjudicator's) verdicts: near ties for the demo model, which
was never trained to judge, so a CPU other than the one that wrote the README may tip one (docs/design.md, "The same bytes on any CPU")."""


def portable(text: str) -> str:
    """`text` with the numbers of the judge's lines masked: what every machine prints alike, and the tests compare."""
    return "\n".join(
        re.sub(r"\d[\d,.]*", "#", line) if line.startswith(JUDGE_LINES) else line for line in text.split("\n")
    )


def updated(readme: str, stdout: str, stats: dict) -> str:
    """README.md with the demo's summary and its count of questions asked for a letter."""
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


_TYPES = re.compile(r"On `make demo`'s own cards the types the demo model fails most are .*? question\.", re.DOTALL)
"""The sentence of the demo's per-type accept rates ("Question types")."""


def type_rates(readme: str, stats: dict) -> str:
    """The page with the demo's two types of lowest accept rate, and those it always accepts, from the build's
    `question_types` (what the rejected card's "The types the model fails most" says)."""
    if "question_types" not in stats:  # a build without question types (a test's): the sentence as it is
        return readme
    types = stats["question_types"].get("types", {})
    if not _TYPES.search(readme):
        raise ReadmeDrift("the page no longer has the sentence 'On `make demo`'s own cards the types ... fails most'")
    if len(types) < 2:
        raise ReadmeDrift("the demo's build has fewer than two question types: rewrite the per-type sentence (docs/)")
    worst = sorted(types, key=lambda name: (types[name]["accept_rate"], name))[:2]
    rates = [f"`{name}` ({100 * types[name]['accept_rate']:.1f}% accepted)" for name in worst]
    every = [f"`{name}`" for name in sorted(types) if types[name]["accept_rate"] == 1.0]
    always = (
        f"; it accepts every {', '.join(every[:-1])}{' and ' if len(every) > 1 else ''}{every[-1]} question."
        if every
        else "; it accepts every question of no type."
    )
    sentence = f"On `make demo`'s own cards the types the demo model fails most are {rates[0]} and {rates[1]}{always}"
    return _TYPES.sub(lambda m: sentence, readme, count=1)


_RECOVERY = re.compile(
    r"the greedy pass accepts on [\d,]+ of [\d,]+ questions \([\d.]+%\), is right at least once in (\d+) samples on "
    r"[\d,]+ of(\s+)the [\d,]+ rejections it sampled \(`make demo`; [\d.]+% after recovery\)"
)
"""The recovery paragraph's sentence of the demo's figures ("Recovering the hard questions")."""
_TOTALS = re.compile(
    r"^\S+: ([\d,]+) source QA, ([\d,]+) dropped by cleaning, [\d,]+ accepted \(([\d,]+) by the verifier, "
    r"([\d,]+) by the judge"
)
_RECOVERED = re.compile(
    r"accept rate ([\d.]+%) greedy, ([\d.]+%) after recovery; ([\d,]+) of ([\d,]+) sampled rejections recovered"
)


def recovery_paragraph(readme: str, block: str) -> str:
    """The page with the recovery paragraph's figures those of the summary `block` (its totals and recovery lines)."""
    totals, recovered = _TOTALS.search(block), _RECOVERED.search(block)
    if not _RECOVERY.search(readme):
        raise ReadmeDrift(
            "the page no longer has the recovery paragraph's 'the greedy pass accepts on N of M' sentence"
        )
    if totals is None or recovered is None:
        raise ReadmeDrift("the demo's summary has no recovery line: rewrite the recovery paragraph (docs/)")
    n = lambda text: int(text.replace(",", ""))  # noqa: E731
    questions = n(totals.group(1)) - n(totals.group(2))
    greedy = n(totals.group(3)) + n(totals.group(4))
    rate, after, fixed, sampled = recovered.groups()
    return _RECOVERY.sub(
        lambda m: (
            f"the greedy pass accepts on {greedy:,} of {questions:,} questions ({rate}), is right at least once in "
            f"{m.group(1)} samples on {fixed} of{m.group(2)}the {sampled} rejections it sampled (`make demo`; {after} after "
            "recovery)"
        ),
        readme,
        count=1,
    )


_AUDIT = re.compile(r"(rs audit out/local/(\S+)\s+# )\S+: [\d,]+ numbers checked, all agree")
"""The audit example's line: what `rs audit` says of the demo's think repo."""


def audit_example(readme: str, said: str) -> str:
    """The page with the audit example's comment `said`, the first line `rs audit` prints of the demo's think repo."""
    if not _AUDIT.search(readme):
        raise ReadmeDrift("the page no longer has the audit example 'rs audit out/local/..._RS_think  # ...'")
    if not said.endswith("all agree"):
        raise ReadmeDrift(f"`rs audit` of the demo's think repo does not agree: {said}")
    return _AUDIT.sub(lambda m: m.group(1) + said, readme, count=1)


def audit_said(out: Path) -> str:
    """The first line `rs audit OUT/local/TinyCLEVR_RS_think` prints (no build: as the documentation's example runs it)."""
    from rs.audit import audit

    return audit(out / "local" / f"{FAMILY}_RS_think").render().splitlines()[0]


def documents(root: Path = ROOT) -> dict[str, str]:
    """README.md and the pages of docs/, by their path in the checkout."""
    paths = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return {str(path.relative_to(root)): path.read_text(encoding="utf-8") for path in paths}


def holder(docs: dict[str, str], pattern: re.Pattern[str], what: str) -> str:
    """The one page of `docs` where `pattern` is found."""
    found = [name for name, text in docs.items() if pattern.search(text)]
    if len(found) != 1:
        raise ReadmeDrift(
            f"{what} is on {len(found)} pages of the documentation, not one: {', '.join(found) or 'none'}"
        )
    return found[0]


def updated_documents(docs: dict[str, str], stdout: str, stats: dict, audit: str | None = None) -> dict[str, str]:
    """Every page with the demo's figures: the README's sample (`updated`), the recovery paragraph's figures, the
    per-type accept rates and, given what `rs audit` said (`audit_said`), the audit example."""
    out = dict(docs)
    out["README.md"] = updated(out["README.md"], stdout, stats)
    name = holder(out, _RECOVERY, "the recovery paragraph's 'the greedy pass accepts on N of M' sentence")
    out[name] = recovery_paragraph(out[name], summary(stdout))
    name = holder(out, _TYPES, "the sentence 'On `make demo`'s own cards the types ... fails most'")
    out[name] = type_rates(out[name], stats)
    if audit is not None:
        name = holder(out, _AUDIT, "the audit example 'rs audit out/local/..._RS_think  # ...'")
        out[name] = audit_example(out[name], audit)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 with a diff when README.md differs"
    )
    parser.add_argument(
        "--build-dir", type=Path, default=ROOT / "build", help="where the demo's build is (default: ./build)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "out", help="where the demo published (default: ./out)")
    args = parser.parse_args(argv)
    stdout = sys.stdin.read()
    stats = json.loads((args.build_dir / FAMILY / "stats.json").read_text())
    before = documents()
    after = updated_documents(before, stdout, stats, audit_said(args.out))
    changed = [name for name in before if before[name] != after[name]]
    if args.check:
        for name in changed:
            sys.stdout.writelines(
                difflib.unified_diff(
                    before[name].splitlines(True), after[name].splitlines(True), name, f"{name} (demo)"
                )
            )
        return int(bool(changed))
    for name in changed:
        (ROOT / name).write_text(after[name], encoding="utf-8")
    print(f"the demo's figures: {', '.join(changed) + ' updated' if changed else 'every page already matched'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
