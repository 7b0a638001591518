"""The day a GPU is at hand: measure what the README's GPU-hour model assumes, with the tiny Qwen3-VL.

    python bench/gpu_check.py [--model rs:tiny-qwen3vl] [--active 1,16,64,256] [--tokens 64,192]
                              [--engine-args JSON] [--skip-bench] [--skip-publish] [--allow-cpu]

Needs a machine with a GPU and a CUDA vLLM (`pip install -e '.[vllm,math]'`); nothing here runs in
the tests. Three parts, each printing its figures:

1. **Step time per active sequence**, the model of `bench/gpu_hours.py` (a decode step costs
   `t0 + t1 x active` seconds; it assumes 3.5 ms and 40 us for an 8B model on an H200). For each
   number of active sequences, that many text requests decode a fixed number of tokens together
   (`ignore_eos`), at two lengths; the difference over the extra tokens is one step's time without
   the prefill. A least-squares line through the steps gives `t0` and `t1`. With the tiny model
   the figures are the engine's overhead floor (weights and KV cache are tiny); with
   `--model Qwen/Qwen3-VL-8B-Thinking` (weights from the Hub) they are the real model's, to put in
   `bench/gpu_hours.py --t0 --t1`.
2. **The engine benchmark's long-tail workload** (`bench/engine.py --workload long-tail`) on the
   tiny Qwen3-VL on the GPU: (c)/(a), the `--stream-ratio` the GPU-hour model uses.
3. **A TinyCLEVR publish with the tiny Qwen3-VL** (`model.id` rs:tiny-qwen3vl, `reasoning.parser`
   qwen3, local target): the whole pipeline on the GPU, its seconds and QA per second.

On a GPU the engine runs with CUDA graphs (`enforce_eager: false`) and vLLM's own memory sizing
(`kv_cache_memory_bytes` removed, `gpu_memory_utilization` 0.5); `--engine-args` overrides any of
it. `--allow-cpu` runs everything small on a CPU, to check the script itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

GPU_ARGS = {"enforce_eager": False, "kv_cache_memory_bytes": None, "gpu_memory_utilization": 0.5}
ASSUMED = {"t0": 3.5e-3, "t1": 4.0e-5}  # bench/gpu_hours.py's defaults: an 8B model on one H200
ENV = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"), "VLLM_LOGGING_LEVEL": "WARNING"}


def engine_args(model: str, overrides: dict, on_gpu: bool) -> dict:
    from rs_demo import tiny_qwen3vl

    base = (
        dict(tiny_qwen3vl.VLLM_ENGINE_KWARGS)
        if model.startswith("rs:")
        else {"max_model_len": 8192, "limit_mm_per_prompt": {"image": 1, "video": 0}}
    )
    args = {**base, **(GPU_ARGS if on_gpu else {}), **overrides}
    return {k: v for k, v in args.items() if v is not None}


def step_times(model: str, args: dict, active: list[int], tokens: tuple[int, int]) -> dict[int, float]:
    """Seconds per decode step with `n` sequences decoding together, for each `n` in `active`."""
    from vllm import LLM, SamplingParams

    from rs.engines.models import resolve_model

    llm = LLM(
        model=resolve_model(model), **{**args, "max_num_seqs": max(max(active), int(args.get("max_num_seqs", 0)))}
    )
    short, long = tokens
    prompts = [
        f"Request {i}: describe the scene, counting every cube, sphere and cylinder." for i in range(max(active))
    ]
    llm.generate(prompts[:4], SamplingParams(max_tokens=8), use_tqdm=False)  # warm-up (graphs, allocator)
    steps = {}
    for n in active:
        seconds = {}
        for length in (short, long):
            params = SamplingParams(max_tokens=length, min_tokens=length, ignore_eos=True, temperature=0.0)
            runs = []
            for _ in range(3):
                llm.reset_prefix_cache()
                start = time.perf_counter()
                llm.generate(prompts[:n], params, use_tqdm=False)
                runs.append(time.perf_counter() - start)
            seconds[length] = min(runs)  # the least disturbed run
        steps[n] = (seconds[long] - seconds[short]) / (long - short)
    return steps


def fit(steps: dict[int, float]) -> tuple[float, float]:
    """Least squares `t = t0 + t1 x active`."""
    xs, ys = list(steps), list(steps.values())
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    t1 = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sum((x - mx) ** 2 for x in xs) or 1.0)
    return my - t1 * mx, t1


def publish(model: str, args: dict, num_images: int) -> None:
    """TinyCLEVR with the tiny Qwen3-VL through `python -m rs.publish`, to a local folder."""
    import yaml

    shipped = yaml.safe_load((ROOT / "families.yaml").read_text())
    family = dict(shipped["families"]["TinyCLEVR"])
    family["source"] = {**family["source"], "num_images": num_images}
    family["model"] = {"id": model, "reasoning": {"parser": "qwen3"}}
    family["engine"] = {**family["engine"], "args": {**family["engine"]["args"], **args}}
    config = {"defaults": shipped["defaults"], "families": {"TinyCLEVRQwen3VL": family}}
    with tempfile.TemporaryDirectory(prefix="rs-gpu-check-") as tmp:
        path = Path(tmp) / "families.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        command = [
            sys.executable,
            "-m",
            "rs.publish",
            "TinyCLEVRQwen3VL",
            "--config",
            str(path),
            "--out",
            f"{tmp}/out",
            "--build-dir",
            f"{tmp}/build",
            "--cache",
            f"{tmp}/cache.sqlite",
        ]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=ENV, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"error: the publish failed ({done.returncode}):\n{done.stderr[-3000:]}")
        stats = json.loads(next(Path(tmp, "build").rglob("stats.json")).read_text())
    totals = stats["totals"]
    print(
        f"\n3. TinyCLEVR publish with {model} ({num_images} images): {seconds:.1f} s including the engine's load; "
        f"{totals['answered']} QA answered, {totals['answered'] / seconds:.1f} QA/s; accepted {totals['accepted']}"
    )
    print("   " + "\n   ".join(line for line in done.stdout.splitlines() if line.strip())[:2000])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        default="rs:tiny-qwen3vl",
        help="for part 1: rs:tiny-qwen3vl, or a Hub id such as Qwen/Qwen3-VL-8B-Thinking",
    )
    parser.add_argument("--active", default="1,16,64,256", help="numbers of sequences decoding at once")
    parser.add_argument("--tokens", default="64,192", help="the two output lengths whose difference times a step")
    parser.add_argument(
        "--engine-args",
        type=json.loads,
        default={},
        help="vllm.LLM arguments over the defaults (JSON; null removes one)",
    )
    parser.add_argument("--images", type=int, default=48, help="TinyCLEVR images to publish")
    parser.add_argument("--skip-bench", action="store_true")
    parser.add_argument("--skip-publish", action="store_true")
    parser.add_argument("--allow-cpu", action="store_true", help="run on a CPU (small), to check the script")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    on_gpu = torch.cuda.is_available()
    if not on_gpu and not args.allow_cpu:
        print(
            "error: no GPU here (torch.cuda.is_available() is false)\n"
            "hint: run this on a machine with a GPU and a CUDA vLLM; --allow-cpu runs it small on a CPU to check the script",
            file=sys.stderr,
        )
        return 2
    device = torch.cuda.get_device_name(0) if on_gpu else "CPU (--allow-cpu: figures of no use for the GPU model)"
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0" if not on_gpu else "1")
    active = [int(n) for n in args.active.split(",")]
    short, long = (int(n) for n in args.tokens.split(","))
    llm_args = engine_args(args.model, args.engine_args, on_gpu)

    print(f"device: {device}; model {args.model}; engine args {llm_args}")
    steps = step_times(args.model, llm_args, active, (short, long))
    t0, t1 = fit(steps)
    print(f"\n1. decode step time ({long - short} extra tokens, best of 3)")
    print(f"{'active sequences':>18} {'ms per step':>12} {'us per sequence':>16}")
    for n, t in steps.items():
        print(f"{n:>18} {t * 1e3:>12.3f} {t / n * 1e6:>16.1f}")
    print(
        f"fit: t0 {t0 * 1e3:.3f} ms + t1 {t1 * 1e6:.1f} us x active "
        f"(bench/gpu_hours.py assumes {ASSUMED['t0'] * 1e3:.1f} ms + {ASSUMED['t1'] * 1e6:.0f} us for an 8B model on an H200)"
    )
    print(f"   then: python bench/gpu_hours.py --t0 {t0:.3g} --t1 {t1:.3g}")

    bench_args = {**(GPU_ARGS if on_gpu else {}), **args.engine_args}
    if not args.skip_bench:
        n, repeats = ("384", "3") if on_gpu else ("32", "1")
        print("\n2. bench/engine.py --workload long-tail --model rs:tiny-qwen3vl", flush=True)
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "engine.py"),
                "--workload",
                "long-tail",
                "--model",
                "rs:tiny-qwen3vl",
                "--n",
                n,
                "--repeats",
                repeats,
                "--engine-args",
                json.dumps(bench_args),
            ],
            cwd=ROOT,
            env=ENV,
            check=True,
        )
    if not args.skip_publish:
        from rs_demo import tiny_qwen3vl

        # over TinyCLEVR's CPU arguments and the defaults' GPU ones: a null removes one
        here = GPU_ARGS if on_gpu else {"tensor_parallel_size": None, "gpu_memory_utilization": None}
        publish(
            "rs:tiny-qwen3vl",
            {**tiny_qwen3vl.VLLM_ENGINE_KWARGS, **here, **args.engine_args},
            args.images if on_gpu else min(args.images, 4),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
