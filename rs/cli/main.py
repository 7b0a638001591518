"""`rs`: the console script. `rs publish CLEVRMath`, `rs sample TinyCLEVR --limit 8`, `rs families validate`.

A command's module (`rs.cli.NAME`) is imported when that command runs, not before: `rs --help`, `rs --version` and a
misspelt command import no command and nothing of the pipeline, and answer at once.
"""

from __future__ import annotations

import difflib
import sys

from rs import __version__
from rs.cli import run_as_program
from rs.util.long_lived import import_for_good

COMMANDS: dict[str, tuple[str, str]] = {
    "publish": (
        "rs.cli.publish",
        "build a family if needed, render its cards, publish its repos (three splits, and the pairs, samples and RL repos a family turns on)",
    ),
    "refilter": (
        "rs.cli.refilter",
        "rebuild a family's splits from its stored answers under changed routing, with no model call",
    ),
    "sample": ("rs.cli.sample", "run a family's clean and sample stages only"),
    "plan": (
        "rs.cli.plan",
        "check a family before a run: prompts, template, instructions; --limit N: a real sample and a projection",
    ),
    "families": ("rs.cli.families", "list, validate, show and preview the families of a families file"),
    "audit": (
        "rs.cli.audit",
        "check a published repo's card, stats and front matter against its own files (and a build's stores)",
    ),
    "cache": (
        "rs.cli.cache",
        "check the generation cache for damaged answers, and forget them so that they are asked again",
    ),
}
"""Each command's module, whose `main(argv, prog=...)` runs it, and its line in `rs --help`."""


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
    module, _ = COMMANDS[args[0]]
    return import_for_good(module).main(args[1:], prog=f"rs {args[0]}")


def console() -> None:
    """The `rs` entry point of the installed package."""
    run_as_program(main)
