"""The whole mission as a user meets it: a family written only in YAML, published with the real
engine, killed with SIGKILL and re-run to the identical result, then cards regenerated alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("vllm")

from checkout import ROOT  # noqa: E402
from faults import assert_same_published, cache_rows, meanwhile, published_files  # noqa: E402

NEW_FAMILY = """
  MyShapes:
    source: {kind: synthetic, seed: 11, num_images: 6, questions_per_image: 3, style: clevrmath,
             noise: {off_task: 0.2, corrupt_image: 0.15}}
    instruction: " Reply with one number."
    verifier: {name: count}
    model: {id: "rs:tiny-vlm"}
    engine:
      batch_size: 4
      args: {dtype: bfloat16, max_model_len: 2048, max_num_seqs: 16, enforce_eager: true, kv_cache_memory_bytes: 268435456,
             limit_mm_per_prompt: {image: 1, video: 0}, tensor_parallel_size: null, gpu_memory_utilization: null}
    sampling: {max_tokens: 24, thinking_token_budget: null}  # the defaults' budget is for 8,192 tokens
    judge: {calibration_samples: 6}
    cleaning:
      purity: {enabled: true, vocabulary: [subtract, add, all, how, many, objects, things, are, left, exist, big, small, large, tiny,
               red, blue, green, gray, brown, purple, cyan, yellow, rubber, matte, metal, shiny, metallic, cube, cubes, block, blocks,
               sphere, spheres, ball, balls, cylinder, cylinders, object, thing]}
    shard: {max_bytes: 1MB, row_group_bytes: 256KB}
    publish: {namespace: me, target: local}
    card:
      pretty_name: My Shapes
      description: A family nobody wrote code for.
      license: cc-by-4.0
      citation: "@misc{myshapes}"
"""


@pytest.fixture(scope="module")
def families(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "families.yaml"
    shipped = (ROOT / "families.yaml").read_text()
    path.write_text(shipped.rstrip() + "\n" + NEW_FAMILY)
    return path


def publish_cmd(families: Path, work: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rs.publish",
        "MyShapes",
        "--config",
        str(families),
        "--out",
        str(work / "out"),
        "--build-dir",
        str(work / "build"),
        "--cache",
        str(work / "cache.sqlite"),
        *extra,
    ]


ENV = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}


def test_yaml_only_family_publishes_survives_sigkill_and_regenerates_cards(
    families: Path, tmp_path: Path, monkeypatch
) -> None:
    ref, crashed = tmp_path / "ref", tmp_path / "crashed"
    with meanwhile(
        publish_cmd(families, ref), cwd=ROOT, env=ENV
    ) as done:  # the uninterrupted run, beside the killed one
        victim = subprocess.Popen(
            publish_cmd(families, crashed),
            cwd=ROOT,
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 300
        while cache_rows(crashed / "cache.sqlite") < 4 and victim.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert victim.poll() is None, "finished before it could be killed"
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        rerun = subprocess.run(
            publish_cmd(families, crashed), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600
        )
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        said, err = done.communicate(timeout=600)
    assert done.returncode == 0, err[-3000:]
    assert "MyShapes_rejected:" in said and "judge calibration:" in said and "cards:" in said

    a, b = ref / "out" / "me", crashed / "out" / "me"
    assert_same_published(a, b)  # same rows, same stats, same cards, byte for byte

    # a template change, then --cards-only: the three cards change, nothing else
    import rs.pipeline.publish.cards.render
    from rs.families import load_families
    from rs.pipeline.publish.stage import publish

    templates = tmp_path / "templates"
    import shutil

    shutil.copytree(ROOT / "templates", templates)
    card = templates / "card.md.jinja"
    card.write_text(
        card.read_text().replace("## How the data was produced", "## How the data was produced\n\nTemplate v2.", 1)
    )
    monkeypatch.setattr(rs.pipeline.publish.cards.render, "TEMPLATES", templates)
    before = {p: (a / p).read_bytes() for p in published_files(a)}
    family = load_families(families)["MyShapes"]
    outcome = publish(
        family,
        out=ref / "out",
        cards_only=True,
        build_root=ref / "build",
        cache_path=ref / "cache.sqlite",
        progress=False,
    )
    changed = sorted(p for p in published_files(a) if (a / p).read_bytes() != before[p])
    assert changed == [f"MyShapes_{s}/README.md" for s in ("RS_nothink", "RS_think", "rejected")]
    assert all("Template v2." in (a / p).read_text() for p in changed)
    assert outcome.seconds < 5
