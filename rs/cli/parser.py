"""The commands' argument parser: an argument error first, with a did-you-mean, then one usage line (not the whole block).

argparse (before Python 3.14) prints the usage block and then `error: ...`, and suggests nothing for
a misspelt flag or subcommand (`--lmit`, `valdate`).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import Any, NoReturn

__all__ = ["Parser"]

_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


class Parser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` whose errors say `error: ...` first, with the closest flag or choice when one is near.

    A flag is taken only as written in full: argparse's abbreviations (`--judg` taken for `--judge`) would let a
    misspelt flag of tomorrow mean another one, and say nothing (`allow_abbrev=False`, subcommands' parsers too)."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        lines = self.format_usage().strip().splitlines()
        usage = lines[0] + (" ..." if len(lines) > 1 else "")
        sys.stderr.write(
            f"error: {message}{self._did_you_mean(message)}\n{usage}\nhint: `{self.prog} --help` lists every flag\n"
        )
        self.exit(2)

    def _did_you_mean(self, message: str) -> str:
        if (choice := _CHOICE.search(message)) is not None:
            options = re.findall(r"'([^']*)'", choice.group(2))
            return _closest(choice.group(1), options)
        if message.startswith("unrecognized arguments: "):
            flags = sorted(_option_strings(self))
            for word in message.removeprefix("unrecognized arguments: ").split():
                if not word.startswith("-"):
                    continue
                flag = word.split("=", 1)[0]
                started = [f for f in flags if f.startswith(flag)]
                if len(started) == 1:  # an abbreviation (refused: allow_abbrev=False): the flag it starts
                    return f" (did you mean {started[0]!r}?)"
                if near := _closest(flag, flags):
                    return near
        return ""


def _closest(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Every flag of the parser and of its subcommands' parsers (an unknown flag after a subcommand is reported here)."""
    flags = {s for s in parser._option_string_actions if s.startswith("--")}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags |= _option_strings(sub)
    return flags
