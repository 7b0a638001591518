"""The versions of the code that decides an answer's fate: what the sample stage's fingerprint is built from.

Each piece that decides what a sampled answer becomes (how its final answer is read, each verifier, the
judge and its prompt, calibration, the prompt, the stage itself) declares a ``version`` beside its code, as
an lm-evaluation-harness task does. The sample stage's fingerprint holds these versions, not the code: a
comment or a docstring edited re-verifies nothing, and a bumped version re-verifies every cached answer.

That a version is bumped when the code changes is checked, not trusted: ``rs/pipeline/versions.lock.json``
records each piece's version and a hash of its code with comments, docstrings and formatting left out
(:func:`code_digest`), and ``tests/test_versions.py`` fails, naming the version to bump, when the code
changed under the same version. ``python -m rs.pipeline.versions --write`` refreshes the lock after a bump.

A plug-in verifier declares its own ``version`` (a class attribute). One that declares none is keyed by
the digest of its code instead (:func:`verifier_version`, with a warning): any change of its module
beyond comments and docstrings re-verifies, which is safe, only slower than it need be. A verifier
derived from another is keyed by the versions of both.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import inspect
import logging
import marshal
import sys
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import rs.answers
import rs.pipeline.sample.calibration
import rs.pipeline.clean.decontam.methods
import rs.answers.extract
import rs.pipeline.sample.judge
import rs.prompt
import rs.engines.reasoning
import rs.pipeline.recover
import rs.pipeline.route
import rs.pipeline.sample
import rs.verifiers.base
from rs.registry import VERIFIERS
from rs.util.shipped import CHECKOUT, shipped
from rs.verifiers.base import Verifier

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Piece:
    """One versioned piece: what declares its version (a module's `VERSION`, a verifier class's `version`) and the
    code it covers."""

    name: str
    owner: Any
    """The module or class whose attribute is the version."""
    attribute: str
    code: tuple[str, ...]
    """The files it covers, relative to the `rs` package or the folders shipped with it (`rs.util.shipped`; a folder, ending
    in `/`: its every .py file)."""

    @property
    def declared_at(self) -> str:
        """`rs.answers:VERSION`, `rs.verifiers.exact:ExactVerifier.version`: what to bump when the code changes."""
        if isinstance(self.owner, type):
            return f"{self.owner.__module__}:{self.owner.__qualname__}.{self.attribute}"
        return f"{self.owner.__name__}:{self.attribute}"

    @property
    def version(self) -> str:
        value = getattr(self.owner, self.attribute)
        if not isinstance(value, str) or not value:
            raise TypeError(f"{self.declared_at} must be a non-empty string, got {value!r}")
        return value

    def files(self) -> list[Path]:
        """The files of :attr:`code`, in a fixed order."""
        return files_of(self.code)

    def digest(self) -> str:
        """The hash of its code, comments, docstrings and formatting left out (see :func:`code_digest`)."""
        return code_digest(self.files())


SAMPLE_PIECES = (
    Piece("answers", rs.answers, "VERSION", ("answers/",)),
    Piece("extract", rs.answers.extract, "VERSION", ("answers/extract.py",)),
    Piece("reasoning", rs.engines.reasoning, "VERSION", ("engines/reasoning.py",)),
    Piece("prompt", rs.prompt, "VERSION", ("prompt.py", "pipeline/sample/requests.py")),
    Piece("verifiers", rs.verifiers.base, "VERSION", ("verifiers/__init__.py", "verifiers/base.py")),
    Piece("judge", rs.pipeline.sample.judge, "VERSION", ("pipeline/sample/judge.py", "templates/judge_prompt.jinja")),
    Piece("calibration", rs.pipeline.sample.calibration, "VERSION", ("pipeline/sample/calibration.py",)),
    Piece("sample", rs.pipeline.sample, "VERSION", ("pipeline/sample/__init__.py",)),
)
"""What the sample stage's fingerprint holds the versions of, besides the family's verifier's."""
ROUTE = Piece("route", rs.pipeline.route, "VERSION", ("pipeline/route.py",))
RECOVERY = Piece("recovery", rs.pipeline.recover, "VERSION", ("pipeline/recover.py", "records.py", "engines/ordered.py"))
DECONTAMINATION = Piece("decontamination", rs.pipeline.clean.decontam.methods, "VERSION", ("pipeline/clean/decontam/", "sources/synthetic/evaluation.py"))
"""What cleaning matches against the evaluation sets (in the clean stage's fingerprint, `rs.pipeline.stage`)."""
"""The recovery pass: which items it samples (with routing's version) and what it records of each sample."""
"""Routing decides which split an answered item goes to: the splits' fingerprint holds its version."""
SPLITS_CODE = ("pipeline/build.py", "pipeline/write/", "builders/", "splits_schema.py", "store.py", "records.py")
"""The code that writes the splits' rows from the stores (besides routing): the datasets builder, the splits'
features, the stores' readers, the shards' naming. Their bytes depend on nothing else of `rs`."""


