"""A repo's card and the files it shows or is rendered from, written into the assembled repo.

`README.md` (the card), its figures, the decontamination section's example pairs, and under `rs/` what the card was
rendered from (`stats.json`, `examples.json`, `overturns.json` when the judge promoted answers into the split,
`numbers.json` for the samples and RL repos).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rs.families import Family
from rs.pipeline.publish.cards import figures
from rs.pipeline.publish.cards.decontam import pair_files
from rs.pipeline.publish.cards.inputs import CardInputs
from rs.pipeline.publish.cards.render import render_card
from rs.pipeline.write.report import FamilyReport
from rs.store import write_json

CARD_FILES = ("README.md", "images/*")
"""What `--cards-only` publishes: the card and the images it shows; the rest of a repo stays as it is."""


def write_card(
    repo: Path, family: Family, split: str, inputs: CardInputs, numbers: dict[str, Any] | None, *, local: bool
) -> str:
    """Write the card of `split` into `repo` with its figures and inputs; returns its text.

    `local`: for a local target, where the card links its siblings relatively.
    """
    report = inputs.report.published()  # timings and engine calls differ from run to run
    write_json(repo / "rs" / "stats.json", report.to_dict())
    write_json(repo / "rs" / "examples.json", inputs.examples)
    if inputs.overturns:
        write_json(repo / "rs" / "overturns.json", inputs.overturns)
    c = family.config
    drawn = _draw_figures(report, repo)
    for path, data in pair_files(report.cleaning.decontamination):  # the decontamination section's example pairs
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    if numbers is not None:
        write_json(repo / "rs" / "numbers.json", numbers)
    text = render_card(
        report,
        dataclasses.asdict(c.card),
        split,
        c.publish.namespace,
        inputs.examples,
        inputs.overturns,
        local=local,
        figures=drawn,
        numbers=numbers,
    )
    (repo / "README.md").write_text(text, encoding="utf-8")
    return text


def _draw_figures(report: FamilyReport, repo: Path) -> list[figures.Figure]:
    """Write the card's figures (`figures.card_figures`) into `repo`."""
    drawn = list(figures.card_figures(report))
    for figure in drawn:
        (repo / figure.path).parent.mkdir(parents=True, exist_ok=True)
        (repo / figure.path).write_bytes(figure.png)
    return drawn
