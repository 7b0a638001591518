"""The family registry: the shipped families.yaml, YAML-only families, and errors with file, line and key."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from checkout import ROOT

from rs.families import FamilyConfigError, UnknownFamilyError, default_families_path, get_family, load_families

MINIMAL = """\
defaults:
  model: {id: some/model}
families:
  MyVQA:
    source:
      kind: files
      path: data/train.parquet
    instruction: "\\nAnswer briefly."
    verifier: {name: exact}
    card:
      pretty_name: My VQA
      description: A test family.
      license: mit
      citation: none
"""


def write_source(folder: Path) -> None:
    """The MINIMAL family's source file, with the columns it reads (validate checks both)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from conftest import png

    (folder / "data").mkdir(exist_ok=True)
    table = pa.table({"image": [png((200, 40, 40))], "question": ["?"], "answer": ["1"]})
    pq.write_table(table, folder / "data" / "train.parquet")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "families.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rs.families", *args], capture_output=True, text=True, cwd=ROOT)


def test_shipped_families_validate() -> None:
    families = load_families(default_families_path())
    expected = {
        "CLEVR": "alnum",
        "CLEVRMath": "count",
        "ChartQA": "relaxed",
        "DocVQA": "anls",
        "TextVQA": "vqa",
        "AI2D": "mcq",
        "ScienceQA": "mcq",
        "IIIT5K": "alnum",
        "TinyCLEVR": "alnum",
    }
    for name, verifier in expected.items():
        assert families[name].config.verifier.name == verifier


def test_seed_families_as_the_cards_describe_them() -> None:
    clevr = get_family("CLEVR").config
    assert clevr.instruction == "\nAnswer the question using a single word or phrase."
    assert clevr.card.license == "other" and clevr.card.language == ["en"]
    assert clevr.card.task_categories == ["visual-question-answering"]
    assert clevr.cleaning.step("purity").enabled and "cylinder" in clevr.cleaning.step("purity").vocabulary
    math = get_family("CLEVRMath").config
    assert math.instruction == "\nAnswer in short without any other content."
    assert math.verifier.name == "count"  # counts are exact: a 5% tolerance accepted "4.8" for 5
    assert "subtract" in math.cleaning.step("purity").vocabulary  # anchors of shared word lists are flattened
    assert math.sampling.temperature == 0.0 and math.sampling.chat_template_kwargs == {"enable_thinking": True}


def test_defaults_merge_and_family_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "    sampling: {max_tokens: 128}\n    engine: {args: {max_model_len: 4096}}\n")
    text = path.read_text().replace(
        "  model: {id: some/model}",
        "  model: {id: some/model}\n  sampling: {seed: 7}\n  engine: {args: {tensor_parallel_size: 2}}",
    )
    path.write_text(text)
    c = load_families(path)["MyVQA"].config
    assert c.sampling.max_tokens == 128 and c.sampling.seed == 7
    assert c.engine.args == {"tensor_parallel_size": 2, "max_model_len": 4096}
    assert c.source.path == "data/train.parquet" and c.source.shape == "flat"


