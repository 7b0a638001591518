"""The sampling stage (and the judge) on a Ray cluster: one engine replica per GPU, one cache.

    python -m rs.sample FAMILY --ray [auto | ray://HEAD:10001 | HEAD:6379] [--replicas N]

The driver (the process running this) is the only writer of the generation cache, which stays on
its local disk: SQLite is not safe on a network filesystem, and per-replica caches would need a
merge. Replicas only answer; results travel back to the driver, which commits each batch as it
arrives. The cache keys are the single-process ones (`CachedEngine.key`, computed here from a lazy
`VLLMEngine` that never loads the model on the driver), so a family can be started on one machine,
continued on a cluster and finished anywhere with nothing recomputed.

The run has four steps, each sending only what the cache lacks:

1. sampling: every cleaned QA item, its request built exactly as `rs.sample.SampleStage` builds it;
2. judge: the verifier rejections that have a final answer, verified from the cached generations
   exactly as `SampleStage` verifies them (its own verifier, `Judge.prompt`, judge settings);
3. calibration: the judge calls of `rs.judge.calibrate` (the same deterministic samples);
4. the normal `rs.build.ensure_sampled`, which finds everything cached: zero engine calls, and it
   writes the items store and `sample.json` exactly as a single-process run does.

Failures cost at most their batch. A replica that dies (preempted node, OOM kill, crash) is
restarted by Ray and the batches it held are sent once more; a batch whose engine raises is lost
(the replica replaces its engine). The run goes on, reports what was lost, and skips the steps
that need every answer (judge, calibration, final pass); the same command again sends only what
is missing. A replica failing three times in a row gets no more work.

The driver streams: it reads the clean store row by row, looks up `lookahead` keys at a time, and
keeps at most `in_flight` batches per replica plus one queued, so its memory and the object store
hold a sliding window of the family, never the family.

Each replica is a Ray actor holding one project `VLLMEngine`: prompts, sampling settings,
reasoning split, failure isolation and `Generation` fields are those of the single-process path.
Ray Data's `map_batches` is not used: it has no source that streams from the driver (`from_items`
materialises; `read_*` tasks run on the workers and would need the clean store on shared storage,
impossible for a `ray://` client), so the family would have to go in windows, and every Dataset
execution starts a new actor pool, which reloads the model for every window. Ray Data LLM
(`ray[llm]`) is not used either: ray 2.60's `llm` extra pins `vllm[audio]==0.29.0`, which conflicts
with the project's vLLM, and it would build its own prompts and sampling parameters.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from rs.engines.base import Generation, Request, SamplingSettings

if TYPE_CHECKING:
    from rs.build import BuildContext
    from rs.cache import GenerationCache

logger = logging.getLogger(__name__)

__all__ = ["RAY_MISSING", "EngineReplica", "RayIncomplete", "RayNotInstalled", "RayRun", "StepStats", "ray_available", "sample_on_ray"]

RAY_MISSING = "Ray is not installed: pip install 'rs[ray]'"
FAIL_BATCH_ENV = "RS_RAY_FAIL_BATCH"
"""Test only, comma-separated: `STEP:N` makes a replica raise on batch N of STEP; `STEP:N:exit` kills the replica instead."""
FORWARDED_ENV_PREFIXES = ("VLLM_",)
FORWARDED_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
"""Environment variables the CLI passes to the replicas (never tokens: log the workers in themselves)."""
NOT_FORWARDED = ("VLLM_HOST_IP", "VLLM_PORT")
MAX_CONSECUTIVE_FAILURES = 3


class RayNotInstalled(RuntimeError):
    def __init__(self) -> None:
        super().__init__(RAY_MISSING)


class RayIncomplete(RuntimeError):
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
    """Requests whose key was already waiting in this run (the same image and prompt twice)."""
    sent: int = 0
    batches: int = 0
    stored: int = 0
    uncached: int = 0
    """Answered with a transient failure (not cacheable): sent again on the next run."""
    retried_batches: int = 0
    """Batches lost with their replica (it died) and sent once more."""
    failed_batches: int = 0
    failed_requests: int = 0
    seconds: float = 0.0
    """Wall time of the step, without starting the replicas."""
    engine_seconds: float = 0.0
    """Time the replicas spent in `generate()`, summed over replicas."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RayRun:
    """The Ray steps of one run, and the final single-process pass's report when it ran."""

    replicas: int = 0
    steps: dict[str, StepStats] = field(default_factory=dict)
    startup_seconds: float = 0.0
    """From asking for the replicas to all of them holding the model (0: none was needed)."""
    load_seconds: float = 0.0
    """Of which loading the model (the slowest replica)."""
    restarts: int = 0
    """Replica deaths during the run (Ray restarted them)."""
    seconds: float = 0.0
    """The Ray part of the run (the final pass not included)."""
    report: dict[str, Any] | None = None

    @property
    def complete(self) -> bool:
        return all(s.failed_requests == 0 and s.uncached == 0 for s in self.steps.values())

    def to_dict(self) -> dict[str, Any]:
        return {"replicas": self.replicas, "startup_seconds": round(self.startup_seconds, 3), "load_seconds": round(self.load_seconds, 3),
                "restarts": self.restarts,
                "seconds": round(self.seconds, 3),
                "steps": {name: s.to_dict() for name, s in self.steps.items()}}


