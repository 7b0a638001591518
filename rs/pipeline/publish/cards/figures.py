"""The two figures of a card: where the family's QA went, and how long the model's answers ran.

Drawn with matplotlib from the family report alone (`stats.json`), the same numbers the card's text
states; each comes with alt text that carries those numbers, for a reader who cannot see it. PNGs
are written without a timestamp, so a rebuild of the same report writes the same bytes.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

from rs.pipeline.write.report import FamilyReport, Lengths

FUNNEL = "figures/qa-funnel.png"
LENGTHS = "figures/answer-lengths.png"
_ACCEPTED, _REJECTED, _DROPPED, _SOURCE = "#2e7d32", "#c62828", "#9e9e9e", "#1565c0"


@dataclass(frozen=True)
class Figure:
    path: str
    """Where it lives in the repo."""
    png: bytes
    alt: str


def card_figures(report: FamilyReport) -> tuple[Figure, ...]:
    """The card's figures for `report`: the funnel always, token lengths only from an engine that counts tokens (not
    `replay`). Every repo of a family shows the same two, so they are drawn once a report, not once a repo."""
    key = json.dumps(report.to_dict(), sort_keys=True)
    if key not in _DRAWN:
        _DRAWN.clear()  # one family's report at a time
        drawn = [funnel(report)]
        if any(h.total for h in report.lengths.values()):
            drawn.append(lengths(report))
        _DRAWN[key] = tuple(drawn)
    return _DRAWN[key]


_DRAWN: dict[str, tuple[Figure, ...]] = {}


def _funnel_rows(report: FamilyReport) -> list[tuple[str, int, str]]:
    """The funnel's bars, top to bottom: (label, QA, colour); a reason or actor with no QA gets no bar."""
    t = report.totals
    rows = [("source QA", t.source_qa, _SOURCE)]
    rows += [(f"dropped: {reason}", n, _DROPPED) for reason, n in sorted(report.cleaning.dropped.items()) if n]
    rows += [
        ("recovered by a sample" if by == "recovery" else f"accepted by the {by}", n, _ACCEPTED)
        for by, n in t.accepted_by.items()
        if n
    ]
    rows += [(f"rejected: {reason}", n, _REJECTED) for reason, n in t.rejected_by_reason.items() if n]
    return rows


def funnel_alt(report: FamilyReport) -> str:
    """The funnel's numbers in words, for a reader who cannot see it."""
    t = report.totals
    dropped = ", ".join(f"{reason} {n:,}" for reason, n in sorted(report.cleaning.dropped.items()) if n) or "none"
    rejected = ", ".join(f"{reason} {n:,}" for reason, n in t.rejected_by_reason.items() if n) or "none"
    return (
        f"Bar chart of the {t.source_qa:,} source QA: {t.dropped_by_cleaning:,} dropped by cleaning ({dropped}); "
        f"{t.accepted:,} accepted ({t.accepted_by.get('verifier', 0):,} by the verifier, {t.accepted_by.get('judge', 0):,} "
        f"by the judge"
        + (f", {t.accepted_by['recovery']:,} recovered by a sample" if "recovery" in t.accepted_by else "")
        + f"); {t.rejected:,} rejected ({rejected})"
    )


