"""What `rs audit` checks: the card's text, the stats and the front matter against the numbers the files hold.

A check is one comparison; a finding names the number, where it is stated (README.md's line, or the
stats' key), what is stated there and what the files hold. The card's numbers are read from its text
(`rs.audit.card_text`), the files' from the rows (`rs.audit.facts`); `stats.json` is the third witness,
and the only one for what no published row holds (the judge's calibration, how the answers ended).

Checks are per repo kind (`CHECKERS`: think, nothink, rejected, pairs, samples, rl): a new kind of repo adds its own
checker with `checker("kind")`; what every card states (the whole family's numbers) is `common`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rs.audit.card_text import Stated, counts, number, read, table
from rs.audit.facts import Facts
from rs.audit.repo import Family, RepoFiles
from rs.pipeline.publish.cards.figures import FUNNEL, LENGTHS, funnel_alt, lengths_alt
from rs.pipeline.sample.calibration import wilson
from rs.pipeline.write.report import PASS_RATE_BINS, FamilyReport
from rs.pipeline.write.samples import REPO_NUMBERS
from rs.splits import REJECT_REASONS
from rs.util.text import pct


@dataclass(frozen=True)
class Finding:
    what: str
    """The number, in words (`rejected_by_reason.judge_overruled`)."""
    where: str
    """`README.md:42`, `rs/stats.json totals.accepted`, `front matter dataset_info...`."""
    stated: Any
    truth: Any
    """What the files (or the source named in `what`) hold."""
    source: str = "the files hold"
    """Who says `truth` (`the cache re-derives`: `rs audit --replay`)."""
    message: str | None = None
    """What is wrong, where no value is compared (`--replay`: an answer the cache lacks)."""

    def __str__(self) -> str:
        if self.message is not None:
            return f"{self.where}: {self.what}: {self.message}"
        if self.stated is MISSING:
            return f"{self.where}: {self.what} is not on the card, in the words rs writes it ({self.truth})"
        return f"{self.where}: {self.what} is {self.stated!r}, {self.source} {self.truth!r}"


MISSING = "not found"
"""What a finding states for a statement the card should make and does not."""


@dataclass
class Audit:
    """The findings of one repo's audit, and how many comparisons were made."""

    repo: RepoFiles
    family: Family
    facts: Facts
    card: dict[str, Stated]
    findings: list[Finding] = field(default_factory=list)
    checked: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def report(self) -> FamilyReport:
        return self.repo.report

    @property
    def accepted_by(self) -> dict[str, int]:
        """Accepted QA by who accepted them: the nothink rows, else (that repo not readable) the stats."""
        return self.facts.accepted_by if self.facts.accepted_by is not None else self.report.totals.accepted_by

    @property
    def rejected_by_reason(self) -> dict[str, int]:
        """Rejected QA by reason (none at 0): the rejected rows, else the stats."""
        held = self.facts.rejected_by_reason
        return held if held is not None else {k: v for k, v in self.report.totals.rejected_by_reason.items() if v}

    @property
    def answered(self) -> int:
        return sum(self.accepted_by.values()) + sum(self.rejected_by_reason.values())

    def where(self, name: str) -> str:
        stated = self.card.get(name)
        return f"{self.repo.name}/README.md:{stated.line}" if stated else f"{self.repo.name}/README.md"

    def same(self, what: str, where: str, stated: Any, truth: Any, *, source: str = "the files hold") -> None:
        """One comparison; a `truth` of None (its repo could not be read) compares nothing."""
        if truth is None:
            return
        self.checked += 1
        if stated != truth:
            self.findings.append(Finding(what, where, stated, truth, source))

    def fail(self, what: str, where: str, message: str) -> None:
        """A check that could not be made, counted as failed: `message` says why (`--replay`: an answer the cache lacks)."""
        self.checked += 1
        self.findings.append(Finding(what, where, None, None, message=message))

    def stated(self, name: str, *, expected: bool = True) -> Stated | None:
        """What the card says under `name`; a statement the card should make and does not is a finding."""
        found = self.card.get(name)
        if found is None and expected:
            self.checked += 1
            self.findings.append(
                Finding(
                    f"the statement {name!r}",
                    f"{self.repo.name}/README.md",
                    MISSING,
                    "the stats call for it; a changed template must change rs.audit.card_text too",
                )
            )
        return found


