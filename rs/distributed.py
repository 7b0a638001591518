"""The sampling stage (and the judge) on a Ray cluster with Ray Data: one engine replica per GPU, one cache.

    python -m rs.sample FAMILY --ray [auto | HEAD:6379] [--replicas N]

Each step is one Ray Data pipeline, so every replica loads its model once per step:

    read_parquet(clean store) -> map_batches(sampling_requests)                 items still missing, by image
                              -> repartition(target_num_rows_per_block=images)  one block per batch
                              -> map_batches(EngineReplica, ActorPoolStrategy(size=N), num_gpus=TP x PP)
                              -> iter_batches() on the driver -> GenerationCache.put_many

`EngineReplica` holds the project's own engine of the family's kind (any kind registered with
`runs_in_replica`, such as `vllm`), so prompts, sampling settings, reasoning
split, per-request failure isolation and `Generation` fields are those of the single-process path,
and the cache keys (`rs.engines.cached.cache_key`) are the same: a family can be started on one
machine, continued on a cluster and finished anywhere, with nothing recomputed.

Where results live, and why: the driver (the process running this) is the only writer of the
generation cache, which stays on its local disk. SQLite is not safe on a network filesystem, and
per-replica stores would need a merge; instead answers travel back through Ray's object store and
the driver commits each batch as it arrives. The inputs go the other way through shared storage:
Ray Data's read tasks, on any node, read the clean store (and the judge's request files) from the
build directory, so on a multi-node cluster `--build-dir` must be a filesystem every node mounts at
the same path (NFS, Lustre, a FUSE bucket). The cache (`--cache`) need not be.

What is sent: the driver first reads the clean store without images, computes every request's
key and looks it up; only the missing ones travel. It broadcasts them as a sorted array of 64-bit
key prefixes (8 bytes per missing item), which the read tasks test each item against: a prefix
collision can only send an already cached item again, never skip a missing one. Requests travel
grouped by image (an image asked about ten times is shipped once), and a batch holds whole images,
about `engine.batch_size` requests.

The steps:

1. sampling: every cleaned QA item, its request built exactly as `rs.sample.SampleStage` builds it;
2. judge: the verifier rejections that have a final answer, verified on the driver from the cached
   generations exactly as `SampleStage` verifies them, plus the calibration cases of
   `rs.judge.calibrate`; written to `BUILD/FAMILY/ray/judge-*.parquet` and answered in one pipeline;
3. the normal `rs.stages.ensure_sampled` on the driver, which finds everything cached (zero engine
   calls) and writes the items store and `sample.json` exactly as a single-process run does.

Failures cost at most their batch. A replica that dies (OOM kill, crash) is restarted by Ray and
its batches are retried (Ray Data's actor pool: `max_restarts=-1`, `max_task_retries=-1`). A node
that leaves the cluster takes its replicas with it: the pool may shrink to one replica, each step
starts with the replicas the cluster holds then (`_Cluster.fitting_replicas`), and a step whose
pipeline fails while nodes leave runs again for what is missing (`MAX_STEP_ATTEMPTS`). A batch
whose engine raises comes back marked failed and is not cached (the replica replaces its engine);
the run goes on, reports it, skips the judge step (it needs every answer) and ends with
`RayIncomplete`; the same command again sends only what is missing. A replica failing
`MAX_CONSECUTIVE_FAILURES` batches in a row stops the run: something is wrong with the node or the
model, not with a batch. Whatever was committed before stays committed.

Ray's own LLM processor (`ray.data.llm`) is not used: ray 2.60's `llm` extra pins
`vllm[audio]==0.29.0`, which conflicts with the project's vLLM, and it builds its own prompts and
sampling parameters, so its outputs would not share the single-process path's cache keys.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from array import array
from dataclasses import asdict, dataclass, field
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rs.engines.base import Engine, Generation, Request, SamplingSettings
from rs.errors import RsError, UsageError
from rs.registry import ENGINES

if TYPE_CHECKING:
    from rs.engines.cache import GenerationCache
    from rs.stages import BuildContext

logger = logging.getLogger(__name__)

__all__ = ["RAY_MISSING", "EngineReplica", "RayIncomplete", "RayNotInstalled", "RayPlanError", "RayRun", "StepStats", "ray_available", "sample_on_ray"]

RAY_MISSING = "Ray is not installed: pip install 'rs[ray]'"
FORWARDED_ENV_PREFIXES = ("VLLM_",)
FORWARDED_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
"""Environment variables the CLI passes to the replicas (never tokens: log the workers in themselves)."""
NOT_FORWARDED = ("VLLM_HOST_IP", "VLLM_PORT")
MAX_CONSECUTIVE_FAILURES = 3
MAX_STEP_ATTEMPTS = 3
"""A step whose pipeline fails while nodes leave the cluster runs again (for what is missing) up to this many times."""

REQUEST = pa.struct([("key", pa.string()), ("prompt", pa.string()), ("item_key", pa.string())])
REQUESTS = pa.schema([("image", pa.binary()), ("image_sha256", pa.string()), ("requests", pa.list_(REQUEST))])
"""What a replica answers: one image (None for the judge) and the requests about it, with their cache keys.

