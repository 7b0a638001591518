"""The versions that key the sample stage are held to the code: a change of what decides an answer's fate without
its version bumped fails here, naming the version to bump (`rs.pipeline.versions`, `rs/pipeline/versions.lock.json`)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

import rs.pipeline.versions
from rs.pipeline.pieces import normalised
from rs.pipeline.versions import (
    ADJUDICATION,
    LOCK,
    RECOVERY,
    ROUTE,
    all_pieces,
    current,
    identities,
    main,
    recorded,
    unbumped,
)
from rs.pipeline.write.provenance import versions_digest
from rs.registry import VERIFIERS
from rs.verifiers.exact import ExactVerifier

REFRESH = "then run `.venv/bin/python -m rs.pipeline.versions --write` to record the new versions in rs/pipeline/versions.lock.json"


def test_every_piece_that_decides_an_answer_has_the_version_its_code_was_locked_under() -> None:
    locked, now = json.loads(LOCK.read_text()), current()
    problems = unbumped(locked, now)
    assert not problems, "\n".join(problems) + f"\n{REFRESH}"
    recorded = {name: {k: v for k, v in entry.items() if k != "identity"} for name, entry in locked.items()}
    stale = sorted(name for name in recorded.keys() | now.keys() if recorded.get(name) != now.get(name))
    assert not stale, (
        f"the lock file is not current for {', '.join(stale)} (a version bumped or a piece added): {REFRESH}"
    )


def test_every_built_in_verifier_declares_its_own_version() -> None:
    for name, cls in VERIFIERS.items():
        if cls.__module__.startswith("rs.verifiers."):
            assert isinstance(vars(cls).get("version"), str), (
                f"{cls.__qualname__} ({name}) sets no class attribute `version`"
            )
    assert {p.name for p in all_pieces()} >= {
        f"verifier/{name}" for name, cls in VERIFIERS.items() if cls.__module__.startswith("rs.verifiers.")
    }


def test_the_recovery_fingerprint_holds_the_versions_of_the_pieces_the_lock_records() -> None:
    """The recover stage names its pieces' versions itself (`rs.pipeline.versions` imports it): as the lock names them."""
    from types import SimpleNamespace

    from rs.pipeline.recover import recovery_inputs

    ctx = SimpleNamespace(family=SimpleNamespace(config=SimpleNamespace(recovery=None)))
    inputs = recovery_inputs(ctx, SimpleNamespace(fingerprint="sampled", promotes=False))  # type: ignore[arg-type]
    assert inputs["versions"] == {piece.name: piece.version for piece in (RECOVERY, ROUTE, ADJUDICATION)}


def test_comments_docstrings_and_formatting_do_not_count_a_rule_does() -> None:
    source = inspect.getsource(inspect.getmodule(ExactVerifier))
    reworded = source.replace('    """Equality after', '    # a comment\n    """Once more: equality after').replace(
        "norm = exact_normalise(value)", "norm = exact_normalise(  value )  # formatting"
    )
    assert reworded != source and normalised(reworded) == normalised(source)
    hardened = source.replace("return any(norm == ref", "return len(norm) < 40 and any(norm == ref")
    assert normalised(hardened) != normalised(source)


def test_a_changed_verifier_under_the_same_version_is_named_with_what_to_bump(tmp_path: Path, monkeypatch) -> None:
    now = current()
    locked = {name: dict(entry) for name, entry in now.items()}
    locked["verifier/exact"]["code"] = "the code before the change"
    problems = unbumped(locked, now)
    assert len(problems) == 1
    assert (
        "rs/verifiers/exact.py" in problems[0]
        and f"bump rs.verifiers.exact:ExactVerifier.version (now '{ExactVerifier.version}')" in problems[0]
    )

    lock = tmp_path / "versions.lock.json"
    lock.write_text(json.dumps(locked))
    monkeypatch.setattr(rs.pipeline.versions, "LOCK", lock)
    assert main(["--write"]) == 2  # the lock is not refreshed over an unbumped change
    assert json.loads(lock.read_text()) == locked
    assert main(["--write", "--unchanged", "verifier/exact"]) == 0  # a refactor, said so
    written = json.loads(lock.read_text())
    assert {name: {k: v for k, v in e.items() if k != "identity"} for name, e in written.items()} == now
    assert written["verifier/exact"]["identity"] == "the code before the change"  # a refactor keeps the identity

    bumped = str(int(ExactVerifier.version) + 1)
    monkeypatch.setattr(ExactVerifier, "version", bumped)  # bumped: the lock is refreshed, no complaint
    assert not unbumped(now, current())
    assert current()["verifier/exact"]["version"] == bumped


@pytest.mark.parametrize("piece", ["answers", "judge", "sample"])
def test_each_piece_covers_existing_code(piece: str) -> None:
    (found,) = [p for p in all_pieces() if p.name == piece]
    assert found.files() and all(path.is_file() for path in found.files())
    assert found.version


@pytest.mark.slow
def test_the_published_digest_names_the_decisions_a_recorded_refactor_keeps_it_an_unrecorded_edit_changes_it(
    tmp_path: Path, monkeypatch
) -> None:
    now = current()
    before = {name: {**entry, "code": f"old {name}"} for name, entry in now.items()}
    refactored = recorded(before, now)  # every piece's code moved, recorded as deciding nothing otherwise
    lock = tmp_path / "versions.lock.json"
    lock.write_text(json.dumps(refactored))
    monkeypatch.setattr(rs.pipeline.versions, "LOCK", lock)
    assert identities() == {name: {"version": e["version"], "code": f"old {name}"} for name, e in now.items()}
    digest = versions_digest()

    edited = dict(refactored, judge={**refactored["judge"], "code": "not the code of today"})
    lock.write_text(json.dumps(edited))  # the judge's code is not what the lock recorded: its own digest counts
    assert identities()["judge"]["code"] == now["judge"]["code"] and versions_digest() != digest

    bumped = recorded(before, {**now, "judge": {**now["judge"], "version": "99"}})
    assert bumped["judge"]["identity"] == now["judge"]["code"]  # a new version starts a new identity
