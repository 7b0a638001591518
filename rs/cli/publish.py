"""`rs publish FAMILY` / `python -m rs.publish FAMILY`: build if needed, render the cards, publish the family's repos.

python -m rs.publish TinyCLEVR                 # local folder (the embedded default: no GPU, network or token)
python -m rs.publish CLEVRMath                 # the Hub: {namespace}/CLEVRMath_RS_think, ..._RS_nothink, ..._rejected
python -m rs.publish CLEVRMath --out DIR       # a local folder laid out exactly as the Hub repos
python -m rs.publish CLEVRMath --cards-only    # re-render and publish the cards (three repos, four with recovery pairs), nothing else
python -m rs.publish CLEVRMath --dry-run       # what would be added, changed and deleted, with sizes, in how many commits
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import time
from pathlib import Path
from typing import Any

from rs import cli
from rs.cli import RunFailed, before_run, output
from rs.cli.parser import Parser
from rs.context import default_cache_path
from rs.distributed import forwarded_env, sample_on_ray
from rs.errors import RsError, UsageError
from rs.families import Family
from rs.hub import describe_commits, format_changes
from rs.hub.offline import hub_needs, offline_unless_the_hub_resolves
from rs.pipeline.publish.cards.decontam import summary as decontamination_summary
from rs.pipeline.publish.preflight import check_local_root
from rs.pipeline.publish.stage import PublishReport, publish
from rs.pipeline.write.report import Endings, FamilyReport, RecoverySummary
from rs.plan import PlanReport, plan_family
from rs.splits_schema import ROW_SCHEMAS, features
from rs.util import invocation
from rs.util.sizes import format_bytes
from rs.util.text import counted, pct

logger = logging.getLogger(__name__)


def _totals_line(family: Family, report: FamilyReport) -> str:
    """The funnel in one line: source QA, cleaning, accepted by whom, rejected, the accept rate."""
    t = report.totals
    return (
        f"{family.name}: {t.source_qa:,} source QA, {t.dropped_by_cleaning:,} dropped by cleaning, "
        f"{t.accepted:,} accepted ({t.accepted_by['verifier']:,} by the verifier, {t.accepted_by['judge']:,} by the judge"
        + (f", {t.accepted_by['recovery']:,} by recovery" if report.recovery else "")
        + f"), {t.rejected:,} rejected; accept rate {pct(t.accept_rate)}"
    )


def _recovery_line(r: RecoverySummary) -> str:
    """What the recovery pass sampled and recovered."""
    sampled = ", ".join(f"{why} {n:,}" for why, n in r.sampled.items()) or "nothing"
    return (
        f"  recovery: accept rate {pct(r.greedy_accept_rate)} greedy, {pct(r.accept_rate)} after recovery; "
        f"{r.recovered:,} of {r.recovered + r.still_rejected:,} sampled rejections recovered "
        f"({counted(r.samples, 'sample')} at temperature {r.settings['temperature']}, sampled: {sampled})"
        + (f"; {r.pairs['pairs']:,} preference pairs" if r.pairs else "")
    )


def _suspects_lines(s: dict[str, Any]) -> list[str]:
    """The suspect references (`recovery.suspects`): the adjudicator's agreement on each calibration set, how many were
    marked of how many candidates, and its gate."""
    cal = s["calibration"]
    checks = (
        f"  adjudicator calibration: wrong references sided against {_check(cal['wrong_reference'])}, "
        f"right references left alone {_check(cal['right_reference'])}"
    )
    gate = (
        "the adjudicator passed its calibration"
        if cal["passes"]
        else f"the adjudicator is BLOCKED, it marks nothing: {cal['blocked_reason']}"
    )
    return [
        checks,
        f"  suspect references: {s['marked']:,} marked of {s['candidates']:,} candidates ({s['against']:,} sided against "
        f"the reference in both orders; {s['requests']:,} adjudication requests); {gate}",
    ]


def _blind_line(b: dict[str, Any]) -> str:
    """The no-image pass (`blind:`): the questions right without the image, and per question type where typed."""
    types = b.get("types") or {}
    by_type = ", ".join(f"{name} {pct(t['share'])}" for name, t in types.items())
    return (
        f"  no image: {b['marked']:,} of {b['questions']:,} questions right without the image ({pct(b['share'])}; "
        f"{b['multiple_choice']:,} multiple choice in up to {b['settings']['rotations']} rotations; "
        f"{counted(b['requests'], 'text-only request')})" + (f"; by type: {by_type}" if by_type else "")
    )


def _endings_line(e: Endings) -> str:
    """How the answers ended, and the tokens loop detection saved."""
    ended = ", ".join(f"{k} {v:,}" for k, v in e.counts.items() if v)
    spent = e.completion_tokens + e.loop_tokens_saved
    return (
        f"  answers ended: {ended or 'none'}; loop detection saved {e.loop_tokens_saved:,} tokens"
        f" ({pct(e.loop_tokens_saved / spent if spent else None)}"
        f" of {spent:,}); {e.budgeted_answered:,} answered after a thinking-budget cut"
    )


def _check(c: dict[str, Any]) -> str:
    """A calibration check as agreed/total [its 95% interval]."""
    return f"{c['agreed']}/{c['total']} [{pct(c['low'])}, {pct(c['high'])}]" if c["total"] else "0/0"


def _calibration_lines(cal: dict[str, Any]) -> list[str]:
    """The judge's agreement on each calibration set, and whether its verdicts promote."""

    def check(name: str) -> str:
        return _check(cal[name])

    checks = (
        f"  judge calibration: positives {check('positive')}, easy negatives {check('easy')}, "
        f"hard negatives {check('hard')}, certain rejections {check('certain')}"
    )
    verdict = "  judge: " + (
        "passed its calibration, its CORRECT verdicts promote"
        if cal["promotes"]
        else f"BLOCKED, it promotes nothing: {cal['blocked_reason']}"
    )
    return [checks, verdict]


