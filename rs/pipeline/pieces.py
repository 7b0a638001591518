"""A versioned piece of code: the version it declares beside its code, the files it covers and their digest.

Each piece that decides what a sampled answer becomes declares a ``version``, as an lm-evaluation-harness task
does, and the stage that holds the piece puts the versions in its fingerprint (`rs.pipeline.sample.stage.SAMPLE_PIECES`);
`rs.pipeline.versions` records every piece in its lock and checks that a version is bumped when its code changes.
The digest leaves comments, docstrings and formatting out (:func:`code_digest`): what the code does, not how it reads.

A plug-in verifier that declares no ``version`` is keyed by the digest of its code instead (:func:`verifier_version`).
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import logging
import marshal
import sys
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from rs.util.shipped import shipped
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
    logger.warning(
        "verifier %s.%s declares no `version`: the sample stage is keyed by its code instead, so any change "
        'of its module re-verifies every answer. Set a class attribute `version = "1"` and bump it when '
        "the verifier decides otherwise.",
        cls.__module__,
        cls.__qualname__,
    )


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


@lru_cache(maxsize=256)
def normalised(source: str) -> str:
    """The syntax tree of `source` without its docstrings (a string standing alone as a statement), dumped: what
    the code does, not how it reads. Comments, blank lines and line numbers are not in a syntax tree. Kept for the
    process by source text: every stage's fingerprint and the provenance digest the same files again."""
    tree = _parse(source)
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list):
                setattr(node, field, [s for s in body if not _bare_string(s)])
    return ast.dump(tree)


def _parse(source: str) -> ast.Module:
    """`ast.parse`, once more after CPython 3.11's spurious "AST constructor recursion depth mismatch": its AST builder
    keeps that count in state every thread shares (python/cpython#106905), so a parse in another thread at the same
    moment can fail a correct one (seen once in a publish run by the tests). Source that does not parse fails again."""
    try:
        return ast.parse(source)
    except SystemError as err:
        if "recursion depth mismatch" not in str(err):
            raise
        return ast.parse(source)


def _bare_string(statement: ast.AST) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )
