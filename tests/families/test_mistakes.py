"""A user's mistakes, one step off the happy path: each command says `error:` (and `hint:`) with the right exit status.

Every case runs the real command in a fresh process and checks the first line of stderr and the exit status:
2 for a configuration or usage problem, never a traceback. Nothing here loads a model: every mistake is
caught before one would be.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from checkout import ROOT
from PIL import Image

FAMILY = """\
families:
  MyShapes:
    source: {kind: files, path: data/shapes.parquet, shape: flat}
    instruction: "\\nAnswer the question using a single word or phrase."
    verifier: {name: alnum}
    model: {id: "rs:demo-vlm", reasoning: {parser: tags}}
    engine:
      args: {dtype: bfloat16, max_model_len: 2048, max_num_seqs: 16, enforce_eager: true, kv_cache_memory_bytes: 268435456}
    sampling: {max_tokens: 64}
    publish: {namespace: local, target: local}
    card: {pretty_name: My Shapes, description: Shapes., license: cc-by-4.0, citation: "@misc{s}"}
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mistakes")
    (folder / "data").mkdir()
    rows = []
    for i, (question, answer) in enumerate([("What color is the square?", "purple"), ("How many shapes?", "2")]):
        image = io.BytesIO()
        Image.new("RGB", (16, 16), (40 * i, 10, 10)).save(image, "PNG")
        rows.append({"image": {"bytes": image.getvalue(), "path": None}, "question": question, "answer": answer})
    pq.write_table(pa.Table.from_pylist(rows), folder / "data" / "shapes.parquet")
    (folder / "data" / "broken.parquet").write_bytes(b"PAR1 not really a parquet file")
    (folder / "a-file").write_text("")
    (folder / "users" / "local").mkdir(parents=True)
    (folder / "users" / "local" / "MyShapes_rejected").write_text("the user's own file")
    (folder / "theirs" / "local" / "MyShapes_RS_think").mkdir(parents=True)
    (folder / "theirs" / "local" / "MyShapes_RS_think" / "notes.txt").write_text("the user's own notes")
    return folder


def _config(folder: Path, name: str, edit: tuple[str, str] | None) -> Path:
    text = FAMILY if edit is None else FAMILY.replace(*edit)
    assert edit is None or text != FAMILY, edit
    path = folder / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _read_only_target(folder: Path) -> str:
    """A folder this process cannot write in: a read-only one, or under /sys where even root cannot create files."""
    if os.geteuid() == 0:
        return "/sys/rs-out"
    target = folder / "read-only"
    target.mkdir(exist_ok=True)
    target.chmod(0o555)
    return str(target / "out")


EVALUATION_IMAGE_IS_QUESTION = (
    "families:\n  MyShapes:\n",
    "evaluation:\n  Shapes-val:\n    source: {kind: files, path: data/shapes.parquet, "
    "shape: flat, columns: {image: question}}\nfamilies:\n  MyShapes:\n    decontamination: {against: [Shapes-val]}\n",
)
"""An evaluation split (`evaluation:`) a family is checked against, read with the question column as its image column."""

