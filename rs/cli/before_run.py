"""What a command that runs a family checks before anything starts: the family as `rs families validate` checks it, the
build paths (`--build-dir`, `--cache`), and Ray for `--ray`; a mistake is said before any work, not as a stage's failure."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rs import distributed
from rs.cli import build_root
from rs.families import Family, get_family
from rs.pipeline.publish.preflight import check_local_root, check_overlap
from rs.plan.probe import probe_family


def checked_family(name: str, config: Path | None, *, probe: bool = True, loads_model: bool = True) -> Family:
    """The family by name, with what `rs families validate` checks of it here (local files, columns, models) checked first:
    a misspelt path is said at its file and line before anything starts, not as a stage's failure. `loads_model`: the
    command may load the model here (an offline Hub model must then be in the local cache)."""
    family = get_family(name, config)
    if probe:
        probe_family(family, loads_model=loads_model)
    return family


def check_build_paths(args: argparse.Namespace) -> None:
    """Refuse a --build-dir or --cache where nothing can be written (a file in the way, a read-only folder) before anything starts."""
    check_local_root(build_root(args), "--build-dir" if args.build_dir else "the build folder", "the builds")
    if args.cache is not None:
        check_local_root(args.cache.parent, "--cache", "the generation cache")
        check_overlap(
            None, "--out", build_root(args), args.cache
        )  # the build is rebuilt from the cache: never part of it


def check_ray(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int | None:
    """Exit status 2 when `--ray` is asked for without Ray installed (after saying which extra to install)."""
    if args.replicas is not None and args.ray is None:
        parser.error("--replicas needs --ray")
    if args.ray is None:
        return None
    if not distributed.ray_available():
        print(distributed.RAY_MISSING, file=sys.stderr)
        return 2
    return None
