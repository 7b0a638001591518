"""`rs plan`'s report written for a person: one section per part of the report, the warnings last."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from rs.pipeline.publish.cards.decontam import plan_lines as overlap_lines
from rs.util.text import counted

if TYPE_CHECKING:
    from rs.plan.report import KindReport, PlanReport, Projection, RecoveryProjection

_STATE_WORDS = {
    "open": "pre-filled open: the output starts inside the reasoning",
    "closed": "closed: an empty reasoning block, no reasoning",
    "none": "left to the model: it opens a block itself, or does not reason",
}


def render_report(report: PlanReport) -> str:
    """The report a person reads: the configuration, the template, the sample, each kind of question, the projection, the warnings."""
    out = [
        f"{report.family}: plan for {report.model}, max_tokens {report.max_tokens:,}"
        + (f", max_model_len {report.max_model_len:,}" if report.max_model_len else "")
    ]
    out += [f"  {line}" for line in report.configuration]
    out += [f"  note: {note}" for note in report.notes]
    out += _template_lines(report)
    out += _sample_lines(report)
    checked = report.overlap or report.sample
    if checked is not None:
        where = f"the first {report.overlap.source_records} records (--limit)" if report.overlap else "the sample"
        out += overlap_lines(checked.decontamination, where)
    for kind in report.kinds:
        out += _kind_lines(report, kind)
    if report.projection is not None:
        out += _projection_lines(report.projection)
    out += [f"warning: {w}" for w in report.warnings] or ["no warnings"]
    return "\n".join(out)


def _template_lines(report: PlanReport) -> list[str]:
    if report.template is None:
        return []
    t = report.template
    markers = f"`{t.markers[0]}` ... `{t.markers[1]}`" if t.markers else "none (the model does not reason)"
    return [
        "chat template:",
        f"  reasoning markers: {markers}",
        f"  generation prompt ends {t.tail[-24:]!r}: reasoning {_STATE_WORDS.get(t.thinking or '', 'unknown')}",
        f"  with enable_thinking false (a label-only judge): {_STATE_WORDS.get(t.without_thinking or '', 'unknown')}",
    ]


def _sample_lines(report: PlanReport) -> list[str]:
    if report.sample is None:
        return []
    s = report.sample
    size = f" of {counted(report.source_records, 'record')}" if report.source_records is not None else ""
    return [
        f"sample: {counted(s.source_records, 'record')}{size}, {counted(s.source_items, 'question')}, {s.kept_items:,} kept by cleaning "
        f"({s.dropped_items} dropped: {', '.join(f'{k} {v}' for k, v in sorted(s.dropped.items())) or 'none'})"
    ]


def _kind_lines(report: PlanReport, kind: KindReport) -> list[str]:
    """One kind of question: its count, verifier and instruction, its prompt and image tokens, an example."""
    out = [
        f"  {kind.kind}: {counted(kind.items, 'question')}, verifier {kind.verifier}, instruction {kind.instruction!r}"
    ]
    if kind.prompt_tokens:
        tokens = sorted(kind.prompt_tokens)
        fits = ""
        if report.max_model_len is not None and tokens[-1] >= report.max_model_len:
            fits = f"over max_model_len {report.max_model_len:,}: the longest prompt alone is refused by vLLM"
        elif report.max_model_len is not None and tokens[-1] + report.max_tokens > report.max_model_len:
            fits = (
                f"over max_model_len {report.max_model_len:,}: the longest prompt's answer is cut after "
                f"{report.max_model_len - tokens[-1]:,} tokens"
            )
        elif report.max_model_len is not None:
            fits = "fits"
        out.append(
            f"    prompt tokens (image included) min {tokens[0]:,}, median {statistics.median(tokens):,.0f}, "
            f"max {tokens[-1]:,}; + max_tokens {report.max_tokens:,} = {tokens[-1] + report.max_tokens:,} {fits}".rstrip()
        )
    if kind.image_tokens and kind.largest is not None:
        images = sorted(kind.image_tokens)
        width, height, most = kind.largest
        out.append(
            f"    image tokens min {images[0]:,}, median {statistics.median(images):,.0f}, max {most:,} "
            f"(a {width}x{height} image)"
            + (f" at {_pixel_setting(report.mm_processor_kwargs)}" if report.mm_processor_kwargs else "")
        )
    out.append(f"    e.g. {kind.example!r}")
    return out


def _projection_lines(p: Projection) -> list[str]:
    out = [
        f"answered for real: {counted(p.answered, 'question')} of the first {counted(p.images, 'image')} in {p.seconds:.1f} s "
        f"({counted(p.sent, 'request')} sent to the engine: answers, verdicts and calibration; the rest from the cache)"
    ]
    if p.completion_tokens:
        tokens = sorted(p.completion_tokens)
        p90 = tokens[min(len(tokens) - 1, int(0.9 * len(tokens)))]
        out.append(
            f"  output tokens per answer: median {statistics.median(tokens):,.0f}, mean {p.mean_tokens:,.1f}, "
            f"90th percentile {p90:,}, max {tokens[-1]:,}"
        )
    out.append(f"  cut off at max_tokens: {p.truncated} of {p.answered} ({_pct(p.truncated, p.answered)})")
    out.append("  answers ended: " + (", ".join(f"{k} {v}" for k, v in p.endings.items() if v) or "none"))
    if p.loop_detection:
        loops = p.endings.get("repetition", 0)
        out.append(
            f"  loop detection ended {loops} of {p.answered} ({_pct(loops, p.answered)}), saving {p.loop_tokens_saved:,} "
            f"tokens ({_pct(p.loop_tokens_saved, sum(p.completion_tokens) + p.loop_tokens_saved)} of what they would have run)"
        )
    else:
        out.append("  loop detection is off (sampling.repetition_detection: null): a loop runs to max_tokens")
    out.append(f"  accepted: {p.accepted} of {p.answered} ({_pct(p.accepted, p.answered)}); judged: {p.judged}")
    if p.blind is not None:
        out.append(_blind_line(p, p.blind))
    out.append(
        f"  model loads: {p.model_loads} for the run (one engine per model, shared by the greedy pass, the judge"
        f"{' and the recovery' if p.recovery is not None else ''})"
    )
    total = p.family_tokens()
    if p.family_qa is None or total is None:
        out.append("  whole family: the source does not say its size here; no projection")
        return out + (_recovery_lines(p, p.recovery, None) if p.recovery is not None else [])
    out.append(
        f"  whole family: about {counted(p.family_qa, 'question')}, {total:,.0f} output tokens (judge at most "
        f"{counted(p.judge_max_tokens, 'token')} a verdict)"
    )
    if p.tokens_per_second:
        hours = total / p.tokens_per_second / 3600
        where = "measured on this machine, the model's load included" if p.measured else "given"
        out.append(f"  at {p.tokens_per_second:,.0f} output tokens/s ({where}): {hours:,.2f} hours of engine time")
        if p.loop_detection:
            without = (p.family_tokens(without_loop_detection=True) or 0) / p.tokens_per_second / 3600
            out.append(
                f"  without loop detection (every loop run to max_tokens, same throughput): {without:,.2f} hours"
            )
    else:
        out.append("  give --tokens-per-second (an engine's output throughput) for the GPU-hours")
    if p.recovery is not None:
        out += _recovery_lines(p, p.recovery, total)
    return out


def _blind_line(p: Projection, b: dict[str, int]) -> str:
    """The no-image pass (`blind:`): its text-only requests and tokens on the plan's questions, projected."""
    line = (
        f"  no-image pass: {counted(b['requests'], 'text-only request')} for {counted(b['questions'], 'question')} "
        f"({b['sent']} sent), {b['prompt_tokens']:,} prompt and {b['completion_tokens']:,} output tokens, no image"
    )
    if p.family_qa is None or not b["questions"]:
        return line
    scale = p.family_qa / b["questions"]
    tokens = b["completion_tokens"] * scale
    line += (
        f"; whole family: about {counted(round(b['requests'] * scale), 'request')}, {round(b['prompt_tokens'] * scale):,}"
        f" prompt and {tokens:,.0f} output tokens"
    )
    if p.tokens_per_second:
        line += f", {tokens / p.tokens_per_second / 3600:,.2f} hours at {p.tokens_per_second:,.0f} output tokens/s"
    return line


