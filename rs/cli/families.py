"""`rs families` / `python -m rs.families`: list, validate, show and preview the families of a families file."""

from __future__ import annotations

import argparse
import dataclasses

import yaml

from rs import cli
from rs.cli import before_run, output
from rs.cli.parser import Parser
from rs.families import default_families_path, get_family, load_families, schema
from rs.families.keys import walk
from rs.families.loader import defaults_note
from rs.hub.offline import hub_needs, offline_unless_the_hub_resolves
from rs.plan.preview import preview
from rs.plan.probe import probe_family
from rs.plan.source_check import check_first_records
from rs.registry import SOURCES
from rs.util.text import counted
from rs.verifiers import get_verifier, known_verifiers


def _list(args: argparse.Namespace) -> int:
    path = args.config or default_families_path()
    families = load_families(path)
    width = max(map(len, families), default=0)
    print(f"{counted(len(families), 'family', 'families')} in {path}")
    for name, family in families.items():
        c = family.config
        label = SOURCES.get(c.source.kind).label(c.source)
        print(f"  {name:<{width}}  {c.verifier.name:<8} {c.source.kind:<9} {label}")
    return 0


LOCAL_RECORDS = 3
"""Records of a local `files` source that `validate` reads unasked (an image column holding text is found there, not by
the publish); `--source N` reads N records of any source."""


def _validate(args: argparse.Namespace) -> int:
    path = args.config or default_families_path()
    with output.own_lines_only():  # vLLM's import notices (engine_checks) are not validate's output
        families = load_families(path, engine_checks=True)
    not_checked = {name: probe_family(family) for name, family in families.items()}
    asked = getattr(args, "source", None)
    sources = [
        check_first_records(family, asked or LOCAL_RECORDS)
        for family in families.values()
        if asked or family.config.source.kind == "files"
    ]
    print(f"ok: {path}: {counted(len(families), 'family', 'families')} valid ({', '.join(families)})")
    print(
        "  checked: keys and values, local source files and the columns read from them"
        + ("" if asked else f" (the first {LOCAL_RECORDS} records of a local files source: the values they hold)")
        + ", engine arguments against the installed engine, built-in and local models"
    )
    for name, notes in not_checked.items():
        if notes:
            print(f"  not checked here: {name}: {'; '.join(notes)}")
    for line in sources:
        print(f"  {line}")
    for name, family in families.items():
        if line := defaults_note(family):
            print(f"  note: {line}")
    return 0


def _show(args: argparse.Namespace) -> int:
    family = get_family(args.name, args.config)
    resolved = {
        "name": family.name,
        "defined_at": f"{family.path}:{family.line}",
        **dataclasses.asdict(family.config),
        "cleaning": family.config.cleaning.as_yaml(),
    }
    print(yaml.safe_dump(resolved, sort_keys=False, allow_unicode=True, width=100), end="")
    return 0


def _keys(args: argparse.Namespace) -> int:
    """Every key families.yaml accepts, with its type, default and meaning."""
    for key in walk(schema.FamilyConfig, "families.NAME"):
        print(key.line())
    return 0


def _verifiers(args: argparse.Namespace) -> int:
    for name in known_verifiers():
        try:
            print(f"{name}: {get_verifier(name).description.splitlines()[0]}")
        except Exception as err:  # an optional dependency missing must not hide the others
            print(f"{name}: unavailable here ({err})")
    return 0


def _preview(args: argparse.Namespace) -> int:
    family = before_run.checked_family(args.name, args.config, loads_model=False)
    offline_unless_the_hub_resolves(hub_needs(family))
    preview(family, limit=args.limit or 3)
    return 0


def main(argv: list[str] | None = None, *, prog: str = "python -m rs.families") -> int:
    """List, validate, show and preview the families of a families file."""
    parser = Parser(prog=prog, description=__doc__)
    cli.add_config(parser)
    sub = parser.add_subparsers(dest="command")
    for name, fn, help_ in [
        ("list", _list, "list the families (the default)"),
        ("validate", _validate, "validate the families file; exit 0 when valid"),
        ("keys", _keys, "every key families.yaml accepts"),
        ("verifiers", _verifiers, "the registered verifiers"),
    ]:
        p = sub.add_parser(name, help=help_)
        cli.add_config(p, subcommand=True)
        p.set_defaults(fn=fn)
        if name == "validate":
            p.add_argument(
                "--source",
                type=cli.positive_int,
                metavar="N",
                help="also read each family's first N source records "
                "and check each column's type (an image column holds images or paths that open)",
            )
    p = sub.add_parser("show", help="print a family's resolved configuration")
    p.add_argument("name")
    cli.add_config(p, subcommand=True)
    p.set_defaults(fn=_show)
    p = sub.add_parser("preview", help="stream and clean a family; print a few rows and the cleaning counts")
    p.add_argument("name")
    cli.add_config(p, subcommand=True)
    cli.add_limit(p)
    p.set_defaults(fn=_preview)
    args = parser.parse_args(argv)
    cli.remember(args)
    return getattr(args, "fn", _list)(args)