# --- the replica ----------------------------------------------------------------------------------


class EngineReplica:
    """One engine replica (a Ray actor): the project's `VLLMEngine`, created from the family's configuration.

    `specs` maps an engine name (`sampler`, `judge`) to `{"model", "revision", "engine_args"}`;
    names with the same spec share one engine, as `rs.engines.engines_for` shares it. At most one
    model is loaded at a time: asking for another closes the first (the steps run one after the other).
    """

    def __init__(self, specs: dict[str, dict[str, Any]]):
        from rs.engines.vllm import VLLMEngine

        self._spec_keys = {name: json.dumps(spec, sort_keys=True) for name, spec in specs.items()}
        self._engines: dict[str, VLLMEngine] = {}
        for name, spec in specs.items():
            key = self._spec_keys[name]
            if key not in self._engines:
                self._engines[key] = VLLMEngine(spec["model"], revision=spec["revision"], engine_args=spec["engine_args"])
        self._fail = dict(_failure(entry) for entry in os.environ.get(FAIL_BATCH_ENV, "").split(",") if entry)

    def identities(self) -> dict[str, dict[str, Any]]:
        """Each engine's identity (what the cache keys cover), computed here, without loading a model."""
        return {name: self._engines[key].identity() for name, key in self._spec_keys.items()}

    def load(self, name: str) -> float:
        """Load engine `name`'s model now (closing another loaded one); returns the seconds it took."""
        start = time.perf_counter()
        self._loaded(name).llm  # noqa: B018
        return time.perf_counter() - start

    def generate(self, name: str, batch: str, requests: list[Request], settings: SamplingSettings) -> tuple[list[Generation], float]:
        """`(generations, seconds in the engine)` for one batch."""
        if batch in self._fail:
            if self._fail[batch] == "exit":
                os._exit(1)
            raise RuntimeError(f"{FAIL_BATCH_ENV}: injected failure of batch {batch}")
        engine = self._loaded(name)
        start = time.perf_counter()
        try:
            generations = engine.generate(requests, settings)
        except Exception:
            self._replace(name)  # per-request failures never raise: an engine that did is suspect
            raise
        return generations, time.perf_counter() - start

    def _loaded(self, name: str) -> Any:
        engine = self._engines[self._spec_keys[name]]
        for other in self._engines.values():
            if other is not engine and other.loaded:
                other.close()  # one model at a time: the steps run one after the other
        return engine

    def _replace(self, name: str) -> None:
        from rs.engines.vllm import VLLMEngine

        key = self._spec_keys[name]
        old = self._engines[key]
        try:
            old.close()
        except Exception:
            logger.warning("closing a failed engine failed", exc_info=True)
        spec = json.loads(key)
        self._engines[key] = VLLMEngine(spec["model"], revision=spec["revision"], engine_args=spec["engine_args"])

    def close(self) -> None:
        for engine in self._engines.values():
            engine.close()


