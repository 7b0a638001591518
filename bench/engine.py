"""How close the sampling stage keeps vLLM to its own best offline throughput, and how fast a cached re-run is.

    python bench/engine.py [--n 384] [--repeats 7] [--workload long-tail,today,loops] [--loop-share 0.05] [--rss]
                           [--model rs:tiny-vlm|rs:tiny-qwen3vl] [--engine-args JSON]

The same requests on every path of one run (synthetic CLEVR-style scenes, four questions an image,
prompts built by `rs.prompt.build_prompt` with TinyCLEVR's instruction), with the tiny VLM on one
`vllm.LLM` (TinyCLEVR's engine arguments: `max_num_seqs` 16; batch size 64):

* workload `long-tail`: every request's output length is drawn from a lognormal (median 24 tokens,
  sigma 1, capped at 240: median : max = 1 : 10), fixed by a hash of the request's item key and
  forced with `ignore_eos` (`bench/longtail.py`), so that every path decodes exactly the same
  tokens. This is the shape of a thinking model's answers: most short, a few running to `max_tokens`.
* workload `today`: the tiny model's own outputs under TinyCLEVR's sampling settings.
* workload `loops`: the long tail, with a share of the requests (`--loop-share`, default 0.05) forced
  into a loop instead ("red cube " repeated, by a structured-output regex, up to the long tail's cap
  of 240 tokens; the others write a count, cut at their long-tail length, which never loops): path (c) with loop detection on (TinyCLEVR's `sampling.repetition_detection`, the
  defaults') against off, alternating, on the same requests: tokens generated, items/s, endings.
  Why 5%: with the long tail's mean of about 40 tokens, loops running to the 240-token cap then take a
  quarter of all tokens, which is what vLLM's reported ~33% more throughput from loop detection on
  Qwen3-VL (PR #35451) implies; the figure scales with the share (`--loop-share`).

Paths:

* (a) vLLM's own best offline use: one `LLM.chat` over all requests (PIL images opened from the bytes);
* (b) the old per-batch loop: one `LLM.chat` per `engine.batch_size` requests;
* (c) the stage's engine path on a cold cache: `CachedEngine(VLLMEngine).run` (cache keys, the
  stream into the running engine, commits in small groups, results in request order);
* (d) the same on the now warm cache: zero engine calls (over the requests `WARM_PASSES` times, so
  that opening the cache and the run's set-up do not dominate a run of a few milliseconds).

Each timed run starts with vLLM's prefix and multimodal caches emptied; the paths alternate their
order from one repeat to the next, and figures are medians of `--repeats` (this machine's noise
is 10-20% from run to run); (c)/(a) is also given repeat by repeat, (a) and (c) of a repeat having
run side by side. Targets: (c)/(a) >= 0.95 on long-tail and >= 0.9 on today; (d) >= 50,000 items/s.
`--rss` also runs path (c) in two fresh processes on 1x and 4x the requests (generated lazily) and
compares their peak RSS: memory must not grow with the number of requests.
`--model rs:tiny-qwen3vl` runs the same on the tiny Qwen3-VL (the default model's architecture), and
`--engine-args` overrides `vllm.LLM` arguments (a GPU: `{"enforce_eager": false, "kv_cache_memory_bytes": null}`;
`bench/gpu_check.py` does both).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
WARM_PASSES = 10
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from longtail import long_tail_length, long_tail_params  # noqa: E402


def setup() -> None:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def requests_of(n: int, instruction: str) -> Iterator:
    """`n` requests, generated lazily (an image is rendered when its first question is reached)."""
    from rs.engines.base import Request
    from rs.prompt import build_prompt
    from rs.sources.synthetic import SyntheticSource

    made = 0
    for record in SyntheticSource(seed=0, num_images=(n + 3) // 4, questions_per_image=4):
        image = record.images[0]
        sha = hashlib.sha256(image).hexdigest()
        for item in record.qa:
            if made == n:
                return
            made += 1
            yield Request(
                prompt=build_prompt(item.question, instruction),
                image=image,
                image_sha256=sha,
                item_key=f"{item.record_id}/{item.turn}",
            )


def params_for(request, settings, long_tail: bool):
    from vllm import SamplingParams

    if long_tail:
        return long_tail_params(request, settings)
    return SamplingParams(
        temperature=settings.temperature, top_p=settings.top_p, seed=settings.seed, max_tokens=settings.max_tokens
    )


def make_engine(long_tail: bool, model: str = "rs:tiny-vlm", **args):
    """The project's vLLM engine; for the long tail, the kind whose stream forces each request's length."""
    from longtail import LongTailEngine

    from rs.engines.vllm import VLLMEngine
    from rs_demo import tiny_model, tiny_qwen3vl

    kwargs = tiny_qwen3vl.VLLM_ENGINE_KWARGS if model == "rs:tiny-qwen3vl" else tiny_model.VLLM_ENGINE_KWARGS
    return (LongTailEngine if long_tail else VLLMEngine)(model, engine_args={**kwargs, **args})


def chat(llm, requests: list, settings, long_tail: bool, batch_size: int) -> list[str]:
    """What a user of vLLM writes: `LLM.chat` over batches of `batch_size` (all at once: `len(requests)`)."""
    from PIL import Image

    texts: list[str] = []
    for start in range(0, len(requests), batch_size):
        batch = requests[start : start + batch_size]
        conversations = [
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_pil", "image_pil": Image.open(io.BytesIO(r.image))},
                        {"type": "text", "text": r.prompt},
                    ],
                }
            ]
            for r in batch
        ]
        params = [params_for(r, settings, long_tail) for r in batch]
        outputs = llm.chat(conversations, params, chat_template_kwargs=settings.chat_template_kwargs, use_tqdm=False)
        texts.extend(o.outputs[0].text for o in outputs)
    return texts


def cached_run(engine, cache_path: Path, requests, settings, batch_size: int):
    from rs.engines.cached_engine import CachedEngine
    from rs.engines.generation_cache import GenerationCache

    with GenerationCache(cache_path) as cache:
        runner = CachedEngine(engine, cache, batch_size=batch_size, progress=False)
        texts = [g.text for _, g in runner.run(requests, settings)]
    return texts, runner.stats


def workload(
    name: str, n: int, repeats: int, family, model: str = "rs:tiny-vlm", engine_args: dict | None = None
) -> dict[str, float]:
    from dataclasses import replace

    from rs.engines.factory import sampling_settings

    long_tail = name == "long-tail"
    # the tiny VLM is loaded without TinyCLEVR's reasoning parser, which vLLM needs for a thinking budget (as in `loops`)
    settings = replace(sampling_settings(family), thinking_token_budget=None)
    batch_size = family.config.engine.batch_size
    requests = list(requests_of(n, family.config.instruction))
    engine = make_engine(long_tail, model, **(engine_args or {}))
    llm = engine.llm
    times: dict[str, list[float]] = {"all": [], "batches": [], "cold": [], "warm": []}
    cpu_times: dict[str, list[float]] = {"all": [], "batches": [], "cold": []}
    same = {"batches": 0, "cold": 0}
    with tempfile.TemporaryDirectory(prefix="rs-bench-engine-") as tmp:
        chat(llm, requests[:batch_size], settings, long_tail, batch_size)  # warm-up
        cached_run(engine, Path(tmp) / "warmup.sqlite", requests[:batch_size], settings, batch_size)
        for repeat in range(repeats):
            runs = {}
            for path in ("all", "batches", "cold")[:: 1 if repeat % 2 == 0 else -1]:  # alternate: drift cancels
                llm.reset_prefix_cache()
                llm.reset_mm_cache()
                start, cpu = time.perf_counter(), time.process_time()
                if path == "cold":
                    texts, stats = cached_run(
                        engine, Path(tmp) / f"cold-{repeat}.sqlite", requests, settings, batch_size
                    )
                    if stats.engine_calls != len(requests) or stats.errors:
                        raise SystemExit(
                            f"cold run sent {stats.engine_calls} of {len(requests)} requests with {stats.errors} errors"
                        )
                else:
                    texts = chat(llm, requests, settings, long_tail, len(requests) if path == "all" else batch_size)
                times[path].append(time.perf_counter() - start)
                cpu_times[path].append(time.process_time() - cpu)
                runs[path] = texts
            for path in same:
                same[path] = sum(a == b for a, b in zip(runs["all"], runs[path]))
            start = time.perf_counter()
            again, stats = cached_run(
                engine, Path(tmp) / f"cold-{repeat}.sqlite", requests * WARM_PASSES, settings, batch_size
            )
            times["warm"].append((time.perf_counter() - start) / WARM_PASSES)
            if stats.engine_calls or again != runs["cold"] * WARM_PASSES:
                raise SystemExit("the warm run called the engine or returned different outputs")
    engine_max_num_seqs = engine.core.max_num_seqs
    engine.close()

    rate = {k: len(requests) / statistics.median(v) for k, v in times.items()}
    lengths = [long_tail_length(r) for r in requests] if long_tail else None
    shape = (
        f"lengths median {statistics.median(lengths):.0f}, max {max(lengths)} tokens (forced)"
        if lengths
        else f"the model's own lengths, max_tokens {settings.max_tokens}"
    )
    print(
        f"\nworkload {name} on {model}: {len(requests)} requests, {shape}; engine.batch_size {batch_size}, "
        f"max_num_seqs {engine_max_num_seqs}; median of {repeats}"
    )
    print(f"{'path':<52} {'items/s':>10}  runs (s)")
    rows = [
        ("(a) one LLM.chat over all requests", "all"),
        (f"(b) one LLM.chat per batch of {batch_size}", "batches"),
        ("(c) CachedEngine(VLLMEngine).run, cold cache", "cold"),
        ("(d) the same, warm cache (all hits)", "warm"),
    ]
    for label, key in rows:
        print(f"{label:<52} {rate[key]:>10,.1f}  {' '.join(f'{t:.3f}' for t in times[key])}")
    target = 0.95 if long_tail else 0.9
    c_a, c_b = rate["cold"] / rate["all"], rate["cold"] / rate["batches"]
    # (a) and (c) of one repeat ran next to each other: their ratio cancels the machine's drift between repeats
    paired = sorted(a / c for a, c in zip(times["all"], times["cold"]))
    print(f"{'(c)/(a)':<52} {c_a:>10.3f}  target >= {target}: {'met' if c_a >= target else 'MISSED'}")
    print(
        f"{'(c)/(a) paired by repeat, median':<52} {statistics.median(paired):>10.3f}  "
        f"{' '.join(f'{r:.3f}' for r in paired)}"
    )
    cpu = {k: statistics.median(v) for k, v in cpu_times.items()}
    print(f"{'(c)/(a) by process CPU time (the noise of wall time)':<52} {cpu['all'] / cpu['cold']:>10.3f}")
    print(f"{'(b)/(a)':<52} {rate['batches'] / rate['all']:>10.3f}")
    print(f"{'(c)/(b)':<52} {c_b:>10.3f}")
    print(
        f"{'(d) items/s':<52} {rate['warm']:>10,.0f}  target >= 50,000: {'met' if rate['warm'] >= 50_000 else 'MISSED'}"
    )
    print(f"outputs identical to (a): (b) {same['batches']}/{len(requests)}, (c) {same['cold']}/{len(requests)}")
    return rate


LOOP_REGEX = r"(red cube ){200}"
COUNTING = " ".join(map(str, range(400)))
"""What the other requests write: a count, which never repeats a pattern (the tiny model's own noise, forced to a
length with `ignore_eos`, falls into loops of its own), cut at the request's long-tail length."""


