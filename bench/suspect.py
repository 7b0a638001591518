"""Suspect references against planted wrong ones, and the no-image mark against planted guessable questions: precision
and recall, with the demo model or any model given.

    python bench/suspect.py [--images 48] [--wrong 0.1] [--guessable 0.1] [--family TinyCLEVR] [--model ID]
                            [--build-dir DIR] [--cache PATH]

The family's synthetic source plants wrong references (`noise: {wrong_reference: P}`: another count, the other yes/no,
another value of the attribute), which the source alone knows (`SyntheticSource.planted`); the family is then sampled,
recovered and adjudicated as a run does it (`recovery.suspects`, `rs.pipeline.sample.adjudicate`), in a build folder of
its own, through the generation cache. For each step it prints how many questions it singles out and their precision and
recall against the planted ones (among the questions cleaning kept):

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


def measure(
    family_name: str,
    images: int,
    wrong: float,
    model: str | None,
    build: Path,
    cache: Path | None,
    guessable: float = 0.1,
) -> dict:
    sys.path[:0] = [str(ROOT), str(ROOT / "demo")]
    from rs.context import BuildContext, default_cache_path
    from rs.families import get_family
    from rs.families.schema import BlindConfig
    from rs.pipeline.build import ensure_passes
    from rs.pipeline.clean.stage import CleanStage
    from rs.pipeline.route import SUSPECT_REFERENCE, outcomes, routes_for
    from rs.pipeline.stage import ensure
    from rs.sources.synthetic import SyntheticSource, SyntheticSourceConfig
    from rs.store import read_records

    family = get_family(family_name)
    c = family.config
    if not isinstance(c.source, SyntheticSourceConfig) or c.recovery is None:
        raise SystemExit(f"{family_name}: needs a synthetic source and a recovery block")
    noise = {**c.source.noise, "wrong_reference": wrong, "guessable": guessable}
    source = dataclasses.replace(c.source, num_images=images, noise=noise)
    recovery = dataclasses.replace(c.recovery, suspects=True)
    config = dataclasses.replace(c, source=source, recovery=recovery, blind=c.blind or BlindConfig())
    if model is not None:
        config = dataclasses.replace(config, model=dataclasses.replace(c.model, id=model))
    family = dataclasses.replace(family, config=config)
    synthetic = SyntheticSource.from_config(source, base_dir=family.path.parent)
    planted, guessed = synthetic.planted(), synthetic.guessable()

    ctx = BuildContext(family, build, cache or default_cache_path(), progress=True)
    with ctx.lock():
        ensure(CleanStage(), ctx)
        sampled, recovered = ensure_passes(ctx)
    assert recovered is not None and recovered.adjudication is not None
    answered, marked, blind, right = set(), set(), set(), set()
    for item, result in outcomes(ctx.paths.root, routes_for(ctx, sampled.promotes)):
        answered.add(item["key"])
        if result.decision.reason == SUSPECT_REFERENCE:
            marked.add(item["key"])
        if result.blind_marked:
            blind.add(item["key"])
        if result.blind is not None and result.blind["right"] and result.blind["right"][0]:
            right.add(item["key"])
    adjudicated = list(read_records(ctx.paths.recovery, "adjudication"))
    kept = set(planted) & answered
    a = recovered.adjudication
    cal = a.calibration.to_dict() if a.calibration else None
    return {
        "family": family_name,
        "model": config.model.id,
        "images": images,
        "wrong_reference": wrong,
        "questions": len(answered),
        "planted": len(planted),
        "planted_answered": len(kept),
        "candidates": _rates({r["key"] for r in adjudicated}, kept),
        "against": _rates({r["key"] for r in adjudicated if r["against"]}, kept),
        "marked": _rates(marked, kept),
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
    parser.add_argument("--model", default=None, help="another model id (default: the family's)")
    parser.add_argument("--build-dir", type=Path, default=ROOT / "build" / "bench-suspect")
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    r = measure(args.family, args.images, args.wrong, args.model, args.build_dir, args.cache, args.guessable)
    if args.json:
        print(json.dumps(r, indent=2))
        return
    print(
        f"{r['family']} with {r['model']}: {r['images']} images, {r['questions']} questions answered, "
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
    print(f"  {r['adjudication_requests']} adjudication requests")
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
