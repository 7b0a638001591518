"""Reasoning formats and judge modes on the real engine, with chat templates that behave like published ones.

The tiny model's templates (`rs_demo.tiny_model.TEMPLATES`) reproduce what thinking VLMs' templates do:
`prefill` pre-fills an open `<think>` unless `enable_thinking` is false, `always` pre-fills it whatever
the switch says, `markers` leaves the model to write `◁think▷` ... `◁/think▷` itself, `hybrid` (the
default) pre-fills nothing and closes an empty block when thinking is off. The tiny model's answers
are noise, so the sampling requests here are shaped with a regular expression per item (vLLM's
structured outputs): a closed reasoning then an answer, a reasoning that stops without closing, or
one that runs past `max_tokens`. The prompts, the templates, the engine and the reading are all real.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Iterator

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

from family_yaml import TINY, write_families  # noqa: E402
from replay_family import publish_in  # noqa: E402

from rs.context import BuildContext
from rs.engines.base import Generation, Request  # noqa: E402
from rs.engines.cached_engine import CachedEngine  # noqa: E402
from rs.engines.generation_cache import GenerationCache  # noqa: E402
from rs.engines.vllm import ReasoningParserMissing, VLLMEngine, VLLMStream  # noqa: E402
from rs.families import load_families  # noqa: E402
from rs.families.loader import FamilyConfigError  # noqa: E402
from rs.families.schema import JudgeConfig, ReasoningConfig  # noqa: E402
from rs.pipeline.route import decide  # noqa: E402
from rs.pipeline.sample.judge import LABELS, Judge, JudgeCase  # noqa: E402
from rs.pipeline.sample.stage import SampleStage
from rs.pipeline.stage import ensure
from rs.store import read_records  # noqa: E402
from rs_demo.tiny_model import TEMPLATE_MARKERS, VLLM_ENGINE_KWARGS, tiny_vlm_path  # noqa: E402

MAX_TOKENS = 40
WORDS = r"[a-z]{2,6}( [a-z]{2,6}){3}"
LONG = r"[a-z]{2,6}( [a-z]{2,6}){80}"  # runs past MAX_TOKENS
SHAPES = ("closed", "unclosed", "long")

# Each template, the format a family writes for it (a vLLM parser where vLLM has one for the markers)
FORMATS = {
    "prefill": {"parser": "deepseek_r1"},
    "always": {"parser": "qwen3"},
    "markers": {"parser": "tags", "start": "◁think▷", "end": "◁/think▷"},
    "hybrid": {"parser": "deepseek_r1"},
}


def shape_of(key: str) -> str:
    return SHAPES[int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(SHAPES)]


def shaped_regex(shape: str, template: str) -> str:
    """The output a request of `shape` is forced to, as a model under `template` writes it."""
    start, end = TEMPLATE_MARKERS[template]
    body = {"closed": f"{WORDS}{end}\\n\\n(yes|no|[0-9])", "unclosed": WORDS, "long": LONG}[shape]
    # `prefill` and `always` opened the block in the prompt; the `markers` model opens its own; under `hybrid`
    # only the closed shape reasons at all, the others are the plain answers of a model that did not think
    opens = template == "markers" or (template == "hybrid" and shape == "closed")
    return (start if opens else "") + body


class ShapedStream(VLLMStream):
    """vLLM's stream with each sampling request's output shaped by its item (judge requests keep their settings)."""

    template = "hybrid"

    def params(self, request: Request) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        if self.settings.choices or request.item_key is None:
            return super().params(request)
        regex = shaped_regex(shape_of(request.item_key), self.template)
        return SamplingParams(
            temperature=0.0,
            seed=0,
            max_tokens=self.settings.max_tokens,
            structured_outputs=StructuredOutputsParams(regex=regex),
        )


class ShapedEngine(VLLMEngine):
    def __init__(self, model: str, template: str, **kwargs: Any):
        super().__init__(model, **kwargs)
        self.template = template

    def open_stream(self, settings: Any, *, window: int | None = None) -> ShapedStream:
        stream = ShapedStream(self, settings, window=window or self.in_flight)
        stream.template = self.template
        return stream


@pytest.fixture(scope="module", autouse=True)
def _in_process() -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"


class Engines:
    """The module's engines, opened once per model and engine arguments and at most one open at a time (closing an
    in-process engine tears down the distributed state under another still open): asking for another closes the one
    before. A ShapedEngine of a template serves judge requests as a VLLMEngine of it does (`ShapedStream.params`).
    Each test keeps its own cache and build folder, so an engine shared carries nothing from one test to the next."""

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None
        self.engine: VLLMEngine | None = None

    def shaped(self, template: str) -> ShapedEngine:
        path = str(tiny_vlm_path(template=template))
        return self._open(
            ("shaped", template), lambda: ShapedEngine(path, template, engine_args=dict(VLLM_ENGINE_KWARGS))
        )

    def with_parser(self, parser: str, **model: str) -> VLLMEngine:
        path, args = str(tiny_vlm_path(**model)), {**VLLM_ENGINE_KWARGS, "reasoning_parser": parser}
        return self._open(("parser", parser, *sorted(model.items())), lambda: VLLMEngine(path, engine_args=args))

    def _open(self, key: tuple[Any, ...], make: Any) -> Any:
        if key != self.key:
            self.close()
            self.engine, self.key = make(), key
        return self.engine

    def close(self) -> None:
        engine, self.engine, self.key = self.engine, None, None
        if engine is not None:
            engine.close()


@pytest.fixture(scope="module")
def engines(_in_process: None) -> Iterator[Engines]:
    shelf = Engines()
    try:
        yield shelf
    finally:
        shelf.close()


@pytest.fixture(scope="module")
def template(request: pytest.FixtureRequest) -> str:
    """The test's chat template, a module-scoped parameter so that pytest runs the tests of one template together."""
    return request.param