@pytest.mark.slow
def test_new_family_in_a_copy_validates_and_shows_without_code(tmp_path: Path) -> None:
    copy = tmp_path / "families.yaml"
    copy.write_text(default_families_path().read_text() + textwrap.indent(MINIMAL.split("families:\n", 1)[1], ""))
    write_source(tmp_path)
    assert cli("validate", "--config", str(copy)).returncode == 0
    shown = cli("show", "MyVQA", "--config", str(copy))
    assert shown.returncode == 0, shown.stderr
    assert "name: MyVQA" in shown.stdout and "kind: files" in shown.stdout and "id: Qwen/" in shown.stdout
    assert "MyVQA" in cli("--config", str(copy)).stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("edit", "line", "message"),
    [
        (("verifier: {name: exact}", "verifier: {name: exakt}"), 9, "Unknown verifier 'exakt'"),
        (("verifier: {name: exact}", "verifier: {name: relaxed, params: {tolerence: 0.1}}"), 9, "tolerence"),
        (("    instruction:", "    instructions:"), 8, "unknown key (did you mean 'instruction'?)"),
        (("      kind: files", "      kind: ftp"), 6, "'ftp' is not valid; expected one of files, hub, synthetic"),
        (("      path: data/train.parquet\n", ""), 6, "families.MyVQA.source.path: required key is missing"),
        (("      license: mit\n", ""), 11, "families.MyVQA.card.license: required key is missing"),
        (("      license: mit", "      license: [mit]"), 13, "expected str, got a list"),
        (
            ("  model: {id: some/model}", "  model: {id: some/model}\n  sampling: {max_tokens: lots}"),
            3,
            "expected int, got 'lots'",
        ),
        (
            ("  model: {id: some/model}", "  model: {id: some/model}\n  sampling: {temperature: true}"),
            3,
            "expected float, got True",
        ),
        (("  MyVQA:", "  My/VQA:"), 4, "not usable as a Hub repo name"),
        (("defaults:", "default:"), 1, "unknown top-level key (did you mean 'defaults'?)"),
    ],
)
def test_broken_family_is_refused_with_file_line_and_key(
    tmp_path: Path, edit: tuple[str, str], line: int, message: str
) -> None:
    old, new = edit
    assert old in MINIMAL
    path = write(tmp_path, MINIMAL.replace(old, new, 1))
    with pytest.raises(FamilyConfigError) as err:
        load_families(path)
    assert f"{path}:{line}:" in str(err.value)
    assert message in str(err.value)
    result = cli("validate", "--config", str(path))
    assert result.returncode != 0 and f"{path}:{line}:" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("block", "key", "message"),
    [
        (
            "shard: {max_bytes: 8 megs}",
            "shard.max_bytes",
            "'8 megs' is not a byte size; write an integer or a number with a unit",
        ),
        ("shard: {row_group_bytes: 0}", "shard.row_group_bytes", "must be above 0 (a byte size such as 500MB), got 0"),
        ("shard: {row_group_margin: 1.5}", "shard.row_group_margin", "must be at least 0 and below 1"),
        ("sampling: {max_tokens: 0}", "sampling.max_tokens", "must be at least 1 (the tokens an answer may use"),
        (
            "sampling: {temperature: -0.5}",
            "sampling.temperature",
            "must be at least 0 (0 is greedy decoding), got -0.5",
        ),
        ("sampling: {temperature: .nan}", "sampling.temperature", "must be a finite number, got nan"),
        (
            "engine: {kind: openai, base_url: 'http://h/v1', timeout_s: .inf}",
            "engine.timeout_s",
            "must be a finite number, got inf",
        ),
        ("sampling: {top_p: 0}", "sampling.top_p", "must be above 0 and at most 1"),
        ("sampling: {top_p: 1.5}", "sampling.top_p", "must be above 0 and at most 1"),
        (
            "judge: {calibration_samples: -1}",
            "judge.calibration_samples",
            "must be at least 1 (cases per check; to judge nothing, set judge.enabled: false), got -1",
        ),
        ("judge: {max_tokens: 0}", "judge.max_tokens", "must be at least 1"),
        ("judge: {think_budget: 0}", "judge.think_budget", "must be at least 1"),
        ("judge: {min_negative_agreement: 1.5}", "judge.min_negative_agreement", "must be from 0.0 to 1.0"),
        ("engine: {batch_size: 0}", "engine.batch_size", "must be at least 1"),
        ("engine: {in_flight: 0}", "engine.in_flight", "must be at least 1"),
        (
            "engine: {kind: openai, base_url: 'http://h/v1', concurrency: 0}",
            "engine.concurrency",
            "must be at least 1",
        ),
        ("engine: {kind: openai, base_url: 'http://h/v1', timeout_s: 0}", "engine.timeout_s", "must be above 0"),
        (
            "engine: {kind: openai, base_url: 'http://h/v1', max_retries: -1}",
            "engine.max_retries",
            "must be at least 0",
        ),
        ("cleaning: {purity: {max_unknown_words: -1}}", "cleaning.purity.max_unknown_words", "must be at least 0"),
        ("cleaning: {reference_form: {max_words: 0}}", "cleaning.reference_form.max_words", "must be at least 1"),
        (
            "cleaning: {multiple_choice: {letters: AAB}}",
            "cleaning.multiple_choice.letters",
            "must be distinct letters",
        ),
    ],
)
def test_a_value_that_cannot_work_is_refused_at_its_key(tmp_path: Path, block: str, key: str, message: str) -> None:
    """Checked at validate time, at the key's own line and path, rather than in a run after the model has loaded."""
    path = write(tmp_path, MINIMAL + f"    {block}\n")
    with pytest.raises(FamilyConfigError) as err:
        load_families(path)
    assert f"{path}:15: families.MyVQA.{key}: {message}" in str(err.value)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("setting", "key", "message"),
    [
        ("num_images: -5", "num_images", "must be at least 0 (scenes in the pool), got -5"),
        ("questions_per_image: 0", "questions_per_image", "must be at least 1 (questions asked of each scene), got 0"),
        ("image_size: 8", "image_size", "must be at least 32"),
        (
            "noise: {offtask: 0.03}",
            "noise.offtask",
            "unknown noise kind (did you mean 'off_task'?); valid kinds: off_task,",
        ),
        ("noise: {off_task: 3}", "noise.off_task", "must be a probability from 0 to 1, got 3.0"),
    ],
)
def test_a_synthetic_source_the_run_would_refuse_is_refused_by_validate(
    tmp_path: Path, setting: str, key: str, message: str
) -> None:
    path = write(
        tmp_path,
        MINIMAL.replace(
            "      kind: files\n      path: data/train.parquet\n", f"      kind: synthetic\n      {setting}\n"
        ),
    )
    with pytest.raises(FamilyConfigError) as err:
        load_families(path)
    assert f"{path}:7: families.MyVQA.source.{key}: {message}" in str(err.value)
    result = cli("validate", "--config", str(path))
    assert (
        result.returncode == 2
        and f"{path}:7: families.MyVQA.source.{key}" in result.stderr
        and "Traceback" not in result.stderr
    )


