"""vLLM's temporary files (a `vllm_dist_<uuid>` file store per engine start) go with the engine, and a killed run's go
with the next start: nothing piles up in the system's temporary folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
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


def test_an_engine_start_makes_its_temporary_files_in_its_own_folder(tmp_path: Path) -> None:
    folder = temp_files.make()
    try:
        before = tempfile.gettempdir(), os.environ.get("TMPDIR")
        with temp_files.engine_temp_dir(folder):
            assert tempfile.gettempdir() == str(folder)
            child = subprocess.run(  # a spawned engine core reads TMPDIR
                [sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                capture_output=True,
                text=True,
                check=True,
            )
            assert child.stdout.strip() == str(folder)
            assert temp_files.system_temp_dir() == folder.parent
        assert (tempfile.gettempdir(), os.environ.get("TMPDIR")) == before
        assert folder.is_dir() and folder.name.startswith(f"{temp_files.PREFIX}{os.getpid()}-")
        assert folder not in temp_files.remove_stale(folder.parent)  # held by this living process
    finally:
        temp_files.release(folder)
    assert not folder.exists()


def test_the_folders_of_killed_runs_are_removed_by_the_next_start_a_living_ones_kept(tmp_path: Path) -> None:
    hold = """
        from rs.engines import temp_files
        folder = temp_files.make()
        (folder / "vllm_dist_0123").write_text("a file store")
        print(folder, flush=True)
        input()
    """
    tmp_path = tmp_path / "tmp"
    tmp_path.mkdir()
    killed, living = _python(hold, tmp_path), _python(hold, tmp_path)
    try:
        killed_folder = Path(killed.stdout.readline().strip())
        living_folder = Path(living.stdout.readline().strip())
        assert killed_folder.parent == living_folder.parent == tmp_path
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        assert (killed_folder / "vllm_dist_0123").exists()  # a SIGKILL runs no cleanup
        (tmp_path / f"{temp_files.PREFIX}999-orphan").mkdir()  # killed before its lock was taken
        removed = temp_files.remove_stale(tmp_path)
        assert set(removed) == {killed_folder, tmp_path / f"{temp_files.PREFIX}999-orphan"}
        assert not killed_folder.exists() and living_folder.is_dir()
    finally:
        for process in (killed, living):
            process.kill()
            process.wait(timeout=30)
    assert temp_files.remove_stale(tmp_path) == [living_folder]


@pytest.mark.vllm
@pytest.mark.slow
def test_a_vllm_engine_leaves_no_file_store_behind_killed_or_not(tmp_path: Path) -> None:
    """Before, a killed run's `vllm_dist_<uuid>` stayed in the temporary folder for good (this test found it after the
    second run); now a closed engine's folder goes with it, and a killed run's with the next start."""
    pytest.importorskip("vllm")
    tmp_path = tmp_path / "tmp"
    tmp_path.mkdir()
    start = """
        import os
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
    killed = _python(start.replace("WAIT", "True"), tmp_path)  # waits, and is killed once loaded
    try:
        assert any(line.strip() == "loaded" for line in killed.stdout), _log(tmp_path)  # vLLM logs there too
        left = sorted(p.name for p in tmp_path.rglob("vllm_dist_*"))
        assert left, sorted(p.name for p in tmp_path.rglob("*"))  # the engine's file store, in its own folder
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=60)
    finally:
        killed.kill()
    assert list(tmp_path.rglob("vllm_dist_*"))  # what the kill left
    closed = _python(start.replace("WAIT", "False"), tmp_path)
    out, _ = closed.communicate(timeout=600)
    assert closed.returncode == 0 and "loaded" in out, _log(tmp_path)
    assert not list(tmp_path.rglob("vllm_dist_*")), sorted(p.name for p in tmp_path.rglob("*"))
    assert not list(tmp_path.glob(f"{temp_files.PREFIX}*"))