def family_for(
    tmp_path: Path,
    template: str,
    *,
    judge: dict | None = None,
    reasoning: dict | None = None,
    max_tokens: int = MAX_TOKENS,
):
    path = write_families(
        tmp_path,
        "Shaped",
        TINY,
        source={"seed": 5, "num_images": 4, "style": "clevr"},
        model={"id": str(tiny_vlm_path(template=template)), "reasoning": reasoning or FORMATS[template]},
        sampling={"max_tokens": max_tokens},
        judge={"calibration_samples": 4, "min_calibration_cases": 2, **(judge or {})},
        card={"pretty_name": "Shaped"},
    )
    return load_families(path)["Shaped"]


def sample_with(tmp_path: Path, template: str, engines: Engines) -> tuple[Any, list[dict[str, Any]], Any]:
    family = family_for(tmp_path, template)
    engine = engines.shaped(template)
    ctx = BuildContext(
        family,
        tmp_path / "build",
        tmp_path / "cache.sqlite",
        progress=False,
        engine_factory=lambda f: (engine, engine),
    )
    report = ensure(SampleStage(), ctx)
    return report, list(read_records(ctx.paths.items, "items")), ctx


@pytest.mark.slow
@pytest.mark.parametrize("template", ["prefill", "always", "markers"], indirect=True)
def test_reasoning_is_split_and_never_scored_as_the_answer(tmp_path: Path, template: str, engines: Engines) -> None:
    report, items, _ = sample_with(tmp_path, template, engines)
    start, end = TEMPLATE_MARKERS[template]
    prefilled = template in ("prefill", "always")
    by_shape: dict[str, list[dict[str, Any]]] = {shape: [] for shape in SHAPES}
    for item in items:
        by_shape[shape_of(item["key"])].append(item)
    assert all(by_shape.values()), "every shape should occur"
    for item in items:  # where the prompt left the reasoning, read from the prompt the engine rendered
        assert item["prompt_reasoning"] == ("open" if prefilled else "none"), item
    assert report.prompt_reasoning == {"open" if prefilled else "none": len(items)}

    for item in by_shape["closed"]:  # a closed reasoning: the answer is what follows it, the reasoning is kept apart
        assert item["finish_reason"] == "stop" and end in item["text"]
        assert item["final"] == item["text"].rsplit(end, 1)[1].strip() and item["final"] in {
            "yes",
            "no",
            *"0123456789",
        }
        assert item["reasoning"] and start not in item["reasoning"] and end not in item["reasoning"]
    for item in by_shape["unclosed"]:  # stopped without closing its reasoning: nothing to score
        assert item["finish_reason"] == "stop" and end not in item["text"]
        assert item["final"] is None and decide(item, True).reason == "no_final_answer", item
        assert item["judge"] is None  # never judged either
    for item in by_shape["long"]:  # cut off by max_tokens
        assert item["finish_reason"] == "length" and item["completion_tokens"] == MAX_TOKENS
        assert item["final"] is None and decide(item, True).reason == "no_final_answer"
    assert report.no_final_answer == len(by_shape["unclosed"]) + len(by_shape["long"])


