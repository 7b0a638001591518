"""Stream and clean a synthetic family; print rows/s and peak memory at two sizes.

    python bench/sources.py [--images 50000 --small 10000 --qa-per-image 4]

Each size runs in its own process so that its peak resident memory (ru_maxrss) is its own. The
target is flat memory: peak RSS at the large size within 1.2x of the small size.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOISE = {
    "off_task": 0.02,
    "sentence_answer": 0.02,
    "foreign_source": 0.01,
    "flattened_mc": 0.03,
    "corrupt_image": 0.005,
    "duplicate_qa": 0.01,
    "duplicate_image": 0.02,
}


def measure(images: int, qa_per_image: int) -> dict:
    sys.path.insert(0, str(ROOT))
    from rs.families import get_family
    from rs.pipeline.clean import Cleaner
    from rs.sources.synthetic import SyntheticSource

    config = get_family("TinyCLEVR").config
    source = SyntheticSource(seed=0, num_images=images, questions_per_image=qa_per_image, style="mixed", noise=NOISE)
    cleaner = Cleaner(config, source.provenance())
    in_source = 0.0

    def timed(records):  # time spent generating records, to report cleaning on its own too
        nonlocal in_source
        it = iter(records)
        while True:
            t = time.perf_counter()
            try:
                record = next(it)
            except StopIteration:
                return
            finally:
                in_source += time.perf_counter() - t
            yield record

    start = time.perf_counter()
    rows = qa = image_bytes = 0
    for row in cleaner.rows(timed(source)):
        rows += 1
        qa += len(row.qa)
        image_bytes += len(row.image)
    seconds = time.perf_counter() - start
    r = cleaner.report
    return {
        "images": images,
        "rows": rows,
        "source_qa": r.source_items,
        "kept_qa": qa,
        "dropped_qa": sum(r.dropped.values()),
        "seconds": seconds,
        "rows_per_s": rows / seconds,
        "qa_per_s": r.source_items / seconds,
        "clean_rows_per_s": rows / (seconds - in_source),
        "mb": image_bytes / 1e6,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=50_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--qa-per-image", type=int, default=4)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.qa_per_image)))
        return
    results = []
    for n in (args.small, args.images):
        out = subprocess.run(
            [sys.executable, __file__, "--one", str(n), "--qa-per-image", str(args.qa_per_image)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    print(
        f"{'images':>8} {'rows':>8} {'source QA':>10} {'kept QA':>8} {'dropped':>8} {'seconds':>8} {'rows/s':>8} {'QA/s':>8} {'clean rows/s':>12} {'peak RSS MB':>12}"
    )
    for r in results:
        print(
            f"{r['images']:>8} {r['rows']:>8} {r['source_qa']:>10} {r['kept_qa']:>8} {r['dropped_qa']:>8} "
            f"{r['seconds']:>8.1f} {r['rows_per_s']:>8.0f} {r['qa_per_s']:>8.0f} {r['clean_rows_per_s']:>12.0f} {r['peak_rss_mb']:>12.1f}"
        )
    print(
        "rows/s and QA/s: scene rendering + cleaning; clean rows/s: the cleaning stage alone (rendering time excluded)"
    )
    ratio = results[1]["peak_rss_mb"] / results[0]["peak_rss_mb"]
    verdict = "meets" if ratio <= 1.2 else "MISSES"
    print(
        f"peak memory {results[1]['images']:,} vs {results[0]['images']:,} images: {ratio:.2f}x ({verdict} the 1.2x target)"
    )


if __name__ == "__main__":
    main()
