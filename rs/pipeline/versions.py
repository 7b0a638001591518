"""The versions of the code that decides an answer's fate, recorded: what the stages' fingerprints are built from.

Each piece that decides what a sampled answer becomes (how its final answer is read, each verifier, the
judge and its prompt, calibration, the prompt, the stage itself) declares a ``version`` beside its code, as
an lm-evaluation-harness task does (`rs.pipeline.pieces`). The sample stage's fingerprint holds these versions, not
the code (`rs.pipeline.sample.stage.SAMPLE_PIECES`): a comment or a docstring edited re-verifies nothing, and a bumped
version re-verifies every cached answer.

That a version is bumped when the code changes is checked, not trusted: ``rs/pipeline/versions.lock.json``
records each piece's version and a hash of its code with comments, docstrings and formatting left out
(`rs.pipeline.pieces.code_digest`), and ``tests/pipeline/test_versions.py`` fails, naming the version to bump, when the code
changed under the same version. ``python -m rs.pipeline.versions --write`` refreshes the lock after a bump.

A plug-in verifier declares its own ``version`` (a class attribute). One that declares none is keyed by
the digest of its code instead (`rs.pipeline.pieces.verifier_version`, with a warning): any change of its module
beyond comments and docstrings re-verifies, which is safe, only slower than it need be. A verifier
derived from another is keyed by the versions of both.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import lru_cache
from pathlib import Path

import rs.pipeline.clean.decontam.methods
import rs.pipeline.recover
import rs.pipeline.route
import rs.pipeline.sample.adjudicate
import rs.pipeline.sample.blind
from rs.pipeline.pieces import Piece, code_digest, files_of
from rs.pipeline.sample.stage import SAMPLE_PIECES
from rs.registry import VERIFIERS
from rs.util.shipped import CHECKOUT, shipped

ROUTE = Piece("route", rs.pipeline.route, "VERSION", ("pipeline/route.py",))
"""Routing decides which split an answered item goes to: the splits' fingerprint holds its version."""
RECOVERY = Piece(
    "recovery", rs.pipeline.recover, "VERSION", ("pipeline/recover.py", "records.py", "engines/ordered.py")
)
"""The recovery pass: which items it samples (with routing's version) and what it records of each sample."""
ADJUDICATION = Piece(
    "adjudicate",
    rs.pipeline.sample.adjudicate,
    "VERSION",
    ("pipeline/sample/adjudicate.py", "templates/adjudicate_prompt.jinja"),
)
"""The suspect references: which rejections are candidates, what the adjudicator is asked, how it is measured (in the
recovery pass's fingerprint)."""
BLIND = Piece("blind", rs.pipeline.sample.blind, "VERSION", ("pipeline/sample/blind.py",))
"""The no-image pass: what it asks and how it marks a question (in the sample stage's fingerprint where `blind:` is on)."""
DECONTAMINATION = Piece(
    "decontamination",
    rs.pipeline.clean.decontam.methods,
    "VERSION",
    ("pipeline/clean/decontam/", "sources/synthetic/evaluation.py"),
)
"""What cleaning matches against the evaluation sets (in the clean stage's fingerprint, `rs.pipeline.clean.stage`)."""
SPLITS_CODE = ("pipeline/write/", "builders/", "splits.py", "splits_schema.py", "store.py", "records.py")
"""The code that writes the splits' rows from the stores (besides routing): the datasets builder, the splits'
features, the stores' readers, the shards' naming. Their bytes depend on nothing else of `rs`."""


def builtin_verifier_pieces() -> list[Piece]:
    """One piece for each verifier of `rs.verifiers`: its class's ``version``, the code of its module."""
    pieces = []
    for name, cls in VERIFIERS.items():
        if cls.__module__.startswith("rs.verifiers."):
            pieces.append(
                Piece(f"verifier/{name}", cls, "version", (f"verifiers/{cls.__module__.rsplit('.', 1)[1]}.py",))
            )
    return pieces


def all_pieces() -> list[Piece]:
    """Every versioned piece the lock file holds."""
    return [*SAMPLE_PIECES, ROUTE, RECOVERY, ADJUDICATION, BLIND, DECONTAMINATION, *builtin_verifier_pieces()]


@lru_cache(maxsize=1)
def splits_code_digest() -> str:
    """The digest of :data:`SPLITS_CODE`, comments and docstrings left out."""
    return code_digest(files_of(SPLITS_CODE))


LOCK = Path(__file__).with_name("versions.lock.json")
"""Each piece's version, code digest and identity as last recorded (shipped in the package: the published digest,
:func:`identities`, reads it; `tests/pipeline/test_versions.py` holds the code to it)."""


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
        table[name] = {
            "version": entry["version"],
            "code": lock.get("identity", entry["code"]) if same else entry["code"],
        }
    return table


def unbumped(locked: dict[str, dict[str, str]], now: dict[str, dict[str, str]]) -> list[str]:
    """The pieces whose code changed since the lock under the same version: each says what to bump."""
    return [
        f"{name}: its code ({', '.join(_code_of(name))}) changed since rs/pipeline/versions.lock.json, but its version "
        f"did not: bump {entry['declared_at']} (now {entry['version']!r})"
        for name, entry in now.items()
        if name in locked and locked[name]["version"] == entry["version"] and locked[name]["code"] != entry["code"]
    ]


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
    parser.add_argument(
        "--unchanged",
        action="append",
        default=[],
        metavar="PIECE",
        help="record PIECE's new code under its old version: the change decides nothing otherwise (a refactor)",
    )
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
        print(
            "hint: bump each version named, or pass --unchanged PIECE when the change decides nothing otherwise",
            file=sys.stderr,
        )
        return 2
    LOCK.write_text(json.dumps(recorded(locked, now), indent=2, sort_keys=True) + "\n")
    print(f"wrote {LOCK}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
