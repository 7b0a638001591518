"""What the sampling stage costs on top of bare vLLM, and how fast a fully cached re-run is.

    python bench/engine.py [--n 512] [--batch-size N] [--repeats 3]

On the same requests (synthetic CLEVR-style scenes, prompts built by `rs.prompt.build_prompt`
with TinyCLEVR's instruction and sampling settings), with the tiny VLM on one `vllm.LLM`:

* (a) a bare `LLM.chat` loop over batches (PIL images opened from the bytes, nothing else);
* (b) the pipeline's sampling stage: `CachedEngine(VLLMEngine, GenerationCache)` on a cold cache
  (cache keys, SQLite commits, per-request isolation, image decoding, output splitting);
* (c) the same run again on the now warm cache: zero engine calls.

(a) and (b) alternate, after one warm-up each, with vLLM's prefix and multimodal caches emptied
before every timed run so that no run profits from the previous one; each figure is the median
of `--repeats` runs. Target: (b)/(a) >= 0.9.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_requests(n: int, instruction: str) -> list:
    from rs.engines.base import Request
    from rs.prompt import build_prompt
    from rs.sources.synthetic import SyntheticSource

    requests = []
    for record in SyntheticSource(seed=0, num_images=(n + 3) // 4, questions_per_image=4):
        image = record.images[0]
        sha = hashlib.sha256(image).hexdigest()
        for item in record.qa:
            requests.append(Request(prompt=build_prompt(item.question, instruction), image=image, image_sha256=sha,
                                    item_key=f"{item.record_id}/{item.turn}"))
    return requests[:n]


def bare_loop(llm, requests: list, settings, batch_size: int) -> list[str]:
    """What a user of vLLM would write: one `LLM.chat` per batch, images opened from their bytes."""
    from PIL import Image
    from vllm import SamplingParams

    params = SamplingParams(temperature=settings.temperature, top_p=settings.top_p, seed=settings.seed,
                            max_tokens=settings.max_tokens)
    texts: list[str] = []
    for start in range(0, len(requests), batch_size):
        conversations = [
            [{"role": "user", "content": [{"type": "image_pil", "image_pil": Image.open(io.BytesIO(r.image))},
                                          {"type": "text", "text": r.prompt}]}]
            for r in requests[start : start + batch_size]
        ]
        outputs = llm.chat(conversations, params, chat_template_kwargs=settings.chat_template_kwargs, use_tqdm=False)
        texts.extend(o.outputs[0].text for o in outputs)
    return texts


def cached_run(engine, cache_path: Path, requests: list, settings, batch_size: int):
    from rs.engines.cache import GenerationCache
    from rs.engines.cached import CachedEngine

    with GenerationCache(cache_path) as cache:
        runner = CachedEngine(engine, cache, batch_size=batch_size, progress=False)
        generations = [g for _, g in runner.run(requests, settings)]
    return generations, runner.stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=512, help="requests per run")
    parser.add_argument("--batch-size", type=int, default=None, help="default: TinyCLEVR's engine.batch_size")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    sys.path.insert(0, str(ROOT))
    from rs.engines import sampling_settings
    from rs.engines.vllm import VLLMEngine
    from rs.families import get_family
    from rs.tiny_model import VLLM_ENGINE_KWARGS

    family = get_family("TinyCLEVR")
    settings = sampling_settings(family)
    batch_size = args.batch_size or family.config.engine.batch_size
    requests = make_requests(args.n, family.config.instruction)
    engine = VLLMEngine("rs:tiny-vlm", engine_args=VLLM_ENGINE_KWARGS)
    llm = engine.llm

    def fresh_vllm_caches() -> None:
        llm.reset_prefix_cache()
        llm.reset_mm_cache()

    times: dict[str, list[float]] = {"bare": [], "cold": [], "warm": []}
    with tempfile.TemporaryDirectory(prefix="rs-bench-engine-") as tmp:
        bare_loop(llm, requests, settings, batch_size)  # warm-up
        cached_run(engine, Path(tmp) / "warmup.sqlite", requests, settings, batch_size)
        for repeat in range(args.repeats):
            fresh_vllm_caches()
            start = time.perf_counter()
            texts = bare_loop(llm, requests, settings, batch_size)
            times["bare"].append(time.perf_counter() - start)

            fresh_vllm_caches()
            cache_path = Path(tmp) / f"cold-{repeat}.sqlite"
            start = time.perf_counter()
            generations, stats = cached_run(engine, cache_path, requests, settings, batch_size)
            times["cold"].append(time.perf_counter() - start)
            if stats.engine_calls != len(requests) or stats.errors:
                raise SystemExit(f"cold run sent {stats.engine_calls} of {len(requests)} requests with {stats.errors} errors")
            if [g.text for g in generations] != texts:
                raise SystemExit("the sampling stage and the bare loop produced different outputs")

            start = time.perf_counter()
            again, stats = cached_run(engine, cache_path, requests, settings, batch_size)
            times["warm"].append(time.perf_counter() - start)
            if stats.engine_calls or [g.to_dict() for g in again] != [g.to_dict() for g in generations]:
                raise SystemExit("the warm run called the engine or returned different generations")
    engine.close()

    rate = {k: len(requests) / statistics.median(v) for k, v in times.items()}
    stops = sum(g.finish_reason == "stop" for g in generations)
    tokens = sum(g.completion_tokens or 0 for g in generations)
    print(f"{len(requests)} requests, batch {batch_size}, max_tokens {settings.max_tokens}, "
          f"{tokens / len(requests):.1f} output tokens/request, {stops}/{len(requests)} stopped; "
          f"median of {args.repeats}, outputs identical in (a) and (b)")
    print(f"{'path':<40} {'items/s':>10}  runs (s)")
    rows = [("(a) bare LLM.chat loop", "bare"), ("(b) CachedEngine(VLLMEngine), cold cache", "cold"),
            ("(c) CachedEngine, warm cache (all hits)", "warm")]
    for label, key in rows:
        print(f"{label:<40} {rate[key]:>10,.1f}  {' '.join(f'{t:.3f}' for t in times[key])}")
    ratio = rate["cold"] / rate["bare"]
    print(f"{'(b)/(a)':<40} {ratio:>10.3f}  target >= 0.9: {'met' if ratio >= 0.9 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
