"""An engine argument vLLM would refuse is refused by `rs families validate`, at its key and line, before any engine
starts; and where the engine does refuse one at its start, the message names the key. Before, `max_num_seqs: 0` passed
validate and failed at the engine's start with pydantic's words and no key."""

from __future__ import annotations

from pathlib import Path

import pytest
from family_yaml import MINIMAL, VLLM_ARGS, write_families

from rs.families import load_families
from rs.families.loader import FamilyConfigError

pytest.importorskip("vllm")


def _line(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        (
            "max_num_seqs",
            0,
            "vLLM's SchedulerConfig.max_num_seqs refuses 0: Input should be greater than or equal to 1",
        ),
        ("gpu_memory_utilization", 1.5, "vLLM's CacheConfig.gpu_memory_utilization refuses 1.5: Input should be less"),
        ("tensor_parallel_size", 0, "vLLM's ParallelConfig.tensor_parallel_size refuses 0"),
    ],
)
def test_validate_refuses_a_value_vllm_refuses_at_its_key(tmp_path: Path, key: str, value: object, words: str) -> None:
    path = write_families(tmp_path, "F", MINIMAL, engine={"kind": "vllm", "args": {**VLLM_ARGS, key: value}})
    load_families(path)  # without the engine's checks (every command but validate): not looked at
    with pytest.raises(FamilyConfigError) as err:
        load_families(path, engine_checks=True)
    assert str(err.value).startswith(f"{path}:{_line(path, f'{key}:')}: families.F.engine.args.{key}: {words}")


def test_validate_takes_the_arguments_vllm_takes(tmp_path: Path) -> None:
    path = write_families(
        tmp_path, "F", MINIMAL, engine={"kind": "vllm", "args": {**VLLM_ARGS, "gpu_memory_utilization": None}}
    )
    assert load_families(path, engine_checks=True)["F"].config.engine.args["max_num_seqs"] == 16


def test_the_engine_start_names_the_key_vllm_refused() -> None:
    from vllm.config import SchedulerConfig

    from rs.engines.vllm import _start_reason

    try:
        SchedulerConfig(max_num_seqs=0, max_model_len=2048, is_encoder_decoder=False)
    except Exception as err:  # pydantic's ValidationError, as the engine's start raises it
        said = _start_reason(err, {"max_num_seqs": 0, "max_model_len": 2048})
    assert said.startswith("engine.args.max_num_seqs: 0: Input should be greater than or equal to 1"), said