Grouped by image so that an image asked about ten times travels once, not ten times."""

ANSWERS = pa.schema([
    ("key", pa.string()), ("generation", pa.string()), ("batch_error", pa.string()), ("batch", pa.string()), ("replica", pa.string()),
    ("load_seconds", pa.float64()), ("engine_seconds", pa.float64()),
])
"""What a replica returns: the `Generation` as JSON; `batch_error` when its whole batch failed."""


class RayNotInstalled(UsageError, RuntimeError):
    def __init__(self) -> None:
        super().__init__(RAY_MISSING)


class RayPlanError(UsageError, ValueError):
    """A run this cluster or this family cannot do: not the vllm engine, more replicas than the cluster holds,
    a cluster this machine cannot reach or is not authorised to join."""


class RayIncomplete(RsError, RuntimeError):
    """Some batches failed or some answers were not cacheable: re-run to send only what is missing."""

    def __init__(self, run: "RayRun"):
        self.run = run
        lost = {name: (s.failed_requests, s.uncached) for name, s in run.steps.items() if s.failed_requests or s.uncached}
        super().__init__(
            "the Ray run is incomplete: " + ", ".join(f"{name}: {failed} requests in failed batches, {uncached} not cacheable"
                                                       for name, (failed, uncached) in lost.items())
            + "; run the same command again, it sends only what is missing"
        )


def ray_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


@dataclass
class StepStats:
    """What one step did: requests considered, answered from the cache, sent, lost."""

    requests: int = 0
    cached: int = 0
    duplicates: int = 0
    """Requests whose key was already to be sent in this step (the same question asked twice)."""
    sent: int = 0
    batches: int = 0
    stored: int = 0
    uncached: int = 0
    """Answered with a failure that is not cached (transient, or a failed batch): sent again on the next run."""
    failed_batches: int = 0
    failed_requests: int = 0
    seconds: float = 0.0
    """Wall time of the step on the driver: looking up keys, the Ray Data pipeline, committing."""
    startup_seconds: float = 0.0
    """From starting the pipeline to its first answer, less that batch's engine time: starting the replicas, loading the model."""
    engine_seconds: float = 0.0
    """Time the replicas spent in `generate()`, summed over replicas."""
    load_seconds: float = 0.0
    """The slowest replica's model load."""
    replica_processes: int = 0
    """Replica processes that answered: more than the replicas when Ray restarted some."""
    replicas: int = 0
    """The pool's size at the step's start: the replicas asked for, or fewer when the cluster had lost nodes."""
    attempts: int = 1
    """More than 1 when nodes left the cluster during the step and it ran again for what was missing."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RayRun:
    """The Ray steps of one run, and the final single-process pass's report when it ran."""

    replicas: int = 0
    steps: dict[str, StepStats] = field(default_factory=dict)
    seconds: float = 0.0
    """The Ray part of the run (the final pass not included)."""
    report: dict[str, Any] | None = None

    @property
    def complete(self) -> bool:
        return all(s.failed_requests == 0 and s.uncached == 0 for s in self.steps.values())

    @property
    def startup_seconds(self) -> float:
        return sum(s.startup_seconds for s in self.steps.values())

    @property
    def load_seconds(self) -> float:
        return max((s.load_seconds for s in self.steps.values()), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"replicas": self.replicas, "seconds": round(self.seconds, 3), "startup_seconds": round(self.startup_seconds, 3),
                "steps": {name: s.to_dict() for name, s in self.steps.items()}}


