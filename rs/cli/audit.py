"""`rs audit REPO`: check a published repo's card, stats and front matter against its own files (`rs.audit`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from pathlib import Path

from rs import cli
from rs.audit import Replay, audit
from rs.audit import __doc__ as AUDIT_DOC
from rs.cli import output
from rs.cli.parser import Parser


def main(argv: list[str] | None = None, *, prog: str = "rs audit") -> int:
    parser = Parser(prog=prog, description=AUDIT_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repo", help="a published repo: its local folder, or its Hub id (namespace/name)")
    parser.add_argument(
        "--build",
        type=Path,
        metavar="DIR",
        help="also check against this build's stores (build/FAMILY, or the build root)",
    )
    parser.add_argument(
        "--replay",
        type=int,
        default=0,
        metavar="N",
        help="with --build: re-derive N published questions from the run's generation cache (byte for byte, "
        "or a finding)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        metavar="PATH",
        help="with --build: count where the build's answers were made again from this generation cache; with "
        "--replay: the cache it reads (default there: $RS_CACHE_DIR/generations.sqlite)",
    )
    parser.add_argument(
        "--engine",
        action="store_true",
        help="with --replay: also send those questions to the family's engine, fresh (no cache read or "
        "written), and print how far its answers agree",
    )
    cli.add_config(parser)
    parser.add_argument(
        "--no-siblings",
        action="store_true",
        help="read this repo alone (the family's numbers against rs/stats.json only)",
    )
    cli.add_verbose(parser)
    args = parser.parse_args(argv)
    cli.remember(args)
    if args.replay < 0:
        parser.error("--replay N: N must be 0 or more")
    if not args.replay and args.engine:
        parser.error("--engine goes with --replay N (and --build DIR)")
    if args.cache is not None and args.build is None:
        parser.error("--cache goes with --build DIR (and --replay N)")
    asked = Replay(args.replay, config=args.config, cache=args.cache, engine=args.engine)
    # the model's processor (its engine built, to key the answers), and with --engine the model, are loaded
    replaying = (args.replay or args.cache is not None) and args.build is not None
    with output.quiet(_logs(args.build, args.repo), verbose=args.verbose) if replaying else contextlib.nullcontext():
        result = audit(args.repo, build=args.build, replay=asked, siblings=not args.no_siblings)
    print(result.render())
    return 0 if result.ok else 1


def _logs(build: Path, repo: str) -> Path:
    """Where the engine's and its libraries' own output goes: the family's log folder in the build (`build/FAMILY/logs`), as
    other commands; the temporary directory's `rs-audit-logs` where the build cannot be written (a read-only copy)."""
    try:
        family = json.loads((Path(repo) / "rs" / "stats.json").read_text(encoding="utf-8"))["family"]
    except (OSError, ValueError, KeyError, TypeError):  # a Hub id, or not a repo: the audit says so
        family = None
    folder = build / family / "logs" if family and (build / family).is_dir() else build / "logs"
    existing = next((p for p in (folder, *folder.parents) if p.exists()), folder)
    if not os.access(existing, os.W_OK):  # an audit only reads the build: a read-only one is audited all the same
        return Path(tempfile.gettempdir()) / "rs-audit-logs"
    return folder


if __name__ == "__main__":
    from rs.cli import run_as_program

    run_as_program(main)