def builtin_verifier_pieces() -> list[Piece]:
    """One piece for each verifier of `rs.verifiers`: its class's ``version``, the code of its module."""
    pieces = []
    for name, cls in VERIFIERS.items():
        if cls.__module__.startswith("rs.verifiers."):
            pieces.append(Piece(f"verifier/{name}", cls, "version", (f"verifiers/{cls.__module__.rsplit('.', 1)[1]}.py",)))
    return pieces


def all_pieces() -> list[Piece]:
    """Every versioned piece the lock file holds."""
    return [*SAMPLE_PIECES, ROUTE, RECOVERY, DECONTAMINATION, *builtin_verifier_pieces()]


def sample_versions(verifier: object) -> dict[str, str]:
    """The versions the sample stage's fingerprint is built from, with `verifier`'s (:func:`verifier_version`)."""
    return {**{piece.name: piece.version for piece in SAMPLE_PIECES}, "verifier": verifier_version(verifier)}


def verifier_version(verifier: object) -> str:
    """The version of a verifier's class and of each verifier class it derives from (rs's shared rules aside: the
    `verifiers` piece): each one's own ``version``, else the digest of its code.

    A version inherited from another class does not count: a plug-in subclassing ``exact`` with a rule of its
    own has its own code, which ``exact``'s version does not vouch for; ``exact``'s bump re-verifies it too.
    """
    parts = []
    for cls in type(verifier).__mro__:
        if cls is Verifier or not (isinstance(cls, type) and issubclass(cls, Verifier)):
            continue
        declared = vars(cls).get("version")
        if isinstance(declared, str) and declared:
            parts.append(f"{cls.__module__}.{cls.__qualname__} {declared}")
        else:
            _warn_unversioned(cls)
            parts.append(f"{cls.__module__}.{cls.__qualname__} code {_class_code_digest(cls)}")
    return "; ".join(parts)


@lru_cache(maxsize=None)
def _warn_unversioned(cls: type) -> None:
    logger.warning("verifier %s.%s declares no `version`: the sample stage is keyed by its code instead, so any change "
                   "of its module re-verifies every answer. Set a class attribute `version = \"1\"` and bump it when "
                   "the verifier decides otherwise.", cls.__module__, cls.__qualname__)


def _class_code_digest(cls: type) -> str:
    """Its module's code (a plug-in's file), else the class's own source (typed in a notebook), else its bytecode."""
    path = getattr(sys.modules.get(cls.__module__), "__file__", None)
    if path and Path(path).is_file():
        return code_digest([Path(path)])
    try:
        return hashlib.sha256(normalised(textwrap.dedent(inspect.getsource(cls))).encode()).hexdigest()
    except (OSError, TypeError):
        methods = sorted((k, marshal.dumps(v.__code__)) for k, v in vars(cls).items() if hasattr(v, "__code__"))
        return hashlib.sha256(repr(methods).encode()).hexdigest()


@lru_cache(maxsize=1)
def splits_code_digest() -> str:
    """The digest of :data:`SPLITS_CODE`, comments and docstrings left out."""
    return code_digest(files_of(SPLITS_CODE))


def files_of(code: tuple[str, ...]) -> list[Path]:
    """The files named by `code` (paths relative to the package or its shipped folders; a folder: its .py files)."""
    found: list[Path] = []
    for name in code:
        found += sorted(shipped(name).rglob("*.py")) if name.endswith("/") else [shipped(name)]
    return found


def code_digest(files: list[Path]) -> str:
    """sha256 of `files`: Python as its syntax tree without docstrings (comments and formatting never count),
    anything else (a Jinja prompt) as its bytes."""
    digest = hashlib.sha256()
    for path in files:
        text = normalised(path.read_text()) if path.suffix == ".py" else path.read_text()
        digest.update(f"{path.name}\0{text}\0".encode())
    return digest.hexdigest()