# --- on the workers -------------------------------------------------------------------------------


def sampling_requests(batch: pa.Table, *, identity: str, settings: SamplingSettings, instruction: str, missing: np.ndarray) -> pa.Table:
    """Clean-store rows -> the sampling requests of their QA items that are still missing, by image (a Ray Data map).

    Builds each request as `SampleStage` does and keys it with the driver's `cache_key`; `missing`
    is the sorted array of the missing keys' 64-bit prefixes.
    """
    from rs.engines.cached import cache_key
    from rs.prompt import sampling_request
    from rs.store import qa_item

    out: dict[str, list[Any]] = {name: [] for name in REQUESTS.names}
    seen: set[str] = set()
    for image, sha, qa in zip(batch["image"].to_pylist(), batch["image_sha256"].to_pylist(), batch["qa"].to_pylist()):
        requests = []
        for item in qa:
            request = sampling_request(qa_item(item), instruction, sha)
            key = cache_key(identity, settings, sha, request.prompt)
            if key not in seen and _is_missing(key, missing):
                seen.add(key)
                requests.append({"key": key, "prompt": request.prompt, "item_key": request.item_key})
        if requests:
            for name, value in zip(REQUESTS.names, (image, sha, requests)):
                out[name].append(value)
    return pa.table(out, schema=REQUESTS)


def _prefix(key: str) -> int:
    return int(key[:16], 16)


def _is_missing(key: str, missing: np.ndarray) -> bool:
    prefix = np.uint64(_prefix(key))
    i = int(np.searchsorted(missing, prefix))
    return i < len(missing) and missing[i] == prefix


class EngineReplica:
    """One engine replica: the Ray Data actor class that answers batches of requests.

    Builds the family's engine from its configuration (`spec`, see `engine_specs`), refuses to start if
    its identity differs from the driver's (its answers would land under keys no run asks for), and
    loads the model before the first batch.
    """

    def __init__(self, spec: dict[str, Any], identity: str, settings: SamplingSettings):
        from rs.engines.cached import identity_key

        self.spec, self.settings = spec, settings
        self.engine = build_replica_engine(spec)
        if (mine := identity_key(self.engine)) != identity:
            raise RuntimeError(
                f"this replica computes another engine identity than the driver, so its answers would be cached under keys no "
                f"run asks for: driver {identity}, replica {mine}. Run the driver and the replicas with the same versions of rs, "
                "vLLM and transformers, and the same model files."
            )
        start = time.perf_counter()
        self.engine.load()  # now, not in the first batch
        self.load_seconds = time.perf_counter() - start
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.failures = 0
        self.batches = 0

    def __call__(self, batch: pa.Table) -> pa.Table:
        keys, requests = [], []
        for row in batch.to_pylist():
            for r in row["requests"]:
                keys.append(r["key"])
                requests.append(Request(prompt=r["prompt"], image=row["image"], image_sha256=row["image_sha256"], item_key=r["item_key"]))
        start = time.perf_counter()
        error = None
        try:
            generations = self.engine.generate(requests, self.settings)
            if len(generations) != len(requests):
                raise RuntimeError(f"the engine returned {len(generations)} generations for {len(requests)} requests")
            self.failures = 0
        except Exception as err:
            self.failures += 1
            if self.failures >= MAX_CONSECUTIVE_FAILURES:
                raise RuntimeError(f"replica {self.name} failed {self.failures} batches in a row; stopping the run "
                                   "(the cache keeps everything answered so far)") from err
            error = _first_line(err)
            logger.error("replica %s: a batch of %d requests failed, its answers are not cached: %s", self.name, len(requests), error)
            self._replace_engine()  # per-request failures never raise: an engine that did is suspect
            generations = [Generation.failed(f"batch failed: {error}", cacheable=False) for _ in requests]
        seconds = time.perf_counter() - start
        self.batches += 1
        n = len(requests)
        return pa.table({
            "key": keys, "generation": [json.dumps(g.to_dict(), ensure_ascii=False) for g in generations],
            "batch_error": [error] * n, "batch": [f"{self.name}/{self.batches}"] * n, "replica": [self.name] * n, "load_seconds": [self.load_seconds] * n,
            "engine_seconds": [seconds / n] * n,
        }, schema=ANSWERS)

    def _replace_engine(self) -> None:
        try:
            self.engine.close()
        except Exception:
            logger.warning("closing a failed engine failed", exc_info=True)
        self.engine = build_replica_engine(self.spec)


