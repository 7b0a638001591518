"""Build a synthetic family with the replay engine (the model out of the measurement) and compare
the split-writing step with the obvious `datasets` path; check memory stays flat as the family grows.

    python bench/build.py [--images 100000 --small 10000]
    python bench/build.py --images 250000 --small 0 --no-reference   # one size only (about 1M QA): time per QA, peak RSS

For each size, one process prepares the family (clean + sample stages, replayed answers), then
separate processes write the three splits: (ours) the project's `datasets` builder, straight to
parquet shards; (reference) `Dataset.from_generator` over the same routed rows, then
`Dataset.to_parquet` with the images embedded. Each process reports its own peak RSS. Figures are
ratios measured in one run: the machine is noisy.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FAMILY = """\
families:
  BenchCLEVR:
    source: {kind: synthetic, seed: 0, num_images: NUM, questions_per_image: 4, style: mixed,
             noise: {off_task: 0.02, flattened_mc: 0.03, corrupt_image: 0.005, duplicate_image: 0.02}}
    instruction: "\\nAnswer the question using a single word or phrase."
    verifier: {name: alnum}
    model: {id: replayed/model}
    engine: {kind: replay, replay_path: replay.jsonl, batch_size: 512}
    shard: {max_bytes: 32MB, row_group_bytes: 4MB}
    card: {pretty_name: Bench, description: d, license: apache-2.0, citation: c}
"""


def _context(work: Path, images: int):
    from rs.context import BuildContext
    from rs.families import load_families

    path = work / "families.yaml"
    if not path.exists():
        path.write_text(FAMILY.replace("NUM", str(images)))
    family = load_families(path)["BenchCLEVR"]
    return BuildContext(family, work / "build", work / "cache.sqlite", progress=False)


def prepare(work: Path, images: int) -> dict:
    from rs.pipeline.clean.stage import CleanStage
    from rs.pipeline.sample.stage import SampleStage
    from rs.pipeline.stage import ensure
    from rs.store import read_records

    ctx = _context(work, images)
    start = time.perf_counter()
    ensure(CleanStage(), ctx)
    clean_s = time.perf_counter() - start
    with (work / "replay.jsonl").open("w") as fh:  # two answers in three right, the rest wrong
        for n, row in enumerate(read_records(ctx.paths.clean, "rows", columns=["qa"])):
            for qa in row["qa"]:
                answer = qa["answer"] if (n + qa["turn"]) % 3 else "purple"
                fh.write(json.dumps({"key": qa["key"], "text": f"<think>I look at the scene.</think>{answer}"}) + "\n")
    start = time.perf_counter()
    sampled = ensure(SampleStage(), ctx)
    return {"clean_s": clean_s, "sample_s": time.perf_counter() - start, "qa": sampled.items}


def write_ours(work: Path, images: int) -> dict:
    from rs.pipeline.build import ensure_passes
    from rs.pipeline.clean.stage import CleanStage
    from rs.pipeline.route import routes_for
    from rs.pipeline.stage import ensure
    from rs.pipeline.write.splits import write_split
    from rs.splits import SPLITS

    ctx = _context(work, images)
    ensure(CleanStage(), ctx)
    sampled, _ = ensure_passes(ctx)  # current: `prepare` made them
    routes = routes_for(ctx, sampled.promotes)
    start = time.perf_counter()
    written = [write_split(ctx, split, 0, routes) for split in SPLITS]
    return {
        "seconds": time.perf_counter() - start,
        "bytes": sum(s.bytes for s in written),
        "rows": sum(s.rows for s in written),
    }


def write_reference(work: Path, images: int) -> dict:
    import datasets

    from rs.pipeline.route import Routes, split_rows
    from rs.splits import SPLITS
    from rs.splits_schema import features

    ctx = _context(work, images)
    out = work / "reference"
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    total_bytes = rows = 0
    for split in SPLITS:
        ds = datasets.Dataset.from_generator(
            split_rows,
            features=features(split),
            gen_kwargs={"build_dir": str(ctx.paths.root), "split": split, "routes": Routes(promotes=True)},
            cache_dir=str(work / "hf-cache" / split),
        )
        path = out / f"{split}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        ds.to_parquet(str(path))
        total_bytes += path.stat().st_size
        rows += ds.num_rows
    return {"seconds": time.perf_counter() - start, "bytes": total_bytes, "rows": rows}


def child(mode: str, work: Path, images: int) -> None:
    fn = {"prepare": prepare, "ours": write_ours, "reference": write_reference}[mode]
    result = fn(work, images)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def run(mode: str, work: Path, images: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--work", str(work), "--images", str(images)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=100_000)
    parser.add_argument(
        "--small", type=int, default=10_000, help="the smaller size to compare with; 0: --images alone"
    )
    parser.add_argument("--no-reference", action="store_true", help="skip the reference path (Dataset.from_generator)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.work, args.images)
        return
    results = {}
    paths = ("ours",) if args.no_reference else ("ours", "reference")
    with tempfile.TemporaryDirectory(prefix="rs-bench-build-") as tmp:
        for n in (args.small, args.images) if args.small else (args.images,):
            work = Path(tmp) / str(n)
            work.mkdir()
            results[n] = {"prepare": run("prepare", work, n), **{path: run(path, work, n) for path in paths}}
    print(f"{'images':>7} {'path':>10} {'rows':>7} {'seconds':>8} {'images/s':>9} {'MB/s':>7} {'peak RSS MB':>12}")
    for n, r in results.items():
        for path in paths:
            x = r[path]
            print(
                f"{n:>7} {path:>10} {x['rows']:>7} {x['seconds']:>8.2f} {n / x['seconds']:>9.0f} "
                f"{x['bytes'] / 1e6 / x['seconds']:>7.1f} {x['peak_rss_mb']:>12.1f}"
            )
        p = r["prepare"]
        print(
            f"{n:>7} {'(stages)':>10}  {p['qa']:,} QA: clean {p['clean_s']:.1f}s, sample (replay) {p['sample_s']:.1f}s, "
            f"{1000 * (p['clean_s'] + p['sample_s']) / p['qa']:.2f} ms per QA; peak RSS {p['peak_rss_mb']:.1f} MB"
        )
    if not args.small:
        return
    big, small = results[args.images], results[args.small]
    if not args.no_reference:
        speed = (args.images / big["ours"]["seconds"]) / (args.images / big["reference"]["seconds"])
        print(
            f"write speed, ours / reference at {args.images:,} images: {speed:.2f}x ({'meets' if speed >= 1 else 'MISSES'} the >= 1x target)"
        )
    for stage in ("prepare", "ours"):
        ratio = big[stage]["peak_rss_mb"] / small[stage]["peak_rss_mb"]
        print(
            f"peak memory of {stage}, {args.images:,} vs {args.small:,} images: {ratio:.2f}x ({'meets' if ratio <= 1.2 else 'MISSES'} the 1.2x target)"
        )
    if not args.no_reference:
        ratio = big["reference"]["peak_rss_mb"] / small["reference"]["peak_rss_mb"]
        print(f"(reference path, same comparison: {ratio:.2f}x)")


if __name__ == "__main__":
    main()