Checker = Callable[[Audit], None]
LAST = "*last"
"""The kind of the checks run after every other on every repo: the whole card rendered again (`rs.audit.rerender`), which
leaves out the lines another check has named."""
CHECKERS: dict[str, list[Checker]] = {}


def checker(*kinds: str) -> Callable[[Checker], Checker]:
    """Register a check for the repos of `kinds` (`*`: every kind)."""

    def register(fn: Checker) -> Checker:
        for kind in kinds:
            CHECKERS.setdefault(kind, []).append(fn)
        return fn

    return register


def run_checks(repo: RepoFiles, family: Family, facts: Facts) -> Audit:
    """Every check that applies to `repo`: the common ones, then its kind's."""
    offset = repo.readme[: len(repo.readme) - len(repo.body)].count("\n")  # the front matter's lines
    card = {name: Stated(stated.value, stated.line + offset) for name, stated in read(repo.body).items()}
    audit = Audit(repo, family, facts, card)
    for check in CHECKERS.get("*", []) + CHECKERS.get(repo.split, []) + CHECKERS.get(LAST, []):
        check(audit)
    return audit


# --- this repo's own files ---------------------------------------------------------------------------------------


@checker("*")
def split_table(a: Audit) -> None:
    """The statistic table's rows, QA pairs and shards, and the stats' split summary, against the shards."""
    repo, summary = a.repo, a.report.splits[a.repo.split]
    rows, qa, shards = len(repo.rows), len(repo.qa), len(repo.shards)
    for name, truth in (("rows", rows), ("qa", qa), ("shards", shards)):
        if (s := a.stated(name)) is not None:
            a.same(f"the statistic table's {name}", a.where(name), number(s.value[0]), truth)
    for name, truth in (
        ("rows", rows),
        ("qa", qa),
        ("shards", shards),
        ("bytes", sum(p.stat().st_size for p in repo.shards)),
    ):
        a.same(f"splits.{repo.split}.{name}", f"{repo.name}/rs/stats.json", getattr(summary, name), truth)
    a.same(f"splits.{repo.split}.files", f"{repo.name}/rs/stats.json", summary.files, [p.name for p in repo.shards])


@checker("*")
def front_matter(a: Audit) -> None:
    """`dataset_info` (sizes, rows, features) and `configs` against the shards."""
    from datasets import DatasetInfo, Features

    repo, data = a.repo, a.repo.front_matter
    info, where = data.get("dataset_info") or {}, f"{a.repo.name}/README.md front matter"
    split = (info.get("splits") or [{}])[0]
    a.same("dataset_info.splits[train].num_examples", where, split.get("num_examples"), len(repo.rows))
    a.same("dataset_info.download_size", where, info.get("download_size"), sum(p.stat().st_size for p in repo.shards))
    a.same("dataset_info.dataset_size", where, info.get("dataset_size"), a.report.splits[repo.split].dataset_bytes)
    a.same(
        "dataset_info.splits[train].num_bytes",
        where,
        split.get("num_bytes"),
        a.report.splits[repo.split].dataset_bytes,
    )
    if repo.arrow_schema is not None:
        declared = info.get("features")
        held = DatasetInfo(features=Features.from_arrow_schema(repo.arrow_schema))._to_yaml_dict().get("features")
        a.same("dataset_info.features", where, declared, held)
    configs = data.get("configs") or []
    files = sorted(str(p.relative_to(repo.root)) for p in repo.shards)
    globbed: list[str] = []
    for config in configs:
        for entry in config.get("data_files") or []:
            globbed += [f for f in files if _matches(f, entry.get("path", ""))]
    a.same("configs[].data_files", where, sorted(set(globbed)), files)


def _matches(path: str, pattern: str) -> bool:
    import fnmatch

    return fnmatch.fnmatch(path, pattern)


# --- the whole family's numbers, on every card -----------------------------------------------------------------------


