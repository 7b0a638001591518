"""Suspect references against planted wrong ones, and the no-image mark against planted guessable questions: precision
and recall, with the demo model or any model given.

    python bench/suspect.py [--images 48] [--wrong 0.1] [--guessable 0.1] [--planter files|source]
                            [--family TinyCLEVR] [--model ID] [--build-dir DIR] [--cache PATH]

Who plants the wrong references (`--planter`):

- `files` (the default): someone else. The family's synthetic pool (its `wrong_reference` noise off) is written out as
  local files (a conversational parquet: one record per image, its questions and references as turns) and this script,
  with its own rule and random generator and none of the project's code, alters a share of the references (another
  count one or two away, the other yes/no, another CLEVR value of the attribute). The truth is kept aside in
  `truth.json` beside the pool's folder, never in it; the family is run on the files (`source: {kind: files}`), so the
  pipeline knows nothing the published repo would not.
- `source`: the synthetic source plants them (`noise: {wrong_reference: P}`), which the source alone knows
  (`SyntheticSource.planted`).

The family is then sampled, recovered and adjudicated as a run does it (`recovery.suspects`,
`rs.pipeline.sample.adjudicate`), in a build folder of its own, through the generation cache. For each step it prints
how many questions it singles out and their precision and recall against the planted ones (among the questions cleaning
kept), and whether any marked question is in the preference pairs (it must not be):

- candidates: rejections whose greedy answer and every sample agree on one value the reference is not near;
- against: candidates the adjudicator sided against the reference in both orders;
- marked: those routed `suspect_reference` (none where the adjudicator failed its calibration: its gate is printed).

The source also plants questions a text-only reader can answer (`noise: {guessable: P}`: the question states its answer
before asking it), known to the source alone (`SyntheticSource.guessable`); the no-image pass (`blind:`, switched on
here) asks every question without its image, and the bench prints the precision and recall of its mark (right without
the image, in every rotation of a multiple-choice question) and of the temperature-0 answer's being right, against them.
A question right without the image that was not planted is no error of the pass: the model may guess it from priors
(CLEVR's answers are few); the precision is of the mark as a detector of the planted kind only.

What limits the figures: recall is bounded by the model (a planted reference the model does not answer right, greedily
and in every sample, is no candidate), by the kinds the reader can call certainly wrong, and by `recovery.samples`; the
adjudicator's calibration needs `judge.min_calibration_cases` cases of each kind, which a small family may lack.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _rates(marked: set[str], planted: set[str]) -> dict[str, Any]:
    hit = len(marked & planted)
    return {
        "n": len(marked),
        "planted": hit,
        "precision": hit / len(marked) if marked else None,
        "recall": hit / len(planted) if planted else None,
    }


CLEVR_VALUES = (
    ("gray", "red", "blue", "green", "brown", "purple", "cyan", "yellow"),
    ("rubber", "metal"),
    ("cube", "sphere", "cylinder"),
    ("small", "large"),
)
"""What someone altering a CLEVR-style pool by hand would know: the values of each attribute."""


def alter(answer: str, rng: random.Random) -> str | None:
    """Someone else's wrong reference for a clean one (None where they would not know how to alter it)."""
    if answer.isdigit():
        n = int(answer)
        return str(n + rng.choice((1, 2)) if n < 2 or rng.random() < 0.5 else n - rng.choice((1, 2)))
    if answer in ("yes", "no"):
        return {"yes": "no", "no": "yes"}[answer]
    for values in CLEVR_VALUES:
        if answer in values:
            return rng.choice([v for v in values if v != answer])
    return None


