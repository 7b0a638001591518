"""The sampling stage (and the judge) on a Ray cluster with Ray Data: one engine replica per GPU, one cache.

    python -m rs.sample FAMILY --ray [auto | HEAD:6379] [--replicas N]

Each step is one Ray Data pipeline, so every replica loads its model once per step:

    read_parquet(clean store) -> map_batches(sampling_requests)                 items still missing, by image
                              -> repartition(target_num_rows_per_block=images)  one block per batch
                              -> map_batches(EngineReplica, ActorPoolStrategy(N, several calls each), num_gpus=TP x PP)
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

Each replica answers several batches at once through one engine (`replica.EngineFeeder`): Ray
Data's `max_concurrent_calls_per_actor` hands it enough batches to keep the engine's window full,
so one batch's long answers never hold the next back.

Failures cost at most what was in flight. A replica that dies (OOM kill, crash) is restarted by Ray and
its batches are retried (Ray Data's actor pool: `max_restarts=-1`, `max_task_retries=-1`). A node
that leaves the cluster takes its replicas with it: the pool may shrink to one replica, each step
starts with the replicas the cluster holds then (`_Cluster.fitting_replicas`), and a step whose
pipeline fails while nodes leave runs again for what is missing (`MAX_STEP_ATTEMPTS`). An engine
that raises loses the requests in flight in it: they come back marked failed and are not cached
(the replica replaces its engine and goes on); the run reports them, skips the judge step (it needs
every answer) and ends with `RayIncomplete`; the same command again sends only what is missing. An
engine failing `MAX_CONSECUTIVE_FAILURES` times with no answer between stops the run: something is
wrong with the node or the model, not with a request. Whatever was committed before stays committed.

Ray's own LLM processor (`ray.data.llm`) is not used: ray 2.60's `llm` extra pins
`vllm[audio]==0.29.0`, which conflicts with the project's vLLM, and it builds its own prompts and
sampling parameters, so its outputs would not share the single-process path's cache keys.

    __init__.py  the driver: `sample_on_ray`, each step's requests, what is missing, committing answers
    cluster.py   connecting, checking what fits, the replicas' environment, answering one step
    replica.py   what runs in a replica (the engine, built from the family's configuration) and its rows
    report.py    what a run did per step, and the errors that say why one cannot run
"""

from __future__ import annotations

import logging
import time
from array import array
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

import rs
from rs.engines import engines_for
from rs.engines.base import Request, SamplingSettings
from rs.engines.cache import CacheAnswerDamaged, GenerationCache
from rs.judge import Judge, JudgeCase
from rs.prompt import sampling_request
from rs.sample import SampleReport, SampleStage
from rs.stages import BuildContext, answer_vocabulary, ensure_clean, ensure_sampled, read_report, sample_fingerprint
from rs.store import ParquetStreamWriter, qa_item, read_records

from .cluster import Cluster, check_fits, connect, forwarded_env, ray_available, retrying_lost_nodes
from .replica import REQUESTS, EngineReplica, build_replica_engine, engine_specs, gpus_per_replica, key_prefix, sampling_requests
from .report import RAY_MISSING, RayIncomplete, RayNotInstalled, RayPlanError, RayRun, StepStats

logger = logging.getLogger(__name__)

