"""What runs inside a Ray replica: the engine it builds from the family's configuration, and the rows it reads and writes."""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import asdict
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from rs.context import BuildContext
from rs.engines.base import Engine, Generation, Request, SamplingSettings
from rs.engines.cached_engine import cache_key, identity_key
from rs.engines.machine import machine_record
from rs.engines.stream import Stream, open_stream
from rs.families.schema import ModelConfig
from rs.pipeline.sample.requests import sampling_request
from rs.prompt import Instructions
from rs.registry import ENGINES
from rs.store import qa_item
from rs.util.long_lived import end_with_the_command
from rs.util.text import last_line

from .report import RayPlanError

logger = logging.getLogger(__name__)


MAX_CONSECUTIVE_FAILURES = 3
REQUEST = pa.struct([("key", pa.string()), ("prompt", pa.string()), ("item_key", pa.string()), ("sample", pa.int32())])
REQUESTS = pa.schema([("image", pa.binary()), ("image_sha256", pa.string()), ("requests", pa.list_(REQUEST))])
"""What a replica answers: one image (None for the judge) and the requests about it, with their cache keys.

Grouped by image so that an image asked about ten times travels once, not ten times. `sample`: which sample of
its prompt a request is (`Request.sample`, seeded `settings.seed + sample`; 0 but in the recovery pass)."""

ANSWERS = pa.schema(
    [
        ("key", pa.string()),
        ("generation", pa.string()),
        ("batch_error", pa.string()),
        ("batch", pa.string()),
        ("replica", pa.string()),
        ("actor", pa.string()),
        ("node", pa.string()),
        ("loads", pa.int32()),
        ("load_seconds", pa.float64()),
        ("engine_seconds", pa.float64()),
        ("busy_seconds", pa.float64()),
        ("active_seconds", pa.float64()),
    ]
)
"""What a replica returns: the `Generation` as JSON; `batch_error` when its batch failed in the engine.

`replica`: the replica's process (host:pid; a replica Ray restarted is a new one), `actor`: its Ray actor (the same
after a restart), `node`: its Ray node, `loads`: the
model loads this process made so far (one a model it serves: the run's passes never load it again).

`engine_seconds`: the replica's engine time since its previous batch returned, shared over this batch's
rows (summed over rows: the replicas' engine time); `busy_seconds` / `active_seconds`: the replica's
engine time and wall time since its first request, so far (their ratio: how busy it kept its engine)."""


def sampling_requests(
    batch: pa.Table,
    *,
    identity: str,
    settings: SamplingSettings,
    instructions: Instructions,
    missing: np.ndarray,
    samples: int = 1,
) -> pa.Table:
    """Clean-store rows -> the sampling requests of their QA items that are still missing, by image (a Ray Data map).

    Builds each request as the sampling pass does (`rs.prompt.sampling_request`) and keys it with the driver's
    `cache_key`; `missing`
    is the sorted array of the missing keys' 64-bit prefixes. `samples`: the recovery pass asks each item's
    samples 0 to `samples - 1` (one request each, keyed as `rs.pipeline.recover` keys them); only the items it
    samples have missing keys, so the rows need not say which items those are.
    """
    out: dict[str, list[Any]] = {name: [] for name in REQUESTS.names}
    seen: set[str] = set()
    for image, sha, qa in zip(batch["image"].to_pylist(), batch["image_sha256"].to_pylist(), batch["qa"].to_pylist()):
        requests = []
        for item in qa:
            request = sampling_request(qa_item(item), instructions, sha)
            for sample in range(samples):
                key = cache_key(identity, settings, sha, request.prompt, sample)
                if key not in seen and _is_missing(key, missing):
                    seen.add(key)
                    requests.append(
                        {"key": key, "prompt": request.prompt, "item_key": request.item_key, "sample": sample}
                    )
        if requests:
            for name, value in zip(REQUESTS.names, (image, sha, requests)):
                out[name].append(value)
    return pa.table(out, schema=REQUESTS)


def key_prefix(key: str) -> int:
    return int(key[:16], 16)


def _is_missing(key: str, missing: np.ndarray) -> bool:
    prefix = np.uint64(key_prefix(key))
    i = int(np.searchsorted(missing, prefix))
    return i < len(missing) and missing[i] == prefix