@checker("*")
def totals(a: Audit) -> None:
    """The stats' totals and the statistic table's accepted / rejected against the siblings' rows."""
    t, f = a.report.totals, a.facts
    stats = f"{a.repo.name}/rs/stats.json"
    a.same("totals.accepted_by", stats, t.accepted_by, _nonzero_like(f.accepted_by, t.accepted_by))
    a.same(
        "totals.rejected_by_reason", stats, {k: v for k, v in t.rejected_by_reason.items() if v}, f.rejected_by_reason
    )
    accepted, rejected = sum(a.accepted_by.values()), sum(a.rejected_by_reason.values())
    a.same("totals.answered", stats, t.answered, accepted + rejected)
    a.same(
        "source QA = dropped + accepted + rejected", stats, t.source_qa, t.dropped_by_cleaning + accepted + rejected
    )
    if (s := a.stated("accepted_rejected")) is not None:
        a.same(
            "accepted / rejected (whole family)",
            a.where("accepted_rejected"),
            (number(s.value[0]), number(s.value[1])),
            (accepted, rejected),
        )


@checker("*")
def accept_rates(a: Audit) -> None:
    """The accept rate, or with a recovery pass the greedy pass's and the rate after recovery, from the rows' counts."""
    accepted, answered = sum(a.accepted_by.values()), a.answered
    rate = accepted / answered if answered else None
    if a.report.recovery is None:
        if (s := a.stated("accept_rate")) is not None:
            a.same("accept rate", a.where("accept_rate"), s.value[0], pct(rate))
        return
    greedy = accepted - a.accepted_by.get("recovery", 0)
    if (s := a.stated("greedy_accept_rate")) is not None:
        a.same(
            "accept rate, greedy pass",
            a.where("greedy_accept_rate"),
            s.value[0],
            pct(greedy / answered if answered else None),
        )
    if (s := a.stated("accept_rate_after_recovery")) is not None:
        a.same("accept rate after recovery", a.where("accept_rate_after_recovery"), s.value[0], pct(rate))


@checker("*")
def totals_sentence(a: Audit) -> None:
    """ "Of the N QA pairs in the source, ...": cleaning from the stats, the rest from the rows."""
    if (s := a.stated("totals")) is None:
        return
    t, by = a.report.totals, a.accepted_by
    source, dropped, answered, by_verifier, by_judge, recovered, rejected, reasons = s.value
    where = a.where("totals")
    a.same("source QA", where, number(source), t.source_qa)
    a.same("dropped by cleaning", where, number(dropped), t.dropped_by_cleaning)
    a.same("QA answered", where, number(answered), a.answered)
    a.same("accepted by the verifier", where, number(by_verifier), by.get("verifier", 0))
    a.same("promoted by the judge", where, number(by_judge), by.get("judge", 0))
    if a.report.recovery is not None:
        a.same("recovered by a second pass", where, number(recovered) if recovered else None, by.get("recovery", 0))
    a.same("rejected", where, number(rejected), sum(a.rejected_by_reason.values()))
    a.same("rejected by reason", where, counts(reasons), a.rejected_by_reason)


def _nonzero_like(held: dict[str, int] | None, declared: dict[str, int]) -> dict[str, int] | None:
    """The files' counts with the declared keys at 0 where no row has them (the stats list every actor)."""
    return (
        None
        if held is None
        else {k: held.get(k, 0) for k in declared} | {k: v for k, v in held.items() if k not in declared}
    )


@checker("*")
def endings(a: Audit) -> None:
    if a.report.endings is None or (s := a.stated("endings")) is None:
        return
    stated = counts(s.value[0]) if s.value[0] != "none" else {}
    a.same(
        "how the answers ended", a.where("endings"), stated, {k: v for k, v in a.report.endings.counts.items() if v}
    )
    a.same("answers ended (sum) = QA answered", a.where("endings"), sum(stated.values()), a.report.totals.answered)


