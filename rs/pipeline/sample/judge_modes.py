"""The judge measured in both modes on the same calibration cases: shown the image (`judge.sees_image`) and not.

No published study compares one judge verifying answers with and without the image, and an image-seeing judge is
weakest on perception: a family owner chooses the mode on this family's own figures. Each mode is calibrated exactly as
a run calibrates its judge (`rs.pipeline.sample.calibration`): the cases are drawn from the run's cached answers by the
sample stage's own code, so both modes see the same positives, easy and hard negatives and certain rejections, and the
run's own mode gives back the run's calibration (its verdicts from the cache). Only the other mode's verdicts are new
requests. Nothing here gates or promotes anything: the run's calibration does, in the mode the family chose.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import TYPE_CHECKING, Any

from rs.engines.generation_cache import GenerationCache
from rs.errors import UsageError
from rs.pipeline.sample import SamplingPass, questions
from rs.pipeline.sample.calibration import Calibration, calibrate
from rs.pipeline.sample.stage import answer_vocabulary, calibration_images
from rs.store import read_clean_rows

if TYPE_CHECKING:
    from rs.context import BuildContext
    from rs.engines.base import Engine

MODES = {"text": False, "image": True}
"""Each mode's name in the comparison, and its `judge.sees_image`."""


@dataclasses.dataclass
class ModeCalibration:
    """One mode's calibration on the family's calibration cases, and what measuring it cost."""

    sees_image: bool
    calibration: Calibration
    requests: int
    """Judge requests of the measurement (calibration cases and certain rejections)."""
    engine_calls: int
    """Of them, those the cache did not answer."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "sees_image": self.sees_image,
            "calibration": self.calibration.to_dict(),
            "requests": self.requests,
            "engine_calls": self.engine_calls,
        }


def mode_calibration(
    ctx: BuildContext, cache: GenerationCache, sampler: Engine, judge: Engine, sees_image: bool
) -> ModeCalibration:
    """The judge's calibration with `judge.sees_image` set to `sees_image`, on the calibration cases of the run's cached
    answers (every answer must be cached: run the sample stage first)."""
    config = ctx.family.config
    config = dataclasses.replace(config, judge=dataclasses.replace(config.judge, sees_image=sees_image))
    greedy = SamplingPass(config, sampler, judge, cache, progress=False, vocabulary=answer_vocabulary(ctx))
    assert greedy.judge is not None
    rows = read_clean_rows(ctx.paths.clean, images=sees_image)
    asked = (
        (greedy.runner.key(request, greedy.settings), request, item)
        for _, item, request in questions(rows, greedy.instructions)
    )
    # the certain rejections, as the run shows them to its judge (every rejection with a case, `SamplingPass.judged`)
    certain = (
        v.case for v in greedy.cached(asked, greedy.settings, calibrating=True) if v.contradicts and v.case is not None
    )
    verdicts = Counter(label for _, label, _ in greedy.judge.verdicts(certain, desc="judge modes: certain"))
    calibration = calibrate(greedy.judge, greedy.calibration_cases(), dict(verdicts), images=calibration_images(ctx))
    stats = greedy.judge.runner.stats
    return ModeCalibration(sees_image, calibration, stats.requests, stats.engine_calls)


def judge_modes(ctx: BuildContext) -> dict[str, ModeCalibration]:
    """Both modes' calibrations (`MODES`) on the same cases of the family's current sample stage."""
    if not ctx.family.config.judge.enabled:
        raise UsageError(
            f"{ctx.family.name}: judge.enabled is false, there is no judge to measure in either mode",
            hint="set judge.enabled: true in the family's YAML",
        )
    with ctx.passes(), GenerationCache(ctx.cache_path) as cache:
        sampler, judge = ctx.engines("judge modes")
        assert judge is not None
        return {name: mode_calibration(ctx, cache, sampler, judge, sees) for name, sees in MODES.items()}


def modes_lines(modes: dict[str, ModeCalibration], chosen: bool) -> list[str]:
    """The comparison for a person: per mode, each check's agreement with its 95% interval, and whether it would pass.
    `chosen`: the family's `judge.sees_image`."""

    def check(cal: Calibration, name: str) -> str:
        c = getattr(cal, name)
        return f"{c.agreed}/{c.total} [{c.low:.1%}, {c.high:.1%}]" if c.total else "0/0"

    lines = ["judge modes on the same calibration cases (95% Wilson intervals):"]
    for name, mode in modes.items():
        cal = mode.calibration
        mark = " (the family's mode)" if mode.sees_image == chosen else ""
        gate = "passes" if cal.promotes else f"BLOCKED: {cal.blocked_reason}"
        lines.append(
            f"  {name}{mark}: positives {check(cal, 'positive')}, easy negatives {check(cal, 'easy')}, "
            f"hard negatives {check(cal, 'hard')}, certain rejections {check(cal, 'certain')}; {gate} "
            f"({mode.requests} requests, {mode.engine_calls} sent to the engine)"
        )
    return lines