def build_replica_engine(spec: dict[str, Any]) -> Engine:
    """The engine a replica runs, from its spec (see `engine_specs`), set up to run inside an actor."""
    from rs.families.schema import ModelConfig

    plugin = ENGINES.get(spec["engine"]["kind"])
    config = plugin.Config(**spec["engine"]).for_replica()
    return plugin.from_config(config, ModelConfig(**spec["model"]))


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[-1] if text else ''}"


# --- on the driver --------------------------------------------------------------------------------


@dataclass
class _Cluster:
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
            logger.warning("%s: the cluster now holds %d of the %d replicas; starting with %d (Ray Data adds more if nodes "
                           "join)", step, max(fits, 0), self.replicas, max(fits, 1))
        return max(1, min(fits, self.replicas))

    def alive_nodes(self) -> set[str]:
        return {node["NodeID"] for node in self.ray.nodes() if node["Alive"]}

    def answer(self, step: str, requests: Any, spec: dict[str, Any], identity: str, settings: SamplingSettings,
               cache: GenerationCache, stats: StepStats, total: int, *, rows_per_batch: int | None = None,
               part_of: Callable[[str], StepStats] | None = None) -> None:
        """Run `requests` (a Ray Dataset of `REQUESTS` rows) through the replicas; commit every batch as it returns.

        `rows_per_batch`: `REQUESTS` rows per engine batch (default: the batch size, one request a
        row). `stats` gets the pipeline's figures; `part_of(key)` says which step's stats a
        request's answer counts in (default: `stats`), when one pipeline serves two steps.
        """
        rows = rows_per_batch or self.batch_size
        from ray.data import ActorPoolStrategy
        from tqdm.auto import tqdm

        part_of = part_of or (lambda key: stats)
        remote_args: dict[str, Any] = {"runtime_env": self.runtime_env} if self.runtime_env else {}
        stats.replicas = start_with = self.fitting_replicas(step)
        # The pool may shrink to one replica: with a fixed size, a node lost mid-step makes Ray restart its replica
        # on the CPUs Ray Data's read tasks need, and the pipeline waits forever.
        pool = ActorPoolStrategy(min_size=1, max_size=self.replicas, initial_size=start_with)
        # one block per batch: replicas share the work evenly, and each answered batch reaches the driver (and the cache) alone
        answers = requests.repartition(target_num_rows_per_block=rows).map_batches(
            EngineReplica, fn_constructor_kwargs={"spec": spec, "identity": identity, "settings": settings},
            compute=pool, num_gpus=self.num_gpus or None, num_cpus=self.num_cpus,
            batch_size=rows, batch_format="pyarrow", **remote_args,
        )
        start = time.perf_counter()
        loads: dict[str, float] = {}
        batches: set[tuple[str, int]] = set()
        try:
            with tqdm(total=total, desc=f"{step} (ray, {start_with} replicas)", unit="item", disable=not self.progress,
                      dynamic_ncols=True) as bar:
                for batch in answers.iter_batches(batch_size=None, batch_format="pyarrow"):
                    if not batch.num_rows:
                        continue
                    if not stats.startup_seconds:
                        first = batch.filter(pc.equal(batch["batch"], batch["batch"][0]))
                        stats.startup_seconds = time.perf_counter() - start - pc.sum(first["engine_seconds"]).as_py()
                    _commit(batch, cache, part_of, loads, batches)
                    bar.update(batch.num_rows)
                    bar.set_postfix(stored=stats.stored, failed=stats.failed_requests, refresh=False)
        except Exception as err:
            hint = ""
            if any(text in str(err) for text in ("FileNotFoundError", "No such file", "does not exist")):
                hint = " (do all nodes see the build directory at the same path? --build-dir must be on shared storage)"
            raise RuntimeError(f"the {step} step on Ray failed after committing {stats.stored} answers (they stay cached; "
                               f"the same command again sends only what is missing): {_first_line(err)}{hint}") from err
        finally:
            stats.replica_processes = len(loads)
            stats.load_seconds = max(loads.values(), default=0.0)