@checker("*")
def made_on(a: Audit) -> None:
    """Where the answers were made: the card's line against `provenance.made_on`, whose counts must add up to the
    answers the stats count (every question's greedy answer, every no-image answer and every recovery sample). A report
    written before rs recorded it states nothing."""
    listed = (a.report.provenance or {}).get("made_on")
    if not listed:
        return
    where, stats = a.where("made_on"), f"{a.repo.name}/rs/stats.json"
    held = {m["id"]: m["answers"] for m in listed}
    if (s := a.stated("made_on")) is not None:
        a.same("where the answers were made", where, counts(s.value[0]), held)
    recovery, blind = a.report.recovery, a.report.blind
    a.same(
        "provenance.made_on (sum) = QA answered + recovery samples + no-image answers",
        stats,
        sum(held.values()),
        a.report.totals.answered
        + (recovery.samples if recovery is not None else 0)
        + (blind["answers"] if blind is not None else 0),
    )


@checker("*")
def verifier(a: Audit) -> None:
    """The verifier's outcomes; the accepted answers whose reasoning concludes another value (the third statement)."""
    v, f = a.report.verifier, a.facts
    if v.outcomes and (s := a.stated("verifier_outcomes")) is not None:
        accepted, certain, undecided = (number(x) for x in s.value)
        where = a.where("verifier_outcomes")
        a.same(
            "the verifier's acceptances",
            where,
            accepted,
            f.accepted_by.get("verifier", 0) + v.verified_too_large if f.accepted_by is not None else None,
        )
        a.same(
            "the verifier's outcomes",
            where,
            {"accepted": accepted, "certain": certain, "undecided": undecided},
            v.outcomes,
        )
    unchecked = a.stated("reasoning_unchecked", expected=bool(v.reasoning_unchecked))
    if unchecked is not None:
        where = a.where("reasoning_unchecked")
        a.same(
            "the verifier's acceptances (reasoning check)",
            where,
            number(unchecked.value[0]),
            v.outcomes.get("accepted", 0),
        )
        a.same(
            "accepted answers whose reasoning could not be compared",
            where,
            number(unchecked.value[1]),
            v.reasoning_unchecked,
        )
    if (s := a.stated("reasoning_disagrees")) is not None:
        disagreeing, none_of, compared, never = s.value
        stated = number(disagreeing) if disagreeing else 0
        where = a.where("reasoning_disagrees")
        a.same("accepted answers whose reasoning concludes another value", where, stated, v.reasoning_disagrees)
        if none_of:
            a.same(
                "accepted answers compared with their reasoning",
                where,
                number(compared),
                v.outcomes.get("accepted", 0) - v.reasoning_unchecked,
            )
        if never:
            a.same(
                "accepted answers compared with their reasoning (the check did not run)",
                where,
                0,
                v.outcomes.get("accepted", 0) - v.reasoning_unchecked,
            )
        if v.think_needs_agreeing_reasoning:  # then they are exactly the nothink QA the think split lacks
            a.same(
                "accepted answers whose reasoning concludes another value (nothink QA - think QA)",
                where,
                stated,
                f.kept_out_of_think,
            )


@checker("*")
def judge(a: Audit) -> None:
    """The judge's verdicts and the certain rejections it called CORRECT (the first statement)."""
    j = a.report.judge
    if not j.enabled:
        return
    if (s := a.stated("judged")) is not None:
        judged, correct, wrong, unsure = (number(x) for x in s.value)
        where = a.where("judged")
        a.same("items judged", where, judged, j.judged)
        a.same(
            "the judge's verdicts",
            where,
            {"CORRECT": correct, "WRONG": wrong, "UNSURE": unsure},
            {label: j.verdicts.get(label, 0) for label in ("CORRECT", "WRONG", "UNSURE")},
        )
        a.same("items judged = the sum of the verdicts", where, judged, correct + wrong + unsure)
    if a.report.verifier.contradiction_rule:
        _contradicted(a)


