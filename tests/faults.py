"""What the fault tests share: small families answered by a replay engine, and the byte-for-byte check of two publishes.

A family here is a JSON Lines file of questions about small PNGs, answered from a replay file (some
right, some wrong, so that every split has rows); `Alpha` and `Beta` differ only in their images.
`slow_replay` (tests/plugins/rs_faults.py) is the same engine taking `delay` seconds a question, so
that a run in a subprocess lasts long enough to be stopped part-way; `plugin_env` installs it the
way a package would be installed (an entry point on the subprocess's path), `engine_kinds_installed` in this process.
"""

from __future__ import annotations

import filecmp
import importlib
import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import pytest
from checkout import PLUGINS
from conftest import png

from rs.families import load_families
from rs.pipeline.publish.local import CONTROL
from rs.pipeline.publish.stage import PublishReport, publish
from rs.registry import CLEANING, ENGINES, SOURCES

FAMILY = """
  NAME:
    source: {kind: files, path: NAME/train.jsonl, columns: {id: id}}
    instruction: "\\nAnswer with one word."
    verifier: {name: exact}
    model: {id: replayed/model, revision: r1}
    engine: ENGINE
    judge: {calibration_samples: 4, min_negative_agreement: 0.5}
    publish: {namespace: tester, target: local}
    card: {pretty_name: NAME, description: A family for the fault tests., license: mit, citation: "@misc{x}"}
"""