class EngineFeeder:
    """One engine kept fed by a thread of its own, from every batch the replica is working on, whatever pass asked it.

    The replica answers several batches at once (Ray calls it from several threads, `concurrent_batches`), of any
    pass: each call hands its requests, with the sampling settings of its pass, to this feeder and waits for their
    answers. The feeder thread alone touches the engine: it keeps one stream (`rs.engines.stream`) a settings open
    on it and the engine's window full from all of them, so a batch's long answers never hold the next batch back.
    An engine that raises fails the requests in flight in it (their batches come back failed and are not cached);
    the feeder replaces the engine and goes on with the rest, and stops after `MAX_CONSECUTIVE_FAILURES` failures
    with no answer between them.
    """

    def __init__(self, spec: dict[str, Any], engine: Engine, replace: Callable[[], Engine]):
        self.spec, self.engine, self._replace = spec, engine, replace
        self._inbox: queue.SimpleQueue[tuple[Request, SamplingSettings, Future[Generation]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.dead: BaseException | None = None
        self.idle_seconds = 0.0
        """Time since the first request with nothing in the engine, waiting for a batch."""
        self.first_request: float | None = None
        self._idle_since: float | None = None
        self._thread = threading.Thread(target=self._feed, name="rs-engine-feeder", daemon=True)
        self._thread.start()

    def answer(self, requests: list[Request], settings: SamplingSettings) -> list[Future[Generation]]:
        futures: list[Future[Generation]] = []
        with self._lock:
            if self.dead is not None:
                raise RuntimeError(
                    f"this replica's engine failed {MAX_CONSECUTIVE_FAILURES} times in a row"
                ) from self.dead
            if self.first_request is None:
                self.first_request = time.perf_counter()
            for request in requests:
                futures.append(Future())
                self._inbox.put((request, settings, futures[-1]))
        return futures

    def _feed(self) -> None:
        failures = 0
        streams: dict[str, Stream] = {}  # one a pass's settings (by their repr: a dict field), all on the one engine
        in_flight: set[Future[Generation]] = set()
        window = 0
        turn = 0
        while True:
            try:
                while len(in_flight) < max(1, window):
                    try:
                        request, settings, future = self._next(block=not in_flight)
                    except queue.Empty:
                        break
                    future.set_running_or_notify_cancel()
                    in_flight.add(future)  # failed with the others if its stream cannot open
                    stream = streams.get(name := repr(settings))
                    if stream is None:
                        stream = streams[name] = open_stream(
                            self.engine, settings, batch_size=self.spec["engine"].get("batch_size") or 256
                        )
                        window = max(s.window for s in streams.values())
                    stream.submit(future, request)
                # advance the engine for one stream with requests in it, in turn; the others take what finished meanwhile
                busy = [s for s in streams.values() if s.in_flight]
                finished = []
                if busy:
                    turn = (turn + 1) % len(busy)
                    finished = busy[turn].poll()
                    for other in busy:
                        if other is not busy[turn]:
                            finished.extend(other.poll(wait=False))
                for future, generation in finished:
                    in_flight.discard(future)  # type: ignore[arg-type]
                    future.set_result(generation)  # type: ignore[attr-defined]
                failures = 0 if finished else failures
            except Exception as err:
                failures += 1
                logger.error("replica engine failed with %d requests in flight: %s", len(in_flight), last_line(err))
                for future in in_flight:
                    future.set_exception(err)
                in_flight.clear()
                streams.clear()
                window = 0
                if failures >= MAX_CONSECUTIVE_FAILURES:
                    with self._lock:
                        self.dead = err
                    while True:  # nothing more will be answered: fail what is queued
                        try:
                            self._inbox.get_nowait()[2].set_exception(err)
                        except queue.Empty:
                            return
                self._replace_engine()

    def _next(self, *, block: bool) -> tuple[Request, SamplingSettings, Future[Generation]]:
        if not block:
            return self._inbox.get_nowait()
        self._idle_since = time.perf_counter()
        item = self._inbox.get()  # nothing in flight: the engine is idle until a batch comes
        if self.first_request is not None:
            self.idle_seconds += time.perf_counter() - max(self._idle_since, self.first_request)
        self._idle_since = None
        return item

    @property
    def busy_seconds(self) -> float:
        """Time since the first request with requests in the engine (submitting, stepping)."""
        if self.first_request is None:
            return 0.0
        now, idle_since = time.perf_counter(), self._idle_since
        idle_now = now - max(idle_since, self.first_request) if idle_since is not None else 0.0
        return max(0.0, now - self.first_request - self.idle_seconds - idle_now)

    def _replace_engine(self) -> None:
        try:
            self.engine.close()
        except Exception:
            logger.warning("closing a failed engine failed", exc_info=True)
        self.engine = self._replace()


class EngineReplica:
    """One engine replica: a Ray actor that lives for the whole run and answers every pass's batches.

    `specs`: the engines of the family's roles (`engine_specs`: the sampler, the judge), `identities`: each role's
    engine identity on the driver. Roles with the same spec share one engine (one model load, as `engines_for` shares
    them in one process). Each engine refuses to start if its identity differs from the driver's (its answers would
    land under keys no run asks for); the sampler's model loads now, another role's model when first asked. The
    passes' batches (`answer`) say their role and sampling settings; they share each engine through an
    `EngineFeeder`. Every load is counted (`loads`) and logged: a run loads each model once a replica.
    """

    def __init__(self, specs: dict[str, dict[str, Any]], identities: dict[str, str]):
        end_with_the_command()  # the actor's process ends with it: its exit frees the engine, no teardown first
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.node, self.actor = _runtime_ids()
        self._lock = threading.Lock()
        self.loads = 0
        self.load_seconds = 0.0
        self._specs = specs
        self._engine_of = {role: json.dumps(spec, sort_keys=True) for role, spec in specs.items()}
        self._engines: dict[str, Engine] = {}
        # this node's machine, stamped on each answer here: the driver stores it with the answer (`rs.engines.machine`)
        self._made_on: dict[str, dict[str, Any]] = {}
        for role, spec in specs.items():
            engine = self._engines.get(self._engine_of[role])
            if engine is None:
                engine = self._engines[self._engine_of[role]] = build_replica_engine(spec)
            if (mine := identity_key(engine)) != identities[role]:
                raise RuntimeError(
                    f"this replica computes another engine identity than the driver, so its answers would be cached under keys "
                    f"no run asks for: driver {identities[role]}, replica {mine}. Run the driver and the replicas with the same "
                    "versions of rs, vLLM and transformers, and the same model files."
                )
            self._made_on[role] = machine_record(engine, json.loads(identities[role]))
        self._feeders: dict[str, EngineFeeder] = {}
        self._feeder(next(iter(specs)))  # the first role's model loads now, not in the first batch
        self.batches = 0
        self._busy_reported = 0.0

    def info(self) -> dict[str, Any]:
        """Who this replica is (its process, its node) and its loads so far; the driver waits on it for the start."""
        return {
            "replica": self.name,
            "actor": self.actor,
            "node": self.node,
            "loads": self.loads,
            "load_seconds": self.load_seconds,
        }

    def _feeder(self, role: str) -> EngineFeeder:
        """The feeder of `role`'s engine, its model loaded (once a process) on first use."""
        key = self._engine_of[role]
        with self._lock:
            if key not in self._feeders:
                engine = self._engines[key]
                self._load(engine, role)
                self._feeders[key] = EngineFeeder(self._specs[role], engine, lambda: self._rebuilt(role))
            return self._feeders[key]

    def _load(self, engine: Engine, role: str) -> None:
        start = time.perf_counter()
        engine.load()
        self.load_seconds = max(self.load_seconds, time.perf_counter() - start)
        self.loads += 1
        logger.info(
            "replica %s loaded the %s model %s in %.1f s (load %d of this process)",
            self.name,
            role,
            self._specs[role]["model"].get("id"),
            time.perf_counter() - start,
            self.loads,
        )

    def _rebuilt(self, role: str) -> Engine:
        """A fresh engine for `role` after its engine failed (a replacement: counted as a load)."""
        engine = build_replica_engine(self._specs[role])
        self._load(engine, role)
        self._engines[self._engine_of[role]] = engine
        return engine

    def answer(
        self, batch: pa.Table, role: str, settings: SamplingSettings, rows: tuple[int, int] | None, tag: Any
    ) -> tuple[Any, pa.Table]:
        """Answer a batch of `REQUESTS` rows (`rows`: the `(start, end)` of them to answer, None: all) with `role`'s
        engine under `settings`, as `ANSWERS` rows, returned with the driver's `tag` of the batch."""
        if rows is not None:
            batch = batch.slice(rows[0], rows[1] - rows[0])
        feeder = self._feeder(role)
        keys, requests = [], []
        for row in batch.to_pylist():
            for r in row["requests"]:
                keys.append(r["key"])
                requests.append(
                    Request(
                        prompt=r["prompt"],
                        image=row["image"],
                        image_sha256=row["image_sha256"],
                        item_key=r["item_key"],
                        sample=r["sample"] or 0,
                    )
                )
        futures = feeder.answer(requests, settings)
        generations, errors = [], []
        for future in futures:
            try:
                generation = future.result()
                generation.max_tokens = settings.max_tokens
                generation.repetition_detection = settings.repetition_detection
                generation.thinking_token_budget = settings.thinking_token_budget
                generation.made_on = self._made_on[role]
                generations.append(generation)
                errors.append(None)
            except Exception as err:  # the engine failed with this request in it: not cached, sent again next run
                errors.append(last_line(err))
                generations.append(Generation.failed(f"the engine failed: {errors[-1]}", cacheable=False))
        if feeder.dead is not None:
            raise RuntimeError(
                f"replica {self.name}: its engine failed {MAX_CONSECUTIVE_FAILURES} times in a row; stopping the run "
                "(the cache keeps everything answered so far)"
            ) from feeder.dead
        if failed := sum(e is not None for e in errors):
            logger.error(
                "replica %s: %d of a batch's %d requests failed in the engine, they are not cached: %s",
                self.name,
                failed,
                len(requests),
                next(e for e in errors if e),
            )
        with self._lock:
            self.batches += 1
            number = self.batches
            busy = sum(f.busy_seconds for f in self._feeders.values())
            busy_since_last, self._busy_reported = busy - self._busy_reported, busy
        first = min((f.first_request for f in self._feeders.values() if f.first_request), default=None)
        active = time.perf_counter() - (first or time.perf_counter())
        n = len(requests)
        return tag, pa.table(
            {
                "key": keys,
                "generation": [json.dumps(g.to_dict(), ensure_ascii=False) for g in generations],
                "batch_error": errors,
                "batch": [f"{self.name}/{number}"] * n,
                "replica": [self.name] * n,
                "actor": [self.actor] * n,
                "node": [self.node] * n,
                "loads": [self.loads] * n,
                "load_seconds": [self.load_seconds] * n,
                "engine_seconds": [busy_since_last / n if n else 0.0] * n,
                "busy_seconds": [busy] * n,
                "active_seconds": [active] * n,
            },
            schema=ANSWERS,
        )


def _runtime_ids() -> tuple[str, str]:
    """This process's Ray node and actor (empty outside Ray)."""
    import ray

    if not ray.is_initialized():
        return "", ""
    context = ray.get_runtime_context()
    return context.get_node_id(), context.get_actor_id() or ""


def concurrent_batches(spec: dict[str, Any], requests_per_batch: int) -> int:
    """Batches a replica works on at once: enough to fill its engine's window, and one more waiting (at most 16)."""
    engine = spec["engine"]
    window = engine.get("in_flight") or 4 * int((engine.get("args") or {}).get("max_num_seqs") or 256)
    return max(2, min(16, -(-window // max(1, requests_per_batch)) + 1))


def build_replica_engine(spec: dict[str, Any]) -> Engine:
    """The engine a replica runs, from its spec (see `engine_specs`), set up to run inside an actor."""
    plugin = ENGINES.get(spec["engine"]["kind"])
    config = plugin.Config(**spec["engine"]).for_replica()
    return plugin.from_config(config, ModelConfig.from_dict(spec["model"]))


# --- on the driver --------------------------------------------------------------------------------


def engine_specs(ctx: BuildContext) -> dict[str, dict[str, Any]]:
    """What a replica needs to build the family's engines: the configuration, not the driver's objects."""
    c = ctx.family.config
    if not ENGINES.get(c.engine.kind).runs_in_replica:
        able = [name for name, plugin in ENGINES.items() if plugin.runs_in_replica]
        raise RayPlanError(
            f"families.{ctx.family.name}.engine.kind is {c.engine.kind!r}; the Ray path runs engine kinds that run "
            f"in a replica ({', '.join(able)}); an openai server is already shared by every process that points at it"
        )
    judge_model = c.judge.model or c.model
    engine = asdict(c.engine)
    return {
        "sampler": {"model": asdict(c.model), "engine": engine},
        "judge": {"model": asdict(judge_model), "engine": engine},
    }


def gpus_per_replica(ctx: BuildContext) -> int:
    """GPUs one replica of the family's engine holds (for vllm: tensor x pipeline parallel size)."""
    return ctx.family.config.engine.devices_per_replica()
