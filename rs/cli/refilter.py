"""`rs refilter FAMILY` / `python -m rs.refilter FAMILY`: rebuild the splits from stored answers under changed settings.

    rs refilter TinyCLEVR --judge never --out DIR          # the judge promotes nothing: its promotions go back to rejected
    rs refilter TinyCLEVR --no-think-needs-agreeing-reasoning
    rs refilter TinyCLEVR --rl-min 0.1 --rl-max 0.9        # the RL repo keeps 0.1 < pass rate < 0.9 (Open-R1's bounds)
    rs refilter TinyCLEVR                                  # after a reader change (a verifier's version, `answers:`): re-read
    rs refilter TinyCLEVR --from-samples me/TinyCLEVR_RS_samples   # from the published samples repo, without the build

Every answer the run gave is in its build's stores (the greedy pass's, the recovery and difficulty samples, with what
the reader and the judge made of each); routing is a pure function of them. So a change of routing rebuilds the splits,
the pairs, the samples and RL repos and their cards with no model call. Three sources, in this order (`rs.refilter`):
the build's stores when they are current for the family's settings; the same stores re-read under the current reader
when only the reader changed since the run (an undecided answer with no stored or cached verdict is rejected as
`judge_not_asked`, counted, and left to `rs publish`); or, with `--from-samples REPO`, the stores written back from a
published samples repo. Anything else that changed (the model, the prompt, the sampling) is refused, never re-run. The
cards say which filter, which reader and which source made them.
"""

from __future__ import annotations

import argparse
from typing import Any

from rs import cli
from rs.cli import before_run, output
from rs.cli.parser import Parser
from rs.cli.publish import summary
from rs.context import BuildContext, default_cache_path
from rs.errors import UsageError
from rs.families import Family
from rs.pipeline.publish.stage import publish
from rs.pipeline.route import JUDGE_POLICIES, RouteFilter
from rs.refilter import Prepared, Reread, prepare
from rs.util.text import counted


class NoStoredAnswers(UsageError):
    """`rs refilter` found no answers stored for the family's settings: it would have to call the model."""

    default_hint = "run `rs publish FAMILY` (with the same --config, --build-dir and --limit) first, then refilter"


def _no_engine(family: Family) -> Any:
    raise NoStoredAnswers(
        f"{family.name}: the build holds no answers (or stale ones) for the family's settings, and `rs refilter` calls no "
        "model: it re-routes the answers a run stored"
    )


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a pass rate from 0 to 1, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a pass rate from 0 to 1, got {value}")
    return value


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("family")
    cli.add_config(parser)
    cli.add_out(parser)
    cli.add_dry_run(parser)
    cli.add_limit(parser)
    parser.add_argument(
        "--judge",
        choices=JUDGE_POLICIES,
        default="calibrated",
        help="calibrated: the judge promotes as the run's calibration allowed (the run's rule); "
        "never: it promotes nothing",
    )
    parser.add_argument(
        "--think-needs-agreeing-reasoning",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep an accepted answer whose reasoning concludes another value out of the think split "
        "(default: the family's answers.think_needs_agreeing_reasoning)",
    )
    parser.add_argument("--rl-min", type=_rate, metavar="P", help="the RL repo keeps pass rates strictly above P")
    parser.add_argument("--rl-max", type=_rate, metavar="P", help="... and strictly below P")
    parser.add_argument(
        "--rl-keeps-blind",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep in the RL repo the questions the no-image pass marked right without the image "
        "(default: the family's blind.rl)",
    )
    parser.add_argument(
        "--from-samples",
        metavar="REPO",
        help="rebuild from the family's published samples repo (a folder laid out as on the Hub, or its Hub "
        "id namespace/name) instead of its build; the stores are written back into BUILD/FAMILY/from-samples",
    )
    parser.add_argument("--token", help="Hub token to read a private samples repo (default: the stored login)")
    cli.add_build_paths(parser)
    cli.add_verbose(parser)
    return parser


def route_filter(parser: argparse.ArgumentParser, args: argparse.Namespace, family: Family) -> RouteFilter:
    """The filter the flags ask for; RL bounds need the family's RL repo (`recovery.difficulty.rl`)."""
    bounds = None
    if args.rl_min is not None or args.rl_max is not None:
        rl = family.config.recovery.difficulty.rl if family.config.recovery is not None else None
        if rl is None:
            raise UsageError(
                f"--rl-min / --rl-max: {family.name} publishes no RL repo",
                hint="set recovery.difficulty: {samples: K, rl: {}} in its families file, then publish it",
            )
        bounds = (
            args.rl_min if args.rl_min is not None else rl.min_pass_rate,
            args.rl_max if args.rl_max is not None else rl.max_pass_rate,
        )
        if bounds[1] <= bounds[0]:
            parser.error(f"--rl-max ({bounds[1]}) must be above --rl-min ({bounds[0]})")
    if args.rl_keeps_blind is not None:
        c = family.config
        if c.blind is None or c.recovery is None or c.recovery.difficulty.rl is None:
            raise UsageError(
                f"--rl-keeps-blind: {family.name} "
                + ("has no no-image pass" if c.blind is None else "publishes no RL repo"),
                hint="set blind: {} and recovery.difficulty: {samples: K, rl: {}} in its families file, then publish it",
            )
    return RouteFilter(
        judge=args.judge,
        think_needs_agreeing_reasoning=args.think_needs_agreeing_reasoning,
        rl_bounds=bounds,
        rl_keeps_blind=args.rl_keeps_blind,
    )