def write_families(
    folder: Path,
    *,
    images: int = 8,
    engine: str = "{kind: replay, replay_path: replay.jsonl, batch_size: 4}",
    names: tuple[str, ...] = ("Alpha", "Beta"),
    samples: int = 0,
    family: str = FAMILY,
) -> Path:
    """families.yaml with one family per name, each `images` images with two questions; returns its path.

    `samples`: the replay file also answers samples 1 to `samples` of each question (a recovery pass asks for them),
    right where the greedy answer was wrong every other time. `family`: the block written for each name."""
    replay = []
    text = "families:"
    for offset, name in enumerate(names):
        (folder / name / "img").mkdir(parents=True, exist_ok=True)
        lines = []
        for i in range(images):
            image = f"img/{i}.png"
            (folder / name / image).write_bytes(png((30 * i % 256, 60 * offset, 90), size=8 + i))
            for turn, (question, answer) in enumerate(
                [(f"What colour is shape {i}?", "red"), (f"How many shapes in {i}?", str(i))]
            ):
                key = f"{name}-{i}-{turn}"
                lines.append({"id": key, "image": image, "question": question, "answer": answer})
                said = answer if (i + turn) % 3 else "blue"  # a third of the answers are wrong: rejected rows too
                replay.append({"key": f"{key}#0", "text": f"<think>looking at shape {i}</think>{said}"})
                for sample in range(1, samples + 1):
                    again = answer if (i + turn + sample) % 2 else "green"
                    replay.append(
                        {"key": f"{key}#0", "sample": sample, "text": f"<think>again, shape {i}</think>{again}"}
                    )
        (folder / name / "train.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
        text += family.replace("NAME", name).replace("ENGINE", engine)
    (folder / "replay.jsonl").write_text("\n".join(json.dumps(r) for r in replay) + "\n")
    (folder / "families.yaml").write_text(text)
    return folder / "families.yaml"


def publish_family(families: Path, work: Path, name: str = "Alpha") -> PublishReport:
    """Publish a family in this process into `work`'s out/, build/ and cache.sqlite."""
    return publish(
        load_families(families)[name],
        out=work / "out",
        build_root=work / "build",
        cache_path=work / "cache.sqlite",
        progress=False,
    )


def reference(folder: Path) -> tuple[Path, Path]:
    """The families file written in `folder`, and `folder/ref`, where Alpha was published without a fault."""
    families = write_families(folder)
    publish_family(families, folder / "ref")
    return families, folder / "ref"


def publish_command(families: Path, work: Path, family: str = "Alpha", *extra: str) -> list[str]:
    """`python -m rs.publish FAMILY` into `work`'s own out folder, build folder and cache."""
    return [
        sys.executable,
        "-m",
        "rs.publish",
        family,
        "--config",
        str(families),
        "--out",
        str(work / "out"),
        "--build-dir",
        str(work / "build"),
        "--cache",
        str(work / "cache.sqlite"),
        *extra,
    ]


def plugin_env(site: Path) -> dict[str, str]:
    """The environment of a subprocess that has the `rs-faults` distribution (engine kinds of the tests) installed."""
    info = site / "rs_faults-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rs-faults\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[rs.engines]\nslow_replay = rs_faults\n[rs.sources]\nslow_files = rs_faults\n"
        "[rs.cleaning]\nslow_check = rs_faults\n"
    )
    path = os.pathsep.join([str(site), str(PLUGINS), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}


@contextmanager
def engine_kinds_installed() -> Iterator[None]:
    """The `rs-faults` plug-ins (engine kinds, a source kind, a cleaning step) registered in this process for the duration;
    the registries are put back after."""
    with pytest.MonkeyPatch.context() as patch:
        fault_plugins(patch)
        yield


def fault_plugins(patch: pytest.MonkeyPatch) -> ModuleType:
    """Register the `rs-faults` plug-ins until `patch` is undone: every registry they add to is copied first, and the
    module imported afresh into the copies (an earlier import registered into copies since put back)."""
    registries = (ENGINES, SOURCES, CLEANING)
    for registry in registries:
        registry.names()  # the built-in kinds found first, so that putting the entries back keeps them
    patch.syspath_prepend(str(PLUGINS))
    for registry in registries:
        patch.setattr(
            registry,
            "_entries",
            {
                name: entry
                for name, entry in registry._entries.items()
                if getattr(entry, "__module__", None) != "rs_faults"
            },
        )
    module = importlib.import_module("rs_faults")
    return module if "slow_replay" in ENGINES else importlib.reload(module)


@contextmanager
def meanwhile(command: list[str], **popen: Any) -> Iterator[subprocess.Popen[str]]:
    """`command` run in the background while the block runs, its output piped (read it with `communicate`): a run that
    does not depend on what the block does uses the core the test's own process leaves idle. Killed if the block fails."""
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    try:
        yield run
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()


def published_files(folder: Path) -> list[str]:
    """The files of the repos under `folder` (the publish lock and transaction folder, `.rs-publish`, are no repo's)."""
    return sorted(
        p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and CONTROL not in p.parts
    )


def assert_same_published(reference: Path, other: Path, *, at_least: int = 9) -> None:
    """The two published folders hold the same files, byte for byte (rows, stats, cards, figures)."""
    files = published_files(reference)
    assert files == published_files(other) and len(files) >= at_least
    assert [p for p in files if not filecmp.cmp(reference / p, other / p, shallow=False)] == []


def cache_keys(path: Path) -> set[str]:
    """The keys committed to a generation cache (read-only; the file is not modified)."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return {key for (key,) in db.execute("SELECT key FROM answers")}


def cache_contents(path: Path) -> dict[str, str]:
    """Every answer committed to a generation cache, by key."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return dict(db.execute("SELECT key, value FROM answers"))


def cache_rows(path: Path) -> int:
    """Rows in a generation cache another process may be writing (0 before it exists or while it is being created)."""
    if not path.exists():
        return 0
    try:
        with closing(sqlite3.connect(path, timeout=5)) as db:
            return db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
    except sqlite3.Error:
        return 0


VLLM_ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
"""A subprocess's environment for a run on vLLM: offline, the engine core in the run's process (`1`: in its own)."""


def engine_core(parent: int) -> int | None:
    """The child process vLLM runs its engine core in (it names itself VLLM::EngineCore)."""
    for entry in Path("/proc").iterdir():
        try:
            stat, name = (entry / "stat").read_text(), (entry / "comm").read_text()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and name.startswith("VLLM::EngineCor"):
            return int(entry.name)
    return None


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc: no extra package needed)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def group_left(group: int) -> list[int]:
    """Live processes of the process group a run leads (started with a session of its own): its engine's, after it exited."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError):
            continue
        if fields[0] != "Z" and int(fields[2]) == group:
            found.append(int(entry.name))
    return found