@checker("*")
def calibration(a: Audit) -> None:
    """Each calibration check's counts and its Wilson interval recomputed; what the gate let through or held back."""
    cal = a.report.judge.calibration
    if not a.report.judge.enabled or cal is None:
        return
    for name in ("positive", "hard", "easy", "certain"):
        key, check = f"calibration_{name}", cal[name]
        if (s := a.stated(key, expected=bool(check["total"]) or name != "certain")) is None:
            continue
        total, agreed = number(s.value[0]), number(s.value[1])
        a.same(f"calibration {name}: agreed / total", a.where(key), (agreed, total), (check["agreed"], check["total"]))
        w = wilson(agreed, total)
        a.same(
            f"calibration {name}: its 95% Wilson interval",
            f"{a.repo.name}/rs/stats.json judge.calibration.{name}",
            (round(check["low"], 9), round(check["high"], 9)),
            (round(w.low, 9), round(w.high, 9)),
        )
    if cal.get("promotes"):
        if (s := a.stated("judge_promoted")) is not None:
            a.same(
                "items the judge promoted",
                a.where("judge_promoted"),
                number(s.value[0]),
                a.accepted_by.get("judge", 0),
            )
    elif (s := a.stated("judge_blocked")) is not None:
        a.same(
            "`judge_blocked` rejections",
            a.where("judge_blocked"),
            number(s.value[0]),
            a.rejected_by_reason.get("judge_blocked", 0),
        )


def _contradicted(a: Audit) -> None:
    """The paragraph on what no verdict can overrule: the greedy pass's certain rejections, how many the judge called
    CORRECT, how many of those are `judge_overruled` in the rejected split and how many a sample recovered."""
    j, f = a.report.judge, a.facts
    if (s := a.stated("contradicted")) is None:
        return
    none, rejections, called, overruled, recovered, called_none = s.value
    where = a.where("contradicted")
    a.same("the greedy pass's certain rejections", where, 0 if none else number(rejections), j.contradicted)
    truth_called = j.contradicted_verdicts.get("CORRECT", 0)
    stated_called = 0 if (none or called_none) else number(called)
    a.same("certain rejections the judge called CORRECT", where, stated_called, truth_called)
    held = f.rejected_by_reason.get("judge_overruled", 0) if f.rejected_by_reason is not None else None
    a.same(
        "certain rejections the judge called CORRECT that are `judge_overruled`",
        where,
        number(overruled) if overruled else 0,
        held,
    )
    stated_recovered = number(recovered) if recovered else 0
    a.same(
        "certain rejections the judge called CORRECT that a sample recovered",
        where,
        stated_recovered,
        truth_called - held if held is not None else None,
    )


@checker("*")
def recovery_table(a: Audit) -> None:
    """The recovery table against the rows' `accepted_by` and the rejected rows that were sampled."""
    f = a.facts
    if a.report.recovery is None:
        return
    answered = a.answered
    if (s := a.stated("recovery_greedy")) is not None:
        a.same("accepted by the greedy pass", a.where("recovery_greedy"), number(s.value[0]), f.greedy_accepted)
        a.same(
            "accepted by the greedy pass (share)",
            a.where("recovery_greedy"),
            s.value[1],
            pct(f.greedy_accepted / answered) if f.greedy_accepted is not None and answered else None,
        )
    if (s := a.stated("recovery_recovered")) is not None:
        a.same("recovered by a sample", a.where("recovery_recovered"), number(s.value[0]), f.recovered)
    if (s := a.stated("recovery_after")) is not None:
        a.same("accepted after recovery", a.where("recovery_after"), number(s.value[0]), f.accepted)
    if (s := a.stated("recovery_still_rejected")) is not None:
        a.same(
            "sampled and not recovered",
            a.where("recovery_still_rejected"),
            number(s.value[0]),
            sum(f.pass_rates["rejected"]) if f.pass_rates is not None else None,
        )


@checker("*")
def recovery_samples(a: Audit) -> None:
    """The samples drawn (the sum of the rows' `k`) and the verifier's outcomes on them."""
    r = a.report.recovery
    if r is None or (s := a.stated("recovery_samples")) is None:
        return
    samples, accepted, certain, undecided = (number(x) for x in s.value)
    a.same("recovery samples drawn", a.where("recovery_samples"), samples, a.facts.samples)
    a.same("recovery samples drawn (stats)", a.where("recovery_samples"), samples, r.samples)
    a.same(
        "the verifier on the samples",
        a.where("recovery_samples"),
        {"accepted": accepted, "certain": certain, "undecided": undecided},
        r.outcomes,
    )


