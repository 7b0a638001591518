"""The documentation's reference pages, rendered from the code: nothing on them is typed by hand.

    families.md   every key of families.yaml: type, default, docstring (`rs.families.keys`, from the schema)
    verifiers.md  every registered verifier: parameters, and how it decides, in the words its cards use
    reasons.md    why a question is rejected (`rs.splits.REJECT_REASONS`), why cleaning drops an item (each step's
                  declared reasons) and each cleaning step's card text
    commands.md   every command and subcommand's `--help`, from its own parser

`docs/hooks.py` hands them to mkdocs at build time (`make docs`); a change to a key, a verifier, a reason or a flag
changes the page, and nothing else does.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from typing import Callable, Iterable

from rs.cli.main import COMMANDS
from rs.families import schema
from rs.families.keys import Key, walk
from rs.pipeline.clean import step_cards, step_reasons
from rs.registry import VERIFIERS
from rs.splits import REJECT_REASONS
from rs.util.long_lived import import_for_good
from rs.verifiers import get_verifier, known_verifiers

REFERENCE = "reference"
"""The pages' folder in the site."""


def pages() -> dict[str, str]:
    """Each reference page's path in the site and its Markdown."""
    return {
        f"{REFERENCE}/families.md": families_page(),
        f"{REFERENCE}/verifiers.md": verifiers_page(),
        f"{REFERENCE}/reasons.md": reasons_page(),
        f"{REFERENCE}/commands.md": commands_page(),
    }


def cell(text: object) -> str:
    """Text made safe for a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(header: Iterable[str], rows: Iterable[Iterable[object]]) -> str:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def families_page() -> str:

    def rows(keys: Iterable[Key]) -> list[tuple[str, ...]]:
        return [
            (f"**`{k.path}`**", f"section: {k.section}", "", k.doc or "")
            if k.section is not None
            else (
                f"`{k.path}`",
                _either(k.type or ""),
                _default(k.default or ""),
                k.doc or "",
            )
            for k in keys
        ]

    header = ("key", "type", "default", "meaning")
    return "\n\n".join(
        [
            "# families.yaml keys",
            "Generated from the schema's dataclasses (`rs.families.schema`) and their docstrings; "
            "`rs families keys` prints the same list. A file has three top-level blocks: `families:` (each family "
            "under its name), `defaults:` (keys every family of the file starts from: the same keys as a family's) and "
            "`evaluation:` (the evaluation sets decontamination checks against). A section whose `kind` names a "
            "plug-in (a source, an engine) lists each kind's settings in turn.",
            "## `families.NAME`",
            table(header, rows(walk(schema.FamilyConfig, "families.NAME"))),
            "## `evaluation.NAME`",
            table(header, rows(walk(schema.EvaluationSetConfig, "evaluation.NAME"))),
        ]
    )


def _either(type_name: str) -> str:
    """`'flat' | 'conversational'` as `'flat'` or `'conversational'`: a table cell holds no pipe."""
    return " or ".join(f"`{option}`" for option in type_name.split(" | "))


def _default(default: str) -> str:
    return "required" if default == "required" else f"`{default.removeprefix('default ')}`"


def verifiers_page() -> str:

    parts = [
        "# Verifiers",
        "Generated from the verifier registry (`rs.registry.VERIFIERS`): a family names one under `verifier.name`, "
        "with the parameters below. *How it decides* is the text the dataset cards print, with the default "
        "parameters.",
    ]
    for name in known_verifiers():
        cls = _verifier_class(name)
        parts.append(f"## `{name}`: {cls.title}" if cls is not None else f"## `{name}`")
        specs = cls.PARAMS if cls is not None else {}
        if specs:
            parts.append(
                table(
                    ("parameter", "type", "default", "meaning"),
                    ((f"`{p}`", f"`{s.type.__name__}`", f"`{s.default!r}`", s.doc) for p, s in specs.items()),
                )
            )
        else:
            parts.append("No parameters.")
        if cls is not None:
            parts.append(f"Version {cls.version}.")
        try:
            parts.append("**How it decides.** " + get_verifier(name).description)
        except Exception as err:  # an optional dependency missing here: say so, the page still builds
            parts.append(f"**How it decides.** Not available where these pages were built: {err}")
    return "\n\n".join(parts)


def _verifier_class(name: str) -> type | None:

    try:
        return VERIFIERS.get(name)
    except Exception:
        return None


def reasons_page() -> str:

    steps = step_cards()
    return "\n\n".join(
        [
            "# Reasons",
            "## Why a question is in the rejected split",
            "The `reason` column of `FAMILY_rejected` (`rs.splits.REJECT_REASONS`); the rejected card lists them with "
            "these words and the family's counts.",
            table(("reason", "meaning"), ((f"`{r}`", meaning) for r, meaning in REJECT_REASONS.items())),
            "## Why a source item is dropped in cleaning",
            "The `reason` of each line of a build's `exclusions.jsonl`, by the step that drops it "
            "(`rs.pipeline.clean.step_reasons`: a step that drops an item for a reason it does not declare stops the "
            "run). The cards count them per step.",
            table(
                ("reason", "step", "meaning"),
                (
                    (f"`{r}`", f"`{step}`", meaning)
                    for step, reasons in step_reasons().items()
                    for r, meaning in reasons.items()
                ),
            ),
            "## Cleaning steps",
            "What each cleaning step does, as the cards say it (`rs.pipeline.clean.step_cards`), in pipeline order. "
            "Every dropped item is written to the build's `exclusions.jsonl` with its step and reason.",
            table(("step", "title", "what it does"), ((f"`{n}`", c.title, c.text) for n, c in steps.items())),
        ]
    )


def commands_page() -> str:

    parts = [
        "# Commands",
        "Every command's `--help`, as its own parser prints it (`rs COMMAND --help`; `python -m rs.COMMAND` takes "
        "the same flags).",
    ]
    for name, (module, summary) in COMMANDS.items():
        main = import_for_good(module).main
        said = help_text(main, [], prog=f"rs {name}")
        parts += [f"## `rs {name}`", summary[0].upper() + summary[1:] + ".", _block(said)]
        for sub in subcommands(said):
            parts += [f"### `rs {name} {sub}`", _block(help_text(main, [sub], prog=f"rs {name}"))]
    return "\n\n".join(parts)


def help_text(main: Callable[..., int], argv: list[str], *, prog: str) -> str:
    """What `main(argv + ['--help'])` prints, wrapped at 100 columns whatever the terminal."""
    out = io.StringIO()
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main([*argv, "--help"], prog=prog)
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before
    return out.getvalue().rstrip()


def subcommands(help_said: str) -> list[str]:
    """The subcommands a parser's usage line offers (`{list,validate,...}`)."""
    usage = help_said.split("\n\n", 1)[0]
    found = re.search(r"\{([\w,-]+)\}", usage)
    return found.group(1).split(",") if found else []


def _block(text: str) -> str:
    return f"```text\n{text}\n```"
