"""Shared test fixtures: small images, and a family written into the test's folder (`family`).

The helpers beside this file (faults.py, family_yaml.py, replay_family.py, hub_clients.py, checkout.py, ...) import by
name from a test in any folder under tests/ (`pythonpath` in pyproject.toml)."""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from PIL import Image
from replay_family import Case, write_family

from rs.families import Family
from rs.util.long_lived import kept_to_the_end

pytest_plugins = ["hub_clients", "shared_builds"]  # the Hub emulator's fixtures; the session's shared builds

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# The tests run several engines side by side (xdist workers, a run beside its reference): one compute thread each, left
# to the kernel's scheduler. vLLM's CPU worker process binds its OpenMP threads, and with them the whole process, to all
# cores but one (`auto`): on two cores, every engine of every test to core 0. Two OpenMP threads an engine on two busy
# cores spin waiting for each other.
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config: pytest.Config) -> None:
    """vLLM's sockets (`ipc://`) in a folder of the run's, removed at its end: vLLM leaves each one it made in the
    temporary directory (seven a multiprocessing run, whether it ends well or is killed), some eighty a suite."""
    if os.environ.get("PYTEST_XDIST_WORKER") or "VLLM_RPC_BASE_PATH" in os.environ:
        return  # a worker inherits the controller's (set before it starts them)
    folder = tempfile.mkdtemp(prefix="rs-tests-vllm-")
    os.environ["VLLM_RPC_BASE_PATH"] = folder
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: one worker a core, at most four (each worker holds torch and, in turn, a vLLM engine or two);
    PYTEST_XDIST_AUTO_NUM_WORKERS, when set, decides instead."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return max(1, min(4, len(os.sched_getaffinity(0))))


_COLLECTING = ExitStack()


def pytest_collection(session: pytest.Session) -> None:
    """The test modules (torch, vLLM, Ray, datasets: millions of objects that live as long as the worker) imported
    `kept_to_the_end`, as `rs.util.long_lived.import_for_good` imports a command's: a worker's collection takes 6 s of
    CPU instead of 11."""
    _COLLECTING.enter_context(kept_to_the_end())


def pytest_collection_finish(session: pytest.Session) -> None:
    _COLLECTING.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files holding a `slow` test first, then the rest, each file's tests in their order: `--dist loadfile` hands a
    free worker the next file in this order, so the long files start early and the short ones fill the end."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


def png(color: tuple[int, int, int], size: int = 16) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (size, size), color).save(buf, format="PNG")
    return buf.getvalue()


def jpeg(color: tuple[int, int, int], size: int = 16) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (size, size), color).save(buf, format="JPEG", quality=73)
    return buf.getvalue()


@pytest.fixture
def images() -> dict[str, bytes]:
    return {
        "red": png((255, 0, 0)),
        "blue": png((0, 0, 255)),
        "green": jpeg((0, 200, 0)),
        "corrupt": png((9, 9, 9))[:40],
    }


@pytest.fixture
def family(tmp_path: Path) -> Callable[..., Family]:
    """`family(cases, **blocks)`: the replay family of tests/replay_family.py answering `cases`, its families.yaml the base
    `REPLAY` of tests/family_yaml.py with `blocks` merged in (`judge={"enabled": False}`), written into the test's folder;
    `name=` the family's name. A module-scoped build calls `replay_family.write_family` the same way."""

    def write(cases: list[Case], /, *, name: str = "Shapes", **blocks: Any) -> Family:
        return write_family(tmp_path, cases, name=name, **blocks)

    return write


@pytest.fixture(autouse=True)
def _no_command_recorded() -> Iterator[None]:
    """Each test starts as no command: what a command's main called in this process recorded (its flags, how the process
    was started: `rs.util.invocation`) would otherwise shape the hints another test reads."""
    from rs.util import invocation

    invocation.reset()
    yield
    invocation.reset()
