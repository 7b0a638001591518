"""What a batch barrier costs on one GPU: a decode-step model of continuous batching against one `LLM.chat` per batch.

    python bench/gpu_hours.py [--qa 2000000] [--median 500] [--sigma 1.0] [--cap 8192]
                              [--batch 512] [--max-num-seqs 256,512] [--stream-ratio 0.983]
                              [--loop-share 0.05] [--loop-pattern 128] [--loop-count 4]

A model, not a measurement: no GPU is used. Output lengths are drawn from a lognormal (median
`--median` tokens, capped at `--cap`: a thinking model's answers, most short, a few running to
`max_tokens`). The engine runs at most `max_num_seqs` sequences at once and every step decodes one
token of each; a step costs `t0 + t1 x active` seconds (defaults: an 8B bf16 model on one H200,
memory-bound decode: reading 16 GB of weights at about 4.8 TB/s is the 3.5 ms floor; a sequence's
KV cache, 36 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 147 KB a token, about 190 MB at a
typical 1,300-token context, adds about 40 us). Prefill is left out (the same on every path).

* continuous batching: a free slot takes the next request at once (vLLM's own scheduler over one
  `LLM.chat` of everything, and what the stage's stream keeps up: `window` >= `max_num_seqs`);
* per-batch barrier: `--batch` requests at a time, the next batch only when the longest has finished
  (the sampling stage before streaming, `engine.batch_size` 512).

Loops (`--loop-share`): that share of the requests falls into a loop at its drawn length and, without
loop detection, runs on to `--cap`; with it (`sampling.repetition_detection`), ends once the loop's
pattern of `--loop-pattern` tokens has come `--loop-count` times (the defaults' worst case: 4 x 128 =
512 tokens more), as `bench/engine.py --workload loops` measures on the real engine. The default share,
5%, is the one at which loops run to the cap take about a quarter of the tokens of a long tail like
the tiny benchmark's: what vLLM's reported ~33% more throughput from loop detection implies.

The stream's own overhead is not modelled: `--stream-ratio` is the measured (c)/(a) of
`bench/engine.py` on the long-tail workload (the stage's throughput over one `LLM.chat` of
everything); the stage's estimate is continuous batching divided by it. Each scenario is simulated
on a `--sample` of requests and scaled to `--qa`.
"""

from __future__ import annotations

import argparse
import heapq
import sys

import numpy as np


def lengths(n: int, median: float, sigma: float, cap: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.rint(median * np.exp(sigma * rng.standard_normal(n))), 1, cap).astype(np.int64)


def makespan(tokens: np.ndarray, slots: int, t0: float, t1: float) -> float:
    """Seconds to decode `tokens` (one request each) with `slots` sequences at most, a free slot refilled at once."""
    finish = [0] * min(slots, len(tokens))  # the step at which each slot is free
    heapq.heapify(finish)
    for n in tokens:
        heapq.heappush(finish, heapq.heappop(finish) + int(n))
    # every slot is busy until the first runs out of requests; after that they stop one by one
    seconds, previous, active = 0.0, 0, len(finish)
    for step in sorted(finish):
        seconds += (step - previous) * (t0 + t1 * active)
        previous, active = step, active - 1
    return seconds


def per_batch(tokens: np.ndarray, batch: int, slots: int, t0: float, t1: float) -> float:
    return sum(makespan(tokens[i : i + batch], slots, t0, t1) for i in range(0, len(tokens), batch))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--qa", type=int, default=2_000_000)
    parser.add_argument("--median", type=float, default=500)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--cap", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=512, help="engine.batch_size of the per-batch loop")
    parser.add_argument(
        "--max-num-seqs", default="256,512", help="about 520 sequences of 1,300 tokens fill an H200's KV cache"
    )
    parser.add_argument("--t0", type=float, default=3.5e-3, help="seconds per decode step, fixed part")
    parser.add_argument("--t1", type=float, default=4.0e-5, help="seconds per decode step, per active sequence")
    parser.add_argument(
        "--stream-ratio", type=float, default=0.983, help="measured (c)/(a) of bench/engine.py, long tail"
    )
    parser.add_argument("--sample", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loop-share", type=float, default=0.05, help="share of the requests that fall into a loop")
    parser.add_argument("--loop-pattern", type=int, default=128, help="tokens of a loop's repeated pattern")
    parser.add_argument("--loop-count", type=int, default=4, help="repetitions loop detection waits for (min_count)")
    args = parser.parse_args(argv)

    tokens = lengths(args.sample, args.median, args.sigma, args.cap, args.seed)
    scale = args.qa / args.sample
    print(
        f"{args.qa:,} QA, output lengths lognormal: median {np.median(tokens):.0f}, mean {tokens.mean():.0f}, "
        f"max {tokens.max()} tokens (cap {args.cap}); {args.qa * tokens.mean() / 1e9:.2f}G output tokens; "
        f"step = {args.t0 * 1e3:.1f} ms + {args.t1 * 1e6:.0f} us x active sequences (a model, prefill left out)"
    )
    print(f"{'max_num_seqs':>12} {'path':<42} {'GPU-hours':>10} {'vs continuous':>14}")
    for slots in (int(s) for s in args.max_num_seqs.split(",")):
        ideal = makespan(tokens, slots, args.t0, args.t1) * scale / 3600
        barrier = per_batch(tokens, args.batch, slots, args.t0, args.t1) * scale / 3600
        rows = [
            ("continuous batching (one LLM.chat of all)", ideal),
            (f"per-batch barrier, batch {args.batch}", barrier),
            (f"the stage's stream ((c)/(a) = {args.stream_ratio})", ideal / args.stream_ratio),
        ]
        for label, hours in rows:
            print(f"{slots:>12} {label:<42} {hours:>10.1f} {ideal / hours:>14.2f}")
    if args.loop_share > 0:
        rng = np.random.default_rng(args.seed + 1)
        looping = rng.random(args.sample) < args.loop_share
        without = np.where(looping, args.cap, tokens)
        with_ = np.where(looping, np.minimum(args.cap, tokens + args.loop_pattern * args.loop_count), tokens)
        print(
            f"\nloops: {looping.mean():.1%} of the requests loop from their drawn length; without loop detection they run to "
            f"{args.cap}, with it they end {args.loop_pattern} x {args.loop_count} tokens later; output tokens "
            f"{args.qa * without.mean() / 1e9:.2f}G without, {args.qa * with_.mean() / 1e9:.2f}G with "
            f"({with_.sum() / without.sum():.2f}); the stage's stream at (c)/(a) = {args.stream_ratio}"
        )
        print(f"{'max_num_seqs':>12} {'path':<42} {'GPU-hours':>10} {'vs without':>14}")
        for slots in (int(s) for s in args.max_num_seqs.split(",")):
            off = makespan(without, slots, args.t0, args.t1) * scale / 3600 / args.stream_ratio
            on = makespan(with_, slots, args.t0, args.t1) * scale / 3600 / args.stream_ratio
            for label, hours in (("without loop detection", off), ("with loop detection", on)):
                print(f"{slots:>12} {label:<42} {hours:>10.1f} {off / hours:>14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