def _failure(entry: str) -> tuple[str, str]:
    step, number, *how = entry.strip().split(":")
    return f"{step}:{number}", how[0] if how else "raise"


# --- the driver -----------------------------------------------------------------------------------


@dataclass
class _Batch:
    step: str
    number: int
    keys: list[str]
    requests: Any
    """The requests, put in the object store once (a retry does not send them from here again)."""
    size: int
    attempt: int = 0
    replica: int = -1

    @property
    def label(self) -> str:
        return f"{self.step}:{self.number}" + (f"/retry{self.attempt}" if self.attempt else "")


@dataclass
class _Replica:
    actor: Any
    load: int = 0
    failures: int = 0
    """Batches failed in a row; at MAX_CONSECUTIVE_FAILURES the replica is retired."""
    state: str = "ok"
    """`ok`, `restarting` (a probe waits for it to come back) or `retired`."""


class _Pool:
    """The replicas, started on the first batch there is to send (a fully cached run starts none)."""

    def __init__(self, ray: Any, specs: dict[str, dict[str, Any]], expected: dict[str, dict[str, Any]], *, replicas: int,
                 num_gpus: float, num_cpus: float, runtime_env: dict[str, Any] | None, startup_timeout_s: float):
        self.ray = ray
        self.specs, self.expected = specs, expected
        self.size, self.num_gpus, self.num_cpus = replicas, num_gpus, num_cpus
        self.runtime_env = runtime_env
        self.startup_timeout_s = startup_timeout_s
        self.replicas: list[_Replica] = []
        self.startup_seconds = 0.0
        self.load_seconds = 0.0
        self.restarts = 0

    def start(self, engine: str) -> None:
        """Start the replicas, check their identities, and load `engine`'s model in each."""
        if self.replicas:
            return
        ray = self.ray
        start = time.perf_counter()
        # Ray restarts a dead replica (-1: every time); a replica failing batch after batch is retired instead.
        remote = ray.remote(EngineReplica).options(
            num_gpus=self.num_gpus, num_cpus=self.num_cpus, max_restarts=-1, max_task_retries=0, runtime_env=self.runtime_env,
        )
        self.replicas = [_Replica(remote.remote(self.specs)) for _ in range(self.size)]
        refs = [r.actor.identities.remote() for r in self.replicas]
        ready, waiting = ray.wait(refs, num_returns=len(refs), timeout=self.startup_timeout_s)
        if waiting:
            self.stop()
            raise RuntimeError(
                f"{len(waiting)} of {self.size} replicas did not start within {self.startup_timeout_s:.0f} s "
                f"(each asks for {self.num_gpus} GPU and {self.num_cpus} CPU; the cluster has {ray.cluster_resources()})"
            )
        for i, ref in enumerate(refs):
            self.check_identity(i, ray.get(ref))
        loads = [r.actor.load.remote(engine) for r in self.replicas]
        _, waiting = ray.wait(loads, num_returns=len(loads), timeout=self.startup_timeout_s)
        if waiting:
            self.stop()
            raise RuntimeError(f"{len(waiting)} of {self.size} replicas did not load the model within {self.startup_timeout_s:.0f} s")
        self.load_seconds = max(ray.get(loads))
        self.startup_seconds = time.perf_counter() - start
        logger.info("%d replicas ready in %.1f s (%s GPU, %s CPU each)", self.size, self.startup_seconds, self.num_gpus, self.num_cpus)

    def check_identity(self, index: int, identities: dict[str, Any]) -> None:
        if identities != self.expected:
            self.stop()
            raise RuntimeError(
                f"replica {index} computes another engine identity than the driver, so its answers would be cached under "
                f"keys no run asks for: driver {self.expected}, replica {identities}. Run the driver and the replicas "
                "with the same versions of rs, vLLM and transformers, and the same model files."
            )

    def restarted(self, index: int) -> Any:
        """Replica `index` died and Ray restarts it: returns the probe that answers when it is back."""
        replica = self.replicas[index]
        self.restarts += 1
        replica.state = "restarting"
        # -1 retries: the probe waits through the restart, and fails only if the replica cannot come back
        return replica.actor.identities.options(max_task_retries=-1).remote()

    def retire(self, index: int) -> None:
        replica = self.replicas[index]
        replica.state = "retired"
        self.ray.kill(replica.actor, no_restart=True)

    def stop(self) -> None:
        for replica in self.replicas:
            if replica.state == "ok":
                try:
                    self.ray.get(replica.actor.close.remote(), timeout=60)
                except Exception:
                    logger.debug("closing a replica failed", exc_info=True)
            self.ray.kill(replica.actor, no_restart=True)
        self.replicas = []