def _commit(batch: pa.Table, cache: GenerationCache, part_of: Callable[[str], StepStats], loads: dict[str, float],
            batches: set[tuple[str, int]]) -> None:
    """Commit one block of answers (one transaction) and count each in its step."""
    keys = batch["key"].to_pylist()
    generations = [Generation.from_dict(json.loads(g)) for g in batch["generation"].to_pylist()]
    cache.put_many(zip(keys, generations))
    columns = (batch[c].to_pylist() for c in ("batch", "replica", "load_seconds", "batch_error", "engine_seconds"))
    for key, generation, batch_id, replica, load, error, seconds in zip(keys, generations, *columns):
        stats = part_of(key)
        stats.sent += 1
        stats.stored += generation.cacheable
        stats.uncached += not generation.cacheable
        stats.failed_requests += error is not None
        stats.engine_seconds += seconds
        loads[replica] = load
        if (batch_id, id(stats)) not in batches:
            batches.add((batch_id, id(stats)))
            stats.batches += 1
            stats.failed_batches += error is not None


def engine_specs(ctx: BuildContext) -> dict[str, dict[str, Any]]:
    """What a replica needs to build the family's engines: the configuration, not the driver's objects."""
    c = ctx.family.config
    if not ENGINES.get(c.engine.kind).runs_in_replica:
        able = [name for name, plugin in ENGINES.items() if plugin.runs_in_replica]
        raise RayPlanError(f"families.{ctx.family.name}.engine.kind is {c.engine.kind!r}; the Ray path runs engine kinds that run "
                           f"in a replica ({', '.join(able)}); an openai server is already shared by every process that points at it")
    judge_model = c.judge.model or c.model
    engine = asdict(c.engine)
    return {"sampler": {"model": asdict(c.model), "engine": engine},
            "judge": {"model": asdict(judge_model), "engine": engine}}


def gpus_per_replica(ctx: BuildContext) -> int:
    """GPUs one replica of the family's engine holds (for vllm: tensor x pipeline parallel size)."""
    return ctx.family.config.engine.devices_per_replica()


