"""What `rs plan` checks without the model's processor: the configuration, and a sample of the family's questions.

The configuration's settings against one another and this machine; the first images' questions as cleaning keeps them,
by kind (how each is asked and checked); the family's size and whether its judge can ever pass its calibration. The
prompts' token counts, when asked for, come from `rs.plan.tokens`.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from rs.answers import Kind, classify
from rs.errors import UsageError
from rs.families import Family
from rs.families.loader import defaults_note, mapped_options
from rs.families.schema import FamilyConfig
from rs.pipeline.clean import Cleaner
from rs.plan.report import KindReport, PlanReport
from rs.prompt import Instructions, build_prompt
from rs.records import QAItem, Row
from rs.sources import open_source
from rs.util.sizes import format_bytes
from rs.util.text import counted, first_line

if TYPE_CHECKING:
    from rs.plan.tokens import PromptTokens

logger = logging.getLogger(__name__)

_SHORT_ANSWER = re.compile(r"single word|one word|short phrase|word or phrase|in short", re.IGNORECASE)


def max_model_len(c: FamilyConfig) -> int | None:
    """The engine's `max_model_len`, when the family sets one."""
    value = getattr(c.engine, "args", {}).get("max_model_len")
    return int(value) if value else None


def mm_processor_kwargs(c: FamilyConfig) -> dict[str, Any]:
    """What the vllm engine passes to the model's processor (`engine.args.mm_processor_kwargs`); a server's are its own."""
    return dict(getattr(c.engine, "args", {}).get("mm_processor_kwargs") or {}) if c.engine.kind == "vllm" else {}


def describe(c: FamilyConfig) -> list[str]:
    """What the configuration says about how questions are asked, read and judged, one line each."""
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
    judge = (
        "off"
        if not j.enabled
        else (
            f"{j.mode}, label in {j.max_tokens} tokens"
            + (f" after up to {j.think_budget:,} of reasoning" if j.mode == "think_then_label" else "")
        )
    )
    return [
        f"instruction {c.instruction!r}; questions with options: {mc}",
        f"verifier {c.verifier.name}{params}",
        f"sampling: {c.sampling.chat_template_kwargs}, temperature {c.sampling.temperature}",
        f"reasoning: {reading}",
        f"judge: {judge}",
        *_batch_invariance_lines(c),
    ]


BATCH_INVARIANCE_COST = (
    "vLLM's batch-invariant mode (engine.batch_invariant) costs throughput: reported by vLLM's own "
    "issues, not measured by rs, as 22-31% after tuning on a small model (vllm#27433) and about 0.6% "
    "for 128-token outputs (vllm#28161); GPUs only"
)
"""What `rs plan` says of `engine.batch_invariant: true` (figures from ../shared/research/data-practices-2026.md)."""


def _batch_invariance_lines(c: FamilyConfig) -> list[str]:
    return [f"batch-invariant: on; {BATCH_INVARIANCE_COST}"] if getattr(c.engine, "batch_invariant", False) else []


def check_configuration(c: FamilyConfig, plan: PlanReport) -> None:
    """Settings that contradict one another or this machine (a prompt with no room, a verifier the instruction defeats)."""
    plan.configuration = describe(c)
    if plan.max_model_len is not None and c.sampling.max_tokens >= plan.max_model_len:
        plan.warnings.append(
            f"sampling.max_tokens ({c.sampling.max_tokens:,}) leaves no room for a prompt in max_model_len "
            f"({plan.max_model_len:,})"
        )
    if c.verifier.name == "math" and _SHORT_ANSWER.search(c.instruction):
        plan.warnings.append(
            f"instruction {c.instruction!r} asks for a word or phrase, but the math verifier reads an expression "
            "(a \\boxed{} or a final value); ask for the final answer instead"
        )
    if c.engine.kind == "vllm" and _cpu_vllm():
        _check_cpu_memory(getattr(c.engine, "args", {}), plan)
    if (column := mapped_options(c)) is not None:
        plan.notes.append(
            f"source.columns.options maps the column {column!r}: multiple-choice normalisation is on, so each question "
            "is asked with its options as a lettered block (A. ..., B. ...) and its reference becomes the letter"
        )
    thinking = c.sampling.chat_template_kwargs.get("enable_thinking")
    if thinking is False and c.model.reasoning.required:
        plan.warnings.append(
            "model.reasoning.required with enable_thinking false: every answer would be no_final_answer"
        )


