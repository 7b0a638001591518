"""`judge.sees_image`: the judge's requests carry the question's image only when it is on, keyed apart from the text-only
judge's, the stage's fingerprint changes with it, and the key is refused where it means nothing. With no model: the
answers replay, the judge is an engine that records what it is asked."""

from __future__ import annotations

import gc
import hashlib
import types
from pathlib import Path
from typing import Sequence

import pytest
from replay_family import RECOVERY_CASES

from rs.context import BuildContext
from rs.engines.base import Generation, Request, SamplingSettings
from rs.engines.generation_cache import GenerationCache
from rs.engines.replay import ReplayEngine
from rs.families import FamilyConfigError, load_families
from rs.pipeline.clean.stage import CleanStage
from rs.pipeline.sample.judge import Judge, JudgeCase
from rs.pipeline.sample.stage import SampleStage, sampling_pass
from rs.pipeline.stage import ensure
from rs.store import read_clean_rows

CALIBRATION = {"calibration_samples": 4, "min_calibration_cases": 1}


class RecordingJudge(ReplayEngine):
    """A judge that says WRONG to everything and keeps every request it was sent."""

    def __init__(self, path: Path):
        super().__init__(path, model="some-org/some-vlm")
        self.asked: list[Request] = []

    def generate(self, requests: Sequence[Request], settings: SamplingSettings) -> list[Generation]:
        self.asked += requests
        return [Generation.from_text("WRONG", finish_reason="stop", model=self.model) for _ in requests]


def _run(family, tmp_path: Path, judge: RecordingJudge) -> tuple[BuildContext, object]:
    ctx = BuildContext(
        family,
        tmp_path / "build",
        tmp_path / "cache.sqlite",
        progress=False,
        engine_factory=lambda f: (ReplayEngine(tmp_path / "answers.jsonl", model="some-org/some-vlm"), judge),
    )
    return ctx, ensure(SampleStage(), ctx)


def test_the_judge_sees_the_image_only_when_on_and_its_verdicts_are_cached_apart(tmp_path: Path, family) -> None:
    text_family = family(RECOVERY_CASES, judge=CALIBRATION)
    image_family = load_families(
        _rewritten(tmp_path / "families.yaml", "calibration_samples: 4", "calibration_samples: 4, sees_image: true")
    )["Shapes"]
    assert image_family.config.judge.sees_image and not text_family.config.judge.sees_image

    text_judge = RecordingJudge(tmp_path / "answers.jsonl")
    text_ctx, text_report = _run(text_family, tmp_path, text_judge)
    images = {row.image_sha256: row.image for row in read_clean_rows(text_ctx.paths.clean)}
    assert text_judge.asked and text_report.judged == 2  # the certainly wrong answer and the undecided one
    assert all(r.image is None and r.image_sha256 is None for r in text_judge.asked)
    assert all("image" not in r.prompt.split("The question, as it was asked")[0] for r in text_judge.asked)

    # the other mode on the same cache: not one verdict answered by the text-only judge's, the stage run again
    image_judge = RecordingJudge(tmp_path / "answers.jsonl")
    image_ctx, image_report = _run(image_family, tmp_path, image_judge)
    assert SampleStage().fingerprint(image_ctx) != SampleStage().fingerprint(text_ctx)
    assert image_report.sampling_engine_calls == 0  # the answers are the same
    assert image_report.judge_engine_calls == image_report.judge_requests == text_report.judge_requests
    assert len(image_judge.asked) == len(text_judge.asked)
    for request in image_judge.asked:  # each with its own question's image, the bytes that hash to it
        assert request.image == images[request.image_sha256]
        assert hashlib.sha256(request.image).hexdigest() == request.image_sha256
        assert "The image the question was asked about is attached" in request.prompt
    # a case's image is its question's: the same prompt text asked in both modes, the image added
    text_prompts = sorted(r.prompt for r in text_judge.asked)
    marker = " The image the question was asked about is attached"
    assert sorted(r.prompt.replace(marker + _rest(r.prompt, marker), "") for r in image_judge.asked) == text_prompts
    assert {c.total for c in _checks(image_report)} == {c.total for c in _checks(text_report)}

    # and each mode's verdicts stay cached under its own keys: both run again with nothing sent
    for fam, judge in ((text_family, RecordingJudge(tmp_path / "answers.jsonl")), (image_family, image_judge)):
        ctx = BuildContext(
            fam,
            tmp_path / "build",
            tmp_path / "cache.sqlite",
            progress=False,
            engine_factory=lambda f, j=judge: (ReplayEngine(tmp_path / "answers.jsonl", model="some-org/some-vlm"), j),
        )
        ctx.paths.sample_report.unlink()
        again = ensure(SampleStage(), ctx)
        assert again.judge_engine_calls == 0 and again.judge_requests == text_report.judge_requests