# (case, command, the YAML edit, the start of stderr's first line after `error: `, exit status)
MISTAKES = [
    (
        "source path misspelt: validate",
        ["families", "validate"],
        ("data/shapes.parquet", "data/shapse.parquet"),
        "{config}:3: families.MyShapes.source.path: 'data/shapse.parquet': ",
        2,
    ),
    (
        "source path misspelt: preview",
        ["families", "preview", "MyShapes"],
        ("data/shapes.parquet", "data/shapse.parquet"),
        "{config}:3: families.MyShapes.source.path: ",
        2,
    ),
    (
        "source path misspelt: plan",
        ["plan", "MyShapes"],
        ("data/shapes.parquet", "data/shapse.parquet"),
        "{config}:3: families.MyShapes.source.path: ",
        2,
    ),
    (
        "source path misspelt: sample",
        ["sample", "MyShapes"],
        ("data/shapes.parquet", "data/shapse.parquet"),
        "{config}:3: families.MyShapes.source.path: ",
        2,
    ),
    (
        "source path misspelt: publish",
        ["publish", "MyShapes", "--out", "{folder}/out"],
        ("data/shapes.parquet", "data/shapse.parquet"),
        "{config}:3: families.MyShapes.source.path: ",
        2,
    ),
    (
        "a column that is not there",
        ["publish", "MyShapes", "--out", "{folder}/out"],
        ("shape: flat}", "shape: flat, columns: {question: query}}"),
        "{config}:3: families.MyShapes.source.columns.question: no column 'query' in data/shapes.parquet",
        2,
    ),
    (
        "an unreadable source file",
        ["families", "preview", "MyShapes"],
        ("data/shapes.parquet", "data/broken.parquet"),
        "{config}:3: families.MyShapes.source.path: 'data/broken.parquet': ",
        2,
    ),
    (
        "an engine argument misspelt: validate",
        ["families", "validate"],
        ("max_num_seqs: 16", "max_num_seq: 16"),
        "{config}:8: families.MyShapes.engine.args.max_num_seq: the installed vLLM",
        2,
    ),
    (
        "an engine argument misspelt: publish",
        ["publish", "MyShapes", "--out", "{folder}/out"],
        ("max_num_seqs: 16", "max_num_seq: 16"),
        "{config}:8: families.MyShapes.engine.args.max_num_seq: the installed vLLM",
        2,
    ),
    (
        "a replay file that is not there",
        ["families", "validate"],
        (
            "    engine:\n      args: {dtype: bfloat16, max_model_len: 2048, max_num_seqs: 16, enforce_eager: true, kv_cache_memory_bytes: 268435456}\n",
            "    engine: {kind: replay, replay_path: answers.jsonl}\n",
        ),
        "{config}:7: families.MyShapes.engine.replay_path: 'answers.jsonl': ",
        2,
    ),
    (
        "a built-in model misspelt",
        ["plan", "MyShapes"],
        ('"rs:demo-vlm"', '"rs:demo-vml"'),
        "{config}:6: families.MyShapes.model.id: unknown built-in model 'rs:demo-vml'",
        2,
    ),
    (
        "a local model folder that holds no model",
        ["families", "validate"],
        ('"rs:demo-vlm"', '"./no-such-model"'),
        "{config}:6: families.MyShapes.model.id: './no-such-model' is a local path",
        2,
    ),
    (
        "a missing block",
        ["families", "validate"],
        ("    verifier: {name: alnum}\n", ""),
        "{config}:3: families.MyShapes.verifier: required key is missing",
        2,
    ),
    ("not YAML", ["families", "validate"], ("shape: flat}", "shape: flat"), "{config}:", 2),
    (
        "a families file that is a folder",
        ["families", "validate", "--config", "{folder}/data"],
        None,
        "{folder}/data: cannot read families file",
        2,
    ),
    ("an unknown family", ["publish", "MyShape", "--out", "{folder}/out"], None, "unknown family 'MyShape'", 2),
    ("--out a file", ["publish", "MyShapes", "--out", "{folder}/a-file"], None, "--out {folder}/a-file: ", 2),
    (
        "--out a read-only folder",
        ["publish", "MyShapes", "--out", "{read_only}"],
        None,
        "--out {read_only}: cannot write in ",
        2,
    ),
    (
        "--cache under a file",
        ["sample", "MyShapes", "--cache", "{folder}/a-file/cache.sqlite"],
        None,
        "--cache {folder}/a-file: {folder}/a-file is a file, not a folder: the generation cache cannot go there",
        2,
    ),
    (
        "--build-dir a read-only folder",
        ["plan", "MyShapes", "--build-dir", "{read_only}"],
        None,
        "--build-dir {read_only}: cannot write in ",
        2,
    ),
    (
        "a file where a repo goes",
        ["publish", "MyShapes", "--out", "{folder}/users"],
        None,
        "--out: {folder}/users/local/MyShapes_rejected is a file, not a repo this project published",
        2,
    ),
    (
        "a folder of the user's where a repo goes",
        ["publish", "MyShapes", "--out", "{folder}/theirs"],
        None,
        "--out: {folder}/theirs/local/MyShapes_RS_think is a folder this project did not publish",
        2,
    ),
    (
        "--out inside the build folder",
        ["publish", "MyShapes", "--out", "{folder}/b/repos", "--build-dir", "{folder}/b"],
        None,
        "--out {folder}/b/repos is inside the build folder {folder}/b",
        2,
    ),
    (
        "the build folder inside --out",
        ["publish", "MyShapes", "--out", "{folder}/o", "--build-dir", "{folder}/o/build"],
        None,
        "the build folder {folder}/o/build is inside --out {folder}/o",
        2,
    ),
    (
        "a cache inside --out",
        ["publish", "MyShapes", "--out", "{folder}/o", "--cache", "{folder}/o/cache.sqlite"],
        None,
        "the generation cache {folder}/o/cache.sqlite is inside --out {folder}/o",
        2,
    ),
    (
        "a cache inside the build folder",
        ["sample", "MyShapes", "--build-dir", "{folder}/b", "--cache", "{folder}/b/c.sqlite"],
        None,
        "the generation cache {folder}/b/c.sqlite is inside the build folder {folder}/b",
        2,
    ),
    (
        "an engine argument of the wrong type: validate",
        ["families", "validate"],
        ("max_model_len: 2048", "max_model_len: big"),
        "{config}:8: families.MyShapes.engine.args.max_model_len: vLLM's EngineArgs.max_model_len is int: 'big' (str) is not an int",
        2,
    ),
    (
        "an engine argument of the wrong type: sample",
        ["sample", "MyShapes"],
        ("max_model_len: 2048", "max_model_len: big"),
        "{config}:8: families.MyShapes.engine.args.max_model_len: vLLM's EngineArgs.max_model_len is int",
        2,
    ),
    (
        "a reasoning parser vLLM does not have: validate",
        ["families", "validate"],
        ("parser: tags", "parser: qwen4"),
        "{config}:6: families.MyShapes.model.reasoning.parser: the installed vLLM has no reasoning parser 'qwen4' (did you mean 'qwen3'?)",
        2,
    ),
    (
        "a reasoning parser vLLM does not have: publish",
        ["publish", "MyShapes", "--out", "{folder}/out"],
        ("parser: tags", "parser: qwen4"),
        "{config}:6: families.MyShapes.model.reasoning.parser: the installed vLLM has no reasoning parser 'qwen4'",
        2,
    ),
    (
        "a Hub model id misspelt, offline: sample",
        ["sample", "MyShapes"],
        ('"rs:demo-vlm"', '"Qwen/Qwen3-VL-2B-Instrct"'),
        "{config}:6: families.MyShapes.model.id: the Hub model 'Qwen/Qwen3-VL-2B-Instrct' is not in the local Hugging Face cache",
        2,
    ),
    (
        "a license the Hub does not know",
        ["families", "validate"],
        ("license: cc-by-4.0", "license: cc-by-4"),
        "{config}:11: families.MyShapes.card.license: 'cc-by-4' is not a license identifier of the Hugging Face Hub (did you mean "
        "'cc-by-4.0'",
        2,
    ),
    (
        "a thinking budget at max_tokens",
        ["families", "validate"],
        ("max_tokens: 64}", "max_tokens: 64, thinking_token_budget: 64}"),
        "{config}:9: families.MyShapes.sampling.thinking_token_budget: 64 is not below max_tokens (64)",
        2,
    ),
    ("a command misspelt", ["publsh", "MyShapes"], None, "unknown command 'publsh' (did you mean 'publish'?)", 2),
    (
        "a subcommand misspelt",
        ["families", "valdate"],
        None,
        "argument command: invalid choice: 'valdate' (choose from 'list', 'validate', 'keys', 'verifiers', 'show', "
        "'preview') (did you mean 'validate'?)",
        2,
    ),
    (
        "a flag misspelt",
        ["publish", "MyShapes", "--lmit", "3"],
        None,
        "unrecognized arguments: --lmit 3 (did you mean '--limit'?)",
        2,
    ),
    (
        "rs audit --replay without a build",
        ["audit", "{folder}/theirs/local/MyShapes_RS_think", "--replay", "3"],
        None,
        "--replay N re-derives questions from the build's cleaned items and the run's generation cache: give --build DIR too",
        2,
    ),
    (
        "--cards-only with nothing built",
        ["publish", "MyShapes", "--cards-only", "--out", "{folder}/out", "--build-dir", "{folder}/none"],
        None,
        "no build of MyShapes in ",
        2,
    ),
    (
        "an evaluation set whose image column is the question",
        ["publish", "MyShapes", "--out", "{folder}/out"],
        EVALUATION_IMAGE_IS_QUESTION,
        "the evaluation set Shapes-val (data/shapes.parquet) gave no image that opens (2 of 2 records), most often missing_image (2): "
        "decontamination would check the images against nothing",
        2,
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("case", "command", "edit", "said", "status"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_mistake_is_said_in_one_error_line_with_its_exit_status(
    folder: Path, case: str, command: list[str], edit: tuple[str, str] | None, said: str, status: int
) -> None:
    config = _config(folder, case.replace(" ", "-").replace(":", ""), edit)
    values = {"folder": str(folder), "config": str(config), "read_only": _read_only_target(folder)}
    argv = [part.format(**values) for part in command]
    if "--config" not in argv:
        argv += ["--config", str(config)]
    run = subprocess.run(
        [sys.executable, "-c", "from rs.cli.main import console; console()", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RS_BUILD_DIR": str(folder / "build")},
    )
    first = run.stderr.splitlines()[0] if run.stderr else ""
    assert first.startswith("error: " + said.format(**values)), run.stderr
    assert run.returncode == status, run.stderr
    assert "Traceback" not in run.stderr + run.stdout


@pytest.mark.vllm
def test_the_engine_arguments_read_from_vllms_files_are_those_it_takes() -> None:
    """validate reads vLLM's argument list from its source (importing vLLM takes ~10 s): the same list an import gives."""
    import dataclasses
    import inspect

    pytest.importorskip("vllm")
    from vllm import LLM
    from vllm.engine.arg_utils import EngineArgs

    from rs.engines.vllm_args import known_engine_args, unknown_engine_arg

    takes = {
        name
        for name, p in inspect.signature(LLM.__init__).parameters.items()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }
    assert known_engine_args() == (takes | {f.name for f in dataclasses.fields(EngineArgs)}) - {"self", "model"}
    assert unknown_engine_arg(["max_model_len", "max_num_seq"]) == ("max_num_seq", " (did you mean 'max_num_seqs'?)")


@pytest.mark.slow
def test_a_mistake_under_defaults_is_said_at_its_line_there(folder: Path) -> None:
    path = folder / "with-defaults.yaml"
    text = (
        'defaults:\n  model: {id: "rs:demo-vml"}\n  engine:\n    args: {max_num_seq: 4}\nfamilies:\n'
        + FAMILY.split("families:\n", 1)[1]
        .replace('    model: {id: "rs:demo-vlm", reasoning: {parser: tags}}\n', "")
        .replace(
            "    engine:\n      args: {dtype: bfloat16, max_model_len: 2048, max_num_seqs: 16, enforce_eager: true, "
            "kv_cache_memory_bytes: 268435456}\n",
            "",
        )
    )
    for line, key in ((4, "engine.args.max_num_seq"), (2, "model.id")):
        path.write_text(text)
        run = subprocess.run(
            [sys.executable, "-m", "rs.families", "validate", "--config", str(path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 2 and run.stderr.startswith(f"error: {path}:{line}: families.MyShapes.{key}: "), (
            run.stderr
        )
        text = text.replace("max_num_seq:", "max_num_seqs:")


@pytest.mark.slow
def test_a_run_that_cleaning_left_nothing_to_sample_fails_before_sampling(folder: Path) -> None:
    """The image column pointing at the question text: every QA is dropped as missing_image, and the run stops there with
    exit 2 and the likely cause (it published empty repos with exit 0), before any engine starts."""
    config = _config(
        folder, "image-column-is-the-question", ("shape: flat}", "shape: flat, columns: {image: question}}")
    )
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "from rs.cli.main import console; console()",
            "publish",
            "MyShapes",
            "--out",
            str(folder / "nothing-out"),
            "--config",
            str(config),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RS_BUILD_DIR": str(folder / "build")},
    )
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [
        "error: MyShapes: cleaning dropped every QA (2 of 2), most often as missing_image (2): nothing to sample"
    ], run.stderr
    assert "hint: likely: the image column holds no image: source.columns.image names another column" in run.stderr
    assert run.returncode == 2 and "Traceback" not in run.stderr and "Loading" not in run.stderr
    assert not (folder / "nothing-out").exists()


@pytest.mark.slow
def test_the_relative_path_hint_is_given_for_a_relative_path_only(folder: Path) -> None:
    said = {}
    for case, path in (("relative", "data/shapse.parquet"), ("absolute", str(folder / "data" / "shapse.parquet"))):
        config = _config(folder, f"{case}-path-misspelt", ("data/shapes.parquet", path))
        run = subprocess.run(
            [sys.executable, "-m", "rs.families", "validate", "--config", str(config)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 2 and run.stderr.startswith("error: "), run.stderr
        said[case] = run.stderr
    assert "relative to the families file's folder" in said["relative"]
    assert "relative" not in said["absolute"].split("hint:", 1)[1]


@pytest.mark.slow
def test_validate_source_reads_the_first_records_and_checks_each_columns_type(folder: Path) -> None:
    """`validate` said `ok` for an image column that names the question column (the column exists); `--source N` reads."""
    wrong = _config(
        folder, "validate-source-image-is-question", ("shape: flat}", "shape: flat, columns: {image: question}}")
    )
    right = _config(folder, "validate-source-right", None)
    said = {}
    for name, config in (("wrong", wrong), ("right", right)):
        said[name] = subprocess.run(
            [sys.executable, "-m", "rs.families", "validate", "--config", str(config), "--source", "5"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert said["wrong"].returncode == 2 and said["wrong"].stdout == "", said["wrong"].stdout
    assert said["wrong"].stderr.startswith(
        f"error: {wrong}:3: families.MyShapes.source.columns.image: none of the first 2 records "
        "holds an image that opens in column 'question': missing_image, e.g. What color is the "
        "square?: no such file"
    ), said["wrong"].stderr
    assert said["right"].returncode == 0, said["right"].stderr
    assert (
        "  MyShapes: the first 2 source records: an image that opens in 2, a question in 2, an answer in 2"
        in said["right"].stdout
    )
