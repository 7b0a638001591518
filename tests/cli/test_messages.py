"""Messages that name the real cause: a read-only file system is not a permission, offline is said before a token, and
a key the cache does not hold is named rather than "forgotten"."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import ROOT
from faults import FAMILY, write_families

from rs.engines.base import Generation
from rs.engines.generation_cache import GenerationCache

ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))},
    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
}


def rs(folder: Path, *args: str, env: dict[str, str] = ENV) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )


def test_forgetting_a_key_the_cache_does_not_hold_names_it_and_forgets_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "cache.sqlite"
    with GenerationCache(cache) as c:
        c.put_many([("k1", Generation("a", None, "a", "stop", max_tokens=8))])
    said = rs(tmp_path, "rs.cli.cache", "forget", "--cache", str(cache), "k1", "k9")
    assert said.returncode == 2, said.stdout + said.stderr
    assert f"error: 1 key not in {cache}: k9; nothing was forgotten" in said.stderr
    with GenerationCache(cache) as c:
        assert len(c) == 1
    said = rs(tmp_path, "rs.cli.cache", "forget", "--cache", str(cache), "k1")
    assert said.returncode == 0 and "forgot 1 of the 1 answer named in" in said.stdout, said.stderr


def _can_mount_read_only(folder: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o ro,size=1m tmpfs {folder}"], capture_output=True
    )
    return probe.returncode == 0


def test_a_read_only_file_system_is_said_as_such_not_as_permission_denied(tmp_path: Path) -> None:
    """Run as root in a mount namespace of its own (`unshare -rm`): the folder's permission bits allow writing, its
    mount does not."""
    write_families(tmp_path, names=("MyShapes",), family=FAMILY)
    (tmp_path / "ro").mkdir()
    if not _can_mount_read_only(tmp_path / "ro"):
        pytest.skip("no mount namespace here (unshare -rm)")
    run = f"mount -t tmpfs -o ro,size=1m tmpfs {tmp_path / 'ro'} && exec {sys.executable} -m rs.publish MyShapes"
    said = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"{run} --config families.yaml --out ro/out --dry-run"],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert said.returncode == 2, said.stderr[-3000:]
    assert "its file system is mounted read-only" in said.stderr and "permission denied" not in said.stderr
    assert "a file system mounted read-write" in said.stderr


def test_an_offline_publish_to_the_hub_says_offline_before_any_token(tmp_path: Path) -> None:
    write_families(tmp_path, names=("MyShapes",), family=FAMILY.replace("target: local", "private: true"))
    env = {**ENV, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "HOME": str(tmp_path)}  # no token anywhere
    said = rs(tmp_path, "rs.publish", "MyShapes", "--config", "families.yaml", env=env)
    assert said.returncode == 2, said.stderr[-3000:]
    assert "error: HF_HUB_OFFLINE=1 is set: the Hub libraries work offline" in said.stderr
    assert "token found" not in said.stderr and "--out DIR" in said.stderr
    assert sorted(p.name for p in (tmp_path / "build" / "MyShapes").iterdir()) == ["logs"]  # refused before the build


STOPPED = """
import atexit, logging, os, sys
from rs.cli import run_as_program
from rs.util import progress

def main():
    atexit.register(lambda: logging.getLogger("torch._inductor").info("a notice at exit"))
    logging.getLogger("torch.distributed").info("a notice before the end")
    with progress.phase("the sample stage"):
        os.kill(os.getpid(), 2)  # Ctrl-C while no bar is open (the model loads)
        raise AssertionError("the signal did not stop the command")

run_as_program(main)
"""


def test_a_stopped_run_names_its_phase_and_its_account_is_the_last_thing_said(tmp_path: Path) -> None:
    said = subprocess.run(
        [sys.executable, "-c", STOPPED], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=60
    )
    lines = said.stderr.strip().splitlines()
    assert said.returncode == 130, said.stderr
    assert "INFO torch.distributed: a notice before the end" in lines  # while the command runs, said
    assert lines[-2].startswith("stopped by SIGINT during the sample stage; nothing was finished yet"), said.stderr
    assert lines[-1].startswith("to resume, run the same command again: "), said.stderr  # nothing after it


@pytest.mark.parametrize(
    ("module", "args", "said"),
    [
        (
            "rs.refilter",
            ["Shapes", "--judg", "never"],
            "error: unrecognized arguments: --judg never (did you mean '--judge'?)",
        ),
        ("rs.publish", ["Shapes", "--dry"], "error: unrecognized arguments: --dry (did you mean '--dry-run'?)"),
        (
            "rs.families",
            ["validate", "--sour", "3"],
            "error: unrecognized arguments: --sour 3 (did you mean '--source'?)",
        ),
    ],
)
def test_a_flag_is_taken_only_as_written_in_full_and_refused_in_three_lines(
    tmp_path: Path, module: str, args: list[str], said: str
) -> None:
    """`--judg` was taken for `--judge` (argparse's abbreviations); `rs refilter`'s usage errors printed argparse's whole
    usage block, where the other commands print `error:`, one usage line and `hint:`."""
    run = rs(tmp_path, module, *args)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and lines[0] == said, run.stderr
    assert len(lines) == 3 and lines[1].startswith("usage: ") and lines[2].startswith("hint: "), run.stderr


def test_a_comma_in_a_flow_mapping_is_said_as_what_happened_not_as_an_unknown_key(tmp_path: Path) -> None:
    families = write_families(tmp_path, names=("MyShapes",), family=FAMILY)
    text = families.read_text().replace("description: A family for the fault tests.", "description: shapes, colours")
    families.write_text(text)
    said = rs(tmp_path, "rs.families", "--config", "families.yaml", "validate")
    assert said.returncode == 2, said.stderr
    assert (
        "families.MyShapes.card.colours: not a key: inside {...} (a flow mapping) a comma ends a value" in said.stderr
    )
    assert 'quote the value: description: "shapes, colours"' in said.stderr and "unknown key" not in said.stderr


def test_the_summary_says_why_the_think_split_holds_fewer_qa_than_were_accepted(tmp_path: Path, family) -> None:
    from rs.cli.publish import summary
    from rs.pipeline.publish.stage import publish

    shapes = family(
        [("How many shapes?", "2", "2", []), ("How many circles?", "3", ("3", "4"), []), ("How many?", "1", "1", [])],
        judge={"enabled": False},
    )
    outcome = publish(shapes, out=tmp_path / "out", build_root=tmp_path / "build", cache_path=tmp_path / "c.sqlite")
    said = summary(shapes, outcome, dry_run=False)
    assert "3 accepted" in said.splitlines()[0], said
    think = next(line for line in said.splitlines() if "Shapes_RS_think:" in line)
    assert (
        ": 2 rows, 2 QA (of the 3 accepted: 1 whose reasoning concluded another value is in the nothink split only)"
        in (think)
    ), said