def test_a_missing_key_says_what_to_write(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("    verifier: {name: exact}\n", ""))
    with pytest.raises(FamilyConfigError) as err:
        load_families(path)
    message = str(err.value)
    assert (
        f"{path}:5: families.MyVQA.verifier: required key is missing; add e.g. `verifier: {{name: alnum}}`" in message
    )
    assert "VerifierConfig" not in message
    path = write(tmp_path, MINIMAL.replace("    source:\n      kind: files\n      path: data/train.parquet\n", ""))
    with pytest.raises(
        FamilyConfigError,
        match=r"families\.MyVQA\.source: required key is missing; add e\.g\. `source: \{kind: files \| hub \| synthetic \| synthetic_eval, \.\.\.\}`",
    ):
        load_families(path)
    path = write(tmp_path, MINIMAL.replace("      license: mit\n", ""))
    with pytest.raises(
        FamilyConfigError,
        match=r"families\.MyVQA\.card\.license: required key is missing; add e\.g\. `license: <str>`",
    ):
        load_families(path)


def test_a_family_file_without_defaults_says_model_is_required(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("defaults:\n  model: {id: some/model}\n", ""))
    with pytest.raises(FamilyConfigError) as err:
        load_families(path)
    message = str(err.value)
    assert (
        f"{path}:3: families.MyVQA.model: required key is missing; add e.g. `model: {{id: Qwen/Qwen3-VL-8B-Thinking}}`"
        in message
    )
    assert "in a `defaults:` block (this file has none)" in message
    assert "the shipped families.yaml sets `model` under its `defaults:`" in message


@pytest.mark.parametrize(
    ("edit", "line", "key"),
    [
        (
            ("    verifier: {name: exact}\n", "    verifier: {name: exact}\n    verifier: {name: alnum}\n"),
            10,
            "families.MyVQA.verifier",
        ),
        (
            ("      license: mit\n", "      license: mit\n      license: cc-by-4.0\n"),
            14,
            "families.MyVQA.card.license",
        ),
        (("  model: {id: some/model}\n", "  model: {id: some/model, id: other/model}\n"), 2, "defaults.model.id"),
    ],
)
def test_a_key_given_twice_is_refused_even_with_defaults(
    tmp_path: Path, edit: tuple[str, str], line: int, key: str
) -> None:
    """With `defaults:` merged in, the second of two equal keys used to win silently."""
    path = write(tmp_path, MINIMAL.replace(*edit))
    with pytest.raises(
        FamilyConfigError, match=rf"{path}:{line}: {re.escape(key)}: given twice \(first at line \d+\); keep one"
    ):
        load_families(path)


