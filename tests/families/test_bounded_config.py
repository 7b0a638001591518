"""A families file is input like any other: names that become paths are checked as what they become, YAML aliases
are expanded within a bound, text fields have lengths a run can take. Each refusal names file, line and key."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from checkout import ROOT
from test_families import MINIMAL, write, write_source

from rs.errors import UsageError
from rs.families import FamilyConfigError, default_families_path, load_families
from rs.families.bounds import MAX_EXPANDED_NODES, MAX_FILE_BYTES, expanded_size
from rs.families.schema import MAX_INSTRUCTION_CHARS
from rs.hub.names import PathEscapeError, confined
from rs.pipeline.publish.targets import target_for

ESCAPES = ["../../escape", "..", "/tmp/rs-anywhere", "my space", "a/b", ".hidden", "-dash"]
"""Namespaces that are no Hub user or organisation, four of which would lead a local publish out of `--out`."""


def _console(*argv: str, cwd: Path, build: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from rs.cli.main import console; console()", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RS_BUILD_DIR": str(build)},
    )


def _tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.parametrize("namespace", ESCAPES)
def test_a_namespace_that_is_no_hub_name_is_refused_at_its_key(tmp_path: Path, namespace: str) -> None:
    path = write(tmp_path, MINIMAL + f"    publish: {{namespace: {namespace!r}, target: local}}\n")
    with pytest.raises(FamilyConfigError) as err:
        load_families(path)
    assert f"{path}:15: families.MyVQA.publish.namespace: {namespace!r} is not a Hub user or organisation name" in str(
        err.value
    )


def test_a_namespace_under_defaults_is_refused_at_its_line_there(tmp_path: Path) -> None:
    text = MINIMAL.replace("  model: {id: some/model}\n", "  model: {id: some/model}\n  publish: {namespace: ..}\n")
    path = write(tmp_path, text)
    with pytest.raises(FamilyConfigError, match=rf"{path}:3: families.MyVQA.publish.namespace: '..' is not"):
        load_families(path)


@pytest.mark.parametrize("namespace", ["../../escape", "..", "/tmp/rs-anywhere"])
def test_publish_with_an_escaping_namespace_writes_nothing_anywhere(tmp_path: Path, namespace: str) -> None:
    """`rs publish --out` refuses at load, exit 2, and writes nothing: not outside `--out`, not in it."""
    work = tmp_path / "deep" / "er"
    work.mkdir(parents=True)
    write_source(work)
    config = write(work, MINIMAL + f"    publish: {{namespace: {namespace!r}, target: local}}\n")
    before = _tree(tmp_path)
    absolute = Path("/tmp/rs-anywhere")
    assert not absolute.exists()
    run = _console("publish", "MyVQA", "--out", str(work / "out"), "--config", str(config), cwd=work, build=work / "b")
    assert run.returncode == 2, run.stderr
    assert f"error: {config}:15: families.MyVQA.publish.namespace:" in run.stderr and "Traceback" not in run.stderr
    assert _tree(tmp_path) == before and not absolute.exists()


@pytest.mark.parametrize("namespace", ["../../escape", "..", "/tmp/rs-anywhere", "sub/../../x"])
def test_the_local_target_confines_its_root_even_past_validation(tmp_path: Path, namespace: str) -> None:
    """The second line of defence: a namespace that reached the target unchecked is refused where the path is built."""
    write_source(tmp_path)
    family = load_families(write(tmp_path, MINIMAL))["MyVQA"]
    family.config.publish.namespace = namespace  # as if validation had been skipped
    with pytest.raises(UsageError, match="publish.namespace: .* outside"):
        target_for(family, tmp_path / "out")
    assert target_for(load_families(write(tmp_path, MINIMAL))["MyVQA"], tmp_path / "out").root == (
        tmp_path / "out" / "rs-datasets"
    )


def test_confined_follows_a_symbolic_link_out(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "link").symlink_to(tmp_path)
    with pytest.raises(PathEscapeError):
        confined(tmp_path / "out", "link")
    assert confined(tmp_path / "out", "ns") == tmp_path / "out" / "ns"


@pytest.mark.parametrize("name", ["../../cache-escape", "..", "a/b", "my set"])
def test_an_evaluation_set_name_that_would_leave_the_cache_is_refused(tmp_path: Path, name: str) -> None:
    text = f"evaluation:\n  {name!r}:\n    source: {{kind: files, path: data/train.parquet}}\n" + MINIMAL
    path = write(tmp_path, text)
    with pytest.raises(FamilyConfigError, match=rf"{path}:2: evaluation\..*: a set's name must be letters"):
        load_families(path)


def _bomb(levels: int = 10, fanout: int = 10) -> str:
    """Ten levels of ten aliases under `x-` keys: 10^10 values once written out, a few hundred bytes of YAML."""
    lines = ["x-l0: &l0 [lol]"]
    for i in range(1, levels):
        lines.append(f"x-l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * fanout) + "]")
    return "\n".join(lines) + "\n"


BOMBED = {
    "card.tags": ("      citation: none\n", "      citation: none\n      tags: *l9\n"),
    "a verifier's vocabulary": (
        "    verifier: {name: exact}\n",
        "    verifier: {name: alnum, params: {vocabulary: *l9}}\n",
    ),
    "synonyms": ("    verifier: {name: exact}\n", "    verifier: {name: exact}\n    answers: {synonyms: {a: *l9}}\n"),
    "engine args": (
        "    verifier: {name: exact}\n",
        "    verifier: {name: exact}\n    engine: {args: {hf_overrides: *l9}}\n",
    ),
    "a merge key": ("    verifier: {name: exact}\n", "    verifier: {name: exact}\n    engine: {args: {<<: *l9}}\n"),
}


@pytest.mark.parametrize("where", BOMBED)
def test_a_yaml_alias_bomb_is_refused_at_its_line_in_seconds(tmp_path: Path, where: str) -> None:
    """Before, validate walked the 10^10 values (over three minutes, killed here at 60 s); now it measures the
    composed nodes once and refuses at the anchor that goes over the bound."""
    old, new = BOMBED[where]
    write_source(tmp_path)
    path = write(tmp_path, _bomb() + MINIMAL.replace(old, new))
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "rs.families", "validate", "--config", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    assert f"error: {path}:7: this block stands for more than {MAX_EXPANDED_NODES:,} values" in run.stderr
    assert "Traceback" not in run.stderr
    print(f"{where}: refused in {time.monotonic() - started:.1f} s")


def test_a_recursive_anchor_and_deep_nesting_are_refused_at_their_line(tmp_path: Path) -> None:
    path = write(tmp_path, "x-r: &r {a: *r}\n" + MINIMAL)
    with pytest.raises(FamilyConfigError, match=rf"{path}:1: a YAML alias inside its own anchor"):
        load_families(path)
    path = write(tmp_path, "x-deep: " + "[" * 150 + "]" * 150 + "\n" + MINIMAL)
    with pytest.raises(FamilyConfigError, match=rf"{path}:1: nested more than 100 lists or mappings deep"):
        load_families(path)
    path = write(tmp_path, "x-deep: " + "[" * 5000 + "]" * 5000 + "\n" + MINIMAL)  # deeper than PyYAML can compose
    with pytest.raises(FamilyConfigError, match=rf"{path}: nested too deeply to read"):
        load_families(path)


def test_ordinary_anchors_and_aliases_still_load() -> None:
    """The shipped families.yaml shares its vocabularies and answers through anchors, and a list of two aliases."""
    text = default_families_path().read_text(encoding="utf-8")
    assert "&clevr_vocabulary" in text and "[*clevr_vocabulary, *clevr_math_extra]" in text
    families = load_families(default_families_path())
    assert families["CLEVR"].config.answers == families["TinyCLEVR"].config.answers
    size = expanded_size(yaml.compose(text, Loader=yaml.SafeLoader))
    assert size < MAX_EXPANDED_NODES // 100, size  # the bound leaves a hundredfold room


@pytest.mark.parametrize(("key", "line"), [("instruction", 8), ("multiple_choice_instruction", 15)])
def test_an_instruction_past_its_bound_is_refused_at_its_key(tmp_path: Path, key: str, line: int) -> None:
    """It is appended to every question and sent with each: before, a 50 MB one passed validate and failed the run
    after minutes and gigabytes."""
    long = "x" * MAX_INSTRUCTION_CHARS  # with the leading newline, one character over
    if key == "instruction":
        text = MINIMAL.replace("Answer briefly.", long)
    else:
        text = MINIMAL + f'    {key}: "\\n{long}"\n'
    path = write(tmp_path, text)
    with pytest.raises(FamilyConfigError) as err:
        load_families(path)
    assert f"{path}:{line}: families.MyVQA.{key}: {MAX_INSTRUCTION_CHARS + 1:,} characters, over" in str(err.value)
    ok = write(tmp_path, MINIMAL.replace("Answer briefly.", long[1:]))
    assert len(load_families(ok)["MyVQA"].config.instruction) == MAX_INSTRUCTION_CHARS


def test_a_families_file_past_its_bound_is_refused_unread(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("Answer briefly.", "x" * MAX_FILE_BYTES))
    started = time.monotonic()
    with pytest.raises(FamilyConfigError, match=rf"{path}: [0-9,]+ bytes, over the {MAX_FILE_BYTES:,} a families"):
        load_families(path)
    print(f"refused in {time.monotonic() - started:.2f} s")