__all__ = ["RAY_MISSING", "EngineReplica", "RayIncomplete", "RayNotInstalled", "RayPlanError", "RayRun", "StepStats", "build_replica_engine",
           "engine_specs", "forwarded_env", "gpus_per_replica", "ray_available", "sample_on_ray", "sampling_requests"]


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

    with ctx.lock():  # the driver writes the family's build (its `ray/` folder, then the items store)
        started = time.perf_counter()
        run = RayRun()
        clean = ensure_clean(ctx)
        if report := read_report(ctx.paths.sample_report, sample_fingerprint(ctx, clean), SampleReport.from_dict):
            run.report = report
            return run
        specs = engine_specs(ctx)
        sampler, judge = engines_for(ctx.family)  # lazy: identities only, no model on the driver

        own_ray = not ray.is_initialized()
        if own_ray:  # Ray uploads local code only for a whole job, so `ship_code` needs this connection to be ours
            connect(ray, address, {"py_modules": [str(Path(rs.__file__).parent)]} if ship_code else None)
        elif ship_code:
            logger.info("Ray was initialised before: the replicas import the rs installed on their nodes")
        try:
            resources = ray.cluster_resources()
            if num_gpus is None:
                num_gpus = gpus_per_replica(ctx) if resources.get("GPU", 0) else 0
            if replicas is None:
                replicas = max(1, int(resources.get("GPU", 0) // num_gpus)) if num_gpus else 1
            check_fits(resources, replicas=replicas, num_gpus=num_gpus, num_cpus=num_cpus, local=address is None)
            cluster = Cluster(ray, replicas, num_gpus, num_cpus, runtime_env,
                               batch_size or ctx.family.config.engine.batch_size, ctx.progress)
            run.replicas = replicas
            data = ray.data.DataContext.get_current()
            bars = data.enable_progress_bars
            data.enable_progress_bars = ctx.progress
            try:
                with GenerationCache(ctx.cache_path) as cache:
                    def new_stage() -> SampleStage:  # the judge step's calibration cases accumulate in the stage: one per attempt
                        return SampleStage(ctx.family.config, sampler, judge, cache, progress=False,
                                           vocabulary=answer_vocabulary(ctx))

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


def _run_steps(ctx: BuildContext, new_stage: Callable[[], SampleStage], cluster: Cluster, cache: GenerationCache,
               specs: dict[str, dict[str, Any]], run: RayRun, lookahead: int) -> None:
    run.steps["sampling"], = retrying_lost_nodes("sampling", cluster, lambda: (
        _sampling_step(ctx, new_stage(), cluster, cache, specs["sampler"], lookahead),))
    if new_stage().judge is None or not run.complete:
        return  # the judge needs every answer; a re-run does it
    run.steps["judge"], run.steps["calibration"] = retrying_lost_nodes("judge", cluster, lambda: _judge_step(
        ctx, new_stage(), cluster, cache, specs["judge"], lookahead))


def _sampling_step(ctx: BuildContext, stage: SampleStage, cluster: Cluster, cache: GenerationCache, spec: dict[str, Any],
                   lookahead: int) -> StepStats:
    """Answer the family's missing sampling requests: read the clean store, keep what is missing, answer."""
    stats = StepStats()
    start = time.perf_counter()
    missing, images = _missing_sampling_keys(ctx, stage, cache, stats, lookahead)
    if missing.size:
        files = sorted(str(p) for p in ctx.paths.clean.glob("rows-*.parquet"))
        requests = cluster.ray.data.read_parquet(files).select_columns(["image", "image_sha256", "qa"]).map_batches(
            sampling_requests, fn_kwargs={"identity": stage.runner.identity_key, "settings": stage.settings,
                                          "instructions": stage.instructions, "missing": missing},
            batch_format="pyarrow", batch_size=None,
        )
        per_image = missing.size / images  # a batch holds whole images, about `batch_size` requests
        cluster.answer("sampling", requests, spec, stage.runner.identity_key, stage.settings, cache, stats, int(missing.size),
                       rows_per_batch=max(1, round(cluster.batch_size / per_image)))
    stats.seconds = time.perf_counter() - start
    return stats


def _judge_step(ctx: BuildContext, stage: SampleStage, cluster: Cluster, cache: GenerationCache, spec: dict[str, Any],
                lookahead: int) -> tuple[StepStats, StepStats]:
    """Verify every answer on the driver, write the missing judge and calibration requests, answer them in one pipeline."""
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
        _write_missing(_judge_requests(ctx, stage, unanswered), cache, writer, stats, seen, lookahead, judge.settings)
        if unanswered[0]:
            raise RuntimeError(f"{unanswered[0]} sampled items vanished from the cache during the run")
        _write_missing(_keyed(judge, stage.calibration_cases().all()), cache, writer, calibration, seen, lookahead,
                       judge.settings, written=calibration_keys)
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


def _missing_sampling_keys(ctx: BuildContext, stage: SampleStage, cache: GenerationCache, stats: StepStats,
                           lookahead: int) -> tuple[np.ndarray, int]:
    """The sorted 64-bit prefixes of the sampling keys not in the cache, and how many images have one.

    Counts requests, cached and duplicates in `stats`.
    """
    records = read_records(ctx.paths.clean, "rows", batch_rows=256, columns=["image_sha256", "qa"])
    keyed = ((stage.runner.key(sampling_request(qa_item(q), stage.instructions, r["image_sha256"]), stage.settings), index)
             for index, r in enumerate(records) for q in r["qa"])
    prefixes = array("Q")  # 8 bytes per missing item
    images, last_image = 0, -1
    for key, image in _uncached(keyed, cache, stats, lookahead, stage.settings):
        prefixes.append(key_prefix(key))
        images += image != last_image
        last_image = image
    missing = np.unique(np.frombuffer(prefixes, dtype=np.uint64))
    stats.duplicates = len(prefixes) - len(missing)  # the same question about the same image twice
    return missing, images


def _write_missing(keyed: Iterable[tuple[str, Request]], cache: GenerationCache, writer: ParquetStreamWriter, stats: StepStats, seen: set[bytes],
                   lookahead: int, settings: SamplingSettings, *, written: set[str] | None = None) -> None:
    """Write the requests not in the cache and not written before (`seen`: 128-bit key prefixes) to `writer`."""
    for key, request in _uncached(keyed, cache, stats, lookahead, settings, seen=seen):
        stats.sent += 1
        if written is not None:
            written.add(key)
        writer.write({"image": None, "image_sha256": None,
                      "requests": [{"key": key, "prompt": request.prompt, "item_key": request.item_key}]},
                     size=len(request.prompt))


def _uncached(keyed: Iterable[tuple[str, Any]], cache: GenerationCache, stats: StepStats, lookahead: int, settings: SamplingSettings, *,
              seen: set[bytes] | None = None) -> Iterator[tuple[str, Any]]:
    """The `(key, value)` pairs the cache cannot answer under `settings` (its limits), looked up `lookahead` at a time; counts
    requests and cached.

    With `seen` (128-bit key prefixes), a key yielded before is counted as a duplicate instead.
    """
    iterator = iter(keyed)
    while chunk := list(islice(iterator, lookahead)):
        found = cache.present((key for key, _ in chunk), settings=settings)
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


def _judge_requests(ctx: BuildContext, stage: SampleStage, unanswered: list[int], chunk: int = 1024) -> Iterator[tuple[str, Request]]:
    """Verify every cached answer with `SampleStage.verify`; yield the judge requests of its rejections.

    Also fills the stage's calibration samples, as `SampleStage` does while it runs. Reads the
    clean store without the image bytes: the cache keys need only their hashes.
    """
    records = read_records(ctx.paths.clean, "rows", batch_rows=256, columns=["image_sha256", "qa"])
    items = ((record["image_sha256"], qa_item(q)) for record in records for q in record["qa"])
    while block := list(islice(items, chunk)):
        keyed = []
        for sha, item in block:
            request = sampling_request(item, stage.instructions, sha)
            keyed.append((stage.runner.key(request, stage.settings), request, item))
        try:
            generations = stage.runner.cache.get_many((key for key, _, _ in keyed), settings=stage.settings)
        except CacheAnswerDamaged as err:
            raise err.naming({key: request.item_key for key, request, _ in keyed}) from None
        for key, request, item in keyed:
            gen = generations.get(key)
            if gen is None:
                unanswered[0] += 1
                continue
            case = stage.verify(item, request.prompt, gen).case
            if case is not None:
                yield from _keyed(stage.judge, [case])


def _keyed(judge: Judge, cases: Iterable[JudgeCase]) -> Iterator[tuple[str, Request]]:
    """The judge requests of `Judge.verdicts`, with their cache keys."""
    for case in cases:
        request = judge.request(case)
        yield judge.runner.key(request, judge.settings), request


