"""The sampling stage (with the judge, and the recovery pass) on a Ray cluster with Ray Data: one engine replica per GPU, one cache.

    python -m rs.sample FAMILY --ray [auto | HEAD:6379] [--replicas N]

The replicas are Ray actors that live for the whole run: each loads its model once and serves every
step (every pass: any stream of requests, its role and its sampling settings) in the order the stages
ask. Each step streams its requests with Ray Data and hands them to the replicas through Ray's
`ActorPool`:

    read_parquet(clean store) -> map_batches(sampling_requests)                 items still missing, by image
                              -> repartition(target_num_rows_per_block=images)  one block per batch
                              -> iter_internal_ref_bundles() on the driver      block references, not the data
    ActorPool(replicas, several times each).submit(EngineReplica.answer)        role, settings: the step's
                              -> answers on the driver -> GenerationCache.put_many

`EngineReplica` holds the project's own engine of the family's kind (any kind registered with
`runs_in_replica`, such as `vllm`), so prompts, sampling settings, reasoning
split, per-request failure isolation and `Generation` fields are those of the single-process path,
and the cache keys (`rs.engines.cached_engine.cache_key`) are the same: a family can be started on one
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

1. sampling: every cleaned QA item, its request the sample stage's own (`SamplingPass.question_requests`);
2. judge: the verifier rejections that have a final answer, verified on the driver from the cached
   generations by the sample stage's own code (`SamplingPass.judge_requests`), plus the calibration cases of
   `rs.pipeline.sample.judge.calibrate`; written to `BUILD/FAMILY/ray/judge-*.parquet` and answered in one pipeline;
2b. blind (`blind:`): the no-image pass's requests (`SamplingPass.blind_requests`: every question's prompt with no
   image, a multiple-choice question's rotations, the samples), written to `BUILD/FAMILY/ray/blind*-*.parquet` and
   answered under the pass's settings, keyed as the single-process pass keys them;
3. the normal sample stage (`ensure(SampleStage(), ctx)`) on the driver, which finds everything cached (zero engine
   calls) and writes the items store and `sample.json` exactly as a single-process run does;

and, for a family with a `recovery:` block (`rs.pipeline.recover`), on the same replicas:

4. recovery: the samples of the items the greedy pass rejected (`RecoveryPass.sample_requests` over the items
   store), one request a sample, sample `i` seeded `recovery.seed + i` and keyed as the single-process
   pass keys it, so the cache holds the same entries (only the missing samples travel: a raised `k`
   sends the new ones);
5. recovery_judge: the samples the verifier neither accepts nor knows wrong, verified on the driver
   from the cache by the recover stage's own code (`RecoveryPass.judge_requests`; no calibration: the judge's is the
   greedy pass's);
5b. adjudication (`recovery.suspects`): the suspect references' candidates and the adjudicator's calibration cases,
   found on the driver from the cached samples by the recover stage's own code (`RecoveryPass.collect_disputes`), each
   asked in both orders with its image;
6. the recover stage (`ensure(RecoverStage(sampled), ctx)`) on the driver: zero engine calls, the recovery store and
   `recovery.json` of a single-process run. A family already sampled runs only steps 4 to 6.

Each replica answers several batches at once through one engine (`replica.EngineFeeder`): the pool
lists each replica `concurrent_batches` times, enough batches to keep the engine's window full, so
one batch's long answers never hold the next back; the feeder keeps one engine stream a pass's settings.

Failures cost at most what was in flight. A replica that dies (OOM kill, crash) is restarted by Ray and
its batches are sent to it again (`max_restarts=-1`, `max_task_retries=-1`; the restarted process loads
the model again, the only reload of a run). A node that leaves the cluster takes its replicas with it:
they are ended as soon as the driver sees the node gone and their batches sent to the replicas that
remain (`cluster._Sender`); each step starts with the replicas the cluster holds then
(`Cluster.fitting_replicas`, new ones started when it holds more), and a step whose pipeline fails
while nodes leave runs again for what is missing (`MAX_STEP_ATTEMPTS`). An engine
that raises loses the requests in flight in it: they come back marked failed and are not cached
(the replica replaces its engine and goes on); the run reports them, skips the judge step (it needs
every answer) and ends with `RayIncomplete`; the same command again sends only what is missing. An
engine failing `MAX_CONSECUTIVE_FAILURES` times with no answer between stops the run: something is
wrong with the node or the model, not with a request. Whatever was committed before stays committed.

Ray's own LLM processor (`ray.data.llm`) is not used: ray 2.60's `llm` extra pins
`vllm[audio]==0.29.0`, which conflicts with the project's vLLM, and it builds its own prompts and
sampling parameters, so its outputs would not share the single-process path's cache keys.

    __init__.py  the driver: `sample_on_ray`, each step's requests, what is missing, committing answers
    cluster.py   connecting, checking what fits, the replicas (started once a run), answering one step on them
    replica.py   what runs in a replica (the engines of its roles, built from the family's configuration) and its rows
    report.py    what a run did per step, and the errors that say why one cannot run
"""

