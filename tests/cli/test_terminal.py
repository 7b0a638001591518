"""What a person sees on a terminal: the demo family published under a real pseudo-terminal.

No engine or library noise (it goes to `build/<FAMILY>/logs/`), a progress bar per stage, the
summary; `-v` brings the engines' own output back.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rs.pipeline.publish.cards.html import render_repo

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("vllm")

from checkout import ROOT  # noqa: E402

NOISE = (
    "torch.set_num_threads",
    "Triton",
    "pad_token_id",
    "torchvision",
    "WARNING",
    "INFO vllm",
    "FutureWarning",
    "Generating train split",
)


def on_a_terminal(args: list[str], tmp: Path, timeout: float = 300) -> tuple[int, str]:
    """Run `python -m rs.publish ARGS` with a pseudo-terminal as stdin, stdout and stderr; its exit status and output."""
    env = {
        **os.environ,
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "HF_HUB_OFFLINE": "1",
        "COLUMNS": "120",
        "TERM": "xterm",
    }
    env.pop("VLLM_CONFIGURE_LOGGING", None)
    env.pop("VLLM_LOGGING_LEVEL", None)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # a terminal window of 120 columns
    process = subprocess.Popen(
        [sys.executable, "-m", "rs.publish", *args],
        cwd=tmp,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        close_fds=True,
    )
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the terminal closed: the process has exited
                break
            if not data:
                break
            chunks.append(data)
        elif process.poll() is not None:
            break
    os.close(master)
    code = process.wait(timeout=30)
    return code, b"".join(chunks).decode("utf-8", "replace")


def test_the_terminal_shows_progress_and_the_summary_and_verbose_shows_the_engine(tmp_path: Path) -> None:
    common = ["TinyCLEVR", "--limit", "4"]
    # the run with -v (the engine's own output on the terminal) goes beside it, in a build, cache and out folder of its own so
    # that its engine runs
    with ThreadPoolExecutor(max_workers=1) as pool:
        verbose = pool.submit(
            on_a_terminal,
            [
                *common,
                "-v",
                "--out",
                str(tmp_path / "out2"),
                "--build-dir",
                str(tmp_path / "build2"),
                "--cache",
                str(tmp_path / "cache2.sqlite"),
            ],
            tmp_path,
        )
        code, seen = on_a_terminal(
            [
                *common,
                "--out",
                str(tmp_path / "out"),
                "--build-dir",
                str(tmp_path / "build"),
                "--cache",
                str(tmp_path / "cache.sqlite"),
            ],
            tmp_path,
        )
        code_verbose, loud = verbose.result()
    assert code == 0, seen[-3000:]
    for noise in NOISE:
        assert noise not in seen, (noise, seen)
    for stage in ("cleaning", "sampling"):  # a tqdm bar, drawn to its end
        assert re.search(re.escape(stage) + r": +100%\|.*\| [0-9]+/[0-9]+ \[", seen), (stage, seen)
    for split in (
        "TinyCLEVR_RS_think",
        "TinyCLEVR_RS_nothink",
        "TinyCLEVR_rejected",
    ):  # rows counted as they are written
        assert re.search(rf"writing {split}: [0-9]+row \[[0-9:]+, +[0-9.]+row/s\]", seen), (split, seen)
    assert "Loading rs:demo-vlm with vLLM" in seen and "accept rate" in seen and re.search(r"done in [0-9.]+s", seen)
    (log,) = (tmp_path / "build" / "TinyCLEVR" / "logs").glob("*.log")
    text = log.read_text()
    assert "vllm" in text and "torch.set_num_threads" in text  # the engine's output, kept where a person can find it
    lines = [line for line in seen.replace("\r", "\n").splitlines() if line.strip()]
    assert len(lines) < 60, seen  # bars redrawn in place, not a wall of text
    # the demo's three cards, as a reader on the Hub sees them: no markup dropped or shown as text, both figures
    for repo in sorted(
        p for p in (tmp_path / "out" / "local").iterdir() if not p.name.startswith(".")
    ):  # .rs-publish: the lock
        rendered = render_repo(repo)
        tables = (repo / "README.md").read_text().count("\n|---")  # each Markdown table's delimiter row
        assert rendered.problems == [] and rendered.html.count("<table>") == tables >= 4, (
            repo.name,
            rendered.problems,
        )
        assert "figures/qa-funnel.png" in rendered.html and "figures/answer-lengths.png" in rendered.html

    assert code_verbose == 0, loud[-3000:]
    assert "vllm" in loud and "torch.set_num_threads" in loud and "accept rate" in loud
    assert not (tmp_path / "build2" / "TinyCLEVR" / "logs").exists()


def _publish_with(tmp_path: Path, old: str, new: str) -> tuple[subprocess.CompletedProcess, Path | None]:
    families = (ROOT / "families.yaml").read_text()
    assert old in families
    (tmp_path / "families.yaml").write_text(families.replace(old, new, 1))
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rs.publish",
            "TinyCLEVR",
            "--config",
            str(tmp_path / "families.yaml"),
            "--limit",
            "2",
            "--out",
            str(tmp_path / "out"),
            "--build-dir",
            str(tmp_path / "build"),
            "--cache",
            str(tmp_path / "c.sqlite"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    logs = list((tmp_path / "build" / "TinyCLEVR" / "logs").glob("*.log"))
    assert len(logs) <= 1
    return done, logs[0] if logs else None


def test_an_engine_that_fails_says_where_its_log_is_and_shows_its_end(tmp_path: Path) -> None:
    # a KV cache too small for one sequence: vLLM refuses to start
    done, log = _publish_with(tmp_path, "kv_cache_memory_bytes: 268435456", "kv_cache_memory_bytes: 4096")
    assert done.returncode != 0
    assert f"log: {log}" in done.stderr and "its last" in done.stderr and "  | " in done.stderr
    assert "Traceback" in log.read_text()  # the failure itself is in the log too


def test_an_engine_argument_vllm_does_not_take_is_a_plain_error(tmp_path: Path) -> None:
    # caught before anything starts, against the installed vLLM's own argument list (rs/engines/vllm_args.py)
    done, log = _publish_with(
        tmp_path, "\n        max_num_seqs: 16\n", "\n        max_num_seqs: 16\n        no_such_engine_argument: 1\n"
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr and log is None
    first = done.stderr.splitlines()[0]
    assert first.startswith(f"error: {tmp_path / 'families.yaml'}:") and "no_such_engine_argument" in first
