"""The commands' argument parser: an argument error first, with a did-you-mean, then one usage line (not the whole block).

argparse (before Python 3.14) prints the usage block and then `error: ...`, and suggests nothing for
a misspelt flag or subcommand (`--lmit`, `valdate`).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import NoReturn

__all__ = ["Parser"]

_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


class Parser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` whose errors say `error: ...` first, with the closest flag or choice when one is near."""

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
                if word.startswith("-") and (near := _closest(word.split("=", 1)[0], flags)):
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
