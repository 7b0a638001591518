"""`rs refilter FAMILY`: rebuild the splits from the stored answers under changed routing.

    rs refilter TinyCLEVR --judge never --out DIR          # the judge promotes nothing: its promotions go back to rejected
    rs refilter TinyCLEVR --no-think-needs-agreeing-reasoning
    rs refilter TinyCLEVR --rl-min 0.1 --rl-max 0.9        # the RL repo keeps 0.1 < pass rate < 0.9 (Open-R1's bounds)

Every answer the run gave is in its build's stores (the greedy pass's, the recovery and difficulty samples, with what
the reader and the judge made of each); routing is a pure function of them. So a change of routing rebuilds the splits,
the pairs, the samples and RL repos and their cards with no model call: a build whose stores are missing or stale
for the family's settings is refused, never re-run. The cards say which filter made them.
"""

from __future__ import annotations

import argparse
from typing import Any

from rs import cli
from rs.cli import output
from rs.cli.publish import summary
from rs.errors import UsageError
from rs.families import Family
from rs.publish import publish
from rs.route import JUDGE_POLICIES, RouteFilter
from rs.stages import BuildContext, current_recovery_report, current_sample_report, default_cache_path


class NoStoredAnswers(UsageError):
    """`rs refilter` found no answers stored for the family's settings: it would have to call the model."""

    default_hint = "run `rs publish FAMILY` (with the same --config, --build-dir and --limit) first, then refilter"


def _no_engine(family: Family) -> Any:
    raise NoStoredAnswers(
        f"{family.name}: the build holds no answers (or stale ones) for the family's settings, and `rs refilter` calls no "
        "model: it re-routes the answers a run stored")


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a pass rate from 0 to 1, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a pass rate from 0 to 1, got {value}")
    return value


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("family")
    cli.add_config(parser)
    cli.add_out(parser)
    cli.add_dry_run(parser)
    cli.add_limit(parser)
    parser.add_argument("--judge", choices=JUDGE_POLICIES, default="calibrated",
                        help="calibrated: the judge promotes as the run's calibration allowed (the run's rule); "
                             "never: it promotes nothing")
    parser.add_argument("--think-needs-agreeing-reasoning", action=argparse.BooleanOptionalAction, default=None,
                        help="keep an accepted answer whose reasoning concludes another value out of the think split "
                             "(default: the family's answers.think_needs_agreeing_reasoning)")
    parser.add_argument("--rl-min", type=_rate, metavar="P", help="the RL repo keeps pass rates strictly above P")
    parser.add_argument("--rl-max", type=_rate, metavar="P", help="... and strictly below P")
    cli.add_build_paths(parser)
    cli.add_verbose(parser)
    return parser


def route_filter(parser: argparse.ArgumentParser, args: argparse.Namespace, family: Family) -> RouteFilter:
    """The filter the flags ask for; RL bounds need the family's RL repo (`recovery.difficulty.rl`)."""
    bounds = None
    if args.rl_min is not None or args.rl_max is not None:
        rl = family.config.recovery.difficulty.rl if family.config.recovery is not None else None
        if rl is None:
            raise UsageError(f"--rl-min / --rl-max: {family.name} publishes no RL repo",
                             hint="set recovery.difficulty: {samples: K, rl: {}} in its families file, then publish it")
        bounds = (args.rl_min if args.rl_min is not None else rl.min_pass_rate,
                  args.rl_max if args.rl_max is not None else rl.max_pass_rate)
        if bounds[1] <= bounds[0]:
            parser.error(f"--rl-max ({bounds[1]}) must be above --rl-min ({bounds[0]})")
    return RouteFilter(judge=args.judge, think_needs_agreeing_reasoning=args.think_needs_agreeing_reasoning, rl_bounds=bounds)


def main(argv: list[str] | None = None, *, prog: str = "rs refilter") -> int:
    """Rebuild a family's splits from its stored answers under changed routing settings, with no model call."""
    parser = _parser(prog)
    args = parser.parse_args(argv)
    cli.check_build_paths(args)
    family = cli.checked_family(args.family, args.config, probe=False)
    chosen = route_filter(parser, args, family)
    ctx = BuildContext(family, cli.build_root(args), args.cache or default_cache_path(), limit=args.limit, progress=False)
    sampled = current_sample_report(ctx)
    if sampled is None or (family.config.recovery is not None and current_recovery_report(ctx, sampled) is None):
        _no_engine(family)  # before anything runs: not even the cleaning of a source that may be large
    with output.quiet(cli.build_root(args) / family.name / "logs", verbose=args.verbose):
        outcome = publish(family, out=args.out, dry_run=args.dry_run, limit=args.limit, build_root=args.build_dir,
                          cache_path=args.cache, progress=True, engine_factory=_no_engine, route_filter=chosen)
        if outcome["report"] is None:  # a dry run on a family with no current build
            _no_engine(family)
        report = outcome["report"]
        print(f"{family.name}: re-filtered offline, no model call; changed: " + "; ".join(report.filter["changes"]))
        print(summary(family, outcome, dry_run=args.dry_run))
    return 0