def sample_on_ray(
    ctx: BuildContext,
    *,
    address: str | None = None,
    replicas: int | None = None,
    num_gpus: float | None = None,
    num_cpus: float = 1,
    runtime_env: dict[str, Any] | None = None,
    ship_code: bool = True,
    batch_size: int | None = None,
    lookahead: int = 4096,
    finish: bool = True,
) -> RayRun:
    """Fill the generation cache for `ctx`'s family on Ray, then (`finish`) run `ensure_sampled` on the driver.

    Args:
        address: Ray address (`auto`, `HEAD:6379`; not `ray://`: Ray Data does not run through Ray
            Client); None starts a local Ray. Ignored when Ray is already initialised in this process.
        replicas: engine replicas (Ray Data's actor pool size); default: the cluster's GPUs //
            `num_gpus` (1 without GPUs).
        num_gpus: GPUs per replica; default: tensor x pipeline parallel size when the cluster has
            GPUs, else 0 (vLLM-CPU).
        num_cpus: CPUs Ray reserves per replica. The replicas must leave one CPU of the cluster free
            for Ray Data's own tasks (listing and reading files, building requests, repartitioning).
        runtime_env: the replicas' Ray runtime environment (`env_vars`, ...).
        ship_code: when this call connects to Ray, send this `rs` package to the workers
            (`py_modules`), so that they compute keys and outputs with the driver's code whatever
            version is installed on the nodes (vLLM and its dependencies must be there).
        batch_size: requests per batch; default: the family's `engine.batch_size` (as single-process).
        lookahead: requests whose cache keys the driver looks up together.
        finish: run `ensure_sampled` at the end, when every step is complete.

    Raises:
        RayNotInstalled: without Ray.
        RayPlanError: the family's engine is not vllm, the replicas do not fit the local Ray, or the
            cluster at `address` cannot be reached or refuses this client's token.
        RayIncomplete: a batch failed or an answer was not cacheable; the cache keeps everything
            else, and the same call again sends only what is missing.
        RuntimeError: a step's pipeline failed (a replica failing batch after batch, a replica that
            cannot start); what was committed before stays cached.
    """
    if not ray_available():
        raise RayNotInstalled()
    import ray

    from rs.engines.cache import GenerationCache
    from rs.engines import engines_for
    from rs.sample import SampleStage
    from rs.stages import ensure_clean, ensure_sampled, read_report, sample_fingerprint

    started = time.perf_counter()
    run = RayRun()
    clean = ensure_clean(ctx)
    if report := read_report(ctx.paths.sample_report, sample_fingerprint(ctx, clean)):
        run.report = report
        return run
    specs = engine_specs(ctx)
    sampler, judge = engines_for(ctx.family)  # lazy: identities only, no model on the driver

    own_ray = not ray.is_initialized()
    if own_ray:  # Ray uploads local code only for a whole job, so `ship_code` needs this connection to be ours
        import rs

        _connect(ray, address, {"py_modules": [str(Path(rs.__file__).parent)]} if ship_code else None)
    elif ship_code:
        logger.info("Ray was initialised before: the replicas import the rs installed on their nodes")
    try:
        resources = ray.cluster_resources()
        if num_gpus is None:
            num_gpus = gpus_per_replica(ctx) if resources.get("GPU", 0) else 0
        if replicas is None:
            replicas = max(1, int(resources.get("GPU", 0) // num_gpus)) if num_gpus else 1
        _check_fits(resources, replicas=replicas, num_gpus=num_gpus, num_cpus=num_cpus, local=address is None)
        cluster = _Cluster(ray, replicas, num_gpus, num_cpus, runtime_env,
                           batch_size or ctx.family.config.engine.batch_size, ctx.progress)
        run.replicas = replicas
        data = ray.data.DataContext.get_current()
        bars = data.enable_progress_bars
        data.enable_progress_bars = ctx.progress
        try:
            with GenerationCache(ctx.cache_path) as cache:
                def new_stage() -> Any:  # the judge step's calibration cases accumulate in the stage: one per attempt
                    return SampleStage(ctx.family.config, sampler, judge, cache, progress=False)

                _run_steps(ctx, new_stage, cluster, cache, specs, run, lookahead)
        finally:
            data.enable_progress_bars = bars
    finally:
        if own_ray:
            ray.shutdown()
    run.seconds = time.perf_counter() - started
    if not run.complete:
        raise RayIncomplete(run)
    if finish:
        run.report = ensure_sampled(ctx)
    return run


def _connect(ray: Any, address: str | None, runtime_env: dict[str, Any] | None) -> None:
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
            raise RayPlanError(f"--ray {address}: expected auto or HOST:PORT (the head's `ray start --head --port`)") from None
        except OSError as err:
            raise RayPlanError(f"--ray {address}: nothing answers there ({err}); the address must be the head's GCS, "
                               "`ray start --head --port=6379` (`ray status` on the head prints it)") from None
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


def _chain_text(error: BaseException | None) -> str:
    parts = []
    while error is not None and len(parts) < 10:
        parts.append(f"{type(error).__name__}: {error}")
        error = error.__cause__ or error.__context__
    return "\n".join(parts)


def _check_fits(resources: dict[str, float], *, replicas: int, num_gpus: float, num_cpus: float, local: bool) -> None:
    """Refuse a plan the cluster cannot hold: Ray Data would wait for resources forever.

    Ray Data's own tasks (listing files, reading, repartitioning) ask for one CPU each: with no
    CPU left beside the replicas, the pipeline never gets its first block.
    """
    gpus, cpus = resources.get("GPU", 0), resources.get("CPU", 0)
    problems = []
    if replicas * num_gpus > gpus:
        problems.append(f"{replicas} replicas x {num_gpus:g} GPUs need {replicas * num_gpus:g} GPUs, the cluster has {gpus:g}")
    if replicas * num_cpus + 1 > cpus:
        problems.append(f"{replicas} replicas x {num_cpus:g} CPUs and 1 CPU for Ray Data's read tasks need "
                        f"{replicas * num_cpus + 1:g} CPUs, the cluster has {cpus:g}")
    if problems and local:  # on a cluster, each step starts with the replicas that fit (`_Cluster.fitting_replicas`)
        raise RayPlanError("; ".join(problems) + ". Use fewer --replicas.")


def _run_steps(ctx: BuildContext, new_stage: Callable[[], Any], cluster: _Cluster, cache: GenerationCache,
               specs: dict[str, dict[str, Any]], run: RayRun, lookahead: int) -> None:
    run.steps["sampling"], = _retrying_lost_nodes("sampling", cluster, lambda: (
        _sampling_step(ctx, new_stage(), cluster, cache, specs["sampler"], lookahead),))
    if new_stage().judge is None or not run.complete:
        return  # the judge needs every answer; a re-run does it
    run.steps["judge"], run.steps["calibration"] = _retrying_lost_nodes("judge", cluster, lambda: _judge_step(
        ctx, new_stage(), cluster, cache, specs["judge"], lookahead))


def _retrying_lost_nodes(step: str, cluster: _Cluster, run_step: Callable[[], tuple[StepStats, ...]]) -> tuple[StepStats, ...]:
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
            logger.warning("%s: %d node(s) left the cluster and the step failed (%s); its answers are cached, running it "
                           "again for the rest (attempt %d of %d)", step, len(lost), err, attempt + 1, MAX_STEP_ATTEMPTS)
            continue
        for stats in results:
            stats.attempts = attempt
        return results
    raise AssertionError("unreachable")


def _sampling_step(ctx: BuildContext, stage: Any, cluster: _Cluster, cache: GenerationCache, spec: dict[str, Any],
                   lookahead: int) -> StepStats:
    """Answer the family's missing sampling requests: read the clean store, keep what is missing, answer."""
    stats = StepStats()
    start = time.perf_counter()
    missing, images = _missing_sampling_keys(ctx, stage, cache, stats, lookahead)
    if missing.size:
        files = sorted(str(p) for p in ctx.paths.clean.glob("rows-*.parquet"))
        requests = cluster.ray.data.read_parquet(files).select_columns(["image", "image_sha256", "qa"]).map_batches(
            sampling_requests, fn_kwargs={"identity": stage.runner.identity_key, "settings": stage.settings,
                                          "instruction": stage.config.instruction, "missing": missing},
            batch_format="pyarrow", batch_size=None,
        )
        per_image = missing.size / images  # a batch holds whole images, about `batch_size` requests
        cluster.answer("sampling", requests, spec, stage.runner.identity_key, stage.settings, cache, stats, int(missing.size),
                       rows_per_batch=max(1, round(cluster.batch_size / per_image)))
    stats.seconds = time.perf_counter() - start
    return stats


def _judge_step(ctx: BuildContext, stage: Any, cluster: _Cluster, cache: GenerationCache, spec: dict[str, Any],
                lookahead: int) -> tuple[StepStats, StepStats]:
    """Verify every answer on the driver, write the missing judge and calibration requests, answer them in one pipeline."""
    from rs.store import ParquetStreamWriter

    judge = stage.judge
    stats, calibration = StepStats(), StepStats()
    start = time.perf_counter()
    directory = ctx.paths.root / "ray"
    for old in directory.glob("judge-*.parquet"):
        old.unlink()
    unanswered: list[int] = [0]
    seen: set[bytes] = set()
    calibration_keys: set[str] = set()  # those sent for calibration only (a case can repeat a rejection's request)
    with ParquetStreamWriter(directory, "judge", REQUESTS, group_rows=max(1024, cluster.batch_size)) as writer:
        _write_missing(_judge_requests(ctx, stage, unanswered), cache, writer, stats, seen, lookahead)
        if unanswered[0]:
            raise RuntimeError(f"{unanswered[0]} sampled items vanished from the cache during the run")
        _write_missing(_keyed(judge, stage.calibration_cases().all()), cache, writer, calibration, seen, lookahead,
                       written=calibration_keys)
    to_send = stats.sent + calibration.sent
    stats.sent = calibration.sent = 0  # counted again as the answers come back
    if to_send:
        requests = cluster.ray.data.read_parquet([str(p) for p in writer.files])
        cluster.answer("judge", requests, spec, judge.runner.identity_key, judge.settings, cache, stats, to_send,
                       part_of=lambda key: calibration if key in calibration_keys else stats)
    for path in writer.files:
        path.unlink()
    stats.seconds = time.perf_counter() - start
    return stats, calibration


def _missing_sampling_keys(ctx: BuildContext, stage: Any, cache: GenerationCache, stats: StepStats,
                           lookahead: int) -> tuple[np.ndarray, int]:
    """The sorted 64-bit prefixes of the sampling keys not in the cache, and how many images have one.

    Counts requests, cached and duplicates in `stats`.
    """
    from rs.prompt import sampling_request
    from rs.store import qa_item, read_records

    records = read_records(ctx.paths.clean, "rows", batch_rows=256, columns=["image_sha256", "qa"])
    keyed = ((stage.runner.key(sampling_request(qa_item(q), stage.config.instruction, r["image_sha256"]), stage.settings), index)
             for index, r in enumerate(records) for q in r["qa"])
    prefixes = array("Q")  # 8 bytes per missing item
    images, last_image = 0, -1
    for key, image in _uncached(keyed, cache, stats, lookahead):
        prefixes.append(_prefix(key))
        images += image != last_image
        last_image = image
    missing = np.unique(np.frombuffer(prefixes, dtype=np.uint64))
    stats.duplicates = len(prefixes) - len(missing)  # the same question about the same image twice
    return missing, images


def _write_missing(keyed: Iterable[tuple[str, Request]], cache: GenerationCache, writer: Any, stats: StepStats, seen: set[bytes],
                   lookahead: int, *, written: set[str] | None = None) -> None:
    """Write the requests not in the cache and not written before (`seen`: 128-bit key prefixes) to `writer`."""
    for key, request in _uncached(keyed, cache, stats, lookahead, seen=seen):
        stats.sent += 1
        if written is not None:
            written.add(key)
        writer.write({"image": None, "image_sha256": None,
                      "requests": [{"key": key, "prompt": request.prompt, "item_key": request.item_key}]},
                     size=len(request.prompt))


def _uncached(keyed: Iterable[tuple[str, Any]], cache: GenerationCache, stats: StepStats, lookahead: int, *,
              seen: set[bytes] | None = None) -> Iterator[tuple[str, Any]]:
    """The `(key, value)` pairs whose key is not cached, looked up `lookahead` at a time; counts requests and cached.

    With `seen` (128-bit key prefixes), a key yielded before is counted as a duplicate instead.
    """
    iterator = iter(keyed)
    while chunk := list(islice(iterator, lookahead)):
        found = cache.present(key for key, _ in chunk)
        for key, value in chunk:
            stats.requests += 1
            if key in found:
                stats.cached += 1
                continue
            if seen is not None:
                digest = bytes.fromhex(key[:32])
                if digest in seen:
                    stats.duplicates += 1
                    continue
                seen.add(digest)
            yield key, value


def _judge_requests(ctx: BuildContext, stage: Any, unanswered: list[int], chunk: int = 1024) -> Iterator[tuple[str, Request]]:
    """Verify every cached answer with `SampleStage.verify`; yield the judge requests of its rejections.

    Also fills the stage's calibration samples, as `SampleStage` does while it runs. Reads the
    clean store without the image bytes: the cache keys need only their hashes.
    """
    from rs.prompt import sampling_request
    from rs.store import qa_item, read_records

    records = read_records(ctx.paths.clean, "rows", batch_rows=256, columns=["image_sha256", "qa"])
    items = ((record["image_sha256"], qa_item(q)) for record in records for q in record["qa"])
    while block := list(islice(items, chunk)):
        keyed = []
        for sha, item in block:
            request = sampling_request(item, stage.config.instruction, sha)
            keyed.append((stage.runner.key(request, stage.settings), request, item))
        generations = stage.runner.cache.get_many(key for key, _, _ in keyed)
        for key, request, item in keyed:
            gen = generations.get(key)
            if gen is None:
                unanswered[0] += 1
                continue
            case = stage.verify(item, request.prompt, gen).case
            if case is not None:
                yield from _keyed(stage.judge, [case])


def _keyed(judge: Any, cases: Iterable[Any]) -> Iterator[tuple[str, Request]]:
    """The judge requests of `Judge.verdicts`, with their cache keys."""
    for case in cases:
        request = judge.request(case)
        yield judge.runner.key(request, judge.settings), request


def forwarded_env() -> dict[str, str]:
    """The driver's environment variables that the CLI passes to the replicas: `VLLM_*` (but no key, token
    or per-node address) and the Hugging Face offline switches."""
    def private(name: str) -> bool:
        return any(word in name for word in ("KEY", "TOKEN", "SECRET", "PASSWORD")) or name in NOT_FORWARDED

    return {k: v for k, v in os.environ.items() if (k.startswith(FORWARDED_ENV_PREFIXES) or k in FORWARDED_ENV) and not private(k)}
