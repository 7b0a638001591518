"""A real vLLM OpenAI-compatible server for the tests: the tiny models served as `vllm serve` would serve them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def vllm_server(
    model: Path, log_path: Path, *, max_model_len: int, extra: tuple[str, ...] = (), ready_s: float = 180
) -> Iterator[str]:
    """The server in its own process group (`python -m vllm...`: the CPU build has no `vllm` script); yields the /v1 URL.

    A server that exits or is not healthy within `ready_s` fails the test with the end of its log.
    """
    with vllm_server_started(model, log_path, max_model_len=max_model_len, extra=extra, ready_s=ready_s) as ready:
        yield ready()


@contextmanager
def vllm_server_started(
    model: Path, log_path: Path, *, max_model_len: int, extra: tuple[str, ...] = (), ready_s: float = 180
) -> Iterator[Callable[[], str]]:
    """`vllm_server` started but not yet waited for: yields `ready()`, which waits until it is healthy (`ready_s` from
    its start) and returns the /v1 URL, so that a module's other work runs while the server starts."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--kv-cache-memory-bytes",
        "268435456",
        "--limit-mm-per-prompt",
        '{"image": 1, "video": 0}',
        "--enforce-eager",
        "--dtype",
        "bfloat16",
        "--max-model-len",
        str(max_model_len),
        *extra,
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + ready_s
    url = f"http://127.0.0.1:{port}/v1"

    def ready() -> str:
        while True:
            if process.poll() is not None:
                pytest.fail(f"the vLLM server exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the vLLM server was not healthy within {ready_s:.0f} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        return url

    try:
        yield ready
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def start_early(request: pytest.FixtureRequest, fixture: str) -> None:
    """Set up the module-scoped `fixture` (a server started, not waited for) now, when a test of this module that will
    run uses it: the server starts beside the module's work before that test rather than in its setup."""
    if any(item.module is request.module and fixture in item.fixturenames for item in request.session.items):
        request.getfixturevalue(fixture)