@pytest.mark.slow
@pytest.mark.parametrize("template", ["hybrid"], indirect=True)
def test_without_a_prefilled_block_a_plain_output_is_the_answer(
    tmp_path: Path, template: str, engines: Engines
) -> None:
    """The contrast: the same unclosed text under a template that opened nothing is a plain answer, and judged as one."""
    _, items, _ = sample_with(tmp_path, template, engines)
    unclosed = [item for item in items if shape_of(item["key"]) == "unclosed"]
    assert unclosed and all(item["prompt_reasoning"] == "none" for item in items)
    for item in unclosed:
        assert item["final"] == item["text"].strip() and item["reasoning"] is None


@pytest.mark.slow
@pytest.mark.parametrize("template", ["always", "prefill", "markers", "hybrid"], indirect=True)
def test_a_label_only_judge_decodes_its_label_after_a_closed_reasoning(
    tmp_path: Path, template: str, engines: Engines
) -> None:
    """Label-only: the judge's prompt ends with a closed block, whether the template closes it or the engine must."""
    start, end = TEMPLATE_MARKERS[template]
    reasoning = ReasoningConfig(parser="tags", start=start, end=end)
    engine = engines.shaped(template)  # judge requests go to vLLM as a plain VLLMEngine sends them
    with GenerationCache(tmp_path / "cache.sqlite") as cache:
        judge = Judge(
            CachedEngine(engine, cache, progress=False),
            JudgeConfig(),
            reasoning=reasoning,
            chat_template_kwargs={"enable_thinking": True},
            tokenizer=engine.tokenizer,
        )
        cases = [JudgeCase(f"How many cubes? ({i})", str(i), str(i + 1), f"k#{i}") for i in range(4)]
        verdicts = list(judge.verdicts(cases))
    for _, label, generation in verdicts:
        read = judge.verdict(generation)[1]
        assert generation.text in LABELS and label == generation.text, generation  # the first thing decoded
        assert read.prompt_reasoning == "closed" and generation.prompt_tail.rstrip().endswith(end)


@pytest.mark.slow
def test_a_think_then_label_judge_labels_only_after_its_reasoning(tmp_path: Path, engines: Engines) -> None:
    """Think-then-label: vLLM constrains the label once the reasoning ends; no end within the budget is UNSURE."""
    judge_config = JudgeConfig(mode="think_then_label", think_budget=6, max_tokens=4)
    reasoning = ReasoningConfig(parser="deepseek_r1")
    cases = [JudgeCase(f"How many spheres? ({i})", str(i), str(i), f"k#{i}") for i in range(3)]
    outcomes = {}
    # the plain tiny model never writes </think>; the one favouring it closes its reasoning at once
    for name, model in (("never closes", {}), ("closes", {"favour": "</think>"})):
        engine = engines.with_parser("deepseek_r1", template="prefill", **model)
        with GenerationCache(tmp_path / f"{name}.sqlite") as cache:
            judge = Judge(
                CachedEngine(engine, cache, progress=False),
                judge_config,
                reasoning=reasoning,
                chat_template_kwargs={"enable_thinking": True},
                tokenizer=engine.tokenizer,
            )
            outcomes[name] = list(judge.verdicts(cases))
    for _, label, generation in outcomes["never closes"]:
        assert generation.finish_reason == "length" and generation.completion_tokens == 10  # budget + label tokens
        assert generation.text not in LABELS and label == "UNSURE"  # no label forced inside the reasoning
        assert generation.prompt_tail.rstrip().endswith("<think>")  # the prefilling template opened it
    for _, label, generation in outcomes["closes"]:
        after = generation.text.rpartition("</think>")[2]
        assert "</think>" in generation.text and after.strip() in LABELS and label == after.strip(), generation


@pytest.mark.slow
@pytest.mark.parametrize("template", ["prefill"], indirect=True)
def test_think_then_label_needs_a_reasoning_parser(tmp_path: Path, template: str, engines: Engines) -> None:
    with pytest.raises(FamilyConfigError, match=r"judge\.mode: think_then_label .* needs a vLLM reasoning parser"):
        family_for(tmp_path, template, reasoning={"parser": "tags"}, judge={"mode": "think_then_label"})
    engine = engines.shaped(template)  # opens its judge stream as a plain VLLMEngine does (VLLMStream.__init__)
    judge = Judge(
        CachedEngine(engine, GenerationCache(tmp_path / "c.sqlite"), progress=False),
        JudgeConfig(mode="think_then_label"),
        reasoning=ReasoningConfig(parser="tags"),
    )
    with pytest.raises(ReasoningParserMissing, match="no reasoning parser"):
        engine.open_stream(judge.settings)


