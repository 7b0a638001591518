"""`rs audit REPO`: check a published repo's card, stats and front matter against its own files (`rs.audit`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rs.audit import __doc__ as AUDIT_DOC
from rs.audit import audit


def main(argv: list[str] | None = None, *, prog: str = "rs audit") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=AUDIT_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repo", help="a published repo: its local folder, or its Hub id (namespace/name)")
    parser.add_argument("--build", type=Path, metavar="DIR", help="also check against this build's stores (build/FAMILY, or the build root)")
    parser.add_argument("--replay", type=int, default=0, metavar="N", help="with --build: re-derive the first N rows from the stores")
    parser.add_argument("--no-siblings", action="store_true", help="read this repo alone (the family's numbers against rs/stats.json only)")
    args = parser.parse_args(argv)
    if args.replay < 0:
        parser.error("--replay N: N must be 0 or more")
    result = audit(args.repo, build=args.build, replay=args.replay, siblings=not args.no_siblings)
    print(result.render())
    return 0 if result.ok else 1


if __name__ == "__main__":
    from rs.cli import run

    run(main)
