"""A source kind, an engine kind, a cleaning step and a verifier added from outside the package, as a user adds them: a
distribution whose entry points name its module (`tests/plugins/rs_parrots.py`), and a families.yaml that
uses them. Nothing in `rs` is edited; the family validates with file:line errors, lists its keys, and
publishes its three repos and cards. Each check runs in a fresh process, as a user's command does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import PLUGINS

from rs.registry import Registry

ENTRY_POINTS = """[rs.sources]
inline = rs_parrots

[rs.engines]
parrot = rs_parrots

[rs.cleaning]
short_questions = rs_parrots

[rs.verifiers]
first_word = rs_parrots
"""


FAMILIES = """
families:
  Parrots:
    source:
      kind: inline
      questions: {"What colour is it?": red, "Is it red?": "yes", "What shape is it?": square,
                  "Which colour does this square have?": red}
    instruction: " One word."
    verifier: {name: first_word}
    model: {id: parrot/v1}
    engine: {kind: parrot, says: "Red, the one in front.", batch_size: 2}
    judge: {enabled: false}
    cleaning: {short_questions: {enabled: true, max_words: 4}}
    shard: {max_bytes: 1MB, row_group_bytes: 256KB}
    card: {pretty_name: Parrots, description: Plug-ins only., license: mit, citation: ""}
"""


@pytest.fixture
def installed(tmp_path: Path) -> dict[str, str]:
    """The environment of a process in which the `rs-parrots` distribution is installed."""
    site = tmp_path / "site"
    info = site / "rs_parrots-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rs-parrots\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    path = os.pathsep.join([str(site), str(PLUGINS), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}


def _run(env: dict[str, str], *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert (done.returncode == 0) is ok, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def test_entry_points_register_plugins_beside_the_built_in_ones(installed: dict[str, str]) -> None:
    code = (
        "from rs.registry import CLEANING, ENGINES, SOURCES, VERIFIERS; from rs.verifiers import get_verifier; "
        "print(SOURCES.names(), ENGINES.names(), CLEANING.names(), VERIFIERS.names(), get_verifier('first_word').match('Red, I think.', 'red'))"
    )
    assert _run(installed, "-c", code).stdout.split("] ") == [
        "['files', 'hub', 'inline', 'synthetic', 'synthetic_eval'",
        "['openai', 'parrot', 'replay', 'vllm'",
        "['multiple_choice', 'provenance', 'purity', 'reference_form', 'short_questions'",
        "['alnum', 'anls', 'count', 'exact', 'first_word', 'math', 'mcq', 'relaxed', 'vqa'",
        "True\n",
    ]


def test_a_name_is_registered_once() -> None:
    things: Registry[type] = Registry("thing", package="rs.sources", group="rs.things")
    things.register("a")(int)
    things.register("a")(int)  # the same entry again (a module imported twice) is harmless
    with pytest.raises(TypeError, match="thing 'a' is already registered by builtins.int"):
        things.register("a")(str)


@pytest.mark.slow
def test_a_family_of_plugins_validates_with_file_and_line(installed: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "families.yaml"
    path.write_text(FAMILIES.replace('says: "Red, the one in front.", ', ""))
    failed = _run(installed, "-m", "rs.families", "--config", str(path), "validate", ok=False)
    assert "families.yaml:11: families.Parrots.engine.says: required key is missing" in failed.stderr
    path.write_text(FAMILIES.replace("questions:", "question:"))
    failed = _run(installed, "-m", "rs.families", "--config", str(path), "validate", ok=False)
    assert (
        "families.yaml:6: families.Parrots.source.question: unknown key (did you mean 'questions'?)" in failed.stderr
    )
    path.write_text(
        FAMILIES.replace("{short_questions: {enabled: true, max_words: 4}}", "{short_question: {enabled: true}}")
    )
    failed = _run(installed, "-m", "rs.families", "--config", str(path), "validate", ok=False)
    assert (
        "families.yaml:13: families.Parrots.cleaning.short_question: unknown cleaning step (did you mean 'short_questions'?); "
        "valid keys: multiple_choice, provenance, purity, reference_form, short_questions, dedup"
    ) in failed.stderr


@pytest.mark.slow
def test_a_family_of_plugins_publishes(installed: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "families.yaml"
    path.write_text(FAMILIES)
    keys = _run(installed, "-m", "rs.families", "--config", str(path), "keys").stdout
    assert "families.NAME.source.questions: dict, required  # Question -> answer." in keys
    assert "families.NAME.engine.says: str, required" in keys
    assert "families.NAME.cleaning.short_questions.max_words: int, default 8" in keys
    assert (
        "first_word inline    4 inline questions"
        in _run(installed, "-m", "rs.families", "--config", str(path), "list").stdout
    )

    out = tmp_path / "out"
    _run(
        installed,
        "-m",
        "rs.publish",
        "Parrots",
        "--config",
        str(path),
        "--out",
        str(out),
        "--build-dir",
        str(tmp_path / "build"),
        "--cache",
        str(tmp_path / "cache.sqlite"),
    )
    stats = json.loads((out / "rs-datasets" / "Parrots_rejected" / "rs" / "stats.json").read_text())
    assert stats["engine"] == {"kind": "parrot"} and stats["verifier"]["name"] == "first_word"
    # the plugin's metric matches the first word, but a match is accepted without the judge only as the same answer
    # (`rs.answers.grade`): "Red, the one in front." says more than "red", so every answer goes to the judge (off here)
    assert stats["totals"]["accepted"] == 0 and stats["totals"]["rejected"] == 3
    assert stats["verifier"]["outcomes"] == {"accepted": 0, "certain": 0, "undecided": 3}
    assert stats["cleaning"]["dropped"] == {"long_question": 1}
    card = (out / "rs-datasets" / "Parrots_RS_think" / "README.md").read_text()
    assert "first-word match" in card and "served by the `parrot` engine" in card
    assert "Short questions" in card and "Questions of more words than the family allows are dropped." in card
