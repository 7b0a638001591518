"""A row too large to publish is dropped in cleaning with its reason, so that one item never fails a family's write.

A published row (one image with its QA) is written whole into one parquet row group, and a row group over
`shard.row_group_bytes` is refused after writing (`rs.pipeline.write.splits.check_row_groups`: the dataset viewer
would not read the file), which fails the whole family after every GPU-hour has been spent. What a row will weigh is
mostly known here: its image and its text. So a row whose own bytes exceed `ROW_SHARE` of the row-group target
(`shard.row_group_target()`) is dropped before sampling (`row_too_large`, every QA of it in exclusions.jsonl,
counted on the card like every other reason); the rest of the target is left for what sampling adds to it.
"""

from __future__ import annotations

from rs.prompt import Instructions
from rs.records import Row

from .base import StepCard, StepStats

NAME = "row_size"
REASON = "row_too_large"
ROW_SHARE = 0.5
"""Share of the row-group target a row's image and text may fill. The rest is the model's part of the row in the
splits: each answer's reasoning and response (up to `sampling.max_tokens` tokens each, the reasoning twice in the
think split), and every sample of each question in the samples repo; with the default target (80 MB) that is 40 MB,
some ten thousand answers of 8,192 tokens."""
CARD = StepCard(
    "Row size",
    "An image whose bytes and questions together exceed half the published files' row-group target "
    "(`shard.row_group_bytes` less `shard.row_group_margin`) is dropped with its questions (`row_too_large`): "
    "a row larger than a row group cannot be published, and would fail the whole family.",
)


class RowSize:
    """Weighs each row before it is kept: its image's bytes, and each question as asked (instruction and options
    included), its answer and references, in UTF-8."""

    def __init__(self, target: int, instructions: Instructions):
        self.budget = max(1, int(target * ROW_SHARE))
        self.instructions = instructions
        self.stats = StepStats()

    def weight(self, row: Row) -> int:
        text = sum(
            len(item.question.encode())
            + len(self.instructions.for_item(item).encode())
            + sum(len(t.encode()) for t in (item.answer, *item.references, *item.options))
            for item in row.qa
        )
        return len(row.image) + text

    def problem(self, row: Row) -> str | None:
        """The detail of a row too large to publish (its weight against the budget), or None; counts what it sees."""
        self.stats.seen += len(row.qa)
        weight = self.weight(row)
        if weight <= self.budget:
            return None
        self.stats.dropped[REASON] += len(row.qa)
        return (
            f"the image ({len(row.image):,} bytes) and its {len(row.qa)} questions weigh {weight:,} bytes, over "
            f"{self.budget:,} ({ROW_SHARE:g} of the row-group target, shard.row_group_bytes less its margin)"
        )
