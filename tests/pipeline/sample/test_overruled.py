"""A judge that calls everything CORRECT, with the gate switched off: it promotes what the verifier
could not read, never an answer the verifier knows is wrong, and the cards show its overturns."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("vllm")

from family_yaml import MINIMAL, family_yaml  # noqa: E402
from replay_family import publish_in  # noqa: E402

from rs.audit import audit  # noqa: E402
from rs.context import BuildContext
from rs.engines.replay import ReplayEngine  # noqa: E402
from rs.families import load_families  # noqa: E402
from rs.pipeline.clean.stage import CleanStage  # noqa: E402
from rs.pipeline.stage import ensure  # noqa: E402
from rs.store import read_clean_rows, read_records  # noqa: E402

FAMILY = family_yaml(
    "Counts",
    MINIMAL,
    source={"seed": 5, "num_images": 8, "questions_per_image": 3, "style": "clevrmath"},
    instruction=" Reply with one number.",
    verifier={"name": "count"},
    model={"id": "replayed/model"},
    engine={"kind": "replay", "replay_path": "replay.jsonl"},
    judge={
        "model": {"id": "rs:tiny-vlm"},
        "calibration_samples": 8,
        "min_calibration_cases": 1,
        "min_negative_agreement": 0.0,
        "min_positive_agreement": 0.0,
    },
    publish={"namespace": "me", "target": "local"},
    card={"pretty_name": "Counts", "license": "cc-by-4.0", "citation": "c"},
)


def test_always_correct_judge_cannot_promote_a_different_number(tmp_path: Path) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    (tmp_path / "families.yaml").write_text(FAMILY)
    family = load_families(tmp_path / "families.yaml")["Counts"]
    ctx = BuildContext(family, tmp_path / "build", tmp_path / "cache.sqlite", progress=False)
    ensure(CleanStage(), ctx)
    lines, kinds = [], {}
    for n, row in enumerate(read_clean_rows(ctx.paths.clean)):
        for q in row.qa:
            kind = ("right", "off by one", "hedged")[(n + q.turn) % 3]
            answer = {
                "right": q.answer,
                "off by one": str(int(q.answer) + 1),
                "hedged": f"{q.answer} or {int(q.answer) + 1}",
            }[kind]
            kinds[q.key] = kind
            lines.append(json.dumps({"key": q.key, "text": f"<think>counting</think>{answer}"}))
    (tmp_path / "replay.jsonl").write_text("\n".join(lines))
    from rs.engines.vllm import VLLMEngine
    from rs_demo.tiny_model import VLLM_ENGINE_KWARGS, tiny_vlm_path

    judge = VLLMEngine(str(tiny_vlm_path(favour="CORRECT")), engine_args=dict(VLLM_ENGINE_KWARGS))
    try:
        outcome = publish_in(
            tmp_path,
            family,
            engine_factory=lambda f: (ReplayEngine(tmp_path / "replay.jsonl", model="replayed/model"), judge),
        )
    finally:
        judge.close()
    stats = outcome.report.to_dict()
    assert stats["judge"]["calibration"]["promotes"] is True
    items = {r["key"]: r for r in read_records(ctx.paths.items, "items")}
    assert {r["judge"] for r in items.values() if not r["verified"]} == {"CORRECT"}
    assert {k for k, r in items.items() if r["contradicts"]} == {
        k for k, kind in kinds.items() if kind == "off by one"
    }
    t = stats["totals"]
    assert t["rejected_by_reason"]["judge_overruled"] == sum(kind == "off by one" for kind in kinds.values()) > 0
    assert t["accepted_by"]["judge"] == sum(kind == "hedged" for kind in kinds.values()) > 0  # the gate was off
    accepted = [
        qa for row in read_records(tmp_path / "out" / "me" / "Counts_RS_nothink" / "data", "train") for qa in row["qa"]
    ]
    assert all(" or " in qa["answer"] for qa in accepted if qa["accepted_by"] == "judge")
    assert all(qa["answer"] == qa["reference"] for qa in accepted if qa["accepted_by"] == "verifier")
    for split in ("RS_think", "RS_nothink"):
        card = (tmp_path / "out" / "me" / f"Counts_{split}" / "README.md").read_text()
        assert "Answers the judge promoted in this split (3 of" in card
        assert card.count(" or ") >= 3 and "| `CORRECT` |" in card
        overturns = json.loads((tmp_path / "out" / "me" / f"Counts_{split}" / "rs" / "overturns.json").read_text())
        assert len(overturns) == 3 and all(" or " in o["answer"] for o in overturns)
    rejected_card = (tmp_path / "out" / "me" / "Counts_rejected" / "README.md").read_text()
    assert "Answers the judge promoted" not in rejected_card and "`judge_overruled`" in rejected_card
    for repo in sorted(
        (tmp_path / "out" / "me").glob("Counts_*")
    ):  # a passing judge's promotions and overrules, audited
        result = audit(repo, build=tmp_path / "build")
        assert result.ok, result.render()