def publish_command(args: argparse.Namespace, family: Family) -> str:
    """The `rs publish` that asks the judge what a re-read left undecided, and draws the samples it lacks."""
    parts = ["rs", "publish", family.name]
    for flag, value in (
        ("--config", args.config),
        ("--build-dir", args.build_dir),
        ("--cache", args.cache),
        ("--limit", args.limit),
        ("--out", args.out),
    ):
        if value is not None:
            parts += [flag, str(value)]
    return " ".join(parts)


def _said(prepared: Prepared, family: Family) -> list[str]:
    """What the re-read did, in lines for the terminal."""
    r: Reread | None = prepared.reread
    if r is None:
        return []
    changed = "; ".join(str(c) for c in r.changed) or "nothing"
    d = r.to_dict()["decisions"]
    lines = [
        f"{family.name}: re-read {counted(r.answers, 'stored answer')} of {counted(r.questions, 'question')} under the "
        f"current reader (changed since the run: {changed}), no model call: {r.outcomes_changed:,} read otherwise, "
        f"{counted(d['changed'], 'decision')} changed ({d['accepted_to_rejected']:,} accepted -> rejected, "
        f"{d['rejected_to_accepted']:,} rejected -> accepted, {d['other']:,} otherwise); judge verdicts reused: "
        f"{r.verdicts['stores']:,} stored, {r.verdicts['cache']:,} cached"
    ]
    if r.cache:
        lines.append(f"  the generation cache was not consulted: {r.cache}")
    if r.not_asked or r.samples_missing:
        waiting = []
        if r.not_asked:
            waiting.append(
                f"{counted(r.not_asked, 'undecided answer')} (of {counted(r.questions_unjudged, 'question')}) without a judge verdict "
                f"({counted(r.not_asked_questions, 'question')} rejected as `judge_not_asked`, not as wrong)"
            )
        if r.samples_missing:
            waiting.append(
                f"{counted(r.samples_missing, 'sample')} a run under this reader would draw, not stored "
                f"(for {counted(r.questions_short, 'question')})"
            )
        rebuilt = (
            " (it builds the family from its source: the generation cache answers what it holds)"
            if ((prepared.refiltered or {}).get("source"))
            else ""
        )
        lines.append(f"  {'; '.join(waiting)}; to ask the judge and draw them: {r.command}{rebuilt}")
    return lines


def main(argv: list[str] | None = None, *, prog: str = "python -m rs.refilter") -> int:
    """Rebuild a family's splits from its stored answers under changed settings, with no model call."""
    parser = _parser(prog)
    args = parser.parse_args(argv)
    cli.remember(args)
    before_run.check_build_paths(args)
    family = before_run.checked_family(args.family, args.config, probe=False)
    chosen = route_filter(parser, args, family)
    cache = args.cache or default_cache_path()
    ctx = BuildContext(family, cli.build_root(args), cache, limit=args.limit, progress=False, route_filter=chosen)
    # before anything runs (not even the cleaning of a source that may be large): refused when the model is needed
    prepared = prepare(
        ctx, from_samples=args.from_samples, cache_path=cache, command=publish_command(args, family), token=args.token
    )
    with output.quiet(cli.build_root(args) / family.name / "logs", verbose=args.verbose):
        outcome = publish(
            family,
            out=args.out,
            dry_run=args.dry_run,
            limit=args.limit,
            build_root=args.build_dir,
            cache_path=args.cache,
            progress=True,
            engine_factory=_no_engine,
            route_filter=chosen,
            stores=prepared.stores,
            refiltered=prepared.refiltered,
            token=args.token,
        )
        report = outcome.report
        if report is None:  # a dry run on a family with no current build
            _no_engine(family)
        source = (prepared.refiltered or {}).get("source")
        origin = f"from the samples repo {source['repo']}" if source else "from the build's stores"
        print(
            f"{family.name}: re-filtered offline {origin}, no model call; changed: "
            + "; ".join(report.filter["changes"])
        )
        for line in _said(prepared, family):
            print(line)
        print(summary(family, outcome, dry_run=args.dry_run))
    return 0