def _recovery_lines(p: Projection, r: RecoveryProjection, greedy_tokens: float | None) -> list[str]:
    """The recovery pass's figures on the plan's images, and its projection beside the greedy pass's (None: the family's
    size is not known, no projection: the figures measured on the plan's images still are)."""
    sampled = sum(r.sampled.values())
    why = ", ".join(f"{k} {v}" for k, v in sorted(r.sampled.items()))
    out = [
        f"recovery pass ({counted(r.k, 'sample')} at temperature {r.temperature}), run on the same images: {sampled} of "
        f"{counted(r.items, 'question')} sampled ({_pct(sampled, r.items)}{': ' + why if why else ''}), "
        f"{counted(r.samples, 'sample')}, {r.judged} judged, {counted(r.sent, 'request')} sent, {r.seconds:.1f} s"
    ]
    if r.completion_tokens:
        tokens = sorted(r.completion_tokens)
        out.append(
            f"  output tokens per sample: median {statistics.median(tokens):,.0f}, mean {statistics.fmean(tokens):,.1f}, "
            f"max {tokens[-1]:,}"
        )
    elif not sampled:
        out.append(
            "  no question of these images was sampled: the projection is 0; a larger --limit measures the rate"
        )
    if r.blocked:
        out.append(
            f"  {r.blocked} of them the judge found CORRECT but its calibration did not pass on this sample: a run whose "
            "calibration passes promotes them instead, and samples fewer"
        )
    if p.family_qa is None or greedy_tokens is None:
        return out + (_rl_lines(p, r) if r.rl is not None else [])
    extra = r.family_tokens(p.family_qa, p.judge_max_tokens)
    out.append(
        f"  whole family: about {counted(round(p.family_qa * r.share), 'question')} sampled, {extra:,.0f} output tokens "
        f"({_pct(round(extra), round(greedy_tokens))} of the greedy pass's)"
    )
    if p.tokens_per_second:
        hours, greedy = extra / p.tokens_per_second / 3600, greedy_tokens / p.tokens_per_second / 3600
        out.append(
            f"  at the same {p.tokens_per_second:,.0f} output tokens/s: {hours:,.2f} hours of engine time; "
            f"greedy and recovery together {greedy + hours:,.2f} hours"
        )
    if r.adjudication is not None:
        out.append(_suspects_line(p, r))
    if r.rl is not None:
        out += _rl_lines(p, r)
    return out