from __future__ import annotations

import logging
import time
from array import array
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

import rs
from rs.context import BuildContext
from rs.engines.base import Request, SamplingSettings
from rs.engines.cached_engine import identity_key
from rs.engines.factory import engines_for
from rs.engines.generation_cache import GenerationCache
from rs.pipeline.clean.stage import CleanStage
from rs.pipeline.recover import DECIDING, RecoverStage, RecoveryPass, current_recovery_report
from rs.pipeline.sample import SampleReport, SamplingPass
from rs.pipeline.sample.stage import SampleStage, calibration_images, sampling_pass
from rs.pipeline.stage import ensure, read_report
from rs.records import Row
from rs.store import ParquetStreamWriter, read_clean_rows, read_records

from .cluster import Cluster, check_fits, connect, forwarded_env, ray_available, retrying_lost_nodes
from .replica import (
    REQUESTS,
    EngineReplica,
    build_replica_engine,
    engine_specs,
    gpus_per_replica,
    key_prefix,
    sampling_requests,
)
from .report import RAY_MISSING, RayIncomplete, RayNotInstalled, RayPlanError, RayRun, StepStats

logger = logging.getLogger(__name__)

__all__ = [
    "RAY_MISSING",
    "EngineReplica",
    "RayIncomplete",
    "RayNotInstalled",
    "RayPlanError",
    "RayRun",
    "StepStats",
    "build_replica_engine",
    "engine_specs",
    "forwarded_env",
    "gpus_per_replica",
    "ray_available",
    "sample_on_ray",
    "sampling_requests",
]


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
    """Fill the generation cache for `ctx`'s family on Ray, running the driver's passes between the steps.

    The greedy pass's steps (sampling, judge), then the sample stage on the driver; with a `recovery:`
    block, the recovery pass's steps (its samples, their judge), then the recover stage. Each driver pass
    finds every answer cached and calls no engine. A family already sampled gets only its recovery steps.

    Args:
        address: Ray address (`auto`, `HEAD:6379`; not `ray://`: Ray Data does not run through Ray
            Client); None starts a local Ray. Ignored when Ray is already initialised in this process.
        replicas: engine replicas (Ray actors started once a run); default: the cluster's GPUs //
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
        finish: run the driver's passes (the sample and recover stages). Without them, only the greedy
            pass's steps run when the family is not sampled yet: the recovery's steps need the items store.

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
    recovery = ctx.family.config.recovery
    with ctx.lock():  # the driver writes the family's build (its `ray/` folder, the items and recovery stores)
        run = RayRun()
        ensure(CleanStage(), ctx)
        run.report = read_report(ctx.paths.sample_report, SampleStage().fingerprint(ctx), SampleReport.from_dict)
        run.recovery = current_recovery_report(ctx, run.report) if run.report is not None else None
        if run.report is not None and (recovery is None or run.recovery is not None):
            return run
        started, passes = time.perf_counter(), 0.0
        with _connected(ctx, address, ship_code) as ray:
            cluster = _cluster(ray, ctx, address, replicas, num_gpus, num_cpus, runtime_env, batch_size)
            run.replicas = cluster.replicas
            try:  # the replicas start with the first step that sends anything, and serve every step after it
                if run.report is None:
                    _greedy_steps(_Steps(ctx, cluster, run, lookahead))
                    if run.complete and finish:
                        start = time.perf_counter()
                        run.report = ensure(SampleStage(), ctx)
                        passes = time.perf_counter() - start
                if (
                    run.report is not None
                    and recovery is not None
                    and current_recovery_report(ctx, run.report) is None
                ):
                    _recovery_steps(_Steps(ctx, cluster, run, lookahead), run.report.promotes)
            finally:
                run.model_loads = dict(cluster.loads)
                cluster.close()
        run.seconds = time.perf_counter() - started - passes
        if not run.complete:
            raise RayIncomplete(run)
        if finish and run.report is not None:
            run.recovery = ensure(RecoverStage(run.report), ctx)
        return run


@contextmanager
def _connected(ctx: BuildContext, address: str | None, ship_code: bool) -> Iterator[Any]:
    """Ray, connected (unless this process already is) and with Ray Data's progress bars as `ctx` wants them, both undone after."""
    import ray

    own_ray = not ray.is_initialized()
    if own_ray:  # Ray uploads local code only for a whole job, so `ship_code` needs this connection to be ours
        connect(ray, address, {"py_modules": [str(Path(rs.__file__).parent)]} if ship_code else None)
    elif ship_code:
        logger.info("Ray was initialised before: the replicas import the rs installed on their nodes")
    data = ray.data.DataContext.get_current()
    bars, data.enable_progress_bars = data.enable_progress_bars, ctx.progress
    try:
        yield ray
    finally:
        data.enable_progress_bars = bars
        if own_ray:
            ray.shutdown()


