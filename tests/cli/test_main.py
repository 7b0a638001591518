"""`rs`'s start-up: a command imports what it runs. `rs --help` and a misspelt command import no command at all (nor
`datasets` or pandas), and `rs families validate` of a family none of the libraries a run needs (`datasets`, pandas,
torch, vLLM, transformers, Ray)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from family_yaml import DEMO, family_yaml

HEAVY = ("datasets", "pandas", "torch", "transformers", "vllm", "ray")

RUN = """
import sys
from rs.cli.main import main
code = main(sys.argv[1:])
print("exit:", code)
print("loaded:", sorted(m for m in {heavy!r} if m in sys.modules))
print("pipeline:", sorted(m for m in sys.modules if m.startswith(("rs.pipeline", "rs.cli.publish", "rs.cli.families"))))
{after}
"""


def _rs(tmp_path: Path, *argv: str, after: str = "") -> dict[str, str]:
    """`rs ARGV` in a fresh interpreter: its exit status, the heavy libraries and the pipeline's modules it imported."""
    done = subprocess.run(
        [sys.executable, "-c", RUN.format(heavy=HEAVY, after=after), *argv],
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "RS_CACHE_DIR": str(tmp_path / "rs-cache")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = dict(
        line.split(": ", 1) for line in done.stdout.splitlines() if line.startswith(("exit", "loaded", "pipeline"))
    )
    said["stdout"], said["stderr"] = done.stdout, done.stderr
    return said


def test_help_and_a_misspelt_command_import_no_command(tmp_path: Path) -> None:
    said = _rs(tmp_path, "--help")
    assert said["exit"] == "0" and "usage: rs COMMAND [ARGS]" in said["stdout"]
    assert said["loaded"] == "[]" and said["pipeline"] == "[]"
    said = _rs(tmp_path, "publsh", "MyShapes")
    assert said["exit"] == "2" and said["stderr"].startswith(
        "error: unknown command 'publsh' (did you mean 'publish'?)"
    )
    assert said["loaded"] == "[]" and said["pipeline"] == "[]"


def test_validating_a_family_imports_none_of_the_libraries_a_run_needs(tmp_path: Path) -> None:
    """The checks are the runs' own (the publish stage's preflight among them), but the build's libraries (`datasets`,
    pandas) and Ray are not imported under them. vLLM's configuration classes are, where the family sets engine
    arguments: their values are checked against vLLM's own fields (`rs.engines.vllm_args.refused_engine_arg_value`), which
    costs vLLM's import (torch and transformers with it)."""
    config = tmp_path / "families.yaml"
    config.write_text(family_yaml("Quick", DEMO, card={"pretty_name": "Quick"}))
    said = _rs(tmp_path, "families", "validate", "--config", str(config))
    assert said["exit"] == "0" and said["stdout"].startswith(f"ok: {config}: 1 family valid (Quick)")
    assert "rs.pipeline.publish.preflight" in said["pipeline"]
    assert set(ast.literal_eval(said["loaded"])) <= {"vllm", "torch", "transformers"}


PROGRAM = """
import atexit, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from rs.cli import run_as_program

out = Path(sys.argv[1])


def main():
    atexit.register(lambda: (out / "atexit").write_text("ran"))
    threading.Thread(target=lambda: (time.sleep(0.5), (out / "thread").write_text("done"))).start()
    ThreadPoolExecutor(1).submit(time.sleep, 0.1)  # never shut down: its idle worker must not hold the exit
    print("said", end="")  # left in stdout's buffer
    {end}


run_as_program(main)
"""


def test_a_program_ends_as_the_interpreter_would_before_it_finalizes(tmp_path: Path) -> None:
    """`run_as_program` ends the process without finalizing (Arrow's exit abort) but after all that comes before it."""
    for end, code, stderr in (
        ("return 3", 3, ""),
        ("raise SystemExit(2)", 2, ""),
        ("raise SystemExit('no such thing')", 1, "no such thing\n"),
        ("raise ValueError('a defect')", 1, "ValueError: a defect\n"),
    ):
        for made in ("atexit", "thread"):
            (tmp_path / made).unlink(missing_ok=True)
        done = subprocess.run(
            [sys.executable, "-c", PROGRAM.format(end=end), str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (done.returncode, done.stdout) == (code, "said"), (end, done.stderr)
        assert done.stderr.endswith(stderr), (end, done.stderr)
        assert ("Traceback" in done.stderr) == end.startswith("raise ValueError"), (end, done.stderr)
        assert (tmp_path / "atexit").read_text() == "ran" and (tmp_path / "thread").read_text() == "done", end