@checker("*")
def pass_rates(a: Audit) -> None:
    """The pass-rate histogram against the rows' `pass_rate`, by what each question is."""
    r = a.report.recovery
    if r is None or (s := a.stated("pass_rate_rows")) is None:
        return
    stated = {group: [0] * len(PASS_RATE_BINS) for group in ("greedy_accepted", "recovered", "rejected")}
    for label, greedy, recovered, rejected in s.value:
        i = PASS_RATE_BINS.index(label)
        stated["greedy_accepted"][i], stated["recovered"][i], stated["rejected"][i] = (
            number(greedy),
            number(recovered),
            number(rejected),
        )
    a.same("the pass-rate histogram", a.where("pass_rate_rows"), stated, a.facts.pass_rates)
    a.same("the pass-rate histogram (stats)", a.where("pass_rate_rows"), stated, r.pass_rates)


@checker("*")
def pairs_sentence(a: Audit) -> None:
    """The pairs' sentence against the pairs repo's rows."""
    r, held = a.report.recovery, a.facts.pairs
    if r is None or r.pairs is None or (s := a.stated("pairs")) is None:
        return
    pairs, images, *made = s.value
    stated: dict[str, Any] = {"pairs": number(pairs), "images": number(images)}
    truth = {"pairs": held["pairs"], "images": held["images"]} if held is not None else None
    if made[0] is not None:
        for key, names, values in (
            ("chosen_from", ("greedy", "sample"), made[0:2]),
            ("rejected_from", ("greedy", "sample"), made[2:4]),
            ("rejected_reason", ("certain", "judge"), made[4:6]),
        ):
            stated[key] = {name: number(value) for name, value in zip(names, values)}
            if truth is not None:
                truth[key] = {name: held[key].get(name, 0) for name in names}
    a.same("the preference pairs", a.where("pairs"), stated, truth)


@checker("*")
def figures(a: Audit) -> None:
    """Each figure's alt text: what the figure module writes from the stats, and the figure file is in the repo."""
    s = a.stated("figure_alt", expected=False)
    stated = {path: alt.replace("\\]", "]").replace("\\[", "[") for alt, path in (s.value if s else [])}
    for path, alt in ((FUNNEL, funnel_alt(a.report)), (LENGTHS, lengths_alt(a.report))):
        if path not in stated:
            continue
        a.same(f"the alt text of {path}", a.where("figure_alt"), _unescape(stated[path]), alt)
        a.same(f"{path} is in the repo", f"{a.repo.name}/{path}", (a.repo.root / path).is_file(), True)


def _unescape(text: str) -> str:
    """The card's alt text as Markdown shows it (jinja's `e` filter escapes HTML)."""
    import html

    return html.unescape(text)


# --- each kind's own -------------------------------------------------------------------------------------------------


@checker("think", "nothink")
def accepted_by_note(a: Audit) -> None:
    """The schema note lists every `accepted_by` the rows hold (the second statement)."""
    if (s := a.stated("accepted_by_note")) is None:
        return
    listed = set(re.findall(r"`([a-z_]+)`", s.value[0]))
    held = {qa["accepted_by"] for qa in a.repo.qa}
    a.same(
        "`accepted_by` values the rows hold that the schema note leaves out",
        a.where("accepted_by_note"),
        sorted(held - listed),
        [],
    )
    possible = {"verifier", "judge"} | ({"recovery"} if a.report.recovery is not None else set())
    a.same(
        "`accepted_by` values the schema note lists (every value this family can write)",
        a.where("accepted_by_note"),
        sorted(listed),
        sorted(possible),
    )


@checker("think")
def think_rows(a: Audit) -> None:
    """The think split holds the nothink split's QA but those whose reasoning concludes another value."""
    if a.report.verifier.think_needs_agreeing_reasoning:
        a.same(
            "think QA = accepted - reasoning that concludes another value",
            f"{a.repo.name}/data",
            len(a.repo.qa),
            a.report.totals.accepted - a.report.verifier.reasoning_disagrees,
        )


@checker("nothink")
def nothink_rows(a: Audit) -> None:
    a.same("nothink QA = accepted", f"{a.repo.name}/data", len(a.repo.qa), a.report.totals.accepted)


