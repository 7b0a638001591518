"""The command that reproduces, resumes or goes on from this run, written to be pasted: one place renders it.

A hint that names a command (`rs families preview MyShapes`, "run `python -m rs.publish MyShapes` without
--cards-only", the card's "Reproducing this dataset", the resume line after Ctrl-C) fails when copied if it drops
what made the run find its family and its files: `--config` (a families file of one's own: "unknown family"), `--out`,
`--build-dir`, `--cache`, and the environment a wrapper set for the command alone (`make demo` runs
`VLLM_ENABLE_V1_MULTIPROCESSING=0 HF_HUB_OFFLINE=1 python -m rs.publish ...`: pasted without them, the CPU engine
starts otherwise and an offline machine tries the network). The command line records what it was given (`record`);
`command` renders a command from it, spelt as this process was started (`rs publish`, or `.venv/bin/python -m
rs.publish`). Outside a command (a library call, a test) it renders `python -m rs.NAME` with what it is told.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from rs.util.shipped import PACKAGE

ENV = (
    "RS_FAMILIES",
    "RS_BUILD_DIR",
    "RS_CACHE_DIR",
    "HF_HOME",
    "HF_HUB_OFFLINE",
    "HF_ENDPOINT",
    "VLLM_ENABLE_V1_MULTIPROCESSING",
    "VLLM_LOGGING_LEVEL",
    "VLLM_BATCH_INVARIANT",
    "VLLM_CPU_KVCACHE_SPACE",
    "CUDA_VISIBLE_DEVICES",
)
"""The environment that changes where a command reads and writes, or how its engine starts: carried by every command
rendered here when the run had it (never a token: those stay where the user keeps them)."""

PATHS = ("--config", "--build-dir", "--cache", "--out")
"""The flags that choose the files a command reads and writes, in the order a command line is written."""

MODULES = {
    "publish": "rs.publish",
    "sample": "rs.sample",
    "families": "rs.families",
    "plan": "rs.plan",
    "refilter": "rs.refilter",
    "cache": "rs.cli.cache",
}
"""`python -m` spelling of each `rs` command that has one (`rs audit` has none: it is spelt `rs audit` always)."""


@dataclass(frozen=True)
class Invocation:
    """What a command was started with: how it was spelt, the path flags it was given, the environment it had."""

    program: str | None = None
    """`rs`, or the interpreter as typed (`.venv/bin/python`) for `python -m`; None: not started as a command."""
    options: Mapping[str, str] = field(default_factory=dict)
    """The path flags given (`--config` -> the path as typed)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """The values of `ENV` the process started with."""


_current = Invocation()
_begun = False
"""Whether `begin` was called for the command that runs now (`rs.cli.run`)."""


def begin() -> None:
    """Remember how this process was started and the environment it has now, before the command changes any of it (rs
    sets `HF_HUB_OFFLINE` itself when the Hub does not resolve: a command that works only because rs set it is still the
    command that was typed). Called once a command starts (`rs.cli.run`)."""
    global _current, _begun
    _current = Invocation(program=_program(), env={name: os.environ[name] for name in ENV if name in os.environ})
    _begun = True


def record(options: Mapping[str, object]) -> None:
    """Remember the path flags a command was given (`{"--config": args.config, ...}`, None: not given); `command`
    renders from them."""
    global _current
    if not _begun:  # a command's main called on its own (a test): as it is now
        begin()
        _begun_here()
    given = {flag: str(value) for flag, value in options.items() if value is not None and flag in PATHS}
    _current = Invocation(program=_current.program, options=given, env=_current.env)


def reset() -> None:
    """Forget what `begin` and `record` remembered: not started as a command (`rs.cli.run` when a command ends)."""
    global _current, _begun
    _current = Invocation()
    _begun = False


def _begun_here() -> None:
    """`record` without `begin` (a command's main called on its own): the next `record` takes the environment anew."""
    global _begun
    _begun = False


def current() -> Invocation:
    return _current


def _program() -> str:
    """`rs` when the process is the `rs` script, else the interpreter as it was typed (`python -m rs.publish`)."""
    argv0 = Path(sys.argv[0]).name if sys.argv else ""
    if argv0 == "rs":
        return "rs"
    orig = getattr(sys, "orig_argv", None) or [sys.executable]
    return orig[0] or "python"


def command(
    name: str,
    *args: str,
    config: Path | str | None = None,
    carry: Iterable[str] = PATHS,
    extra: Iterable[str] = (),
) -> str:
    """`name` (`publish`, `families`, `plan`, ...) with `args`, the path flags in `carry` that this run was given, and
    the environment it had: the command a person pastes to go on from here.

    `config`: the families file the family was read from (`Family.path`), carried as `--config` when the run was not
    given one and it is not the file rs reads by default. `extra`: flags after the path flags (`--limit 3`).
    """
    inv = _current
    carried = [flag for flag in PATHS if flag in set(carry)]
    options = {flag: inv.options[flag] for flag in carried if flag in inv.options}
    if "--config" in carried and "--config" not in options and config is not None and not _default_config(config):
        options["--config"] = _shown(Path(config))
    words = [f"{k}={shlex.quote(v)}" for k, v in inv.env.items()]
    if inv.program == "rs" or name not in MODULES:
        words += ["rs", name]
    else:
        words += [shlex.quote(inv.program or "python"), "-m", MODULES[name]]
    words += [shlex.quote(a) for a in args]
    for flag, value in options.items():
        words += [flag, shlex.quote(value)]
    words += [shlex.quote(a) for a in extra]
    return " ".join(words)


def portable(name: str, *args: str, config: Path | str | None = None, extra: Iterable[str] = ()) -> str:
    """`python -m rs.NAME ARGS [--config FILE] EXTRA`, whatever this process was started with: the command a published
    card states. Its bytes are the same for the same family, however and wherever the run was started (a resumed run
    publishes what an uninterrupted one does, and a card never shows a folder of the machine it was built on), so it
    carries the families file by its name alone (a family of one's own is "unknown" without it) and neither the
    environment nor the local folders (`--out`, `--build-dir`), which the terminal's hints carry (`command`)."""
    words = ["python", "-m", MODULES[name], *map(shlex.quote, args)]
    if config is not None and not _default_config(config):
        words += ["--config", shlex.quote(Path(config).name)]
    return " ".join([*words, *map(shlex.quote, extra)])


def resume(argv: list[str]) -> str:
    """`argv` as typed (the whole command line, program first), preceded by the environment the process started with:
    what resumes a stopped run when pasted (after `make demo`, the variables `make` set for the command alone)."""
    env = [f"{k}={shlex.quote(v)}" for k, v in _current.env.items()]
    return " ".join([*env, shlex.join(argv)])


def _default_config(path: Path | str) -> bool:
    """Whether `path` is the families file rs reads when given none (`$RS_FAMILIES`, else the shipped one)."""
    default = os.environ.get("RS_FAMILIES") or PACKAGE / "families" / "families.yaml"
    try:
        return Path(path).resolve() == Path(default).resolve()
    except OSError:
        return False


def _shown(path: Path) -> str:
    """A path as a person pastes it from the current folder: relative when it is inside, as given otherwise."""
    if path.is_absolute():
        try:
            return str(path.relative_to(Path.cwd()))
        except ValueError:
            return str(path)
    return str(path)
