"""`rs plan FAMILY` / `python -m rs.plan FAMILY`: what a family's run will do, before it runs (`rs.plan`)."""

from __future__ import annotations

from rs import cli
from rs.cli import before_run, output
from rs.cli.parser import Parser
from rs.hub.offline import hub_needs, offline_unless_the_hub_resolves
from rs.plan import plan_family


def main(argv: list[str] | None = None, *, prog: str = "python -m rs.plan") -> int:
    """Check a family before the GPU-hours are spent: prompts, template, instructions, verifiers; with --limit, a real sample and a projection."""
    parser = Parser(prog=prog, description=main.__doc__)
    parser.add_argument("family")
    cli.add_config(parser)
    parser.add_argument(
        "--limit",
        type=cli.positive_int,
        metavar="N",
        help="also answer the questions of the first N images for real (through the generation cache) and "
        "project the whole family from them",
    )
    parser.add_argument(
        "--sample",
        type=cli.positive_int,
        default=8,
        metavar="K",
        help="images whose prompts are rendered and counted without the model's weights (default 8)",
    )
    parser.add_argument(
        "--tokens-per-second",
        type=cli.positive_float,
        metavar="X",
        help="an engine's output throughput (tokens/s, e.g. from a GPU run) for the projected engine hours",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when the plan has a warning (a source it cannot read, a judge that cannot pass its calibration, ...)",
    )
    cli.add_build_paths(parser)
    cli.add_verbose(parser)
    args = parser.parse_args(argv)
    cli.remember(args)
    before_run.check_build_paths(args)
    family = before_run.checked_family(args.family, args.config)
    with output.quiet(cli.build_root(args) / family.name / "logs", verbose=args.verbose):
        offline_unless_the_hub_resolves(hub_needs(family))
        plan = plan_family(
            family,
            sample_images=args.sample,
            limit=args.limit,
            build_root=cli.build_root(args),
            cache_path=args.cache,
            tokens_per_second=args.tokens_per_second,
            progress=True,
        )
    print(plan.render())
    return 1 if args.strict and plan.warnings else 0