@checker("*")
def reread(a: Audit) -> None:
    """A re-read's statement (`rs refilter` under a changed reader): its numbers are the stats' `filter.reread`, it speaks
    of every question answered, and the questions it says are rejected `judge_not_asked` are the rejected rows'."""
    rr = (a.report.filter or {}).get("reread")
    if not rr or (s := a.stated("reread")) is None:
        return
    stats = f"{a.repo.name}/rs/stats.json filter.reread"
    d = rr["decisions"]
    stated = [number(n) for n in s.value]
    held = [
        rr["answers"],
        rr["outcomes_changed"],
        d["changed"],
        rr["questions"],
        d["accepted_to_rejected"],
        d["rejected_to_accepted"],
        d["other"],
        rr["verdicts"]["stores"],
        rr["verdicts"]["cache"],
    ]
    a.same("the re-read's numbers", a.where("reread"), stated, held)
    a.same("the re-read's questions (the family's answered QA)", stats, rr["questions"], a.answered)
    a.same(
        "the re-read's routed otherwise (its parts)",
        stats,
        d["changed"],
        d["accepted_to_rejected"] + d["rejected_to_accepted"] + d["other"],
    )
    not_asked = a.stated("reread_not_asked", expected=bool(rr["judge_not_asked"]))
    answers, of, rest, none = not_asked.value if not_asked is not None else ("0", "0", None, "no")
    questions = number(rest) if rest else 0
    a.same(
        "the re-read's undecided answers with no verdict",
        a.where("reread_not_asked"),
        number(answers),
        rr["judge_not_asked"],
    )
    a.same(
        "the re-read's questions with an answer with no verdict",
        a.where("reread_not_asked"),
        number(of),
        rr["questions_unjudged"],
    )
    a.same(
        "questions rejected `judge_not_asked` (the re-read's statement)",
        a.where("reread_not_asked"),
        questions,
        a.rejected_by_reason.get("judge_not_asked", 0),
    )
    a.same(
        "questions rejected `judge_not_asked` (stats)",
        stats,
        rr["judge_not_asked_questions"],
        a.rejected_by_reason.get("judge_not_asked", 0),
    )


@checker("rejected")
def rejected_reasons(a: Audit) -> None:
    """The rejected card's list of reasons with their counts in this family."""
    if (s := a.stated("reason_counts", expected=False)) is None:
        return
    stated = {reason: number(n) for reason, n in s.value if reason in REJECT_REASONS and n}
    a.same(
        "rejections by reason (the reason list)",
        a.where("reason_counts"),
        stated,
        {k: v for k, v in a.facts.rejected_by_reason.items() if v} if a.facts.rejected_by_reason is not None else None,
    )


@checker("pairs")
def pairs_rows(a: Audit) -> None:
    if a.report.recovery is not None and a.report.recovery.pairs is not None and a.facts.pairs is not None:
        a.same(
            "recovery.pairs (stats)",
            f"{a.repo.name}/rs/stats.json",
            {k: a.report.recovery.pairs.get(k) for k in ("pairs", "images")},
            {k: a.facts.pairs[k] for k in ("pairs", "images")},
        )


# --- the samples and RL repos (`rs.pipeline.write.samples`): their own numbers, and the family's seen from them ---------------


def _named_counts(text: str | None) -> dict[str, int]:
    """`6 greedy, 12 sample` -> {greedy: 6, sample: 12}."""
    return {name: number(n) for n, name in re.findall(r"(\d[\d,]*) ([a-z_]+)", text or "")}


def _held_numbers(a: Audit) -> dict[str, Any]:
    """The repo kind's numbers recomputed from its parquet files (`rs.pipeline.write.samples.REPO_NUMBERS`), held against what
    the card was rendered from (`rs/numbers.json`)."""
    held = REPO_NUMBERS[a.repo.split](a.repo.root / "data")
    rendered = a.repo.root / "rs" / "numbers.json"
    if rendered.exists():
        stated = json.loads(rendered.read_text())
        for key in sorted(set(held) | set(stated)):
            a.same(f"numbers.{key}", f"{a.repo.name}/rs/numbers.json", stated.get(key), held.get(key))
    return held


