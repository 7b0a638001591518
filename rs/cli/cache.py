"""`rs cache check` / `rs cache forget KEY...` / `rs cache merge SOURCE...`: find the generation cache's damaged
answers, forget them, and gather caches made on other machines into one.

    rs cache check --cache PATH                # the keys of the answers whose checksum fails (exit 1 when there are any)
    rs cache forget --cache PATH KEY [KEY...]  # remove those answers: the next run asks for them again, the rest stay
    rs cache merge --cache PATH SOURCE [...]   # add every answer of the SOURCE caches, each with the machine that made it

`merge` is how shards sampled on several machines (`rs sample --shard I/N`, each with its cache on its own disk) come
together before the whole stage runs once more: every answer keeps the record of the machine and engine that made it
(`rs.engines.machine`), so the published provenance counts the answers each machine made. An answer both hold is kept
as a run keeps it (replaced only by one made with a larger budget); a damaged answer in a source stops the merge,
naming it.

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
    merge = actions.add_parser("merge", help="add every answer of other caches (made on other machines) to this one")
    merge.add_argument("sources", nargs="+", type=Path, metavar="SOURCE", help="generation cache files to add")
    for action in (check, forget, merge):
        action.add_argument(
            "--cache",
            type=Path,
            metavar="PATH",
            help="generation cache file (default: $RS_CACHE_DIR/generations.sqlite)",
        )
    args = parser.parse_args(argv)
    cli.remember(args)
    path = args.cache or default_cache_path()
    if args.action == "merge":  # into a new file too: the first shard's answers
        return _merge(path, args.sources)
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


def _merge(path: Path, sources: list[Path]) -> int:
    """`rs cache merge`: each source's answers added to the cache at `path`, with their machines."""
    for source in sources:
        if not source.is_file():
            raise UsageError(f"{source}: no such file", hint="name the generation cache files the shards wrote")
        if source.resolve() == path.resolve():
            raise UsageError(f"{source} is the cache merged into (--cache {path})", hint="name the other caches")
    with GenerationCache(path) as cache:
        for source in sources:
            before = len(cache)
            with GenerationCache(source) as other:
                offered = cache.merge(other)
            print(
                f"merged {source} into {path}: {counted(offered, 'answer')}, "
                f"{len(cache) - before:,} of them new; the cache holds {len(cache):,}"
            )
    return 0


if __name__ == "__main__":
    from rs.cli import run_as_program

    run_as_program(main)
