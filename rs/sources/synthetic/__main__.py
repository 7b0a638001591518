"""`python -m rs.sources.synthetic OUT_DIR`: write a synthetic pool as an image folder with a flat `metadata.jsonl`."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Sequence

from . import SyntheticSource, write_image_folder
from .noise import NOISE_KINDS
from .questions import STYLES


def _parse_noise(pairs: Sequence[str]) -> dict[str, float]:
    noise = {}
    for pair in pairs:
        kind, sep, p = pair.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"--noise expects KIND=P, got {pair!r}")
        noise[kind] = float(p)
    return noise


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rs.sources.synthetic", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--num-images", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--style", choices=STYLES, default="mixed")
    parser.add_argument("--questions-per-image", type=int, default=4)
    parser.add_argument("--image-size", type=int, default=160)
    parser.add_argument("--name", default="synthetic-clevr")
    parser.add_argument(
        "--noise",
        action="append",
        default=[],
        metavar="KIND=P",
        help=f"inject noise (repeatable); kinds: {', '.join(NOISE_KINDS)}",
    )
    args = parser.parse_args(argv)
    try:
        source = SyntheticSource(
            seed=args.seed,
            num_images=args.num_images,
            questions_per_image=args.questions_per_image,
            style=args.style,
            image_size=args.image_size,
            noise=_parse_noise(args.noise),
            name=args.name,
        )
    except (ValueError, argparse.ArgumentTypeError) as err:
        parser.error(str(err))
    start = time.perf_counter()
    out = write_image_folder(source, args.out_dir)
    n_qa = sum(1 for _ in open(out / "metadata.jsonl", encoding="utf-8"))
    injected = ", ".join(f"{k}={v}" for k, v in sorted(source.noise_counts.items())) or "none"
    print(
        f"wrote {args.num_images} images, {n_qa} QA to {out} in {time.perf_counter() - start:.2f}s (noise: {injected})"
    )


if __name__ == "__main__":
    main()
