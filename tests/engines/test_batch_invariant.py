"""`engine.batch_invariant`: vLLM's batch-invariant mode, validated as a key, refused where vLLM cannot run it, costed by `rs plan`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from family_yaml import MINIMAL, family_yaml

from rs.engines.vllm import BatchInvarianceUnsupported, VLLMEngineConfig, _enable_batch_invariance
from rs.engines.vllm_args import batch_invariance_refusal
from rs.families import load_families
from rs.plan.static import BATCH_INVARIANCE_COST, describe
from rs.util.config_checks import ConfigValueError

FAMILY = family_yaml(
    "Inv",
    MINIMAL,
    source={"seed": 0, "num_images": 2, "questions_per_image": 1},
    instruction=" Answer briefly.",
    model={"id": "rs:tiny-vlm"},
    engine={"batch_invariant": True, "args": {"dtype": "float32"}},
    card={"pretty_name": "Inv", "citation": "c"},
)


def test_the_key_is_a_boolean_and_recorded_only_when_on() -> None:
    with pytest.raises(ConfigValueError, match="batch_invariant"):
        VLLMEngineConfig(batch_invariant="yes")  # type: ignore[arg-type]
    assert VLLMEngineConfig().recorded() == {"kind": "vllm", "args": {}}


@pytest.mark.vllm
def test_rs_plan_states_its_throughput_cost(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    if batch_invariance_refusal() is not None:
        pytest.skip("the installed vLLM has no batch-invariant mode")
    (tmp_path / "families.yaml").write_text(FAMILY)
    config = load_families(tmp_path / "families.yaml")["Inv"].config
    assert config.engine.recorded()["batch_invariant"] is True
    lines = describe(config)
    assert any(line.startswith("batch-invariant: on;") and BATCH_INVARIANCE_COST in line for line in lines)
    assert (
        "22-31%" in BATCH_INVARIANCE_COST
        and "vllm#27433" in BATCH_INVARIANCE_COST
        and "not measured by rs" in BATCH_INVARIANCE_COST
    )


@pytest.mark.vllm
def test_the_cpu_build_of_vllm_refuses_it_before_the_engine_starts(monkeypatch) -> None:
    pytest.importorskip("vllm")
    from vllm.platforms import current_platform

    if current_platform.is_cuda_alike():
        pytest.skip("a GPU platform: batch invariance is supported here")
    monkeypatch.delenv("VLLM_BATCH_INVARIANT", raising=False)
    with pytest.raises(BatchInvarianceUnsupported, match="NVIDIA and AMD GPUs only") as err:
        _enable_batch_invariance("rs:tiny-vlm")
    assert err.value.exit_code == 2 and "batch_invariant: false" in (err.value.hint or "")
    assert "VLLM_BATCH_INVARIANT" not in os.environ