def _rest(prompt: str, marker: str) -> str:
    """The sentence `marker` begins, after the marker, up to the blank line that ends the prompt's first paragraph."""
    return prompt.split(marker, 1)[1].split("\n\n", 1)[0]


def _checks(report) -> list:
    cal = report.calibration
    return [cal.positive, cal.easy, cal.hard, cal.certain]


def _rewritten(path: Path, old: str, new: str) -> Path:
    text = path.read_text()
    assert old in text, text
    out = path.with_name("families-image.yaml")
    out.write_text(text.replace(old, new, 1))
    return out


def held_image_bytes(root: object, images: set[bytes]) -> int:
    """The bytes of `images` reachable from `root` (its attributes, containers, cases), each object counted once."""
    seen, stack, held = set(), [root], 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, types.FunctionType)):
            continue
        seen.add(id(obj))
        if isinstance(obj, bytes):
            held += len(obj) if obj in images else 0
        else:
            stack.extend(gc.get_referents(obj))
    return held


def test_the_calibration_cases_hold_no_image_bytes_and_are_asked_with_them(tmp_path: Path, family) -> None:
    """With the judge seeing the image, the calibration sampler keeps each case's image hash, never its bytes (about
    4 x `calibration_samples` cases held with their images for the whole pass: up to a GB of real images); the bytes are
    read again from the clean store, in row order, when the cases are asked: the same requests, the same keys."""
    family(RECOVERY_CASES, judge=CALIBRATION)
    image_family = load_families(
        _rewritten(tmp_path / "families.yaml", "calibration_samples: 4", "calibration_samples: 4, sees_image: true")
    )["Shapes"]
    judge = RecordingJudge(tmp_path / "answers.jsonl")
    ctx, _ = _run(
        image_family, tmp_path, judge
    )  # every answer and verdict cached; `judge.asked`: what one process sent
    rows = list(read_clean_rows(ctx.paths.clean))
    images = {row.image_sha256: row.image for row in rows}
    with GenerationCache(ctx.cache_path) as cache:
        greedy = sampling_pass(ctx, cache, *ctx.engines("test"))
        offered = list(greedy.judge_requests(read_clean_rows(ctx.paths.clean)))  # verified with the images' bytes
        cases = greedy.calibration_cases().all()
        assert offered and len(cases) >= len(rows)
        assert held_image_bytes(greedy.calibration, set(images.values())) == 0

        from rs.pipeline.sample.calibration import calibrate
        from rs.pipeline.sample.stage import calibration_images

        sent = list(greedy.calibration_requests(calibration_images(ctx)))
        listed = list(greedy.calibration_requests())  # for their keys only: no bytes
        with pytest.raises(ValueError, match="the judge's calibration needs the cases' images"):
            calibrate(greedy.judge, greedy.calibration_cases(), {})  # never sent without them
    assert len(sent) == len(cases) and sorted(key for key, _ in sent) == sorted(key for key, _ in listed)
    assert all(r.image is None and r.image_sha256 for _, r in listed)
    assert all(r.image == images[r.image_sha256] for _, r in sent)
    assert {(r.prompt, r.image, r.image_sha256) for _, r in sent} <= {
        (r.prompt, r.image, r.image_sha256) for r in judge.asked
    }
    order = {sha: at for at, sha in enumerate(images)}  # asked in row order: each image read once
    assert [order[r.image_sha256] for _, r in sent] == sorted(order[r.image_sha256] for _, r in sent)


def test_a_judge_that_sees_the_image_refuses_a_case_without_one() -> None:
    """A caller that forgot the image would key the verdict as a text-only one: refused, never sent without it."""
    from rs.families.schema import JudgeConfig

    judge = Judge.__new__(Judge)
    Judge.__init__(judge, runner=None, config=JudgeConfig(sees_image=True))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="judge.sees_image is on but the judge case of 'k' carries no image"):
        judge.request(JudgeCase("How many?", "3", "4", "k"))
    request = judge.request(JudgeCase("How many?", "3", "4", "k", "ab" * 32))  # listed for its key: the hash is enough
    assert request.image is None and request.image_hash() == "ab" * 32


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("judge: {sees_image: maybe}", "judge.sees_image: expected bool, got 'maybe'"),
        (
            "judge: {enabled: false, sees_image: true}",
            "judge.sees_image: the judge is off (judge.enabled: false), so nothing would see the image",
        ),
    ],
)
def test_sees_image_is_checked_at_its_key(tmp_path: Path, family, block: str, message: str) -> None:
    family(RECOVERY_CASES)
    path = tmp_path / "families.yaml"
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("publish:"))
    lines.insert(at, "    " + block)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(FamilyConfigError) as err:
        load_families(path)
    assert f"{path}:{at + 1}: families.Shapes.{message}" in str(err.value)