def _suspects_line(p: Projection, r: RecoveryProjection) -> str:
    """The suspect references' adjudication (`recovery.suspects`): its requests on the plan's images, projected."""
    a = r.adjudication
    assert a is not None and p.family_qa is not None
    family = round(2 * a["candidates"] * p.family_qa / r.items) if r.items else 0
    return (
        f"  suspect references: {a['candidates']} candidates here, {a['requests']} adjudication requests "
        f"({a['sent']} sent; two per candidate and per calibration case, {a['cases']} cases, each with the image and "
        f"at most 4 output tokens); whole family: about {family:,} for the candidates, and the calibration's at most "
        f"{2 * a['most_cases']:,}"
    )


def _rl_lines(p: Projection, r: RecoveryProjection) -> list[str]:
    """The RL repo: its rows on the plan's images, projected; its cost, the difficulty samples' tokens."""
    assert r.rl is not None and r.rl_bounds is not None
    low, high = r.rl_bounds
    head = (
        f"RL repo ({low} < pass rate < {high}): {r.rl} of {r.items} questions of these images ({_pct(r.rl, r.items)})"
    )
    if p.family_qa is None:
        return [f"{head}; the whole family's rows: not projected (its size is not known here)"]
    tokens = p.family_qa * r.difficulty_tokens / r.items if r.items else 0.0
    out = [
        f"{head}; whole family: about {counted(round(p.family_qa * r.rl / r.items) if r.items else 0, 'row')}",
        f"  its cost, the samples of the accepted questions (difficulty): {tokens:,.0f} output tokens over the whole family",
    ]
    if p.tokens_per_second:
        out[-1] += f", {tokens / p.tokens_per_second / 3600:,.2f} hours at {p.tokens_per_second:,.0f} output tokens/s"
    return out


def _pixel_setting(kwargs: dict[str, Any]) -> str:
    return "mm_processor_kwargs " + ", ".join(
        f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in sorted(kwargs.items())
    )


def _pct(part: int, whole: int) -> str:
    """`part` of `whole` as a percentage, computed as `rs plan` always has (100 * part / whole: `rs.util.text.pct` of the
    share rounds a few halves the other way)."""
    return f"{100 * part / whole:.1f}%" if whole else "n/a"
