"""`rs audit REPO`: a published repo's card, stats and front matter checked against its own files.

    rs audit out/local/TinyCLEVR_RS_think          # a local folder (--out); its siblings beside it are read too
    rs audit me/TinyCLEVR_RS_think                 # a Hub repo id (huggingface_hub.snapshot_download)
    rs audit out/local/TinyCLEVR_RS_think --build build/TinyCLEVR    # also against the build's stores
    rs audit ... --build build/TinyCLEVR --cache PATH                # and where the answers were made, from the cache
    rs audit ... --build build/TinyCLEVR --replay 20                 # and 20 questions re-derived from the generation cache
    rs audit ... --build build/TinyCLEVR --replay 20 --engine        # and asked again of the family's engine: the agreement

Every number the card states is read back out of its text and compared with what the repo's files
hold: the rows of this repo and of its siblings (accepted by whom, rejected why, pass rates, pairs),
and `rs/stats.json` for what no row holds (the judge's calibration, how the answers ended); the whole card is
rendered again from the repo's files and held against its text line by line (`rs.audit.rerender`), and every image's
bytes against its `image_sha256` (`rs.audit.images`). It exits 1 naming each number that disagrees and where it is
stated, 0 when every one agrees, 2 when a file is not what rs writes (named), 3 when a publish of the family is
writing the folder (`rs.audit.busy`). `--build` also checks the build's stores and its sealed shards (`rs.audit.build`), and where the answers were made
(`provenance.made_on`) against the stores; with `--cache`, against the generation cache too (`rs.audit.made_on`). `--replay N` re-derives N
published questions from the answers the run cached (`rs.audit.replay`): byte for byte, or a finding.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rs.audit import blind, images, made_on, rerender, stats_rows, suspects  # noqa: F401  (register their checks)
from rs.audit.build import check_answers, check_shards, check_stores
from rs.audit.busy import AuditBusy, not_being_published
from rs.audit.checkers import CHECKERS, Audit, Finding, checker, run_checks
from rs.audit.facts import family_facts
from rs.audit.replay import Replay
from rs.audit.replay import replay as replay_questions
from rs.audit.repo import AuditUsageError, RepoFiles, load_family
from rs.context import BuildPaths
from rs.pipeline.route import Routes, route_items
from rs.pipeline.write.report import pass_rate_histogram
from rs.store import read_records

__all__ = ["AuditBusy", "AuditResult", "AuditUsageError", "CHECKERS", "Finding", "Replay", "audit", "checker"]


@dataclass
class AuditResult:
    repo: str
    checked: int
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def render(self) -> str:
        lines = [
            f"{self.repo}: {self.checked:,} numbers checked, "
            + ("all agree" if self.ok else f"{len(self.findings):,} disagree")
        ]
        lines += [f"  {finding}" for finding in self.findings]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def audit(
    target: str | Path, *, build: Path | None = None, replay: int | Replay = 0, siblings: bool = True
) -> AuditResult:
    """Audit the repo at `target` (a folder or a Hub id); with `build`, also against that build's stores; with `replay`
    (N, or a `Replay` saying which families file, cache and engine), N questions re-derived from the run's cache."""
    asked = replay if isinstance(replay, Replay) else Replay(replay)
    if asked.cache is not None and build is None:
        raise AuditUsageError(
            "--cache counts the machines that made the build's answers again from the generation cache: give --build DIR too",
            hint="rs audit REPO --build build/FAMILY --cache PATH",
        )
    if asked.n and build is None:
        raise AuditUsageError(
            "--replay N re-derives questions from the build's cleaned items and the run's generation cache: "
            "give --build DIR too",
            hint="rs audit REPO --build build/FAMILY --replay N [--cache PATH]",
        )
    with _unless_publishing(Path(target)):
        return _audit(target, build=build, asked=asked, siblings=siblings)


def _unless_publishing(path: Path) -> Any:
    """A local folder's family publish lock, held shared while the audit reads (`rs.audit.busy`)."""
    try:
        family = json.loads((path / "rs" / "stats.json").read_text(encoding="utf-8"))["family"]
    except (OSError, ValueError, KeyError, TypeError):  # a Hub id, or not a repo: `load_family` says what is wrong
        return contextlib.nullcontext()
    if not isinstance(family, str) or not path.is_dir():
        return contextlib.nullcontext()
    return not_being_published(path.resolve().parent, family)