def _cluster(
    ray: Any,
    ctx: BuildContext,
    address: str | None,
    replicas: int | None,
    num_gpus: float | None,
    num_cpus: float,
    runtime_env: dict[str, Any] | None,
    batch_size: int | None,
) -> Cluster:
    """The replicas' placement, defaults filled from the cluster's resources; refused when they do not fit a local Ray."""
    resources = ray.cluster_resources()
    if num_gpus is None:
        num_gpus = gpus_per_replica(ctx) if resources.get("GPU", 0) else 0
    if replicas is None:
        replicas = max(1, int(resources.get("GPU", 0) // num_gpus)) if num_gpus else 1
    check_fits(resources, replicas=replicas, num_gpus=num_gpus, num_cpus=num_cpus, local=address is None)
    specs = engine_specs(ctx)
    engines = dict(zip(("sampler", "judge"), engines_for(ctx.family)))  # lazy: their identities load no model
    return Cluster(
        ray,
        replicas,
        num_gpus,
        num_cpus,
        runtime_env,
        batch_size or ctx.family.config.engine.batch_size,
        ctx.progress,
        specs=specs,
        identities={role: identity_key(engines[role]) for role in specs},
    )


@dataclass
class _Steps:
    """What the steps of one pass share: the family, the cluster (its replicas), where the figures go."""

    ctx: BuildContext
    cluster: Cluster
    run: RayRun
    lookahead: int

    def greedy(self, cache: GenerationCache) -> SamplingPass:
        """A fresh sampling pass (the judge step's calibration cases accumulate in it: one per attempt). Its engines are
        lazy: they give their identities, and never load a model on the driver."""
        return sampling_pass(self.ctx, cache, *engines_for(self.ctx.family))

    def recovery(self, cache: GenerationCache, promotes: bool) -> RecoveryPass:
        """A fresh recovery pass, on a fresh sampling pass (`greedy`)."""
        return RecoveryPass(self.ctx.family.config, self.greedy(cache), promotes=promotes, progress=False)

    def clean_rows(self) -> Iterator[Row]:
        """The cleaned rows without their image bytes: the cache keys need only their hashes."""
        return read_clean_rows(self.ctx.paths.clean, images=False)

    def judge_rows(self) -> Iterator[Row]:
        """The cleaned rows the judge's requests are built from: with their image bytes when the judge sees the image
        (`judge.sees_image`: its requests travel with the image, as one process sends them), else without."""
        return read_clean_rows(self.ctx.paths.clean, images=self.ctx.family.config.judge.sees_image)

    def greedy_items(self) -> Iterator[dict[str, Any]]:
        """The greedy pass's records, the columns that decide whether the recovery pass samples an item."""
        return read_records(self.ctx.paths.items, "items", columns=list(DECIDING))

    def role(self, identity: str) -> str:
        """The replicas' role (`engine_specs`) whose engine has `identity`: any pass's requests go to the engine its
        keys name."""
        return next(role for role, mine in self.cluster.identities.items() if mine == identity)

    def step(self, names: tuple[str, ...], run_step: Callable[[], tuple[StepStats, ...]]) -> None:
        """Run one step (again for what is missing when nodes leave), its figures under `names` in the run."""
        for name, stats in zip(names, retrying_lost_nodes(names[0], self.cluster, run_step)):
            self.run.steps[name] = stats


def _greedy_steps(steps: _Steps) -> None:
    """The greedy pass: every cleaned item's answer, then the judge's requests and the calibration cases."""
    with GenerationCache(steps.ctx.cache_path) as cache:

        def sampling() -> tuple[StepStats]:
            greedy = steps.greedy(cache)
            keyed = ((key, request.image_sha256) for key, request in greedy.question_requests(steps.clean_rows()))
            return (_sampling_step(steps, cache, "sampling", greedy, greedy.settings, keyed),)

        def judge() -> tuple[StepStats, StepStats]:
            greedy = steps.greedy(cache)
            parts = _greedy_judge_parts(steps, greedy)
            _judge_step(steps, cache, "judge", greedy, parts)
            return parts[0][0], parts[1][0]

        def blind() -> tuple[StepStats]:
            stats = StepStats()
            _blind_step(steps, cache, steps.greedy(cache), stats)
            return (stats,)

        steps.step(("sampling",), sampling)
        if (
            steps.greedy(cache).judge is not None and steps.run.complete
        ):  # the judge needs every answer; a re-run does it
            steps.step(("judge", "calibration"), judge)
        if steps.ctx.family.config.blind is not None and steps.run.complete:  # as one process: after every answer
            steps.step(("blind",), blind)


def _greedy_judge_parts(steps: _Steps, greedy: SamplingPass) -> list[tuple[StepStats, Iterator[tuple[str, Request]]]]:
    """The greedy pass's judge step's parts (`_judge_step`): the judge's requests about the rejections, then about the
    calibration cases (known once every answer is verified: read after the first part is written), each with its image
    when the judge sees it (the calibration cases' read again from the clean store, in row order)."""
    return [
        (StepStats(), greedy.judge_requests(steps.judge_rows())),
        (StepStats(), greedy.calibration_requests(calibration_images(steps.ctx))),
    ]


def _recovery_steps(steps: _Steps, promotes: bool) -> None:
    """The recovery pass: the samples of the items it samples (`rs.pipeline.recover.to_sample`), then the judge's requests of the
    samples the verifier can neither accept nor reject, as the recover stage asks them."""
    recovery = steps.ctx.family.config.recovery
    assert recovery is not None
    with GenerationCache(steps.ctx.cache_path) as cache:

        def sampling() -> tuple[StepStats]:
            recovering = steps.recovery(cache, promotes)
            keyed = (
                (key, request.image_sha256)
                for key, request in recovering.sample_requests(steps.clean_rows(), steps.greedy_items())
            )
            return (
                _sampling_step(
                    steps,
                    cache,
                    "recovery",
                    recovering.greedy,
                    recovering.settings,
                    keyed,
                    samples=max(recovery.samples, recovery.difficulty.samples),
                ),
            )

        def judge() -> tuple[StepStats]:
            stats = StepStats()
            recovering = steps.recovery(cache, promotes)
            _judge_step(
                steps,
                cache,
                "recovery_judge",
                recovering.greedy,
                [(stats, recovering.judge_requests(steps.judge_rows(), steps.greedy_items()))],
            )
            return (stats,)

        def adjudication() -> tuple[StepStats]:
            stats = StepStats()
            _adjudication_step(steps, cache, steps.recovery(cache, promotes), stats)
            return (stats,)

        steps.step(("recovery",), sampling)
        if steps.greedy(cache).judge is not None and steps.run.complete:
            steps.step(("recovery_judge",), judge)
        if recovery.suspects and steps.run.complete:  # the candidates are known once every sample is
            steps.step(("adjudication",), adjudication)


def _blind_step(steps: _Steps, cache: GenerationCache, greedy: SamplingPass, stats: StepStats) -> None:
    """The no-image pass (`blind:`, `rs.pipeline.sample.blind`): the sample stage's own requests about every question
    (`SamplingPass.blind_requests`: the same prompt, no image; a multiple-choice question's rotations, the samples), those
    the cache lacks written without an image (`BUILD/FAMILY/ray/blind-*.parquet`) and answered by the replicas under
    their settings (temperature 0, then the samples'), keyed as the single-process pass keys them."""
    start = time.perf_counter()
    directory = steps.ctx.paths.root / "ray"
    for old in directory.glob("blind*-*.parquet"):
        old.unlink()
    assert greedy.blind is not None
    seen: set[bytes] = set()
    for group, settings in enumerate((greedy.blind.settings, greedy.blind.sample_settings)):
        keyed = ((key, r) for key, r, s in greedy.blind_requests(steps.clean_rows()) if s is settings)
        sent = stats.sent
        with ParquetStreamWriter(
            directory, f"blind{group}", REQUESTS, group_rows=max(1024, steps.cluster.batch_size)
        ) as writer:
            for key, request in _uncached(keyed, cache, stats, steps.lookahead, settings, seen=seen):
                stats.sent += 1
                writer.write(*_request_row(None, None, [(key, request)]))
        to_send, stats.sent = stats.sent - sent, sent  # counted again as the answers come back
        _answer_files(steps, "blind", writer.files, greedy.runner.identity_key, settings, cache, stats, to_send)
    stats.seconds = time.perf_counter() - start


def _adjudication_step(steps: _Steps, cache: GenerationCache, recovering: RecoveryPass, stats: StepStats) -> None:
    """The suspect references' adjudication (`rs.pipeline.sample.adjudicate`): the candidates and the calibration cases
    found by the recover stage's own code from the cached samples (`RecoveryPass.collect_disputes`), each dispute's two
    requests the cache lacks written with its image (`BUILD/FAMILY/ray/adjudication-*.parquet`) and answered by the
    replicas under the adjudicator's settings, keyed as the single-process pass keys them."""
    adjudicator = recovering.adjudicator
    assert adjudicator is not None
    start = time.perf_counter()
    recovering.collect_disputes(steps.clean_rows(), steps.greedy_items())
    directory = steps.ctx.paths.root / "ray"
    for old in directory.glob("adjudication-*.parquet"):
        old.unlink()
    seen: set[bytes] = set()
    rows = recovering.disputes_with_images(read_clean_rows(steps.ctx.paths.clean))
    with ParquetStreamWriter(
        directory, "adjudication", REQUESTS, group_rows=max(64, steps.cluster.batch_size)
    ) as writer:
        for dispute in rows:
            keyed = list(adjudicator.keyed([dispute]))
            missing = list(_uncached(keyed, cache, stats, steps.lookahead, adjudicator.settings, seen=seen))
            if not missing:
                continue
            stats.sent += len(missing)
            writer.write(*_request_row(dispute.image, dispute.image_sha256, missing))
    to_send, stats.sent = stats.sent, 0  # counted again as the answers come back
    _answer_files(
        steps,
        "adjudication",
        writer.files,
        adjudicator.runner.identity_key,
        adjudicator.settings,
        cache,
        stats,
        to_send,
    )
    stats.seconds = time.perf_counter() - start


def _sampling_step(
    steps: _Steps,
    cache: GenerationCache,
    name: str,
    greedy: SamplingPass,
    settings: SamplingSettings,
    keyed: Iterable[tuple[str, str | None]],
    *,
    samples: int = 1,
) -> StepStats:
    """Answer the missing sampling requests: the driver finds them (`keyed`: each request's key and its image's hash, in
    the clean store's order), the read tasks build them from the clean store (`sampling_requests`, `samples` a prompt),
    the replicas answer them under `settings`."""
    stats = StepStats()
    start = time.perf_counter()
    missing, images = _missing_keys(keyed, cache, stats, steps.lookahead, settings)
    if missing.size:
        cluster = steps.cluster
        files = sorted(str(p) for p in steps.ctx.paths.clean.glob("rows-*.parquet"))
        requests = (
            cluster.read(files)
            .select_columns(["image", "image_sha256", "qa"])
            .map_batches(
                sampling_requests,
                fn_kwargs={
                    "identity": greedy.runner.identity_key,
                    "settings": settings,
                    "instructions": greedy.instructions,
                    "missing": missing,
                    "samples": samples,
                },
                batch_format="pyarrow",
                batch_size=None,
            )
        )
        per_image = missing.size / images  # a batch holds whole images, about `batch_size` requests
        cluster.answer(
            name,
            requests,
            steps.role(greedy.runner.identity_key),
            settings,
            cache,
            stats,
            int(missing.size),
            rows_per_batch=max(1, round(cluster.batch_size / per_image)),
        )
    stats.seconds = time.perf_counter() - start
    return stats


def _judge_step(
    steps: _Steps,
    cache: GenerationCache,
    name: str,
    greedy: SamplingPass,
    parts: list[tuple[StepStats, Iterator[tuple[str, Request]]]],
) -> None:
    """Write the judge requests of `parts` the cache lacks, answer them in one pipeline, each counted in its part's stats.

    A part's requests are read after the part before it is written (the calibration cases are known once every
    answer is verified); a request two parts ask is sent once, counted in the first. The first part's stats get
    the step's time."""
    judge, (first, _) = greedy.judge, parts[0]
    assert judge is not None
    start = time.perf_counter()
    directory = steps.ctx.paths.root / "ray"
    for old in directory.glob("judge-*.parquet"):
        old.unlink()
    seen: set[bytes] = set()
    later: dict[str, StepStats] = {}  # the keys the parts after the first sent (few: the calibration cases)
    # requests with their image are looked up a batch at a time: `lookahead` of them would hold as many images
    lookahead = min(steps.lookahead, steps.cluster.batch_size) if judge.sees_image else steps.lookahead
    with ParquetStreamWriter(directory, "judge", REQUESTS, group_rows=max(1024, steps.cluster.batch_size)) as writer:
        for stats, keyed in parts:
            for key, request in _uncached(keyed, cache, stats, lookahead, judge.settings, seen=seen):
                stats.sent += 1
                if stats is not first:
                    later[key] = stats
                # no image for a text-only judge (`judge.sees_image` off)
                writer.write(*_request_row(request.image, request.image_sha256, [(key, request)]))
    to_send = sum(stats.sent for stats, _ in parts)
    for stats, _ in parts:
        stats.sent = 0  # counted again as the answers come back
    _answer_files(
        steps,
        name,
        writer.files,
        judge.runner.identity_key,
        judge.settings,
        cache,
        first,
        to_send,
        part_of=lambda key: later.get(key, first),
    )
    first.seconds = time.perf_counter() - start


def _request_row(
    image: bytes | None, image_sha256: str | None, keyed: Sequence[tuple[str, Request]]
) -> tuple[dict[str, Any], int]:
    """A row of a step's request files (`REQUESTS`): an image (or none) and the requests about it, each with its cache
    key; and its size, for the writer's row groups."""
    requests = [{"key": key, "prompt": r.prompt, "item_key": r.item_key, "sample": r.sample} for key, r in keyed]
    size = len(image or b"") + sum(len(r.prompt) for _, r in keyed)
    return {"image": image, "image_sha256": image_sha256, "requests": requests}, size


def _answer_files(
    steps: _Steps,
    name: str,
    files: Iterable[Path],
    identity_key: str,
    settings: SamplingSettings,
    cache: GenerationCache,
    stats: StepStats,
    total: int,
    **kwargs: Any,
) -> None:
    """Answer the `total` requests a step wrote to `files` on the replicas of the engine `identity_key` (`Cluster.answer`:
    each batch committed as it returns), then remove the files."""
    files = list(files)
    if total:
        steps.cluster.answer(
            name,
            steps.cluster.read([str(p) for p in files]),
            steps.role(identity_key),
            settings,
            cache,
            stats,
            total,
            **kwargs,
        )
    for path in files:
        path.unlink()


def _missing_keys(
    keyed: Iterable[tuple[str, str | None]],
    cache: GenerationCache,
    stats: StepStats,
    lookahead: int,
    settings: SamplingSettings,
) -> tuple[np.ndarray, int]:
    """The sorted 64-bit prefixes of the keys not in the cache (`keyed`: each with its image's hash, in row order), and
    how many rows (images) have one.

    Counts requests, cached and duplicates in `stats`.
    """
    prefixes = array("Q")  # 8 bytes per missing request
    images, last_image = 0, None
    for key, image in _uncached(keyed, cache, stats, lookahead, settings):
        prefixes.append(key_prefix(key))
        images += image != last_image
        last_image = image
    missing = np.unique(np.frombuffer(prefixes, dtype=np.uint64))
    stats.duplicates = len(prefixes) - len(missing)  # the same question about the same image twice
    return missing, images


def _uncached(
    keyed: Iterable[tuple[str, Any]],
    cache: GenerationCache,
    stats: StepStats,
    lookahead: int,
    settings: SamplingSettings,
    *,
    seen: set[bytes] | None = None,
) -> Iterator[tuple[str, Any]]:
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