def normalised(source: str) -> str:
    """The syntax tree of `source` without its docstrings (a string standing alone as a statement), dumped: what
    the code does, not how it reads. Comments, blank lines and line numbers are not in a syntax tree."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list):
                setattr(node, field, [s for s in body if not _bare_string(s)])
    return ast.dump(tree)


def _bare_string(statement: ast.AST) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, str)


LOCK = Path(__file__).with_name("versions.lock.json")
"""Each piece's version, code digest and identity as last recorded (shipped in the package: the published digest,
:func:`identities`, reads it; `tests/test_versions.py` holds the code to it)."""


def current() -> dict[str, dict[str, str]]:
    """Each piece as its code stands: its version, where it is declared, and its code digest."""
    return {p.name: {"version": p.version, "declared_at": p.declared_at, "code": p.digest()} for p in all_pieces()}


def recorded(locked: dict[str, dict[str, str]], now: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """What the lock holds after `now` is recorded: each piece with its `identity`, the code digest its version was
    first recorded with. A refactor recorded under the same version (`--unchanged`) keeps the identity; a bumped
    version (or a new piece) starts a new one."""
    out = {}
    for name, entry in now.items():
        before = locked.get(name)
        same_version = before is not None and before["version"] == entry["version"]
        out[name] = {**entry, "identity": before.get("identity", before["code"]) if same_version else entry["code"]}
    return out


def identities() -> dict[str, dict[str, str]]:
    """Each piece's version and identity, what the published digest is made of: the identity the lock records when
    the code is the code it recorded; the code's own digest when it is not (an edit nobody recorded is not hidden)."""
    try:
        locked = json.loads(LOCK.read_text())
    except (OSError, json.JSONDecodeError):
        locked = {}
    table = {}
    for name, entry in current().items():
        lock = locked.get(name) or {}
        same = lock.get("version") == entry["version"] and lock.get("code") == entry["code"]
        table[name] = {"version": entry["version"], "code": lock.get("identity", entry["code"]) if same else entry["code"]}
    return table


def unbumped(locked: dict[str, dict[str, str]], now: dict[str, dict[str, str]]) -> list[str]:
    """The pieces whose code changed since the lock under the same version: each says what to bump."""
    return [f"{name}: its code ({', '.join(_code_of(name))}) changed since rs/pipeline/versions.lock.json, but its version "
            f"did not: bump {entry['declared_at']} (now {entry['version']!r})"
            for name, entry in now.items()
            if name in locked and locked[name]["version"] == entry["version"] and locked[name]["code"] != entry["code"]]


def _code_of(name: str) -> list[str]:
    """The files or folders of piece `name`, as a checkout names them."""
    piece = next(p for p in all_pieces() if p.name == name)
    return [_shown(shipped(c)) + ("/" if c.endswith("/") else "") for c in piece.code]


def _shown(path: Path) -> str:
    return str(path.relative_to(CHECKOUT)) if path.is_relative_to(CHECKOUT) else str(path)


def main(argv: list[str] | None = None) -> int:
    """`python -m rs.pipeline.versions`: list the pieces; `--write` records them in the lock file after a version bump."""
    parser = argparse.ArgumentParser(prog="python -m rs.pipeline.versions", description=main.__doc__)
    parser.add_argument("--write", action="store_true", help=f"record the pieces in {LOCK}")
    parser.add_argument("--unchanged", action="append", default=[], metavar="PIECE",
                        help="record PIECE's new code under its old version: the change decides nothing otherwise (a refactor)")
    args = parser.parse_args(argv)
    now = current()
    for name, entry in now.items():
        print(f"{name:20} {entry['version']:>4}  {entry['code'][:16]}  {entry['declared_at']}")
    if not args.write:
        return 0
    locked = json.loads(LOCK.read_text()) if LOCK.exists() else {}
    problems = [p for p in unbumped(locked, now) if p.split(":", 1)[0] not in args.unchanged]
    if problems:
        print("error: " + "\nerror: ".join(problems), file=sys.stderr)
        print("hint: bump each version named, or pass --unchanged PIECE when the change decides nothing otherwise", file=sys.stderr)
        return 2
    LOCK.write_text(json.dumps(recorded(locked, now), indent=2, sort_keys=True) + "\n")
    print(f"wrote {LOCK}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
