"""`--dry-run` spends nothing: on a family not built yet no engine is created, nothing is sampled or judged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rs.families import load_families
from rs.publish import publish

FAMILY = """\
families:
  Dry:
    source: {kind: synthetic, seed: 5, num_images: 3, questions_per_image: 2}
    instruction: "\\nAnswer the question using a single word or phrase."
    verifier: {name: alnum}
    model: {id: "rs:demo-vlm", reasoning: {parser: tags}}
    engine:
      batch_size: 8
      args: {dtype: bfloat16, max_model_len: 2048, max_num_seqs: 8, enforce_eager: true, kv_cache_memory_bytes: 134217728}
    sampling: {max_tokens: 48}
    publish: {namespace: local, target: local}
    card: {pretty_name: Dry, description: d, license: apache-2.0, citation: c}
"""


def test_a_dry_run_of_a_family_not_built_creates_no_engine_and_says_what_a_run_would_do(tmp_path: Path, capsys) -> None:
    pytest.importorskip("vllm")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from rs.cli.publish import would_do
    from rs.engines import engines_for

    (tmp_path / "families.yaml").write_text(FAMILY)
    family = load_families(tmp_path / "families.yaml")["Dry"]
    created = []

    def counted(f):  # the real engines, counted: a dry run must not ask for any
        created.append(engines_for(f))
        return created[-1]

    paths = {"out": tmp_path / "out", "build_root": tmp_path / "build", "cache_path": tmp_path / "cache.sqlite"}
    dry = publish(family, dry_run=True, progress=False, engine_factory=counted, **paths)
    assert created == [] and dry["report"] is None and dry["results"] == {}
    assert not paths["cache_path"].exists() and not paths["out"].exists()
    assert not list(paths["build_root"].rglob("*.parquet"))  # nothing cleaned into a store, nothing sampled
    text = would_do(family, dry)
    assert text.startswith("Dry: not built here with these settings, so this dry run built nothing: no model was loaded")
    assert "read 3 source records and clean them: about 6 questions to answer" in text
    assert "send about 6 sampling requests to rs:demo-vlm" in text
    assert "write Dry_RS_think: one row per image" in text and "cannot know before sampling: the accept rate" in text
    assert "fewer than judge.min_calibration_cases (50)" in text  # 6 questions can never calibrate the judge

    try:  # the same publish for real does create the engine and send requests: the count above could have failed
        built = publish(family, progress=False, engine_factory=counted, **paths)
    finally:
        for sampler, judge in created:
            sampler.close()
    assert len(created) == 1 and built["report"].run.sampling_engine_calls > 0

    again = publish(family, dry_run=True, progress=False, engine_factory=counted, **paths)  # built: the usual file-by-file plan
    assert len(created) == 1 and again["report"] is not None
    assert all(c.action == "unchanged" for r in again["results"].values() for c in r.changes)
