"""`rs sample FAMILY` / `python -m rs.sample FAMILY`: the clean and sample stages (and the recovery pass, when the family has
one) only."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rs import cli
from rs.cli import RunFailed, before_run, output
from rs.cli.parser import Parser
from rs.context import BuildContext, default_cache_path
from rs.distributed import RayIncomplete, forwarded_env, sample_on_ray
from rs.hub.offline import hub_needs, offline_unless_the_hub_resolves
from rs.pipeline.build import ensure_passes
from rs.pipeline.recover import RecoveryReport
from rs.pipeline.sample import SampleReport
from rs.pipeline.sample.judge_modes import judge_modes, modes_lines
from rs.pipeline.sample.stage import sample_shard


def _shard(parser: argparse.ArgumentParser, value: str) -> tuple[int, int]:
    """`--shard I/N` as (I, N), or a usage error that says what I and N are."""
    try:
        shard, shards = (int(x) for x in value.split("/"))
    except ValueError:
        parser.error(f"--shard expects I/N, e.g. 0/4; got {value!r}")
    if shards < 1:
        parser.error(f"--shard {value}: N is the number of shards, at least 1 (e.g. 0/4)")
    if not 0 <= shard < shards:
        parser.error(
            f"--shard {value}: I counts the shards from 0 to N - 1 (here 0/{shards} to {shards - 1}/{shards})"
        )
    return shard, shards


def _on_ray(ctx: BuildContext, args: argparse.Namespace) -> tuple[SampleReport, RecoveryReport | None, dict[str, Any]]:
    """Sample (and recover) on a Ray cluster; what was done is printed before an incomplete run's error (exit 1)."""
    try:
        run = sample_on_ray(
            ctx, address=args.ray or None, replicas=args.replicas, runtime_env={"env_vars": forwarded_env()}
        )
    except RayIncomplete as err:
        print(json.dumps({"ray": err.run.to_dict()}))  # what was done, then the error (exit 1)
        raise
    except RuntimeError as err:  # a step's pipeline failed; what it committed stays cached
        raise RunFailed(str(err)) from err
    return run.report, run.recovery, {"ray": run.to_dict()}


def _sample(ctx: BuildContext, args: argparse.Namespace, shard: tuple[int, int] | None) -> dict[str, Any]:
    """Run the stages the arguments ask for; returns the summary the command prints."""
    if args.ray is not None:
        report, recovered, summary = _on_ray(ctx, args)
    elif shard is not None:  # the recovery pass needs the whole family's greedy answers: a run without --shard does it
        report, recovered, summary = sample_shard(ctx, *shard), None, {}
    else:
        (report, recovered), summary = ensure_passes(ctx), {}
    if recovered is not None:
        summary["recovery"] = {k: v for k, v in recovered.to_dict().items() if k not in ("fingerprint", "seconds")}
    done = report.to_dict()
    return {
        **{
            k: done[k]
            for k in (
                "items",
                "verified",
                "contradicted",
                "judged",
                "verdicts",
                "no_final_answer",
                "engine_errors",
                "sampling_engine_calls",
                "judge_engine_calls",
            )
        },
        **({"blind": done["blind"]} if done.get("blind") is not None else {}),  # the no-image pass (`blind:`)
        **summary,
    }


def _judge_modes(ctx: BuildContext) -> dict[str, Any]:
    """Both judge modes' calibrations on the same cases (`rs.pipeline.sample.judge_modes`), printed for a person and
    written beside the build's stores; returned for the summary line."""
    modes = judge_modes(ctx)
    print("\n".join(modes_lines(modes, ctx.family.config.judge.sees_image)))
    done = {name: mode.to_dict() for name, mode in modes.items()}
    (ctx.paths.root / "judge_modes.json").write_text(json.dumps(done, indent=2) + "\n", encoding="utf-8")
    return done


def main(argv: list[str] | None = None, *, prog: str = "python -m rs.sample") -> int:
    """Run the clean and sample stages, and the recovery pass (resumable; see rs.pipeline.build; `--ray`: rs.distributed)."""
    parser = Parser(prog=prog, description=main.__doc__)
    parser.add_argument("family")
    cli.add_config(parser)
    cli.add_limit(parser)
    cli.add_build_paths(parser)
    parser.add_argument(
        "--shard", metavar="I/N", help="answer only rows whose index %% N == I (one process per GPU); fills the cache"
    )
    parser.add_argument(
        "--judge-modes",
        action="store_true",
        help="then calibrate the judge both with and without the image (judge.sees_image) on the same calibration "
        "cases, and print both; written to BUILD/FAMILY/judge_modes.json (only the other mode's verdicts are new requests)",
    )
    cli.add_ray(parser)
    cli.add_verbose(parser)
    args = parser.parse_args(argv)
    cli.remember(args)
    if args.ray is not None and args.shard:
        parser.error("--ray and --shard are two ways of spreading the work: use one")
    if args.judge_modes and (args.ray is not None or args.shard):
        parser.error(
            "--judge-modes measures the judge in this process from the whole family's answers: run it without --ray "
            "and --shard (the answers they cached are used)"
        )
    if (code := before_run.check_ray(parser, args)) is not None:
        return code
    shard = _shard(parser, args.shard) if args.shard else None
    before_run.check_build_paths(args)
    family = before_run.checked_family(args.family, args.config)
    ctx = BuildContext(
        family, cli.build_root(args), args.cache or default_cache_path(), limit=args.limit, progress=True
    )
    with output.quiet(ctx.build_root / family.name / "logs", verbose=args.verbose):
        offline_unless_the_hub_resolves(hub_needs(family))  # sources and models in the local caches still work
        summary = _sample(ctx, args, shard)
        if args.judge_modes:
            summary["judge_modes"] = _judge_modes(ctx)
        print(json.dumps({**summary, "cache": str(ctx.cache_path)}))  # which cache: the default is shared
    return 0