def is_loop(request, share: float) -> bool:
    """Whether the request is one of the `share` forced into a loop: the same on every path and run."""
    name = request.item_key or request.prompt
    return int(hashlib.sha256(b"loop" + name.encode()).hexdigest()[:12], 16) / 16**12 < share


def loop_engine(share: float):
    """The long-tail engine, with the loop requests' outputs forced into a loop; the stream's loop detection kept."""
    from longtail import CAP, LongTailEngine, LongTailStream

    from rs_demo.tiny_model import VLLM_ENGINE_KWARGS

    class LoopStream(LongTailStream):
        def params(self, request):
            from vllm.sampling_params import StructuredOutputsParams

            if self.settings.choices:
                return super().params(request)
            params = super().params(request).clone()
            params.repetition_detection = (
                self._params.repetition_detection
            )  # the family's setting, as the stage passes it
            params.ignore_eos = False
            if is_loop(request, share):
                params.max_tokens = CAP
                params.structured_outputs = StructuredOutputsParams(regex=LOOP_REGEX)
            else:
                params.structured_outputs = StructuredOutputsParams(regex=COUNTING)
            return params

    class LoopEngine(LongTailEngine):
        def open_stream(self, settings, *, window=None):
            return LoopStream(self, settings, window=window or self.in_flight)

    return LoopEngine("rs:tiny-vlm", engine_args=dict(VLLM_ENGINE_KWARGS))


