"""Both judge modes calibrated on the same cases (`rs.pipeline.sample.judge_modes`, `rs sample --judge-modes`), with the
tiny model of demo/rs_demo on the real vLLM engine: the family's own mode gives back the run's calibration from the
cache, the other one is measured on exactly the same cases, its verdicts asked with each case's image."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("vllm")

from family_yaml import tiny_family  # noqa: E402

from rs.context import BuildContext  # noqa: E402
from rs.engines.base import Request  # noqa: E402
from rs.families import load_families  # noqa: E402
from rs.pipeline.sample.calibration import CHECKS  # noqa: E402
from rs.pipeline.sample.judge_modes import judge_modes, modes_lines  # noqa: E402
from rs.pipeline.sample.stage import SampleStage  # noqa: E402
from rs.pipeline.stage import ensure  # noqa: E402


@pytest.fixture(scope="module")
def tiny_engine():
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from rs.engines.vllm import VLLMEngine
    from rs_demo.tiny_model import VLLM_ENGINE_KWARGS

    engine = VLLMEngine("rs:tiny-vlm", engine_args=dict(VLLM_ENGINE_KWARGS))
    yield engine
    engine.close()


def test_both_modes_are_calibrated_on_the_same_cases(tmp_path: Path, tiny_engine, monkeypatch) -> None:
    from rs.engines.vllm import VLLMStream

    judged: list[Request] = []  # every judge request the engine is sent
    submit = VLLMStream.submit

    def logged(stream, tag, request):
        if stream.settings.choices:
            judged.append(request)
        submit(stream, tag, request)

    monkeypatch.setattr(VLLMStream, "submit", logged)
    family = load_families(tiny_family(tmp_path, num_images=8))["Tiny"]
    assert family.config.judge.sees_image is False
    ctx = BuildContext(
        family,
        tmp_path / "build",
        tmp_path / "cache.sqlite",
        progress=False,
        engine_factory=lambda f: (tiny_engine, tiny_engine),
    )
    report = ensure(SampleStage(), ctx)
    assert report.calibration is not None and report.judged > 0
    assert judged and all(r.image is None for r in judged)  # the run: text only
    judged.clear()

    modes = judge_modes(ctx)
    text, image = modes["text"].calibration, modes["image"].calibration
    # the family's own mode is the run's calibration, every verdict from the cache
    assert text.to_dict() == report.calibration.to_dict()
    assert modes["text"].engine_calls == 0
    # the other mode: the same cases, each of its verdicts a new request that carries its question's image
    for name in CHECKS:
        assert getattr(image, name).total == getattr(text, name).total, name
        assert sum(image.verdicts[name].values()) == getattr(image, name).total, name
    assert modes["image"].requests == modes["text"].requests > 0
    assert modes["image"].engine_calls == len(judged) > 0
    assert all(r.image and r.image_sha256 for r in judged)
    lines = modes_lines(modes, chosen=False)
    assert lines[1].startswith("  text (the family's mode): positives ") and lines[2].startswith("  image: positives ")
