"""`rs cache check` / `rs cache forget KEY...`: find the generation cache's damaged answers, and forget them.

    rs cache check --cache PATH                # the keys of the answers whose checksum fails (exit 1 when there are any)
    rs cache forget --cache PATH KEY [KEY...]  # remove those answers: the next run asks for them again, the rest stay

A run that reads a damaged answer stops and names it with the `forget` command to run
(`rs.engines.generation_cache.CacheAnswerDamaged`); `check` looks through the whole cache at once.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rs import cli
from rs.cli.parser import Parser
from rs.context import default_cache_path
from rs.engines.generation_cache import GenerationCache
from rs.errors import UsageError
from rs.util.text import counted


def main(argv: list[str] | None = None, *, prog: str = "rs cache") -> int:
    parser = Parser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", required=True)
    check = actions.add_parser("check", help="list the keys of the answers whose checksum fails")
    forget = actions.add_parser("forget", help="remove answers by key: the next run asks for them again")
    forget.add_argument("keys", nargs="+", metavar="KEY", help="cache keys, as a damaged-answer error names them")
    for action in (check, forget):
        action.add_argument(
            "--cache",
            type=Path,
            metavar="PATH",
            help="generation cache file (default: $RS_CACHE_DIR/generations.sqlite)",
        )
    args = parser.parse_args(argv)
    cli.remember(args)
    path = args.cache or default_cache_path()
    if not path.is_file():
        raise UsageError(
            f"--cache {path}: no such file", hint="name the cache file the run used (--cache PATH, or $RS_CACHE_DIR)"
        )
    with GenerationCache(path) as cache:
        if args.action == "check":
            damaged = list(cache.damaged())
            for key in damaged:
                print(key)
            print(
                f"{counted(len(damaged), 'damaged answer')} of {len(cache):,} in {path}"
                + (f"; forget them with `rs cache forget --cache {path} KEY...`" if damaged else "")
            )
            return 1 if damaged else 0
        unknown = [key for key in dict.fromkeys(args.keys) if key not in cache.present(args.keys)]
        if unknown:  # a mistyped key: said, and nothing forgotten (not "forgot 0 of the 1" and exit 0)
            raise UsageError(
                f"{counted(len(unknown), 'key')} not in {path}: {', '.join(unknown)}; nothing was forgotten",
                hint=f"copy the keys from the error that named them, or from `rs cache check --cache {path}`",
            )
        removed = cache.forget(args.keys)
    print(
        f"forgot {removed:,} of the {counted(len(set(args.keys)), 'answer')} named in {path}: the next run asks for "
        f"{'it' if removed == 1 else 'them'} again"
    )
    return 0


if __name__ == "__main__":
    from rs.cli import run_as_program

    run_as_program(main)