def _audit(target: str | Path, *, build: Path | None, asked: Replay, siblings: bool) -> AuditResult:
    family = load_family(str(target), siblings=siblings)
    facts = family_facts(family)
    result = run_checks(family.repo, family, facts)
    notes = [
        f"{name}: not readable here; the numbers only it holds were checked against rs/stats.json alone"
        for name in family.missing
    ]
    if build is not None:
        root = _build_dir(build, family.repo)
        whole = check_stores(result, root)
        check_shards(result, root)
        if whole:
            _against_build(result, root)
            check_answers(result, root)
            made_on.check_stores(result, root)
        else:
            result.notes.append(
                f"{root}: a store of the build is damaged (named above): its counts were not routed afresh, nor replayed"
            )
        if asked.n and whole:
            replay_questions(result, root, _routes(result.report), asked)
        if asked.cache is not None and whole:  # after the replay, which says first what is wrong with the cache
            made_on.check_cache(result, root, asked)
    return AuditResult(family.repo.name, result.checked, result.findings, notes + result.notes)


def _build_dir(build: Path, repo: RepoFiles) -> Path:
    """`build` as given (a family's build folder) or a build root holding the family's folder."""
    family, limit = repo.report.family, repo.report.limit
    trial = [build / f"limit-{limit}", build / family / f"limit-{limit}"] if limit is not None else []
    for candidate in (*trial, build, build / family):
        if (candidate / "items").is_dir():
            return candidate
    raise AuditUsageError(
        f"--build {build}: no build of {repo.report.family} there (no items/ store, nor {repo.report.family}/items/)"
    )


def _routes(report: Any) -> Any:
    cal = report.judge.calibration
    return Routes(
        bool(cal and cal.get("promotes")),
        report.verifier.think_needs_agreeing_reasoning,
        recovery=report.recovery is not None,
        greedy_temperature=report.sampling["temperature"],
        greedy_seed=report.sampling["seed"],
        recovery_temperature=report.recovery.settings["temperature"] if report.recovery is not None else None,
        blind=report.blind is not None,
        answer_bytes=report.verifier.answer_bytes,
    )


def _against_build(a: Audit, root: Path) -> None:
    """The family's counts routed afresh from the build's stores, and the greedy pass's certain rejections the judge
    called CORRECT counted in its items store."""
    report, facts = a.report, a.facts
    routes = _routes(report)
    routing = route_items(BuildPaths(root), routes, pairs="pairs" in report.splits)
    where = f"{root} (the build's stores)"
    a.same(
        "accepted by whom (stores)",
        where,
        facts.accepted_by if facts.accepted_by is not None else report.totals.accepted_by,
        {k: v for k, v in routing.accepted_by.items() if v or facts.accepted_by is None},
    )
    a.same(
        "rejected by reason (stores)",
        where,
        facts.rejected_by_reason if facts.rejected_by_reason is not None else report.totals.rejected_by_reason,
        {k: v for k, v in routing.rejected_by_reason.items() if v or facts.rejected_by_reason is None},
    )
    a.same(
        "accepted answers whose reasoning concludes another value (stores)",
        where,
        report.verifier.reasoning_disagrees,
        routing.reasoning_disagrees,
    )
    if routing.pass_rates is not None:
        a.same(
            "the pass-rate histogram (stores)",
            where,
            facts.pass_rates if facts.pass_rates is not None else report.recovery.pass_rates,
            pass_rate_histogram(routing.pass_rates),
        )
    if routing.pairs is not None and report.recovery is not None:
        a.same("the preference pairs (stores)", where, report.recovery.pairs, routing.pairs.to_dict())
    a.same(
        "verified answers rejected as too large (stores)",
        where,
        report.verifier.verified_too_large,
        routing.verified_too_large,
    )
    contradicted = correct = 0
    for item in read_records(root / "items", "items", columns=["contradicts", "judge"]):
        contradicted += bool(item["contradicts"])
        correct += bool(item["contradicts"]) and item["judge"] == "CORRECT"
    a.same("the greedy pass's certain rejections (stores)", where, report.judge.contradicted, contradicted)
    a.same(
        "certain rejections the judge called CORRECT (stores)",
        where,
        report.judge.contradicted_verdicts.get("CORRECT", 0),
        correct,
    )