def _think_less(report: FamilyReport, split: str) -> str:
    """Why the think split holds fewer QA than were accepted, in one clause (the card says it at length)."""
    v, accepted = report.verifier, report.totals.accepted
    if split != "think" or not v.reasoning_disagrees or not v.think_needs_agreeing_reasoning:
        return ""
    return (
        f" (of the {accepted:,} accepted: {v.reasoning_disagrees:,} whose reasoning concluded another value "
        f"{'is' if v.reasoning_disagrees == 1 else 'are'} in the nothink split only)"
    )


def _split_lines(outcome: PublishReport, split: str, *, dry_run: bool) -> list[str]:
    """One split's rows and what its publish changed (with the changes file by file, on a dry run); a warning when it is empty."""
    assert outcome.report is not None
    s = outcome.report.splits[split]
    result = outcome.results[split]
    counts = {a: sum(1 for ch in result.changes if ch.action == a) for a in ("add", "change", "delete", "unchanged")}
    commits = "" if outcome.local else f"; {describe_commits(result, dry_run=dry_run)}"
    head = (
        f"  {s.repo}: {counted(s.rows, 'row')}, {s.qa:,} QA{_think_less(outcome.report, split)}, "
        f"{counted(s.shards, 'shard')} -> {outcome.where[split]}"
    )
    if result.offline:
        lines = [
            f"{head} (offline: {counted(len(result.changes), 'file')}, {format_bytes(sum(c.size for c in result.changes))}, to upload "
            "at most; not compared with the Hub)"
        ]
    else:
        lines = [
            (
                f"{head} ({counts['add']} added, {counts['change']} changed, {counts['delete']} deleted, {counts['unchanged']} "
                f"unchanged{commits})"
            )
        ]
    if not s.rows:
        lines.append(
            f"  warning: {s.repo} is empty: datasets.load_dataset cannot load a split with no rows (streaming=True reads "
            "it as empty); to the Hub it is published only with --allow-empty"
        )
    if dry_run:
        lines.append(format_changes(result.changes))
    return lines