def test_the_clean_stage_is_shared_by_both_modes(tmp_path: Path, family) -> None:
    """Only the sample stage depends on the judge's mode: switching it cleans nothing again."""
    text_family = family(RECOVERY_CASES)
    image_family = load_families(
        _rewritten(tmp_path / "families.yaml", "publish:", "judge: {sees_image: true}\n    publish:")
    )["Shapes"]
    ctxs = [
        BuildContext(f, tmp_path / "build", tmp_path / "cache.sqlite", progress=False)
        for f in (text_family, image_family)
    ]
    assert CleanStage().fingerprint(ctxs[0]) == CleanStage().fingerprint(ctxs[1])
    assert SampleStage().fingerprint(ctxs[0]) != SampleStage().fingerprint(ctxs[1])


class FakeCluster:
    """The Ray cluster as `rs.distributed._judge_step` uses it: the request files it would answer, read back."""

    batch_size = 8

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def read(self, files: list[str]) -> list[str]:
        return files

    def answer(self, name, files, *args, **kwargs) -> None:
        import pyarrow.parquet as pq

        for path in files:
            self.rows += pq.read_table(path).to_pylist()


def test_the_ray_path_sends_the_judge_the_same_requests_with_their_images(tmp_path: Path, family) -> None:
    """The judge step of `rs.distributed` writes the requests its replicas send: with the judge seeing the image, each
    with its image's bytes and hash, exactly those one process sends."""
    from types import SimpleNamespace

    from rs.distributed import _greedy_judge_parts, _judge_step, _Steps

    text_family = family(RECOVERY_CASES, judge=CALIBRATION)
    _run(text_family, tmp_path, RecordingJudge(tmp_path / "answers.jsonl"))  # every answer cached
    image_family = load_families(
        _rewritten(tmp_path / "families.yaml", "calibration_samples: 4", "calibration_samples: 4, sees_image: true")
    )["Shapes"]
    judge = RecordingJudge(tmp_path / "answers.jsonl")
    ctx = BuildContext(
        image_family,
        tmp_path / "build",
        tmp_path / "cache.sqlite",
        progress=False,
        engine_factory=lambda f: (ReplayEngine(tmp_path / "answers.jsonl", model="some-org/some-vlm"), judge),
    )
    steps = SimpleNamespace(ctx=ctx, cluster=FakeCluster(), lookahead=64, role=lambda identity: "judge")
    steps.judge_rows = lambda: _Steps.judge_rows(steps)  # type: ignore[arg-type]
    with GenerationCache(ctx.cache_path) as cache:
        greedy = sampling_pass(ctx, cache, *ctx.engines("ray"))
        parts = _greedy_judge_parts(steps, greedy)  # type: ignore[arg-type]
        _judge_step(steps, cache, "judge", greedy, parts)  # type: ignore[arg-type]
    on_ray = {
        (row["image_sha256"], row["image"], r["prompt"], r["item_key"])
        for row in steps.cluster.rows
        for r in row["requests"]
    }
    assert on_ray and all(image for _, image, _, _ in on_ray)

    ensure(SampleStage(), ctx)  # one process: the same requests (the fake cluster cached no verdict)
    assert {(r.image_sha256, r.image, r.prompt, r.item_key) for r in judge.asked} == on_ray


def test_judge_modes_is_refused_with_a_shard(capsys) -> None:
    """The comparison needs the whole family's answers in this process: a shard's slice would measure other cases."""
    from rs.cli.sample import main

    with pytest.raises(SystemExit) as exit:
        main(["TinyCLEVR", "--judge-modes", "--shard", "0/2"])
    assert exit.value.code == 2 and "--judge-modes measures the judge in this process" in capsys.readouterr().err


def test_judge_modes_needs_a_judge(tmp_path: Path, family) -> None:
    from rs.errors import UsageError
    from rs.pipeline.sample.judge_modes import judge_modes

    ctx = BuildContext(family(RECOVERY_CASES, judge={"enabled": False}), tmp_path / "b", tmp_path / "c.sqlite")
    with pytest.raises(
        UsageError, match="Shapes: judge.enabled is false, there is no judge to measure in either mode"
    ):
        judge_modes(ctx)
