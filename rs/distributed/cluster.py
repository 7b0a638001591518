"""The cluster side of the Ray path: connecting, checking what fits, the replicas' environment, answering a step."""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

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
CHECK_SECONDS = 2.0
"""How often a step checks that no node left the cluster."""
FOOTER_READERS_ENV = "RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"
"""Ray Data's parquet reader reads the files' footers on a pool of actors of this size (32 unless set), made for each read."""


def ray_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


@dataclass
class Cluster:
    """How the replicas are placed, and the replicas themselves: Ray actors that live for the run and serve every step.

    Every step's requests stream from a Ray Data pipeline (`read`, the requests it builds), one block a batch, and
    go to the replicas through Ray's `ActorPool`, each replica listed `concurrent_batches` times (several batches at
    once in each, sharing its engine). The replicas start with the first step that sends anything and load their
    model once; the steps after reuse them (`close` ends them with the run). A replica that dies is restarted by Ray
    and its batches re-sent (`max_restarts=-1`, `max_task_retries=-1`): only the answers that come back are
    committed, each once.
    """

    ray: Any
    replicas: int
    num_gpus: float
    num_cpus: float
    runtime_env: dict[str, Any] | None
    batch_size: int
    progress: bool
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each role's engine (`engine_specs`: the sampler, the judge), built in every replica."""
    identities: dict[str, str] = field(default_factory=dict)
    """Each role's engine identity on the driver: a replica computing another refuses to start."""
    handles: list[Any] = field(default_factory=list)
    """The replicas started so far (Ray actor handles)."""
    actor_ids: list[str] = field(default_factory=list)
    node_of: dict[str, str] = field(default_factory=dict)
    """Each replica's Ray node, by actor id, as it last reported it."""
    loads: dict[str, int] = field(default_factory=dict)
    """Model loads by replica process (host:pid; a replica Ray restarted is a new process), as the replicas count them."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def fitting_replicas(self, step: str) -> int:
        """How many replicas the cluster holds now (at least 1), leaving a CPU for Ray Data's own tasks."""
        resources = self.ray.cluster_resources()  # alive nodes only
        fits = int((resources.get("CPU", 0) - 1) // self.num_cpus) if self.num_cpus else self.replicas
        if self.num_gpus:
            fits = min(fits, int(resources.get("GPU", 0) // self.num_gpus))
        if fits < self.replicas:
            logger.warning(
                "%s: the cluster now holds %d of the %d replicas; going on with %d",
                step,
                max(fits, 0),
                self.replicas,
                max(fits, 1),
            )
        return max(1, min(fits, self.replicas))

    @property
    def calls(self) -> int:
        """Batches a replica works on at once (`concurrent_batches` of the sampler's engine)."""
        return concurrent_batches(self.specs["sampler"], self.batch_size)

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

    def fit(self, step: str) -> int:
        """The replicas this step runs on: those on lost nodes ended, as many as the cluster holds now, new ones started
        (and their model loaded) where it holds more than are running. Returns how many."""
        alive = self.alive_nodes()
        self._end(lambda _, actor: self.node_of.get(actor) not in alive)  # gone with their node
        target = self.fitting_replicas(step)
        self._end(lambda i, _: i >= target)
        if len(self.handles) < target:
            replica = self.ray.remote(EngineReplica).options(
                num_cpus=self.num_cpus,
                num_gpus=self.num_gpus or None,
                max_restarts=-1,  # a replica that dies is started again ...
                max_task_retries=-1,  # ... and its batches re-sent to it
                max_concurrency=self.calls + 1,  # its batches, and `info`
                **({"runtime_env": self.runtime_env} if self.runtime_env else {}),
            )
            new = [replica.remote(self.specs, self.identities) for _ in range(target - len(self.handles))]
            try:
                infos = self.ray.get([h.info.remote() for h in new])  # waits for their model loads
            except Exception:
                for handle in new:
                    self.ray.kill(handle, no_restart=True)
                raise
            with self._lock:
                for handle, info in zip(new, infos):
                    self.handles.append(handle)
                    self.actor_ids.append(info["actor"])
                    self.node_of[info["actor"]] = info["node"]
                    self.loads[info["replica"]] = info["loads"]
        return len(self.handles)

    def _end(self, which: Callable[[int, str], bool]) -> int:
        """End the replicas `which(index, actor id)` picks (their batches in flight fail); how many."""
        with self._lock:
            doomed = [i for i, actor in enumerate(self.actor_ids) if which(i, actor)]
            for i in reversed(doomed):
                self.ray.kill(self.handles.pop(i), no_restart=True)
                self.actor_ids.pop(i)
        return len(doomed)

    def end_on(self, nodes: set[str]) -> int:
        """End the replicas last seen on `nodes`; how many."""
        return self._end(lambda _, actor: self.node_of.get(actor) in nodes)

    def close(self) -> None:
        """End the replicas (the run is over): their processes' exit frees the engines."""
        self._end(lambda i, _: True)

    def answer(
        self,
        step: str,
        requests: Any,
        role: str,
        settings: SamplingSettings,
        cache: GenerationCache,
        stats: StepStats,
        total: int,
        *,
        rows_per_batch: int | None = None,
        part_of: Callable[[str], StepStats] | None = None,
    ) -> None:
        """Run `requests` (a Ray Dataset of `REQUESTS` rows) through the replicas' `role` engines under `settings`;
        commit every batch as it returns.

        `rows_per_batch`: `REQUESTS` rows per engine batch (default: the batch size, one request a
        row). `stats` gets the step's figures; `part_of(key)` says which step's stats a
        request's answer counts in (default: `stats`), when one step serves two.
        """

        rows = rows_per_batch or self.batch_size
        part_of = part_of or (lambda key: stats)
        start = time.perf_counter()
        loads: dict[str, float] = {}
        batches: set[tuple[str, int] | tuple[str, int, str]] = set()
        activity: dict[str, tuple[float, float]] = {}

        def commit(batch: pa.Table) -> None:
            if not batch.num_rows:
                return
            if not stats.startup_seconds:
                first = batch.filter(pc.equal(batch["batch"], batch["batch"][0]))
                stats.startup_seconds = time.perf_counter() - start - pc.sum(first["engine_seconds"]).as_py()
            _commit(batch, cache, part_of, loads, batches, activity)
            for actor, node, replica, count in zip(
                *(batch[c].to_pylist() for c in ("actor", "node", "replica", "loads"))
            ):
                self.node_of[actor] = node
                self.loads[replica] = max(count, self.loads.get(replica, 0))
            bar.update(batch.num_rows)
            bar.set_postfix(stored=stats.stored, failed=stats.failed_requests, refresh=False)

        try:
            with _NodeWatch(self) as watch:
                stats.replicas = self.fit(step)
                with progress(total, f"{step} (ray, {stats.replicas} replicas)", enabled=self.progress) as bar:
                    sender = _Sender(self, step, role, settings, watch)
                    # one block per batch: replicas share the work evenly, and each answered batch reaches the driver
                    # (and the cache) alone; the blocks stay in Ray's object store, from the read tasks to the replicas
                    blocks = requests.repartition(target_num_rows_per_block=rows)
                    for bundle in blocks.iter_internal_ref_bundles():
                        for entry, piece in zip(bundle.blocks, bundle.slices):
                            if (piece.num_rows if piece is not None else entry.metadata.num_rows) == 0:
                                continue
                            part = (piece.start_offset, piece.end_offset) if piece is not None else None
                            for answered in sender.send(entry.ref, part):
                                commit(answered)
                    for answered in sender.drain():
                        commit(answered)
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


class _Sender:
    """One step's batches on the replicas, through Ray's `ActorPool`: each replica listed `calls` times (several
    batches in it at once, one engine fed from all), a batch to whichever has room.

    Ray restarts a replica that dies and re-sends its batches itself. A replica ended with its node (`_NodeWatch`)
    is not: the batches it held are re-sent here to the replicas that remain (those the cluster still holds started
    again when none remains), so the step loses nothing and answers each batch once.
    """

    def __init__(self, cluster: Cluster, step: str, role: str, settings: SamplingSettings, watch: "_NodeWatch"):
        self.cluster, self.step, self.role, self.settings, self.watch = cluster, step, role, settings, watch
        self.pending: dict[int, tuple[Any, tuple[int, int] | None]] = {}
        """The batches sent and not answered yet, by tag."""
        self._tags = itertools.count()
        self._handled = 0  # replicas ended with their nodes whose batches were re-sent
        self.pool = self._pool()

    def _pool(self) -> Any:
        from ray.util import ActorPool

        if not self.cluster.handles:  # every replica went with its node: start those the cluster holds now
            self.cluster.fit(self.step)
        return ActorPool([h for _ in range(self.cluster.calls) for h in self.cluster.handles])

    def send(self, block: Any, rows: tuple[int, int] | None) -> Iterator[pa.Table]:
        """Send one block (`rows` of it); yields the answered batches taken off the pool to make room."""
        yield from self._resend_lost()
        while not self.pool.has_free():
            yield from self._take()
        tag = next(self._tags)
        self.pending[tag] = (block, rows)
        self._submit(tag)

    def drain(self) -> Iterator[pa.Table]:
        """The answers of every batch still out."""
        while self.pool.has_next() or self.pending:
            if self.pool.has_next():
                yield from self._take()
            else:  # only batches lost with their replicas remain
                yield from self._resend_lost(force=True)

    def _submit(self, tag: int) -> None:
        block, rows = self.pending[tag]
        role, settings = self.role, self.settings
        self.pool.submit(lambda replica, t: replica.answer.remote(block, role, settings, rows, t), tag)

    def _take(self) -> Iterator[pa.Table]:
        from ray.exceptions import ActorDiedError

        if self.pool.has_next():
            try:
                tag, answered = self.pool.get_next_unordered()
            except ActorDiedError:
                if not self.watch.lost:  # set before the watch ends the lost nodes' replicas
                    raise
            else:
                del self.pending[tag]
                yield answered
        yield from self._resend_lost()

    def _resend_lost(self, *, force: bool = False) -> Iterator[pa.Table]:
        """When replicas ended with their nodes: take what the others answer, and send the rest again on a new pool."""
        from ray.exceptions import ActorDiedError

        if self.watch.ended == self._handled and not force:
            return
        self._handled = self.watch.ended
        while self.pool.has_next():
            try:
                tag, answered = self.pool.get_next_unordered()
            except ActorDiedError:
                continue  # a batch of a replica that went with its node: re-sent below
            del self.pending[tag]
            yield answered
        logger.warning("%s: sending again the %d batch(es) lost with their replicas", self.step, len(self.pending))
        self.pool = self._pool()
        for tag in list(self.pending):
            self._submit(tag)  # the pool queues what does not fit yet


class _NodeWatch:
    """Watches the cluster's nodes while a step runs: the replicas on a node that leaves are ended at once.

    Ray would restart them elsewhere, on the CPUs Ray Data's read tasks need, and the step would wait for a read
    that never runs. Their batches fail instead, and `_Sender` sends them again to the replicas that remain.
    """

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.lost: set[str] = set()
        self.ended = 0
        """Replicas ended because their node left: the step stops sending and fails once the rest is answered."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="rs-node-watch", daemon=True)

    def __enter__(self) -> "_NodeWatch":
        self._nodes = self.cluster.alive_nodes()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        cluster = self.cluster
        while not self._stop.wait(CHECK_SECONDS):
            try:
                lost = self._nodes - cluster.alive_nodes()
            except Exception:  # noqa: BLE001 - the driver's own calls will say what is wrong
                continue
            if lost - self.lost:
                self.lost |= lost
                self.ended += cluster.end_on(lost)  # their batches now fail: `next` expects it
                logger.warning("%d node(s) left the cluster; %d replica(s) ended with them", len(lost), self.ended)


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

    Ray restarts a replica that dies on a live node by itself (and `_Sender` re-sends the batches of a lost node's
    replicas), but a node that goes away can take one of Ray Data's own tasks with it, and the step fails. Its committed
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