def loop_workload(n: int, repeats: int, family, share: float) -> None:
    """Path (c) with loop detection on against off, on the same requests with `share` of them looping."""
    from collections import Counter
    from dataclasses import replace

    from rs.engines.factory import sampling_settings

    base = replace(sampling_settings(family), thinking_token_budget=None)
    if base.repetition_detection is None:
        raise SystemExit(
            "TinyCLEVR has sampling.repetition_detection: null; the loops workload compares it on and off"
        )
    settings = {"on": base, "off": replace(base, repetition_detection=None)}
    batch_size = family.config.engine.batch_size
    requests = list(requests_of(n, family.config.instruction))
    engine = loop_engine(share)
    llm = engine.llm
    times: dict[str, list[float]] = {"on": [], "off": []}
    tokens: dict[str, int] = {}
    endings: dict[str, Counter] = {}
    with tempfile.TemporaryDirectory(prefix="rs-bench-loops-") as tmp:
        cached_run(engine, Path(tmp) / "warmup.sqlite", requests[:batch_size], settings["on"], batch_size)
        for repeat in range(repeats):
            for path in ("on", "off")[:: 1 if repeat % 2 == 0 else -1]:  # alternate: drift cancels
                llm.reset_prefix_cache()
                llm.reset_mm_cache()
                from rs.engines.cached_engine import CachedEngine
                from rs.engines.generation_cache import GenerationCache

                start = time.perf_counter()
                with GenerationCache(Path(tmp) / f"{path}-{repeat}.sqlite") as cache:
                    runner = CachedEngine(engine, cache, batch_size=batch_size, progress=False)
                    generations = [g for _, g in runner.run(requests, settings[path])]
                times[path].append(time.perf_counter() - start)
                if runner.stats.engine_calls != len(requests) or runner.stats.errors:
                    raise SystemExit(
                        f"{path}: sent {runner.stats.engine_calls} of {len(requests)} with {runner.stats.errors} errors"
                    )
                tokens[path] = sum(g.completion_tokens or 0 for g in generations)
                endings[path] = Counter(g.ending for g in generations)
                loops_ended = Counter(g.ending for g, r in zip(generations, requests) if is_loop(r, share))
                endings[path + "-loops"] = loops_ended
    engine.close()
    loops = sum(is_loop(r, share) for r in requests)
    rate = {k: len(requests) / statistics.median(v) for k, v in times.items()}
    print(
        f"\nworkload loops: {len(requests)} requests, {loops} of them ({loops / len(requests):.1%}) forced into a loop of up to "
        f"240 tokens, the rest the long tail; loop detection {base.repetition_detection} (min, max pattern, count); "
        f"median of {repeats}"
    )
    print(f"{'path (c), cold cache':<40} {'items/s':>10} {'tokens':>9}  endings (all; of the loops)   runs (s)")
    for path in ("on", "off"):
        all_, of_loops = dict(sorted(endings[path].items())), dict(sorted(endings[path + "-loops"].items()))
        print(
            f"{'loop detection ' + path:<40} {rate[path]:>10,.1f} {tokens[path]:>9,}  {all_}; {of_loops}   "
            f"{' '.join(f'{t:.3f}' for t in times[path])}"
        )
    paired = sorted(off / on for on, off in zip(times["on"], times["off"]))
    print(
        f"{'items/s on / off':<40} {rate['on'] / rate['off']:>10.3f}  paired by repeat, median {statistics.median(paired):.3f}"
    )
    print(
        f"{'tokens on / off':<40} {tokens['on'] / tokens['off']:>10.3f}  ({tokens['off'] - tokens['on']:,} tokens not generated)"
    )