def check_defaults(family: Family, plan: PlanReport) -> None:
    """A family of a file without `defaults:` runs with the built-in defaults: those the shipped file overrides are said."""
    if (note := defaults_note(family)) is not None:
        plan.notes.append(note)


def check_calibration(c: FamilyConfig, plan: PlanReport) -> None:
    """A family with fewer questions than the calibration's minimum can never have its judge promote anything."""
    expected = plan.expected_questions()
    if c.judge.enabled and expected is not None and expected < c.judge.min_calibration_cases:
        plan.warnings.append(
            f"the whole family has about {counted(expected, 'question')}, fewer than judge.min_calibration_cases "
            f"({c.judge.min_calibration_cases}) even if every answer were accepted: the judge's calibration "
            "cannot pass and it will promote nothing (lower min_calibration_cases, or set judge.enabled: false)"
        )


CPU_MEMORY_DEFAULT = 0.9
"""vLLM's own `gpu_memory_utilization` when the arguments leave it out (`vllm.config.CacheConfig`)."""


def _check_cpu_memory(args: dict[str, Any], plan: PlanReport) -> None:
    """What vLLM's CPU build does with `gpu_memory_utilization`: without a KV cache size (`kv_cache_memory_bytes`, or
    `VLLM_CPU_KVCACHE_SPACE` in the environment) it asks for that share of the machine's memory and refuses to start
    when less is available (`vllm/v1/worker/cpu_worker.py`); said with this machine's figures now, not guessed."""
    import os

    import psutil

    share = args.get("gpu_memory_utilization", CPU_MEMORY_DEFAULT)
    if share is None or args.get("kv_cache_memory_bytes") is not None or os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        return
    memory = psutil.virtual_memory()
    wanted = memory.total * float(share)
    figures = (
        f"vLLM here is its CPU build, where gpu_memory_utilization ({share}) is the share of the machine's memory it "
        f"asks for: {format_bytes(round(wanted))} of {format_bytes(memory.total)}, "
        f"{format_bytes(memory.available)} available now"
    )
    fix = "set engine.args kv_cache_memory_bytes and gpu_memory_utilization: null, as TinyCLEVR does"
    if wanted > memory.available:
        plan.warnings.append(f"{figures}: it refuses to start with less available; {fix}")
    else:
        plan.notes.append(f"{figures}: it starts, and holds that much memory while it runs; {fix} to hold less")


def _cpu_vllm() -> bool:
    """Whether the installed vLLM is its CPU build (the `vllm-cpu` distribution)."""
    from importlib import metadata

    try:
        metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        return False
    return True


def sample_rows(family: Family, images: int, plan: PlanReport) -> list[Row]:
    """The first `images` rows as cleaning keeps them (the cleaning's counts and the source's size go to `plan`); none, with a
    warning, when the source cannot be read here."""
    try:
        source = open_source(family)
        cleaner = Cleaner(family.config, source.provenance(), base_dir=family.path.parent)
        rows = list(cleaner.rows(source, limit=images))
    except UsageError:  # the family's own source settings are wrong: nothing of the plan would hold
        raise
    except Exception as err:  # a Hub source offline: say so, check the rest
        plan.warnings.append(
            f"cannot read the source here ({first_line(err)}): no prompts sampled, "
            "no prompt tokens counted, the family's size unknown"
        )
        return []
    plan.sample = cleaner.report
    size = getattr(source, "size", None)
    try:
        plan.source_records = size() if size is not None else None
    except Exception as err:  # an unreadable file: the projection says it cannot tell
        logger.debug("the source could not say its size: %s", err)
    return rows


