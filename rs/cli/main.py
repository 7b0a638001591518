"""`rs`: the console script. `rs publish CLEVRMath`, `rs sample TinyCLEVR --limit 8`, `rs families validate`."""

from __future__ import annotations

import difflib
import sys
from typing import Callable

from rs import __version__
from rs.cli import audit, cache, families, plan, publish, refilter, run, sample

COMMANDS: dict[str, tuple[Callable[..., int], str]] = {
    "publish": (
        publish.main,
        "build a family if needed, render its cards, publish its repos (three splits, and the pairs, samples and RL repos a family turns on)",
    ),
    "refilter": (
        refilter.main,
        "rebuild a family's splits from its stored answers under changed routing, with no model call",
    ),
    "sample": (sample.main, "run a family's clean and sample stages only"),
    "plan": (
        plan.main,
        "check a family before a run: prompts, template, instructions; --limit N: a real sample and a projection",
    ),
    "families": (families.main, "list, validate, show and preview the families of a families file"),
    "audit": (
        audit.main,
        "check a published repo's card, stats and front matter against its own files (and a build's stores)",
    ),
    "cache": (
        cache.main,
        "check the generation cache for damaged answers, and forget them so that they are asked again",
    ),
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["--version"], ["-V"]):
        print(f"rs {__version__}")
        return 0
    if (
        args and args[0] not in COMMANDS and args[0] not in ("-h", "--help")
    ):  # the error first, and only the command names
        close = difflib.get_close_matches(args[0], list(COMMANDS), n=1, cutoff=0.6)
        print(
            f"error: unknown command {args[0]!r}" + (f" (did you mean {close[0]!r}?)" if close else ""),
            file=sys.stderr,
        )
        print(
            f"usage: rs COMMAND [ARGS], COMMAND one of: {', '.join(COMMANDS)}\nhint: `rs --help` says what each does",
            file=sys.stderr,
        )
        return 2
    if not args or args[0] in ("-h", "--help"):
        lines = ["usage: rs COMMAND [ARGS]", "", "commands:"]
        lines += [f"  {name:<9} {help_}" for name, (_, help_) in COMMANDS.items()]
        lines += ["", "`rs COMMAND --help` shows a command's flags; `rs --version` the version."]
        print("\n".join(lines))
        return 0
    command, _ = COMMANDS[args[0]]
    return command(args[1:], prog=f"rs {args[0]}")


def console() -> None:
    """The `rs` entry point of the installed package."""
    run(main)
