"""`rs publish FAMILY` / `python -m rs.publish FAMILY`: build if needed, render the cards, publish the three repos.

    python -m rs.publish TinyCLEVR                 # local folder (the embedded default: no GPU, network or token)
    python -m rs.publish CLEVRMath                 # the Hub: {namespace}/CLEVRMath_RS_think, ..._RS_nothink, ..._rejected
    python -m rs.publish CLEVRMath --out DIR       # a local folder laid out exactly as the Hub repos
    python -m rs.publish CLEVRMath --cards-only    # re-render and publish the three cards, nothing else
    python -m rs.publish CLEVRMath --dry-run       # what would be added, changed and deleted, with sizes, in how many commits
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from rs import cli
from rs.cards import counted, pct
from rs.cli import RunFailed, output
from rs.distributed import forwarded_env, sample_on_ray
from rs.errors import RsError, UsageError
from rs.families import Family, get_family
from rs.hub import describe_commits, format_plan
from rs.offline import offline_unless_the_hub_resolves
from rs.publish import check_local_root, publish
from rs.schema import SPLITS


def summary(family: Family, outcome: dict[str, Any], *, dry_run: bool) -> str:
    report = outcome["report"]
    t, cal = report.totals, report.judge.calibration
    lines = [f"{family.name}: {t.source_qa:,} source QA, {t.dropped_by_cleaning:,} dropped by cleaning, "
             f"{t.accepted:,} accepted ({t.accepted_by['verifier']:,} by the verifier, {t.accepted_by['judge']:,} by the judge), "
             f"{t.rejected:,} rejected; accept rate {pct(t.accept_rate)}"]
    reasons = ", ".join(f"{k} {v:,}" for k, v in t.rejected_by_reason.items() if v)
    lines.append(f"  rejected by reason: {reasons or 'none'}")
    if report.endings is not None:
        e = report.endings
        ended = ", ".join(f"{k} {v:,}" for k, v in e.counts.items() if v)
        lines.append(f"  answers ended: {ended or 'none'}; loop detection saved {e.loop_tokens_saved:,} tokens"
                     f" ({pct(e.loop_tokens_saved / (e.completion_tokens + e.loop_tokens_saved) if e.completion_tokens + e.loop_tokens_saved else None)}"
                     f" of {e.completion_tokens + e.loop_tokens_saved:,}); {e.budgeted_answered:,} answered after a thinking-budget cut")
    if cal:
        def check(name: str) -> str:
            c = cal[name]
            return f"{c['agreed']}/{c['total']} [{pct(c['low'])}, {pct(c['high'])}]" if c["total"] else "0/0"

        lines.append(f"  judge calibration: positives {check('positive')}, easy negatives {check('easy')}, "
                     f"hard negatives {check('hard')}, certain rejections {check('certain')}")
        lines.append("  judge: " + ("passed its calibration, its CORRECT verdicts promote" if cal["promotes"]
                                    else f"BLOCKED, it promotes nothing: {cal['blocked_reason']}"))
    for split in SPLITS:
        s = report.splits[split]
        result = outcome["results"][split]
        counts = {a: sum(1 for ch in result.changes if ch.action == a) for a in ("add", "change", "delete", "unchanged")}
        commits = "" if outcome["local"] else f"; {describe_commits(result, dry_run=dry_run)}"
        lines.append(f"  {s.repo}: {s.rows:,} rows, {s.qa:,} QA, {counted(s.shards, 'shard')} -> {outcome['where'][split]} "
                     f"({counts['add']} added, {counts['change']} changed, {counts['delete']} deleted, {counts['unchanged']} unchanged"
                     f"{commits})")
        if dry_run:
            lines.append(format_plan(result.changes))
    lines.append("  cards: " + ", ".join(f"{outcome['where'][s]}/README.md" for s in SPLITS) if outcome["local"] else "")
    lines.append(f"  done in {outcome['seconds']:.1f}s" + (" (dry run: nothing was changed)" if dry_run else ""))
    return "\n".join(line for line in lines if line)


def main(argv: list[str] | None = None, *, prog: str = "python -m rs.publish") -> int:
    """Build the family if needed, render the cards, publish the three repos."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("family")
    cli.add_config(parser)
    cli.add_out(parser)
    cli.add_cards_only(parser)
    cli.add_dry_run(parser)
    cli.add_limit(parser)
    cli.add_build_paths(parser)
    cli.add_ray(parser)
    cli.add_verbose(parser)
    args = parser.parse_args(argv)
    if args.ray is not None and args.cards_only:
        parser.error("--cards-only samples nothing: drop --ray")
    if (code := cli.check_ray(parser, args)) is not None:
        return code
    if args.out is not None:
        try:
            check_local_root(args.out, "--out")
        except UsageError as err:
            parser.error(str(err))
    family = get_family(args.family, args.config)
    sample = None
    if args.ray is not None:
        sample = functools.partial(sample_on_ray, address=args.ray or None, replicas=args.replicas,
                                   runtime_env={"env_vars": forwarded_env()})
    with output.quiet(cli.build_root(args) / family.name / "logs", verbose=args.verbose):
        if offline_unless_the_hub_resolves() and args.out is None and family.config.publish.target != "local":
            raise UsageError(f"the Hub is out of reach from here, so {family.name} cannot be published to it "
                             f"({family.config.publish.namespace}/{family.repo_name('think')} and its siblings)",
                             hint="publish to a local folder with --out DIR (laid out as the Hub repos), or run the same "
                                  "command when the network is back")
        try:
            outcome = publish(family, out=args.out, cards_only=args.cards_only, dry_run=args.dry_run, limit=args.limit,
                              build_root=args.build_dir, cache_path=args.cache, progress=True, sample=sample)
        except RsError:
            raise
        except RuntimeError as err:  # a Ray step's pipeline failed: what it committed stays cached
            if sample is None:
                raise
            raise RunFailed(str(err)) from err
        print(summary(family, outcome, dry_run=args.dry_run))
    return 0
