"""A node leaving the cluster in the middle of a Ray run: the run finishes on the nodes that remain.

`ray.cluster_utils.Cluster` starts a real two-node cluster on this machine (a head of 2 CPUs, a
worker of 1): two replicas of 1 CPU and Ray Data's read tasks fill it exactly. The worker node is
killed while the sampling step runs; the run must neither hang nor lose anything, and leave the
cache and items store of a single-process run.

(Ray notices a dead node only after its health checks fail, 5 s here, 17 s by default; a step that
starts before that plans with the dead node's CPUs.)
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.ray]
ray = pytest.importorskip("ray")
pytest.importorskip("vllm")

from family_yaml import tiny_family  # noqa: E402
from faults import cache_contents, cache_rows  # noqa: E402

from rs.context import BuildContext  # noqa: E402
from rs.distributed import StepStats, sample_on_ray  # noqa: E402
from rs.distributed.cluster import MAX_STEP_ATTEMPTS, retrying_lost_nodes  # noqa: E402
from rs.families import load_families  # noqa: E402
from rs.pipeline.sample.stage import SampleStage  # noqa: E402
from rs.pipeline.stage import ensure  # noqa: E402
from rs.store import read_records  # noqa: E402

ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}


@pytest.mark.slow
@pytest.mark.timeout(420)  # with a fixed-size actor pool this hung for good
def test_a_node_lost_mid_run_costs_nothing(tmp_path: Path) -> None:
    from ray.cluster_utils import Cluster

    # a window of one batch: each replica answers a batch or two at a time, so answers arrive through the whole step
    path = tiny_family(tmp_path, num_images=8, batch=3, engine={"in_flight": 3})
    family = load_families(path)["Tiny"]
    assert family.config.engine.in_flight == 3
    single = BuildContext(family, tmp_path / "single", tmp_path / "single.sqlite", progress=False)
    reference = ensure(SampleStage(), single)
    ctx = BuildContext(family, tmp_path / "ray", tmp_path / "ray.sqlite", progress=False)

    # a quick health check: Ray notices a dead node in about 5 s instead of about 17
    quick = {"health_check_period_ms": 500, "health_check_timeout_ms": 500, "health_check_failure_threshold": 3}
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False, "_system_config": quick}
    )
    worker = cluster.add_node(num_cpus=1)
    killed_at: list[int] = []

    def kill_worker_once_answers_arrive() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and cache_rows(ctx.cache_path) < 3:
            time.sleep(0.05)
        # Hold the cache's write lock until Ray sees the node gone: the driver's next commit waits, so
        # the sampling step cannot end (and the judge step plan) before the cluster has shrunk.
        with closing(sqlite3.connect(ctx.cache_path, timeout=30, isolation_level=None)) as db:
            db.execute("BEGIN IMMEDIATE")
            killed_at.append(db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])
            cluster.remove_node(worker, allow_graceful=False)
            while ray.cluster_resources().get("CPU", 0) > 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            db.execute("COMMIT")

    try:
        ray.init(address=cluster.address, runtime_env={"env_vars": ENV})
        cluster.wait_for_nodes()
        killer = threading.Thread(target=kill_worker_once_answers_arrive, daemon=True)
        killer.start()
        run = sample_on_ray(ctx, replicas=2, num_cpus=1, num_gpus=0, runtime_env={"env_vars": ENV})
        killer.join(timeout=5)
    finally:
        ray.shutdown()
        cluster.shutdown()

    assert killed_at and killed_at[0] < reference.items, "the node must die before the sampling step ends"
    sampling, judge = run.steps["sampling"], run.steps["judge"]
    assert sampling.replicas == 2 and judge.replicas == 1  # the judge step starts with what the cluster holds
    # the lost replica's batches went to the one that remained, in the same step; the judge step reused that one
    assert sampling.attempts == 1 and judge.attempts == 1
    assert set(judge.replica_busy) <= set(sampling.replica_busy) and len(judge.replica_busy) == 1
    assert sampling.stored == reference.items and judge.stored == reference.judged
    assert run.report.sampling_engine_calls == 0 and run.report.judge_engine_calls == 0
    assert cache_contents(ctx.cache_path) == cache_contents(single.cache_path)
    assert list(read_records(ctx.paths.items, "items")) == list(read_records(single.paths.items, "items"))


class _Nodes:
    """The `_Cluster` surface `retrying_lost_nodes` reads: which nodes are alive, as Ray would answer."""

    def __init__(self, *answers: set[str]):
        self.answers = list(answers)

    def alive_nodes(self) -> set[str]:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def test_a_step_runs_again_only_when_nodes_left_during_it() -> None:
    attempts: list[int] = []

    def failing_until(n: int):
        def step() -> tuple[StepStats]:
            attempts.append(1)
            if len(attempts) < n:
                raise RuntimeError("the judge step on Ray failed after committing 0 answers")
            return (StepStats(),)

        return step

    # a node left during the first attempt: the second runs and its stats say so
    (stats,) = retrying_lost_nodes("judge", _Nodes({"a", "b"}, {"a"}, {"a"}), failing_until(2))
    assert stats.attempts == 2 and len(attempts) == 2

    # no node left: the failure is the step's own, raised at once
    attempts.clear()
    with pytest.raises(RuntimeError, match="failed after committing"):
        retrying_lost_nodes("judge", _Nodes({"a", "b"}), failing_until(5))
    assert len(attempts) == 1

    # nodes keep leaving: it gives up after MAX_STEP_ATTEMPTS
    attempts.clear()
    shrinking = _Nodes(*({str(i) for i in range(n)} for n in range(10, 0, -1)))
    with pytest.raises(RuntimeError):
        retrying_lost_nodes("judge", shrinking, failing_until(99))
    assert len(attempts) == MAX_STEP_ATTEMPTS
