"""vLLM's temporary files (a `vllm_dist_<uuid>` file store per engine start) go with the engine, and a killed run's go
with the next start, without changing where the process makes its temporary files: nothing piles up in the system's
temporary folder, and no other engine of the process is disturbed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest
from checkout import ROOT

from rs.engines import temp_files


def _python(code: str, tmp: Path) -> subprocess.Popen[str]:
    """`code` in a new process whose temporary folder is `tmp`; its stderr (vLLM's log, which would fill a pipe nobody
    reads) in `tmp/../stderr-<n>.txt`."""
    env = {**os.environ, "TMPDIR": str(tmp), "HF_HUB_OFFLINE": "1"}
    log = tmp.parent / f"stderr-{len(list(tmp.parent.glob('stderr-*')))}.txt"
    with open(log, "w") as err:
        return subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )


def _log(tmp: Path) -> str:
    return "\n".join(p.read_text()[-3000:] for p in sorted(tmp.parent.glob("stderr-*")))


def _store(tmp: Path) -> Path:
    path = tmp / f"vllm_dist_{uuid.uuid4().hex}"
    path.write_text("a file store")
    return path


START = """
    import sys, uuid
    from pathlib import Path
    from rs.engines import temp_files
    start = temp_files.Start()
    made = start.tmp / f"vllm_dist_{uuid.uuid4().hex}"  # as vLLM's engine core does during a start
    made.write_text("a file store")
    start.after(in_process=False)
    print(made, flush=True)
    input()
"""


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    folder = tmp_path / "tmp"
    folder.mkdir()
    return folder


def test_a_start_changes_no_temporary_folder_and_records_what_appeared(tmp: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    before = _store(tmp)  # not this start's
    start = temp_files.Start()
    made = _store(tmp)
    assert (tempfile.gettempdir(), os.environ.get("TMPDIR")) == (str(tmp), os.environ.get("TMPDIR"))
    start.after(in_process=False)
    try:
        manifest = tmp / temp_files.FOLDER / str(os.getpid())
        assert manifest.read_text() == f"{made}\n"
        start.tear_down()
        assert not made.exists() and before.exists()
        assert manifest.read_text() == ""
    finally:
        temp_files._at_exit()
    assert not manifest.exists()


def test_a_killed_runs_files_are_removed_by_the_next_start_a_living_ones_kept(tmp: Path) -> None:
    killed, living = _python(START, tmp), _python(START, tmp)
    try:
        killed_file = Path(killed.stdout.readline().strip())
        living_file = Path(living.stdout.readline().strip())
        assert killed_file.parent == living_file.parent == tmp
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        assert killed_file.exists()  # a SIGKILL runs no cleanup
        assert temp_files.remove_stale(tmp) == [killed_file]
        assert not killed_file.exists() and living_file.exists()
        assert not (tmp / temp_files.FOLDER / str(killed.pid)).exists()
        living.stdin.write("\n")
        living.stdin.flush()
        assert living.wait(timeout=30) == 0
        assert not living_file.exists()  # its own exit removed it
    finally:
        for process in (killed, living):
            process.kill()
            process.wait(timeout=30)
    assert os.listdir(tmp / temp_files.FOLDER) == []


def test_a_dead_runs_manifest_is_trusted_with_nothing_but_its_own_kind_of_file(tmp: Path, tmp_path: Path) -> None:
    outside = tmp_path / f"vllm_dist_{uuid.uuid4().hex}"
    outside.write_text("not in the temporary folder")
    target = tmp / "precious"
    target.write_text("a file of someone's")
    link = tmp / f"vllm_dist_{uuid.uuid4().hex}"
    link.symlink_to(target)
    folder = tmp / f"vllm_dist_{uuid.uuid4().hex}"
    folder.mkdir()
    claimed = _store(tmp)  # named by a dead manifest and a living one
    dead = _store(tmp)
    (tmp / temp_files.FOLDER).mkdir()
    lines = [outside, target, link, folder, tmp / ".." / "tmp" / dead.name, claimed, dead]
    (tmp / temp_files.FOLDER / "1234567").write_text("".join(f"{p}\n" for p in lines))
    hold = f"""
        from pathlib import Path
        from rs.engines import temp_files
        temp_files.Manifest(Path({str(tmp)!r})).add([Path({str(claimed)!r})])  # a living run's, seen in a start of the dead one
        print("held", flush=True)
        input()
    """
    living = _python(hold, tmp)
    try:
        assert living.stdout.readline().strip() == "held"
        assert temp_files.remove_stale(tmp) == [dead]
    finally:
        living.kill()
        living.wait(timeout=30)
    assert outside.exists() and target.exists() and link.is_symlink() and folder.is_dir() and claimed.exists()
    assert not (tmp / temp_files.FOLDER / "1234567").exists()


@pytest.mark.vllm
@pytest.mark.slow
def test_a_killed_vllm_engines_file_store_is_removed_by_the_next_start(tmp: Path) -> None:
    """Before, a killed run's `vllm_dist_<uuid>` stayed in the temporary folder for good (this test found it after the
    second run); now the next start removes it, and a closed engine leaves none."""
    pytest.importorskip("vllm")
    start = """
        import os, tempfile
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from rs.engines.vllm import VLLMEngine
        from rs_demo.tiny_model import VLLM_ENGINE_KWARGS
        engine = VLLMEngine("rs:tiny-vlm", engine_args=dict(VLLM_ENGINE_KWARGS))
        engine.load()
        print("loaded", flush=True)
        if WAIT:
            input()
        engine.close()
    """
    killed = _python(start.replace("WAIT", "True"), tmp)  # waits, and is killed once loaded
    try:
        assert any(line.strip() == "loaded" for line in killed.stdout), _log(tmp)  # vLLM logs there too
        left = list(tmp.glob("vllm_dist_*"))
        assert left, sorted(p.name for p in tmp.rglob("*"))  # the engine's file store
        assert (tmp / temp_files.FOLDER / str(killed.pid)).read_text() == f"{left[0]}\n"
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=60)
    finally:
        killed.kill()
    assert left[0].exists()  # what the kill left
    closed = _python(start.replace("WAIT", "False"), tmp)
    out, _ = closed.communicate(timeout=600)
    assert closed.returncode == 0 and "loaded" in out, _log(tmp)
    assert not list(tmp.glob("vllm_dist_*")), sorted(p.name for p in tmp.rglob("*"))
    assert os.listdir(tmp / temp_files.FOLDER) == []