def _kind_line(report: FamilyReport, *, dry_run: bool) -> str:
    """Whether this publish is a trial (`--limit N`) or a release (every image): a trial must never pass for one."""
    verb = "would be published" if dry_run else "published"
    if report.limit is None:
        return f"  {verb} as a release: every image of the source"
    return (
        f"  {verb} as a TRIAL, not a release: only the first {report.limit:,} images of the source were read "
        f"(--limit {report.limit}); its cards say so"
    )


def summary(family: Family, outcome: PublishReport, *, dry_run: bool, cache: Path | None = None) -> str:
    """What the publish did, for a person: the funnel, whether it is a trial or a release, recovery, verifier, judge, and
    each split's repo."""
    report = outcome.report
    assert report is not None
    t, cal = report.totals, report.judge.calibration
    lines = [_totals_line(family, report)]
    if report.recovery is not None:
        lines.append(_recovery_line(report.recovery))
    if o := report.verifier.outcomes:
        lines.append(
            f"  verifier: {o['accepted']:,} accepted, {o['certain']:,} certainly wrong, "
            f"{o['undecided']:,} undecided (the judge's)"
        )
    lines.append(decontamination_summary(report.cleaning.decontamination) or "")
    reasons = ", ".join(f"{k} {v:,}" for k, v in t.rejected_by_reason.items() if v)
    lines.append(f"  rejected by reason: {reasons or 'none'}")
    if report.endings is not None:
        lines.append(_endings_line(report.endings))
    if cal:
        lines += _calibration_lines(cal)
    if report.recovery is not None and report.recovery.suspects is not None:
        lines.extend(_suspects_lines(report.recovery.suspects))
    if report.blind is not None:
        lines.append(_blind_line(report.blind))
    lines.append(_kind_line(report, dry_run=dry_run))
    for split in report.splits:
        lines += _split_lines(outcome, split, dry_run=dry_run)
    if any(result.offline for result in outcome.results.values()):
        lines.append(
            "  not checked (offline): what the Hub holds now (a file already there is not uploaded again, a file there "
            "and not here is deleted), a pull request an earlier run left, the commits it takes, and whether the token "
            f"may write to {family.config.publish.namespace}"
        )
    lines.append(
        "  cards: " + ", ".join(f"{outcome.where[s]}/README.md" for s in report.splits) if outcome.local else ""
    )
    if cache is not None:  # the default cache is shared by every checkout: a "fresh" clone may reuse answers
        lines.append(f"  generation cache: {cache} (answers already there were not asked again)")
    lines.append(f"  done in {outcome.seconds:.1f}s" + (" (dry run: nothing was changed)" if dry_run else ""))
    return "\n".join(line for line in lines if line)