def plant_files(records: Any, wrong: float, folder: Path, seed: int = 0) -> tuple[Path, dict[str, tuple[str, str]]]:
    """Write `records` as a conversational parquet in `folder/pool`, a share `wrong` of their references altered;
    the truth (item key -> (the altered reference, the true one)) goes to `folder/truth.json`, outside the pool."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(f"someone-else:{seed}")
    rows, truth = [], {}
    for record in records:
        texts = []
        for turn, item in enumerate(record.qa):
            answer = item.answer
            if rng.random() < wrong and (altered := alter(answer, rng)) is not None:
                truth[f"{record.record_id}#{turn}"] = (altered, answer)
                answer = altered
            texts.append({"user": item.question, "assistant": answer, "source": item.source})
        rows.append(
            {"id": record.record_id, "images": [{"bytes": b, "path": None} for b in record.images], "texts": texts}
        )
    pool = folder / "pool"
    pool.mkdir(parents=True, exist_ok=True)
    path = pool / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    (folder / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path, truth


def measure(
    family_name: str,
    images: int,
    wrong: float,
    model: str | None,
    build: Path,
    cache: Path | None,
    guessable: float = 0.1,
    planter: str = "files",
) -> dict:
    sys.path[:0] = [str(ROOT), str(ROOT / "demo")]
    from rs.context import BuildContext, default_cache_path
    from rs.families import get_family
    from rs.families.schema import BlindConfig
    from rs.pipeline.build import ensure_passes
    from rs.pipeline.clean.stage import CleanStage
    from rs.pipeline.route import SUSPECT_REFERENCE, joined, outcomes, pair_of, routes_for
    from rs.pipeline.stage import ensure
    from rs.sources.files import FilesSourceConfig
    from rs.sources.mapping import Columns
    from rs.sources.synthetic import SyntheticSource, SyntheticSourceConfig
    from rs.store import read_records

    family = get_family(family_name)
    c = family.config
    if not isinstance(c.source, SyntheticSourceConfig) or c.recovery is None:
        raise SystemExit(f"{family_name}: needs a synthetic source and a recovery block")
    recovery = dataclasses.replace(c.recovery, suspects=True)
    noise = {**c.source.noise, "guessable": guessable}
    if planter == "source":
        source = dataclasses.replace(c.source, num_images=images, noise={**noise, "wrong_reference": wrong})
        synthetic = SyntheticSource.from_config(source, base_dir=family.path.parent)
        planted = synthetic.planted()
    else:
        noise = {k: v for k, v in noise.items() if k != "wrong_reference"}
        synthetic = SyntheticSource.from_config(
            dataclasses.replace(c.source, num_images=images, noise=noise), base_dir=family.path.parent
        )
        path, planted = plant_files(synthetic, wrong, build.parent / f"{build.name}-files")
        source = FilesSourceConfig(kind="files", path=str(path), shape="conversational", columns=Columns(id="id"))
    guessed = synthetic.guessable()  # the files keep the synthetic records' ids and turns: the same item keys
    config = dataclasses.replace(c, source=source, recovery=recovery, blind=c.blind or BlindConfig())
    if model is not None:
        config = dataclasses.replace(config, model=dataclasses.replace(c.model, id=model))
    family = dataclasses.replace(family, config=config)

    ctx = BuildContext(family, build, cache or default_cache_path(), progress=True)
    with ctx.lock():
        ensure(CleanStage(), ctx)
        sampled, recovered = ensure_passes(ctx)
    assert recovered is not None and recovered.adjudication is not None
    answered, marked, blind, right = set(), set(), set(), set()
    routes = routes_for(ctx, sampled.promotes)
    for item, result in outcomes(ctx.paths.root, routes):
        answered.add(item["key"])
        if result.decision.reason == SUSPECT_REFERENCE:
            marked.add(item["key"])
        if result.blind_marked:
            blind.add(item["key"])
        if result.blind is not None and result.blind["right"] and result.blind["right"][0]:
            right.add(item["key"])
    paired = {
        item["key"]
        for _, results in joined(ctx.paths.root, routes)
        for item, result in results
        if pair_of(item, result, routes) is not None
    }
    adjudicated = list(read_records(ctx.paths.recovery, "adjudication"))
    kept = set(planted) & answered
    a = recovered.adjudication
    cal = a.calibration.to_dict() if a.calibration else None
    return {
        "family": family_name,
        "planter": planter,
        "model": config.model.id,
        "images": images,
        "wrong_reference": wrong,
        "questions": len(answered),
        "planted": len(planted),
        "planted_answered": len(kept),
        "candidates": _rates({r["key"] for r in adjudicated}, kept),
        "against": _rates({r["key"] for r in adjudicated if r["against"]}, kept),
        "marked": _rates(marked, kept),
        "pairs": len(paired),
        "marked_in_pairs": len(marked & paired),
        "adjudication_requests": a.requests,
        "calibration": cal,
        "guessable": guessable,
        "guessable_planted": len(guessed),
        "guessable_answered": len(guessed & answered),
        "blind_marked": _rates(blind, guessed & answered),
        "blind_right": _rates(right, guessed & answered),
        "blind_requests": sampled.blind.requests if sampled.blind is not None else 0,
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="TinyCLEVR")
    parser.add_argument("--images", type=int, default=48)
    parser.add_argument("--wrong", type=float, default=0.1, help="the share of references planted wrong")
    parser.add_argument("--guessable", type=float, default=0.1, help="the share of questions planted guessable")
    parser.add_argument(
        "--planter",
        choices=("files", "source"),
        default="files",
        help="who plants the wrong references: this script, in local files (default), or the synthetic source",
    )
    parser.add_argument("--model", default=None, help="another model id (default: the family's)")
    parser.add_argument("--build-dir", type=Path, default=ROOT / "build" / "bench-suspect")
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    r = measure(
        args.family, args.images, args.wrong, args.model, args.build_dir, args.cache, args.guessable, args.planter
    )
    if args.json:
        print(json.dumps(r, indent=2))
        return
    print(
        f"{r['family']} with {r['model']}, wrong references planted by {r['planter']}: {r['images']} images, {r['questions']} questions answered, "
        f"{r['planted_answered']} of them with a planted wrong reference ({r['planted']} planted, p={r['wrong_reference']})"
    )
    for step in ("candidates", "against", "marked"):
        s = r[step]
        print(
            f"  {step:10} {s['n']:4}  planted {s['planted']:4}  precision {_pct(s['precision']):>6}  "
            f"recall {_pct(s['recall']):>6}"
        )
    cal = r["calibration"]
    if cal is not None:
        w, g = cal["wrong_reference"], cal["right_reference"]
        print(
            f"  adjudicator calibration: wrong references sided against {w['agreed']}/{w['total']} "
            f"[{_pct(w['low'])}, {_pct(w['high'])}], right references left alone {g['agreed']}/{g['total']} "
            f"[{_pct(g['low'])}, {_pct(g['high'])}]; "
            + ("passed" if cal["passes"] else f"BLOCKED, it marks nothing: {cal['blocked_reason']}")
        )
    print(
        f"  {r['adjudication_requests']} adjudication requests; {r['pairs']} preference pairs, "
        f"{r['marked_in_pairs']} of them on a marked question"
    )
    print(
        f"no-image pass: {r['guessable_answered']} questions answered planted guessable ({r['guessable_planted']} "
        f"planted, p={r['guessable']}), {r['blind_requests']} text-only requests"
    )
    for step in ("blind_marked", "blind_right"):
        s = r[step]
        print(
            f"  {step:12} {s['n']:4}  planted {s['planted']:4}  precision {_pct(s['precision']):>6}  "
            f"recall {_pct(s['recall']):>6}"
        )


if __name__ == "__main__":
    main()