@pytest.mark.slow
@pytest.mark.parametrize("template", ["always"], indirect=True)
def test_an_unclosed_reasoning_is_no_final_answer_on_the_card(tmp_path: Path, template: str, engines: Engines) -> None:
    family = family_for(tmp_path, template)
    engine = engines.shaped(template)
    outcome = publish_in(tmp_path, family, engine_factory=lambda f: (engine, engine))
    report = outcome.report
    items = list(read_records(tmp_path / "build" / "Shaped" / "items", "items"))
    unanswered = sum(item["final"] is None for item in items)
    assert report.totals.rejected_by_reason["no_final_answer"] == unanswered > 0
    assert report.prompts.reasoning["states"] == {"open": len(items)}
    card = (Path(outcome.where["rejected"]) / "README.md").read_text()
    assert "`no_final_answer` — " in card and f"({unanswered} in this family)" in card
    assert f"opened the reasoning in the generation prompt of {len(items)} of {len(items)} answers" in card
    assert "**Judge mode: label only.**" in card and set(report.judge.prompt_states) == {
        "closed"
    }  # closed by the engine


@pytest.mark.slow
@pytest.mark.parametrize("template", ["markers"], indirect=True)
def test_reading_is_redone_from_the_cached_text_when_the_format_changes(
    tmp_path: Path, template: str, engines: Engines
) -> None:
    """The cache keeps raw outputs: a family that fixes its markers re-reads them without asking the model again."""
    report, items, ctx = sample_with(tmp_path, template, engines)
    assert all(item["final"] is not None or shape_of(item["key"]) != "closed" for item in items)
    wrong = family_for(
        tmp_path, template, reasoning={"parser": "tags"}
    )  # `<think>` markers: this model's are not read
    engine = engines.shaped(template)
    ctx2 = BuildContext(
        wrong,
        tmp_path / "build2",
        tmp_path / "cache.sqlite",
        progress=False,
        engine_factory=lambda f: (engine, engine),
    )
    again = ensure(SampleStage(), ctx2)
    assert again.sampling_engine_calls == 0
    reread = list(read_records(ctx2.paths.items, "items"))
    closed = [item for item in reread if shape_of(item["key"]) == "closed"]
    assert closed and all(item["final"] == item["text"].strip() and item["reasoning"] is None for item in closed)


def test_formats_read_outputs_by_the_rules() -> None:
    """The reading rules on their own (no engine): prompt state, answer tags, required, a server's split."""
    from rs.engines.reasoning import ReasoningFormat

    tags = ReasoningFormat(ReasoningConfig())

    def read(fmt: ReasoningFormat, text: str, tail: str | None = None, **kwargs: Any) -> Generation:
        fields = {"reasoning": None, "answer": None, "finish_reason": "stop", **kwargs}
        return fmt.read(Generation(text=text, prompt_tail=tail, **fields))

    assert read(tags, "just reasoning", "<|im_start|>assistant\n<think>\n").answer is None
    assert read(tags, "just an answer", "<|im_start|>assistant\n").answer == "just an answer"
    assert read(tags, "red", "<|im_start|>assistant\n<think>\n\n</think>\n\n").answer == "red"
    assert read(tags, "r</think>blue", "<think>\n").answer == "blue"
    required = ReasoningFormat(ReasoningConfig(required=True))
    assert read(required, "plain", None).answer is None and read(required, "r</think>4", None).answer == "4"
    answer_tags = ReasoningFormat(ReasoningConfig(answer_start="<answer>", answer_end="</answer>"))
    assert read(answer_tags, "<think>r</think><answer> 7 </answer>").answer == "7"
    assert read(answer_tags, "<think>r</think>7").answer is None  # no answer tags: nothing to score
    server = read(tags, " 4 ", "<think>\n", reasoning="counted", split_by="server")
    assert (server.reasoning, server.answer) == ("counted", "4")
    assert read(ReasoningFormat(ReasoningConfig(parser="none")), "<think>x</think>y").answer == "<think>x</think>y"
    cut = tags.read(Generation(text="<think>r</think>4", reasoning=None, answer=None, finish_reason="length"))
    assert cut.answer is None and cut.reasoning == "r"
