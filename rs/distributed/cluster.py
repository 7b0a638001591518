"""The cluster side of the Ray path: connecting, checking what fits, the replicas' environment, answering a step."""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from rs.engines.base import Generation, SamplingSettings
from rs.errors import causes
from rs.util.progress import progress
from rs.util.text import last_line

from .replica import EngineReplica, concurrent_batches
from .report import RayPlanError, StepStats

if TYPE_CHECKING:
    from rs.engines.generation_cache import GenerationCache

logger = logging.getLogger(__name__)


FORWARDED_ENV_PREFIXES = ("VLLM_",)
FORWARDED_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
"""Environment variables the CLI passes to the replicas (never tokens: log the workers in themselves)."""
NOT_FORWARDED = ("VLLM_HOST_IP", "VLLM_PORT")
MAX_STEP_ATTEMPTS = 3
"""A step whose pipeline fails while nodes leave the cluster runs again (for what is missing) up to this many times."""
FOOTER_READERS_ENV = "RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"
"""Ray Data's parquet reader reads the files' footers on a pool of actors of this size (32 unless set), made for each read."""


def ray_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


@dataclass
class Cluster:
    """How the replicas are placed, and what every step's pipeline shares."""

    ray: Any
    replicas: int
    num_gpus: float
    num_cpus: float
    runtime_env: dict[str, Any] | None
    batch_size: int
    progress: bool

    def fitting_replicas(self, step: str) -> int:
        """How many replicas the cluster holds now (at least 1), leaving a CPU for Ray Data's own tasks."""
        resources = self.ray.cluster_resources()  # alive nodes only
        fits = int((resources.get("CPU", 0) - 1) // self.num_cpus) if self.num_cpus else self.replicas
        if self.num_gpus:
            fits = min(fits, int(resources.get("GPU", 0) // self.num_gpus))
        if fits < self.replicas:
            logger.warning(
                "%s: the cluster now holds %d of the %d replicas; starting with %d (Ray Data adds more if nodes join)",
                step,
                max(fits, 0),
                self.replicas,
                max(fits, 1),
            )
        return max(1, min(fits, self.replicas))

    def read(self, files: list[str]) -> Any:
        """The parquet `files` of this build as a Ray Dataset.

        Ray Data reads the footers on a pool of 32 actors a read, a Python worker each, for one file as for
        thousands: a step reads the shards this run wrote, often one or two, and started 32 workers for them
        (a quarter of test_ray's CPU). The pool is one actor a file here, at most 32; the environment variable
        decides instead when the user sets it.
        """
        if FOOTER_READERS_ENV in os.environ:
            return self.ray.data.read_parquet(files)
        os.environ[FOOTER_READERS_ENV] = str(max(1, min(32, len(files))))  # read when the dataset is made, here
        try:
            return self.ray.data.read_parquet(files)
        finally:
            del os.environ[FOOTER_READERS_ENV]

    def alive_nodes(self) -> set[str]:
        return {node["NodeID"] for node in self.ray.nodes() if node["Alive"]}

    def answer(
        self,
        step: str,
        requests: Any,
        spec: dict[str, Any],
        identity: str,
        settings: SamplingSettings,
        cache: GenerationCache,
        stats: StepStats,
        total: int,
        *,
        rows_per_batch: int | None = None,
        part_of: Callable[[str], StepStats] | None = None,
    ) -> None:
        """Run `requests` (a Ray Dataset of `REQUESTS` rows) through the replicas; commit every batch as it returns.

        `rows_per_batch`: `REQUESTS` rows per engine batch (default: the batch size, one request a
        row). `stats` gets the pipeline's figures; `part_of(key)` says which step's stats a
        request's answer counts in (default: `stats`), when one pipeline serves two steps.
        """
        rows = rows_per_batch or self.batch_size
        from ray.data import ActorPoolStrategy

        part_of = part_of or (lambda key: stats)
        remote_args: dict[str, Any] = {"runtime_env": self.runtime_env} if self.runtime_env else {}
        stats.replicas = start_with = self.fitting_replicas(step)
        # The pool may shrink to one replica: with a fixed size, a node lost mid-step makes Ray restart its replica
        # on the CPUs Ray Data's read tasks need, and the pipeline waits forever.
        # several batches at once in each replica, sharing its engine (`EngineFeeder`): the engine never waits for the next batch
        calls = concurrent_batches(spec, self.batch_size)
        pool = ActorPoolStrategy(
            min_size=1,
            max_size=self.replicas,
            initial_size=start_with,
            max_tasks_in_flight_per_actor=calls,
            max_concurrent_calls_per_actor=calls,
            enable_true_multi_threading=True,
        )
        # one block per batch: replicas share the work evenly, and each answered batch reaches the driver (and the cache) alone
        answers = requests.repartition(target_num_rows_per_block=rows).map_batches(
            EngineReplica,
            fn_constructor_kwargs={"spec": spec, "identity": identity, "settings": settings},
            compute=pool,
            num_gpus=self.num_gpus or None,
            num_cpus=self.num_cpus,
            batch_size=rows,
            batch_format="pyarrow",
            **remote_args,
        )
        start = time.perf_counter()
        loads: dict[str, float] = {}
        batches: set[tuple[str, int] | tuple[str, int, str]] = set()
        activity: dict[str, tuple[float, float]] = {}
        try:
            with progress(total, f"{step} (ray, {start_with} replicas)", enabled=self.progress) as bar:
                for batch in answers.iter_batches(batch_size=None, batch_format="pyarrow"):
                    if not batch.num_rows:
                        continue
                    if not stats.startup_seconds:
                        first = batch.filter(pc.equal(batch["batch"], batch["batch"][0]))
                        stats.startup_seconds = time.perf_counter() - start - pc.sum(first["engine_seconds"]).as_py()
                    _commit(batch, cache, part_of, loads, batches, activity)
                    bar.update(batch.num_rows)
                    bar.set_postfix(stored=stats.stored, failed=stats.failed_requests, refresh=False)
        except Exception as err:
            hint = ""
            if any(text in str(err) for text in ("FileNotFoundError", "No such file", "does not exist")):
                hint = (
                    " (do all nodes see the build directory at the same path? --build-dir must be on shared storage)"
                )
            raise RuntimeError(
                f"the {step} step on Ray failed after committing {stats.stored} answers (they stay cached; "
                f"the same command again sends only what is missing): {last_line(err)}{hint}"
            ) from err
        finally:
            stats.replica_processes = len(loads)
            stats.load_seconds = max(loads.values(), default=0.0)


def _commit(
    batch: pa.Table,
    cache: GenerationCache,
    part_of: Callable[[str], StepStats],
    loads: dict[str, float],
    batches: set[tuple[str, int] | tuple[str, int, str]],
    activity: dict[str, tuple[float, float]],
) -> None:
    """Commit one block of answers (one transaction) and count each in its step."""
    keys = batch["key"].to_pylist()
    generations = [Generation.from_dict(json.loads(g)) for g in batch["generation"].to_pylist()]
    cache.put_many(zip(keys, generations))
    columns = (
        batch[c].to_pylist()
        for c in (
            "batch",
            "replica",
            "load_seconds",
            "batch_error",
            "engine_seconds",
            "busy_seconds",
            "active_seconds",
        )
    )
    for key, generation, batch_id, replica, load, error, seconds, busy, active in zip(keys, generations, *columns):
        stats = part_of(key)
        stats.sent += 1
        stats.stored += generation.cacheable
        stats.uncached += not generation.cacheable
        stats.failed_requests += error is not None
        stats.engine_seconds += seconds
        if active and active >= activity.get(replica, (0.0, 0.0))[1]:  # the replica's latest figures
            activity[replica] = (busy, active)
            stats.replica_busy[replica] = round(busy / active, 3)
        loads[replica] = load
        if (batch_id, id(stats)) not in batches:
            batches.add((batch_id, id(stats)))
            stats.batches += 1
        if error is not None and (batch_id, id(stats), "failed") not in batches:
            batches.add((batch_id, id(stats), "failed"))
            stats.failed_batches += 1


def connect(ray: Any, address: str | None, runtime_env: dict[str, Any] | None) -> None:
    """`ray.init`, with errors that say what to fix.

    Ray retries an address where nothing listens for many minutes, so a reachable port is checked
    first; a cluster started by `ray start --head` uses token authentication unless told otherwise,
    and a client without the token only gets a generic connection error.
    """
    if address and address.startswith("ray://"):
        raise RayPlanError(
            f"--ray {address}: Ray Data does not run through Ray Client (ray://, ray-project/ray#48682). Run the command "
            "on the head node with --ray auto (the cache then lives on the head's disk), or submit it there as a Ray "
            "Job: ray job submit --address http://HEAD:8265 -- python -m rs.sample FAMILY --ray auto"
        )
    if address and address != "auto":
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
        except ValueError:
            raise RayPlanError(
                f"--ray {address}: expected auto or HOST:PORT (the head's `ray start --head --port`)"
            ) from None
        except OSError as err:
            raise RayPlanError(
                f"--ray {address}: nothing answers there ({err}); the address must be the head's GCS, "
                "`ray start --head --port=6379` (`ray status` on the head prints it)"
            ) from None
    try:
        ray.init(address=address, runtime_env=runtime_env)
    except ConnectionError as err:
        if not any(word in _chain_text(err) for word in ("InvalidAuthToken", "AuthenticationError")):
            raise RayPlanError(f"could not connect to the Ray cluster at {address or 'auto'}: {err}") from err
        raise RayPlanError(
            f"the Ray cluster at {address or 'auto'} refused this client's authentication token. A cluster started by "
            "`ray start --head` uses token authentication: set RAY_AUTH_MODE=token here and give this machine the "
            "head's token (copy its ~/.ray/auth_token, or set RAY_AUTH_TOKEN)"
        ) from err


def _chain_text(error: BaseException) -> str:
    return "\n".join(f"{type(cause).__name__}: {cause}" for cause in itertools.islice(causes(error), 10))


def check_fits(resources: dict[str, float], *, replicas: int, num_gpus: float, num_cpus: float, local: bool) -> None:
    """Refuse a plan the cluster cannot hold: Ray Data would wait for resources forever.

    Ray Data's own tasks (listing files, reading, repartitioning) ask for one CPU each: with no
    CPU left beside the replicas, the pipeline never gets its first block.
    """
    gpus, cpus = resources.get("GPU", 0), resources.get("CPU", 0)
    problems = []
    if replicas * num_gpus > gpus:
        problems.append(
            f"{replicas} replicas x {num_gpus:g} GPUs need {replicas * num_gpus:g} GPUs, the cluster has {gpus:g}"
        )
    if replicas * num_cpus + 1 > cpus:
        problems.append(
            f"{replicas} replicas x {num_cpus:g} CPUs and 1 CPU for Ray Data's read tasks need "
            f"{replicas * num_cpus + 1:g} CPUs, the cluster has {cpus:g}"
        )
    if problems and local:  # on a cluster, each step starts with the replicas that fit (`Cluster.fitting_replicas`)
        raise RayPlanError("; ".join(problems) + ". Use fewer --replicas.")


def retrying_lost_nodes(
    step: str, cluster: Cluster, run_step: Callable[[], tuple[StepStats, ...]]
) -> tuple[StepStats, ...]:
    """Run a step; when its pipeline fails while nodes leave the cluster, run it again for what is still missing.

    Ray Data restarts a replica that dies on a live node by itself, but a node that goes away can
    take one of the pipeline's own tasks with it, and the whole pipeline fails. Its committed
    answers are cached, so the next attempt sends only the rest, sized to the nodes that remain.
    """
    for attempt in range(1, MAX_STEP_ATTEMPTS + 1):
        nodes = cluster.alive_nodes()
        try:
            results = run_step()
        except RuntimeError as err:
            lost = nodes - cluster.alive_nodes()
            if not lost or attempt == MAX_STEP_ATTEMPTS:
                raise
            logger.warning(
                "%s: %d node(s) left the cluster and the step failed (%s); its answers are cached, running it "
                "again for the rest (attempt %d of %d)",
                step,
                len(lost),
                err,
                attempt + 1,
                MAX_STEP_ATTEMPTS,
            )
            continue
        for stats in results:
            stats.attempts = attempt
        return results
    raise AssertionError("unreachable")


def forwarded_env() -> dict[str, str]:
    """The driver's environment variables that the CLI passes to the replicas: `VLLM_*` (but no key, token
    or per-node address) and the Hugging Face offline switches."""

    def private(name: str) -> bool:
        return any(word in name for word in ("KEY", "TOKEN", "SECRET", "PASSWORD")) or name in NOT_FORWARDED

    return {
        k: v
        for k, v in os.environ.items()
        if (k.startswith(FORWARDED_ENV_PREFIXES) or k in FORWARDED_ENV) and not private(k)
    }