@pytest.mark.slow
def test_one_family_is_counted_as_one(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL)
    write_source(tmp_path)
    said = cli("validate", "--config", str(path)).stdout
    assert said.startswith(
        f"ok: {path}: 1 family valid (MyVQA)\n  checked: keys and values, local source files and the columns"
    )
    assert "  not checked here: MyVQA: the Hub model some/model" in said  # validate never claims more than it saw
    assert (
        "(offline, and not in the local Hugging Face cache: a run here could not load it)" in said
    )  # conftest: HF_HUB_OFFLINE
    assert cli("list", "--config", str(path)).stdout.startswith(f"1 family in {path}\n")


def test_unknown_verifier_lists_the_known_ones(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("{name: exact}", "{name: fuzzy}"))
    with pytest.raises(FamilyConfigError, match=r"alnum.*relaxed"):
        load_families(path)


def test_duplicate_and_case_colliding_families(tmp_path: Path) -> None:
    body = MINIMAL.split("families:\n", 1)[1]
    dup = write(tmp_path, MINIMAL + body)
    with pytest.raises(FamilyConfigError, match=r":15: families.MyVQA: duplicate family \(first defined at .*:4\)"):
        load_families(dup)
    cased = write(tmp_path, MINIMAL + body.replace("MyVQA", "myvqa"))
    with pytest.raises(FamilyConfigError, match="only by case"):
        load_families(cased)


@pytest.mark.slow
def test_names_are_case_sensitive() -> None:
    with pytest.raises(UnknownFamilyError, match="Did you mean 'CLEVR'"):
        get_family("clevr")
    result = cli("show", "clevr")
    assert result.returncode == 2 and "Known families: CLEVR" in result.stderr


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("    verifier: {name: exact}", "    verifier: {name: exact"))
    with pytest.raises(FamilyConfigError, match=rf"{path}:\d+: not valid YAML"):
        load_families(path)


@pytest.mark.slow
def test_keys_lists_every_key() -> None:
    out = cli("keys").stdout
    assert "families.NAME.cleaning.purity.vocabulary" in out and "families.NAME.source.columns.texts" in out


def test_yaml_merge_keys_share_a_block_and_a_bad_merge_names_its_line(tmp_path: Path) -> None:
    shared = (
        MINIMAL.replace("    source:\n", "    source: &files\n")
        + "  Other:\n    <<: *family\n    source: {<<: *files, path: data/other.parquet}\n"
    )
    shared = shared.replace("  MyVQA:\n", "  MyVQA: &family\n")
    families = load_families(write(tmp_path, shared))
    mine, other = families["MyVQA"].config, families["Other"].config
    assert other.source.path == "data/other.parquet" and other.source.kind == mine.source.kind == "files"
    assert other.verifier == mine.verifier and other.card == mine.card
    bad = write(tmp_path, MINIMAL + "  Other:\n    <<: plain words\n")
    with pytest.raises(FamilyConfigError, match=rf"{bad}:\d+: .*`<<:` merges a mapping"):
        load_families(bad)


@pytest.mark.parametrize(
    "block,expected",
    [
        ("    blind: {rotations: 0}\n", r":10: families\.MyVQA\.blind\.rotations: .*at least 1"),
        ("    blind: {samples: -2}\n", r":10: families\.MyVQA\.blind\.samples: .*at least 0"),
        ("    blind: {rotation: 4}\n", r":10: families\.MyVQA\.blind\.rotation: .*rotations"),
    ],
)
def test_the_no_image_block_is_checked_naming_the_file_line_and_key(tmp_path: Path, block: str, expected: str) -> None:
    path = write(tmp_path, MINIMAL.replace("    card:\n", block + "    card:\n"))
    with pytest.raises(FamilyConfigError, match=rf"{path}{expected}"):
        load_families(path)
    ok = write(tmp_path, MINIMAL.replace("    card:\n", "    blind: {}\n    card:\n"))
    blind = load_families(ok)["MyVQA"].config.blind
    assert blind is not None and (blind.rotations, blind.samples, blind.rl) == (4, 0, True)


def test_the_no_image_pass_is_refused_with_the_replay_engine(tmp_path: Path) -> None:
    """A replay file answers by the question's key: the question asked without its image would get the answer given with it."""
    block = "    blind: {}\n    engine: {kind: replay, replay_path: out.jsonl}\n"
    path = write(tmp_path, MINIMAL.replace("    card:\n", block + "    card:\n"))
    with pytest.raises(FamilyConfigError, match=r"families\.MyVQA\.blind: the replay engine answers a request by"):
        load_families(path)