class _Dispatcher:
    """Streams keyed requests to the replicas in batches, at most `in_flight` per replica, committing as results arrive.

    A batch lost with its replica (which died; Ray restarts it) is sent once more; a batch whose
    engine raised is not (the replica replaces its engine), and is reported. A replica failing
    MAX_CONSECUTIVE_FAILURES times in a row (a death counts once) is retired.
    """

    def __init__(self, pool: _Pool, cache: GenerationCache, *, batch_size: int, in_flight: int, lookahead: int, progress: bool):
        self.pool, self.cache = pool, cache
        self.batch_size, self.in_flight, self.lookahead = batch_size, in_flight, lookahead
        self.progress = progress
        self.waiting: dict[Any, _Batch] = {}  # ObjectRef of a result -> its batch
        self.waiting_keys: set[str] = set()
        self.probes: dict[Any, int] = {}  # ObjectRef of a probe -> replica
        self.retry: list[_Batch] = []
        self.stats = StepStats()

    def run(self, step: str, engine: str, keyed: Iterable[tuple[str, Request]], settings: SamplingSettings) -> StepStats:
        from tqdm.auto import tqdm

        start, startup = time.perf_counter(), self.pool.startup_seconds
        self.stats = stats = StepStats()
        iterator = iter(keyed)
        batch: list[tuple[str, Request]] = []
        with tqdm(desc=f"{step} (ray)", unit="item", disable=not self.progress, dynamic_ncols=True) as bar:
            while chunk := list(islice(iterator, self.lookahead)):
                found = self.cache.get_many(key for key, _ in chunk)
                for key, request in chunk:
                    stats.requests += 1
                    if key in found:
                        stats.cached += 1
                    elif key in self.waiting_keys:
                        stats.duplicates += 1
                    else:
                        self.waiting_keys.add(key)
                        batch.append((key, request))
                        if len(batch) == self.batch_size:
                            self._send(step, engine, batch)
                            self._submit_ready(engine, settings)
                            batch = []
                self._collect(block=False)
                bar.update(len(chunk))
                bar.set_postfix(cached=stats.cached, sent=stats.sent, failed=stats.failed_requests, refresh=False)
            if batch:
                self._send(step, engine, batch)
            while self.retry or self.waiting:
                self._submit_ready(engine, settings)
                if self.waiting:
                    self._collect(block=True)
                bar.set_postfix(cached=stats.cached, sent=stats.sent, failed=stats.failed_requests, refresh=False)
        stats.seconds += time.perf_counter() - start - (self.pool.startup_seconds - startup)  # the replicas' start is the run's
        return stats

    def _send(self, step: str, engine: str, batch: list[tuple[str, Request]]) -> None:
        """Queue a new batch (its requests go to the object store now, once)."""
        self.pool.start(engine)
        self.retry.append(_Batch(step, self.stats.batches, [k for k, _ in batch], self.pool.ray.put([r for _, r in batch]), len(batch)))
        self.stats.batches += 1
        self.stats.sent += len(batch)

    def _submit_ready(self, engine: str, settings: SamplingSettings) -> None:
        """Give queued batches to the least loaded healthy replicas; wait for room while more than a batch per replica is queued."""
        while self.retry:
            replicas = self.pool.replicas
            usable = [i for i, r in enumerate(replicas) if r.state == "ok" and r.load < self.in_flight]
            if not usable:
                if all(r.state == "retired" for r in replicas):
                    raise RuntimeError(f"every replica failed {MAX_CONSECUTIVE_FAILURES} batches in a row; giving up (see the replicas' logs)")
                if len(self.retry) <= len(replicas) and self.waiting:
                    return  # keep reading ahead; a replica will free up
                self._collect(block=True)
                continue
            index = min(usable, key=lambda i: replicas[i].load)
            batch = self.retry.pop(0)
            batch.replica = index
            ref = replicas[index].actor.generate.remote(engine, batch.label, batch.requests, settings)
            self.waiting[ref] = batch
            replicas[index].load += 1

    def _collect(self, *, block: bool) -> None:
        refs = [*self.waiting, *self.probes]
        if not refs:
            return
        ray = self.pool.ray
        if block:
            ready, _ = ray.wait(refs, num_returns=1)
        else:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            if ref in self.probes:
                self._probed(ref)
            else:
                self._collected(ref)

    def _probed(self, ref: Any) -> None:
        index = self.probes.pop(ref)
        try:
            identities = self.pool.ray.get(ref)
        except Exception as err:
            logger.error("replica %d did not come back (%s); retiring it", index, _first_line(err))
            self.pool.retire(index)
            return
        self.pool.check_identity(index, identities)
        if self.pool.replicas[index].state == "restarting":
            self.pool.replicas[index].state = "ok"
            logger.info("replica %d is back", index)

    def _collected(self, ref: Any) -> None:
        ray, stats = self.pool.ray, self.stats
        batch = self.waiting.pop(ref)
        replica = self.pool.replicas[batch.replica]
        replica.load -= 1
        try:
            generations, seconds = ray.get(ref)
            if len(generations) != batch.size:
                raise RuntimeError(f"replica returned {len(generations)} generations for {batch.size} requests")
        except Exception as err:
            self._failed(batch, err)
            return
        replica.failures = 0
        self.waiting_keys.difference_update(batch.keys)
        stats.engine_seconds += seconds
        stats.stored += self.cache.put_many(zip(batch.keys, generations))
        stats.uncached += sum(1 for g in generations if not g.cacheable)

    def _failed(self, batch: _Batch, err: Exception) -> None:
        from ray.exceptions import RayActorError

        stats, index = self.stats, batch.replica
        replica = self.pool.replicas[index]
        died = isinstance(err, RayActorError)  # the replica died (or is restarting): the batch itself may be fine
        if not died or replica.state == "ok":  # a new incident, not another batch lost with the same replica
            replica.failures += 1
        if replica.failures >= MAX_CONSECUTIVE_FAILURES and replica.state != "retired":
            logger.error("replica %d failed %d times in a row; retiring it", index, replica.failures)
            self.pool.retire(index)
        elif died and replica.state == "ok":
            self.probes[self.pool.restarted(index)] = index
        if died and batch.attempt == 0:
            logger.warning("batch %s (%d requests) was lost with replica %d; sending it again: %s",
                           batch.label, batch.size, index, _first_line(err))
            stats.retried_batches += 1
            batch.attempt += 1
            self.retry.append(batch)
            return
        self.waiting_keys.difference_update(batch.keys)
        stats.failed_batches += 1
        stats.failed_requests += batch.size
        logger.error("batch %s (%d requests) failed on replica %d; a re-run sends it again: %s",
                     batch.label, batch.size, index, _first_line(err))


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[-1] if text else ''}"