def would_do(family: Family, plan: PlanReport, *, local: bool, seconds: float) -> str:
    """What a run would do, for a `--dry-run` on a family with no current build: what `rs plan` tells without the model's
    processor (`plan`), and what only sampling tells. `local`: the target is a local folder; `seconds`: the dry run's."""
    c = family.config
    lines = [
        f"{family.name}: not built here with these settings, so this dry run built nothing: no model was loaded, nothing "
        "was sampled or judged. A run would:"
    ]
    s, expected = plan.sample, plan.expected_questions()
    if s is not None and expected is not None:
        lines.append(
            f"  read {counted(plan.source_records, 'source record')} and clean them: about "
            f"{counted(expected, 'question')} to answer (a sample of {counted(s.source_records, 'record')} held "
            f"{counted(s.source_items, 'question')}, {s.kept_items:,} kept by cleaning)"
        )
    elif s is not None:
        lines.append(
            f"  read the source and clean it (its size is not known here; a sample of "
            f"{counted(s.source_records, 'record')} held {counted(s.source_items, 'question')}, {s.kept_items:,} kept by "
            "cleaning)"
        )
    else:
        lines.append("  read the source and clean it (it cannot be read here: see the warnings)")
    requests = f"about {expected:,} sampling requests" if expected is not None else "one sampling request per question"
    judge = (
        f"then one judge request per rejection with a final answer, and up to {3 * c.judge.calibration_samples:,} calibration "
        f"cases (positives, easy and hard negatives: {c.judge.calibration_samples} each) plus every certain rejection"
        + (", each with its image (judge.sees_image)" if c.judge.sees_image else "")
        if c.judge.enabled
        else "no judge (judge.enabled: false)"
    )
    lines.append(f"  send {requests} to {c.model.id} (fewer where the generation cache has the answer), {judge}")
    where = "" if local else f"{c.publish.namespace}/"
    recovery = c.recovery is not None
    if c.recovery is not None:
        lines.append(
            f"  then sample each rejection with a final answer {c.recovery.samples} more times at temperature "
            f"{c.recovery.temperature} (one request each), verify and judge the samples"
            + (
                f", and each accepted question {c.recovery.difficulty.samples} times"
                if c.recovery.difficulty.samples
                else ""
            )
            + f": at most {c.recovery.samples * (c.recovery.max_tokens or c.sampling.max_tokens):,} output tokens a rejection "
            f"(`{_plan_command(family)}` measures the rejections and projects the pass's hours)"
        )
    if c.blind is not None:
        lines.append(
            f"  and ask every question again without its image (text only, at temperature 0; a multiple-choice question "
            f"in {c.blind.rotations} rotations of its options"
            + (f", {c.blind.samples} samples of the others" if c.blind.samples else "")
            + "), to mark the questions answered right without it"
        )
    for split in family.splits:
        if split in ROW_SCHEMAS:
            what = {
                "pairs": "preference pair",
                "samples": "question with every answer it got",
                "rl": "question within the RL pass-rate bounds",
            }[split]
            lines.append(
                f"  write {where}{family.repo_name(split)}: one row per {what} "
                f"({', '.join(features(split, blind=c.blind is not None))})"
            )
            continue
        fields = ", ".join(features(split, recovery=recovery, blind=c.blind is not None)["qa"].feature)
        lines.append(
            f"  write {where}{family.repo_name(split)}: one row per image (image, qa, clean_meta, image_sha256), "
            f"qa holding {{{fields}}} per " + ("rejected question" if split == "rejected" else "accepted question")
        )
    lines.append(
        "  cannot know before sampling: the accept rate, so how many rows and shards each split gets; which rejections "
        "the judge is asked about; whether the judge passes its calibration"
    )
    lines += [f"  note: {n}" for n in plan.notes]
    lines += [f"warning: {w}" for w in plan.warnings]
    lines.append(
        f"  done in {seconds:.1f}s (dry run: nothing was changed; "
        f"`{_plan_command(family)}` answers N images for real and projects the cost)"
    )
    return "\n".join(lines)


def _plan_command(family: Family) -> str:
    """`rs plan FAMILY --limit N` with the families file this run read."""
    return invocation.command("plan", family.name, config=family.path, carry=("--config",), extra=("--limit", "N"))


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("family")
    cli.add_config(parser)
    cli.add_out(parser)
    cli.add_cards_only(parser)
    cli.add_dry_run(parser)
    cli.add_limit(parser)
    parser.add_argument(
        "--allow-empty",
        action="store_true",
        help="publish to the Hub even a split with no rows (datasets.load_dataset refuses to load one)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="let a --limit trial replace a release (a publish of every image) in the local folder; a trial never goes "
        "to the Hub",
    )
    cli.add_build_paths(parser)
    cli.add_ray(parser)
    cli.add_verbose(parser)
    return parser


def _refuse_unreachable_hub(family: Family, args: argparse.Namespace) -> None:
    """Offline, a publish to the Hub stops before the build, saying what works instead; a local one only warns."""
    to_hub = args.out is None and family.config.publish.target != "local"
    if to_hub and not args.dry_run:
        _refuse_offline_mode(family)
    needs = hub_needs(family, publishing=to_hub)
    if not (offline_unless_the_hub_resolves(needs, say=not to_hub) and to_hub):
        return
    if args.dry_run:  # nothing is sent: describe the run; only the comparison with the repos on the Hub is left out
        logger.warning(
            "the Hub is out of reach from here (its name does not resolve): this dry run describes the run, not the "
            "commits a publish to %s would make",
            family.config.publish.namespace,
        )
        return
    reading = [n for n in needs if not n.startswith("the repos ")]
    hint = (
        "publish to a local folder with --out DIR (laid out as the Hub repos), or run the same command when the "
        "network is back"
    )
    if reading and not args.cards_only:
        hint = (
            f"building {family.name} also reads {' and '.join(reading)} from the Hub: offline, --out DIR works only "
            "when they are in the local Hugging Face cache (HF_HOME); otherwise run where the Hub is reachable"
        )
    raise UsageError(
        f"the Hub is out of reach from here (its name does not resolve): {family.name} cannot be "
        f"published to it ({family.config.publish.namespace}/{family.repo_name('think')} and its siblings)",
        hint=hint,
    )