def _kind(item: QAItem) -> str:
    if item.options:
        return "multiple choice"
    return item.qtype or "open question"


def kinds(rows: list[Row], c: FamilyConfig, tokens: PromptTokens | None) -> list[KindReport]:
    """The sample's questions by kind: how each kind is asked and checked, one example, and (given `tokens`) its prompts' sizes."""
    instructions = Instructions.of(c)
    kinds: dict[str, KindReport] = {}
    for row in rows:
        image = tokens.image(row.image) if tokens is not None else None
        for item in row.qa:
            instruction = instructions.for_item(item)
            prompt = build_prompt(item.question, instruction)
            kind = kinds.setdefault(_kind(item), KindReport(_kind(item), 0, instruction, c.verifier.name, prompt))
            kind.items += 1
            if tokens is not None and image is not None:
                prompt_tokens, image_tokens = tokens.count(prompt, image)
                kind.prompt_tokens.append(prompt_tokens)
                if image_tokens is not None:
                    kind.image_tokens.append(image_tokens)
                    if kind.largest is None or image_tokens > kind.largest[2]:
                        kind.largest = (*image.size, image_tokens)
    return sorted(kinds.values(), key=lambda k: (-k.items, k.kind))


FEW_REFERENCES = 50
"""Distinct free-text references in the sample at or below which `answers.closed_set` is suggested."""


def suggest_closed_set(c: FamilyConfig, rows: list[Row], plan: PlanReport) -> None:
    """Free-text answers' reasoning is never compared with them (a card counts them as unchecked); where the references
    are few, a closed set of answers makes them terms the reasoning can be read for."""
    if c.answers.closed_set or not rows:
        return
    vocabulary = c.answers.vocabulary()
    free = [
        q.answer
        for row in rows
        for q in row.qa
        if not q.options and classify(q.all_references(), vocabulary) is Kind.TEXT
    ]
    distinct = {answer.strip().casefold() for answer in free}
    if free and len(distinct) <= FEW_REFERENCES:
        plan.notes.append(
            f"{counted(len(free), 'sampled answer')} are free text over only {counted(len(distinct), 'distinct reference')}: "
            "their reasoning cannot be compared with them (the card counts them as unchecked); "
            "`answers: {closed_set: true}` reads them as terms of a closed set, so the reasoning's conclusion is checked"
        )


def check_kinds(c: FamilyConfig, plan: PlanReport) -> None:
    """Questions asked or checked in a way that fails them (options without a letter instruction, mcq without options), and
    prompts that do not fit `max_model_len` with `max_tokens` (with the pixel limit that would fit them)."""
    for kind in plan.kinds:
        if kind.kind == "multiple choice" and c.multiple_choice_instruction is None:
            plan.warnings.append(
                f"{kind.items} sampled questions have lettered options but are asked with {c.instruction!r} "
                "(multiple_choice_instruction is null): they are answered with a letter, ask for one"
            )
        if kind.kind != "multiple choice" and c.verifier.name == "mcq":
            plan.warnings.append(
                f"{kind.items} sampled {kind.kind} questions have no options, but the mcq verifier accepts only "
                "an option letter: they will all be rejected"
            )
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
            refused = sum(t >= (plan.max_model_len or 0) for t in kind.prompt_tokens)
            consequence = (
                f"vLLM does not refuse them: it ends an answer where the context ends, so the longest prompt's answer "
                f"is cut after {max(plan.max_model_len - longest, 0):,} tokens instead of max_tokens "
                f"({c.sampling.max_tokens:,}), and a cut answer has no final answer (rejected)"
            )
            if refused:
                consequence = (
                    f"{refused} of them alone reach max_model_len: vLLM refuses those requests; " + consequence
                )
            plan.warnings.append(
                f"{too_long} sampled {kind.kind} prompts + max_tokens exceed max_model_len ({plan.max_model_len:,}): "
                f"{figure}; {consequence}; {fix}"
            )
