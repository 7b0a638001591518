"""The numbers a card states, read back out of its Markdown text, independently of the template that wrote them.

Each reader is a pattern over the card's sentences and tables; `read` returns what it found by name, with
the line it is on. A statement the template writes in other words is not found, and the audit then says
so: a changed template cannot pass unread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_N = r"(\d[\d,]*)"
_P = r"(\d+\.\d%|n/a)"


def number(text: str) -> int:
    return int(text.replace(",", ""))


def _pairs(text: str) -> dict[str, int]:
    """`` `name` 12, `other` 3 `` -> {name: 12, other: 3}."""
    return {name: number(n) for name, n in re.findall(r"`([^`]+)` " + _N, text)}


@dataclass(frozen=True)
class Stated:
    value: Any
    line: int
    """1-based, in README.md."""


PATTERNS: dict[str, re.Pattern[str]] = {
    "rows": re.compile(r"^\| rows \| " + _N + r" \|$", re.M),
    "qa": re.compile(r"^\| QA pairs \| " + _N + r" \|$", re.M),
    "shards": re.compile(r"^\| shards \| " + _N + r" \|$", re.M),
    "accepted_rejected": re.compile(r"^\| accepted / rejected \(whole family\) \| " + _N + " / " + _N + r" \|$", re.M),
    "accept_rate": re.compile(r"^\| accept rate \| \*\*" + _P + r"\*\* \|$", re.M),
    "greedy_accept_rate": re.compile(r"^\| accept rate, greedy pass \(temperature 0\) \| " + _P + r" \|$", re.M),
    "accept_rate_after_recovery": re.compile(r"^\| accept rate after recovery \| \*\*" + _P + r"\*\* \|$", re.M),
    "totals": re.compile(
        r"Of the "
        + _N
        + r" QA pairs in the source, "
        + _N
        + r" were dropped by cleaning \(below\) and "
        + _N
        + r" were answered: "
        + _N
        + r" accepted by the verifier, "
        + _N
        + r" promoted by the judge, (?:"
        + _N
        + r" recovered by a second pass above temperature 0 \(below\), )?"
        + _N
        + r" rejected(?: \(([^)]*)\))?\."
    ),
    "made_on": re.compile(r"^Where the answers were made \(`provenance\.made_on`[^\n]*?\): (.*)\.$", re.M),
    "endings": re.compile(r"How the answers ended: ((?:`[^`]+` " + _N + r"(?:, )?)+|none)\."),
    "verifier_outcomes": re.compile(
        r"In this family the verifier accepted "
        + _N
        + r" answers?, found "
        + _N
        + r" certainly wrong and left "
        + _N
        + r" undecided\."
    ),
    "reasoning_disagrees": re.compile(
        r"(?:"
        + _N
        + r" accepted answers? had reasoning that concluded another value|(none) of the "
        + _N
        + r" answers? compared had reasoning that concluded another value|(no) answer's reasoning "
        r"could be compared, so this check did not run)"
    ),
    "reasoning_unchecked": re.compile(
        r"of the " + _N + r" answers? the verifier accepted, " + _N + r" could not be compared with "
        r"their reasoning and (?:is|are) unchecked"
    ),
    "judged": re.compile(
        r"This run judged " + _N + r" items: `CORRECT` " + _N + r", `WRONG` " + _N + r", `UNSURE` " + _N + r"\."
    ),
    "contradicted": re.compile(
        r"Such a rejection stays rejected whatever the judge says: (?:(no) rejection in this family was of this "
        r"kind|" + _N + r" rejections? of the greedy pass in this family (?:was|were) of this kind, and (?:the "
        r"judge called " + _N + r" of them `CORRECT`: " + _N + r" (?:is|are) in the rejected split with reason "
        r"`judge_overruled`(?:, and " + _N + r" (?:was|were) later recovered)?|the judge called (none) of them "
        r"`CORRECT`))"
    ),
    "calibration_positive": re.compile(
        r"\*Positives\*: of " + _N + r" answers the verifier had accepted, the judge said `CORRECT` to " + _N
    ),
    "calibration_hard": re.compile(
        r"\*Hard negatives\*: of " + _N + r" near misses .*?the judge did \*\*not\*\* say `CORRECT` to " + _N
    ),
    "calibration_easy": re.compile(
        r"\*Easy negatives\*: of " + _N + r" answers paired .*?the judge did not say `CORRECT` to " + _N
    ),
    "calibration_certain": re.compile(
        r"\*Certain rejections\*: of " + _N + r" real rejections .*?the judge did not say `CORRECT` to " + _N
    ),
    "judge_blocked": re.compile(r"with reason `judge_blocked` \(" + _N + r" items?\)"),
    "judge_promoted": re.compile(r"its `CORRECT` verdicts promoted " + _N + r" items"),
    "recovery_greedy": re.compile(
        r"^\| accepted by the greedy pass \(temperature 0\) \| " + _N + r" \| " + _P + r" \|$", re.M
    ),
    "recovery_recovered": re.compile(r"^\| recovered by a sample \| " + _N + r" \| \|$", re.M),
    "recovery_after": re.compile(r"^\| accepted after recovery \| " + _N + r" \| \*\*" + _P + r"\*\* \|$", re.M),
    "recovery_still_rejected": re.compile(
        r"^\| sampled and not recovered \(still rejected\) \| " + _N + r" \| \|$", re.M
    ),
    "recovery_samples": re.compile(
        r"; "
        + _N
        + r" samples? in all\. The verifier accepted "
        + _N
        + r" samples, found "
        + _N
        + r" certainly wrong and left "
        + _N
        + r" undecided"
    ),
    "pass_rate_rows": re.compile(
        r"^\| (0|\(0, 0\.25\]|\(0\.25, 0\.5\]|\(0\.5, 0\.75\]|\(0\.75, 1\)|1) \| "
        + _N
        + r" \| "
        + _N
        + r" \| "
        + _N
        + r" \|$",
        re.M,
    ),
    "pairs": re.compile(
        r"^"
        + _N
        + r" pairs? over "
        + _N
        + r" images?(?:: the chosen response is the greedy answer in "
        + _N
        + r" and a recovery sample in "
        + _N
        + r"; the rejected one is the greedy answer in "
        + _N
        + r" and a sample in "
        + _N
        + r", known wrong by the verifier in "
        + _N
        + r" and by the calibrated judge in "
        + _N
        + r")?",
        re.M,
    ),
    "accepted_by_note": re.compile(r"^  - `accepted_by`: (.*)$", re.M),
    "reason_counts": re.compile(r"^- `([a-z_]+)` — .*?(?: \(" + _N + r" in this family\))?$", re.M),
    # the samples and RL repos' own numbers (templates/card_samples.md.jinja)
    "samples_head": re.compile(
        r"^"
        + _N
        + r" questions? over "
        + _N
        + r" images?, with "
        + _N
        + r" generations?: ((?:[\d,]+ [a-z_]+(?:, )?)+)"
        r"(?: \(the samples drawn for: ([^)]*)\))?\. "
        + _N
        + r" questions accepted \("
        + _N
        + r" by their greedy answer\), "
        + _N
        + r" rejected; "
        + _N
        + r" have a measured pass rate\.",
        re.M,
    ),
    "samples_too_large": re.compile(r" " + _N + r" generations? (?:was|were) too large to publish \(`too_large`\)"),
    "samples_reader": re.compile(
        r"^\| reader's outcome \| generations \|\n\|---\|---\|\n((?:\| `[a-z_]+` \| [\d,]+ \|\n?)*)", re.M
    ),
    "samples_decisions": re.compile(
        r"The judge's verdicts on the generations it was asked about: (none \(no generation was judged\)|[^.]*)\. "
        r"Accepted questions by whom: ([^;]*); rejected by reason: ([^.\n]*)\."
    ),
    "rl_head": re.compile(
        r"^"
        + _N
        + r" questions? over "
        + _N
        + r" images?, each with a pass rate strictly between ([\d.]+) and ([\d.]+); "
        r"mean pass rate "
        + _P
        + r"; samples per question: (.*?)\. "
        + _N
        + r" of them were answered right by the greedy pass\.",
        re.M,
    ),
    "rl_bins": re.compile(r"^\| pass rate \| questions \|\n\|---\|---\|\n((?:\| [^|\n]+ \| [\d,]+ \|\n?)*)", re.M),
    # `rs refilter` under a changed reader (templates/card.md.jinja)
    "reread": re.compile(
        r"\*\*Re-read under a changed reader\*\*: the run's "
        + _N
        + r" stored answers? were graded again, .*? "
        + _N
        + r" of them were read otherwise, and "
        + _N
        + r" of "
        + _N
        + r" questions? were routed otherwise \("
        + _N
        + r" accepted → rejected, "
        + _N
        + r" rejected → accepted, "
        + _N
        + r" by another or for another "
        r"reason\)\. .*?\(" + _N + r" from the run's stores, " + _N + r" from the generation cache\)"
    ),
    "reread_not_asked": re.compile(
        r"\*\*" + _N + r" undecided answers? \(of " + _N + r" questions?\) had no verdict\*\*: the judge "
        r"was never asked about (?:it|them), .*?; (?:" + _N + r" questions? rests? on such an answer|(no) "
        r"question rests on such an answer alone)"
    ),
    "figure_alt": re.compile(r"^!\[((?:[^\]\\]|\\.)*)\]\((figures/[^)]+)\)$", re.M),
}


def _line(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def read(text: str) -> dict[str, Stated]:
    """Every statement the card makes that a pattern finds: name -> what it says (the match's groups) and its line."""
    found: dict[str, Stated] = {}
    for name, pattern in PATTERNS.items():
        if name in ("pass_rate_rows", "figure_alt", "reason_counts"):
            matches = list(pattern.finditer(text))
            if matches:
                found[name] = Stated([m.groups() for m in matches], _line(text, matches[0].start()))
            continue
        match = pattern.search(text)
        if match is not None:
            found[name] = Stated(match.groups(), _line(text, match.start()))
    return found


def table(text: str) -> dict[str, int]:
    """A two-column table's rows (`` | `name` | 12 | `` or ``| (0, 0.25] | 3 |``) as a dict."""
    return {name.strip("`"): number(n) for name, n in re.findall(r"^\| ([^|\n]+?) \| ([\d,]+) \|$", text, re.M)}


def counts(text: str | None) -> dict[str, int]:
    """A card's `` `name` n, ... `` list as a dict (empty for None or `none`)."""
    return _pairs(text or "")