def _refuse_offline_mode(family: Family) -> None:
    """`HF_HUB_OFFLINE=1` set by the user: a publish to the Hub cannot work, and that is said first (before the token,
    whose absence is not the reason it cannot)."""
    started = invocation.current()  # as the command started: rs sets it itself when the Hub does not resolve
    value = (started.env if started.program is not None else os.environ).get("HF_HUB_OFFLINE", "")
    if value.strip().upper() not in ("1", "ON", "YES", "TRUE"):  # huggingface_hub's reading of it
        return
    raise UsageError(
        f"HF_HUB_OFFLINE={value} is set: the Hub libraries work offline, so "
        f"{family.name} cannot be published to the Hub ({family.config.publish.namespace}/"
        f"{family.repo_name('think')} and its siblings)",
        hint="unset HF_HUB_OFFLINE to publish to the Hub (a token is needed then too), or publish to a local folder "
        "with --out DIR; --dry-run shows what a publish would do",
    )


def dry_run_text(family: Family, outcome: PublishReport) -> str:
    """What `rs publish --dry-run` prints of a family it has not built: `rs.plan` asked what a run would do (no model's
    processor loaded, nor `transformers`)."""
    start = time.perf_counter()
    plan = plan_family(family, limit=None, progress=False, count_tokens=False)
    return would_do(family, plan, local=outcome.local, seconds=outcome.seconds + time.perf_counter() - start)


def _publish(family: Family, args: argparse.Namespace, sample: Any) -> PublishReport:
    """`publish` with the command's arguments; a failed Ray pipeline exits as a failed run (what it committed stays cached)."""
    try:
        return publish(
            family,
            out=args.out,
            cards_only=args.cards_only,
            dry_run=args.dry_run,
            limit=args.limit,
            build_root=args.build_dir,
            cache_path=args.cache,
            progress=True,
            sample=sample,
            allow_empty=args.allow_empty,
            force=args.force,
        )
    except RsError:
        raise
    except RuntimeError as err:  # a Ray step's pipeline failed: what it committed stays cached
        if sample is None:
            raise
        raise RunFailed(str(err)) from err


def main(argv: list[str] | None = None, *, prog: str = "python -m rs.publish") -> int:
    """Build the family if needed, render the cards, publish the three repos (four with `recovery.pairs`)."""
    parser = _parser(prog)
    args = parser.parse_args(argv)
    cli.remember(args)
    if args.ray is not None and args.cards_only:
        parser.error("--cards-only samples nothing: drop --ray")
    if (code := before_run.check_ray(parser, args)) is not None:
        return code
    if args.out is not None:
        check_local_root(args.out, "--out")
    before_run.check_build_paths(args)
    family = before_run.checked_family(
        args.family, args.config, probe=not args.cards_only, loads_model=not args.dry_run
    )
    sample = None
    if args.ray is not None:
        sample = functools.partial(
            sample_on_ray, address=args.ray or None, replicas=args.replicas, runtime_env={"env_vars": forwarded_env()}
        )
    with output.quiet(cli.build_root(args) / family.name / "logs", verbose=args.verbose):
        _refuse_unreachable_hub(family, args)
        outcome = _publish(family, args, sample)
        print(
            dry_run_text(family, outcome)
            if not outcome.built
            else summary(family, outcome, dry_run=args.dry_run, cache=args.cache or default_cache_path())
        )
    return 0