def engine_specs(ctx: BuildContext) -> dict[str, dict[str, Any]]:
    """What a replica needs to build the family's engines: the configuration, not the driver's objects."""
    c = ctx.family.config
    if c.engine.kind != "vllm":
        raise ValueError(f"families.{ctx.family.name}.engine.kind is {c.engine.kind!r}; the Ray path runs the vllm engine "
                         "(an openai server is already shared by every process that points at it)")
    judge_model = c.judge.model or c.model
    return {"sampler": {"model": c.model.id, "revision": c.model.revision, "engine_args": dict(c.engine.args)},
            "judge": {"model": judge_model.id, "revision": judge_model.revision, "engine_args": dict(c.engine.args)}}


def gpus_per_replica(ctx: BuildContext) -> int:
    """`tensor_parallel_size` x `pipeline_parallel_size` of the family's engine arguments."""
    args = ctx.family.config.engine.args
    return int(args.get("tensor_parallel_size") or 1) * int(args.get("pipeline_parallel_size") or 1)


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
    in_flight: int = 2,
    lookahead: int = 4096,
    startup_timeout_s: float = 1800.0,
    finish: bool = True,
) -> RayRun:
    """Fill the generation cache for `ctx`'s family on Ray, then (`finish`) run `ensure_sampled` on the driver.

    Args:
        address: Ray address (`auto`, `ray://HEAD:10001`, `HEAD:6379`); None starts a local Ray.
            Ignored when Ray is already initialised in this process.
        replicas: engine replicas; default: the cluster's GPUs // `num_gpus` (1 without GPUs).
        num_gpus: GPUs per replica; default: tensor x pipeline parallel size when the cluster has
            GPUs, else 0 (vLLM-CPU).
        num_cpus: CPUs Ray reserves per replica.
        runtime_env: the replicas' Ray runtime environment (`env_vars`, ...).
        ship_code: when this call connects to Ray, send this `rs` package to the replicas
            (`py_modules`), so that they compute identities and outputs with the driver's code
            whatever version is installed on the nodes (vLLM and its dependencies must be there).
        batch_size: requests per batch; default: the family's `engine.batch_size` (as single-process).
        in_flight: batches queued per replica, so that it starts the next one as soon as one ends.
        lookahead: requests whose cache keys are looked up together (bounds the driver's memory
            with the batches in flight).
        finish: run `ensure_sampled` at the end, when every step is complete.

    Raises:
        RayNotInstalled: without Ray.
        RayIncomplete: a batch failed or an answer was not cacheable; the cache keeps everything
            else, and the same call again sends only what is missing.
    """
    if not ray_available():
        raise RayNotInstalled()
    import ray

    from rs.build import _read_report, ensure_clean, ensure_sampled, sample_fingerprint
    from rs.cache import GenerationCache
    from rs.engines import engines_for
    from rs.sample import SampleStage

    started = time.perf_counter()
    run = RayRun()
    clean = ensure_clean(ctx)
    if report := _read_report(ctx.paths.sample_report, sample_fingerprint(ctx, clean)):
        run.report = report
        return run
    specs = engine_specs(ctx)
    sampler, judge = engines_for(ctx.family)  # lazy: identities only, no model on the driver
    expected = {"sampler": sampler.identity(), "judge": judge.identity()}

    own_ray = not ray.is_initialized()
    if own_ray:  # Ray uploads local code only for a whole job, so `ship_code` needs this connection to be ours
        import rs

        ray.init(address=address, runtime_env={"py_modules": [str(Path(rs.__file__).parent)]} if ship_code else None)
    elif ship_code:
        logger.info("Ray was initialised before: the replicas import the rs installed on their nodes")
    try:
        cluster_gpus = ray.cluster_resources().get("GPU", 0)
        if num_gpus is None:
            num_gpus = gpus_per_replica(ctx) if cluster_gpus else 0
        if replicas is None:
            replicas = max(1, int(cluster_gpus // num_gpus)) if num_gpus else 1
        pool = _Pool(ray, specs, expected, replicas=replicas, num_gpus=num_gpus, num_cpus=num_cpus, runtime_env=runtime_env,
                     startup_timeout_s=startup_timeout_s)
        run.replicas = replicas
        try:
            with GenerationCache(ctx.cache_path) as cache:
                stage = SampleStage(ctx.family.config, sampler, judge, cache, progress=False)
                dispatcher = _Dispatcher(pool, cache, batch_size=batch_size or ctx.family.config.engine.batch_size,
                                         in_flight=in_flight, lookahead=lookahead, progress=ctx.progress)
                _run_steps(ctx, stage, dispatcher, run)
        finally:
            run.startup_seconds, run.load_seconds, run.restarts = pool.startup_seconds, pool.load_seconds, pool.restarts
            pool.stop()
    finally:
        if own_ray:
            ray.shutdown()
    run.seconds = time.perf_counter() - started
    if not run.complete:
        raise RayIncomplete(run)
    if finish:
        run.report = ensure_sampled(ctx)
    return run


def _run_steps(ctx: BuildContext, stage: Any, dispatcher: _Dispatcher, run: RayRun) -> None:
    from rs.store import read_clean_rows

    run.steps["sampling"] = dispatcher.run("sampling", "sampler", _sampling_requests(stage, read_clean_rows(ctx.paths.clean)),
                                           stage.settings)
    if stage.judge is None or not run.complete:
        return  # the judge needs every answer; a re-run does it
    judge = stage.judge
    unanswered: list[int] = [0]
    run.steps["judge"] = dispatcher.run("judge", "judge", _judge_requests(ctx, stage, unanswered), judge.settings)
    if unanswered[0]:
        raise RuntimeError(f"{unanswered[0]} sampled items vanished from the cache during the run")
    if not run.complete:
        return
    cases = stage._positives.items() + stage.negatives()
    run.steps["calibration"] = dispatcher.run("calibration", "judge", _keyed(judge, cases), judge.settings)


def _sampling_requests(stage: Any, rows: Iterable[Any]) -> Iterator[tuple[str, Request]]:
    """The sampling requests of `SampleStage._requests`, with their cache keys."""
    from rs.prompt import build_prompt

    for row in rows:
        for item in row.qa:
            request = Request(prompt=build_prompt(item.question, stage.config.instruction), image=row.image,
                              image_sha256=row.image_sha256, item_key=item.key)
            yield stage.runner.key(request, stage.settings), request


def _judge_requests(ctx: BuildContext, stage: Any, unanswered: list[int], chunk: int = 1024) -> Iterator[tuple[str, Request]]:
    """Verify every cached answer as `SampleStage._chunk` does; yield the judge requests of its rejections.

    Also fills the stage's calibration samples, as `SampleStage` does while it runs. Reads the
    clean store without the image bytes: the cache keys need only their hashes.
    """
    from rs.judge import JudgeCase
    from rs.prompt import build_prompt
    from rs.store import qa_item, read_records

    records = read_records(ctx.paths.clean, "rows", batch_rows=256, columns=["image_sha256", "qa"])
    items = ((record["image_sha256"], qa_item(q)) for record in records for q in record["qa"])
    while block := list(islice(items, chunk)):
        keyed = []
        for sha, item in block:
            request = Request(prompt=build_prompt(item.question, stage.config.instruction), image_sha256=sha, item_key=item.key)
            keyed.append((stage.runner.key(request, stage.settings), request, item))
        generations = stage.runner.cache.get_many(key for key, _, _ in keyed)
        for key, request, item in keyed:
            gen = generations.get(key)
            if gen is None:
                unanswered[0] += 1
                continue
            references = item.all_references()
            verified = gen.answer is not None and gen.error is None and stage.verifier.match(gen.answer, references)
            if gen.answer:
                case = JudgeCase(request.prompt, item.answer, gen.answer, item.key)
                stage._pool.offer(item.key, (case, tuple(references)))
                if verified:
                    stage._positives.offer(item.key, case)
                else:
                    yield from _keyed(stage.judge, [case])


def _keyed(judge: Any, cases: Iterable[Any]) -> Iterator[tuple[str, Request]]:
    """The judge requests of `Judge.verdicts`, with their cache keys."""
    for case in cases:
        request = Request(prompt=judge.prompt(case), item_key=case.item_key)
        yield judge.runner.key(request, judge.settings), request


def forwarded_env() -> dict[str, str]:
    """The driver's environment variables that the CLI passes to the replicas: `VLLM_*` (but no key, token
    or per-node address) and the Hugging Face offline switches."""
    def private(name: str) -> bool:
        return any(word in name for word in ("KEY", "TOKEN", "SECRET", "PASSWORD")) or name in NOT_FORWARDED

    return {k: v for k, v in os.environ.items() if (k.startswith(FORWARDED_ENV_PREFIXES) or k in FORWARDED_ENV) and not private(k)}