@checker("samples")
def samples_numbers_stated(a: Audit) -> None:
    """The samples card's sentence, table and lists against the repo's rows, and against its siblings' splits: every
    question's decision here is the one the think/nothink and rejected repos published."""
    n = _held_numbers(a)
    if (s := a.stated("samples_head")) is not None:
        where = a.where("samples_head")
        rows, images, generations, kinds, sampled_for, accepted, greedy, rejected, measured = s.value
        a.same("questions", where, number(rows), n["rows"])
        a.same("images", where, number(images), n["images"])
        a.same("generations", where, number(generations), n["generations"])
        a.same("generations by kind", where, _named_counts(kinds), n["kinds"])
        a.same("samples by why they were drawn", where, counts(sampled_for), n["sampled_for"])
        a.same("questions accepted", where, number(accepted), n["accepted"])
        a.same("questions accepted by their greedy answer", where, number(greedy), n["greedy_accepted"])
        a.same("questions rejected", where, number(rejected), n["rows"] - n["accepted"])
        a.same("questions with a measured pass rate", where, number(measured), n["measured"])
    too_large = a.stated("samples_too_large", expected=False)  # stated only where some are
    a.same(
        "generations too large to publish (`too_large`)",
        a.where("samples_too_large"),
        number(too_large.value[0]) if too_large is not None else 0,
        n["too_large"],
    )
    if (s := a.stated("samples_reader")) is not None:
        a.same("generations by the reader's outcome", a.where("samples_reader"), table(s.value[0]), n["reader"])
    if (s := a.stated("samples_decisions")) is not None:
        where = a.where("samples_decisions")
        a.same("judge verdicts on generations", where, counts(s.value[0]), n["judge"])
        a.same("accepted questions by whom", where, counts(s.value[1]), n["accepted_by"])
        a.same("rejected questions by reason", where, counts(s.value[2]), n["rejected_by_reason"])
    data = f"{a.repo.name}/data"
    if a.facts.accepted_by is not None:
        a.same(
            "accepted questions by whom = the nothink split's",
            data,
            n["accepted_by"],
            {k: v for k, v in sorted(a.facts.accepted_by.items()) if v},
        )
    if a.facts.rejected_by_reason is not None:
        a.same(
            "rejected questions by reason = the rejected split's",
            data,
            n["rejected_by_reason"],
            {k: v for k, v in sorted(a.facts.rejected_by_reason.items()) if v},
        )


@checker("rl")
def rl_numbers_stated(a: Audit) -> None:
    """The RL card's sentence and pass-rate table against the repo's rows; its rows against the samples repo's
    questions whose pass rate lies strictly between the bounds the card states."""
    n = _held_numbers(a)
    bounds: tuple[float, float] | None = None
    if (s := a.stated("rl_head")) is not None:
        where = a.where("rl_head")
        rows, images, low, high, mean, ks, greedy = s.value
        bounds = float(low), float(high)
        a.same("questions", where, number(rows), n["rows"])
        a.same("images", where, number(images), n["images"])
        a.same("mean pass rate", where, mean, pct(n["pass_rate_mean"]) if n["rows"] else mean)
        a.same(
            "questions by samples drawn",
            where,
            {k: number(c) for k, c in re.findall(r"k = (\d+): (\d[\d,]*)", ks)},
            {str(k): v for k, v in n["k"].items()},
        )
        a.same("questions the greedy pass answered right", where, number(greedy), n["greedy_accepted"])
    if (s := a.stated("rl_bins")) is not None:
        a.same(
            "questions per pass-rate bin",
            a.where("rl_bins"),
            table(s.value[0]),
            {b: c for b, c in n["pass_rates"].items()},
        )
    samples = a.family.of("samples")
    if samples is not None and bounds is not None:
        inside = sum(r["pass_rate"] is not None and bounds[0] < r["pass_rate"] < bounds[1] for r in samples.rows)
        a.same(
            "RL questions = the samples repo's questions strictly between the bounds",
            f"{a.repo.name}/data",
            n["rows"],
            inside,
        )