def funnel(report: FamilyReport) -> Figure:
    """Source QA, what cleaning dropped and why, what was accepted by whom and rejected for which reason."""
    t = report.totals
    rows = _funnel_rows(report)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.32 * len(rows) + 1.1), dpi=100)
    labels, values, colours = zip(*rows)
    bars = ax.barh(range(len(rows)), values, color=colours)
    ax.set_yticks(range(len(rows)), labels)
    ax.invert_yaxis()
    ax.bar_label(bars, labels=[f"{v:,}" for v in values], padding=3, fontsize=8)
    ax.set_xlim(0, max(values) * 1.15 or 1)
    ax.set_xlabel("QA pairs")
    ax.set_title(f"{report.family}: where the {t.source_qa:,} source QA went", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    return Figure(FUNNEL, _png(fig), funnel_alt(report))


def _length_part(h: Lengths, side: str, greedy: str) -> str:
    """One side's histogram in words: how many, the median, and how many ran out, looped or hit the thinking budget."""
    return (
        f"{h.total:,} {greedy}{side}, median {h.median:,} tokens, {h.truncated:,} cut off at the limit"
        + (f", {h.loops:,} ended as loops" if h.loops else "")
        + (f", {h.budget_cuts:,} cut at the thinking budget" if h.budget_cuts else "")
    )


def _mark_limits(ax, report: FamilyReport) -> int:  # type: ignore[no-untyped-def]
    """Mark the thinking budget (when it cuts below `max_tokens`) and `max_tokens` on the axes; returns `max_tokens`."""
    budget = report.lengths["accepted"].thinking_token_budget
    if budget is not None and budget < report.lengths["accepted"].max_tokens:
        ax.axvline(budget, color="grey", linestyle="-.", linewidth=1)
        ax.annotate(
            f"thinking budget {budget:,}",
            (budget, 0.9),
            xycoords=("data", "axes fraction"),
            xytext=(-4, -12),
            textcoords="offset points",
            ha="right",
            fontsize=8,
        )
    limit = report.lengths["accepted"].max_tokens
    ax.axvline(limit, color="black", linestyle="--", linewidth=1)
    ax.annotate(
        f"max_tokens {limit:,}",
        (limit, 1),
        xycoords=("data", "axes fraction"),
        xytext=(-4, -12),
        textcoords="offset points",
        ha="right",
        fontsize=8,
    )
    return limit


def lengths(report: FamilyReport) -> Figure:
    """Histograms of the answers' lengths in tokens, accepted and rejected, with the cut-off at `max_tokens` marked."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=100)
    greedy = (
        "greedy " if report.recovery is not None else ""
    )  # with a recovery pass: the greedy answers, on their side
    drawn = False
    for side, colour in (("accepted", _ACCEPTED), ("rejected", _REJECTED)):
        h: Lengths = report.lengths[side]
        if not h.total:
            continue
        ax.stairs(
            h.counts,
            h.edges,
            color=colour,
            linewidth=1.5,
            label=f"{greedy}{side} ({h.total:,}; {h.truncated:,} cut off)",
        )
        drawn = True
    loops = _loops(report)
    if any(loops):  # loop detection's ends, apart from the max_tokens cut
        ax.stairs(
            loops,
            report.lengths["rejected"].edges,
            color="#7b3294",
            linewidth=1.2,
            linestyle=":",
            label=f"ended as loops ({sum(loops):,})",
        )
    _mark_limits(ax, report)
    ax.set_xlabel("answer length in tokens (reasoning included)")
    ax.set_ylabel("answers")
    ax.set_title(f"{report.family}: how long the model's {'greedy ' if greedy else ''}answers ran", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    if drawn:
        ax.legend(fontsize=8, frameon=False)
    return Figure(LENGTHS, _png(fig), lengths_alt(report))


def _loops(report: FamilyReport) -> list[int]:
    return [sum(pair) for pair in zip(*(report.lengths[s].loop_counts or [] for s in ("accepted", "rejected")))]


def lengths_alt(report: FamilyReport) -> str:
    """The length histogram's numbers in words (also what `rs audit` expects a card to say of it)."""
    greedy = "greedy " if report.recovery is not None else ""
    parts = [
        _length_part(report.lengths[side], side, greedy)
        for side in ("accepted", "rejected")
        if report.lengths[side].total
    ]
    alt = f"Histogram of answer lengths in tokens (limit {report.lengths['accepted'].max_tokens:,}): " + (
        "; ".join(parts) or "no answers"
    )
    if any(loops := _loops(report)):
        alt += f"; {sum(loops):,} answers ended by loop detection, marked apart"
    return alt


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "rs"
    return plt


def _png(fig) -> bytes:  # type: ignore[no-untyped-def]
    out = io.BytesIO()
    fig.tight_layout()
    fig.savefig(out, format="png", metadata={"Software": None})
    _pyplot().close(fig)
    return out.getvalue()