def rss_child(n: int, mm_cache_gb: float | None) -> int:
    """Path (c) over `n` lazily generated long-tail requests in this process; its peak RSS in KiB."""
    from rs.engines.factory import sampling_settings
    from rs.families import get_family

    family = get_family("TinyCLEVR")
    engine = make_engine(True, **({} if mm_cache_gb is None else {"mm_processor_cache_gb": mm_cache_gb}))
    engine.load()
    with tempfile.TemporaryDirectory(prefix="rs-bench-rss-") as tmp:
        _, stats = cached_run(
            engine,
            Path(tmp) / "cache.sqlite",
            requests_of(n, family.config.instruction),
            sampling_settings(family),
            family.config.engine.batch_size,
        )
    assert stats.engine_calls == n
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=384, help="requests per run")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--workload", default="long-tail,today", help="comma-separated: long-tail, today, loops")
    parser.add_argument(
        "--loop-share", type=float, default=0.05, help="share of the requests forced into a loop (workload loops)"
    )
    parser.add_argument(
        "--rss", action="store_true", help="also compare path (c)'s peak RSS on 1x and 4x the requests"
    )
    parser.add_argument("--model", default="rs:tiny-vlm", choices=["rs:tiny-vlm", "rs:tiny-qwen3vl"])
    parser.add_argument(
        "--engine-args",
        type=json.loads,
        default={},
        help="vllm.LLM arguments over the tiny model's (JSON; null removes one)",
    )
    parser.add_argument("--rss-child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--mm-cache-gb", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    setup()
    if args.rss_child is not None:
        print(rss_child(args.rss_child, args.mm_cache_gb))
        return 0
    from rs.families import get_family

    family = get_family("TinyCLEVR")
    for name in args.workload.split(","):
        if name.strip() == "loops":
            loop_workload(args.n, args.repeats, family, args.loop_share)
        else:
            workload(name.strip(), args.n, args.repeats, family, args.model, args.engine_args)
    if args.rss:
        # vLLM's multimodal processor cache keeps processed images up to `mm_processor_cache_gb` (4 GiB by
        # default): with it, RSS grows with the distinct images until that cap; without it, what is left is ours
        for gb, label in ((0.0, "mm_processor_cache_gb 0"), (None, "vLLM's default mm cache")):
            peaks = {}
            for scale in (1, 4):
                command = [sys.executable, __file__, "--rss-child", str(scale * args.n)]
                command += [] if gb is None else ["--mm-cache-gb", str(gb)]
                out = subprocess.run(command, capture_output=True, text=True, check=True)
                peaks[scale] = int(out.stdout.strip().splitlines()[-1])
            growth = peaks[4] / peaks[1]
            verdict = (
                f"target flat (<= 1.05): {'met' if growth <= 1.05 else 'MISSED'}"
                if gb is not None
                else "(vLLM's cache, capped)"
            )
            print(
                f"{'peak RSS of (c), 4x / 1x requests, ' + label:<52} {growth:>10.3f}  "
                f"{peaks[1] / 1024:,.0f} -> {peaks[4] / 1024:,.0f} MiB; {verdict}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
