"""`rs families validate --source N`: the first N records read as a run reads them, each column checked for its type.

A family whose image column named the question column was `ok` for validate (the column exists) and
then dropped every QA as `missing_image`. Reading a few records shows it at once: an image column
must hold images (or paths to images) that open, the question and answer columns text.
"""

from __future__ import annotations

from collections import Counter
from itertools import islice

from rs.families.loader import Family, FamilyConfigError, locate
from rs.pipeline.clean import image_problem
from rs.sources import open_source
from rs.sources.base import RefusedImage
from rs.util import invocation

__all__ = ["check_first_records"]


def check_first_records(family: Family, n: int) -> str:
    """Read the family's first `n` source records; a line saying what they held, or `FamilyConfigError` at the column's key
    when none of them holds a usable value in it (an image that opens, a non-empty question or answer)."""
    images, questions, answers, problems = 0, 0, 0, Counter[str]()
    examples: dict[str, str] = {}
    records = list(islice(iter(open_source(family)), n))
    for record in records:
        usable = [image for image in record.images if image_problem(image) is None]
        images += bool(usable) and len(usable) == len(record.images)
        for image in record.images:
            if (problem := image_problem(image)) is not None:
                problems[problem] += 1
                examples.setdefault(problem, image.detail if isinstance(image, RefusedImage) else repr(image)[:60])
        questions += any(q.question.strip() for q in record.qa)
        answers += any(str(q.answer).strip() for q in record.qa)
    columns = getattr(family.config.source, "columns", None)
    if records:
        for field, held, what in (
            ("image", images, "an image that opens"),
            ("question", questions, "a question"),
            ("answer", answers, "an answer"),
        ):
            if held == 0:
                _refuse(family, field, getattr(columns, field, field), len(records), what, problems, examples)
    said = (
        f"{family.name}: the first {len(records)} source records: an image that opens in {images}, a question in {questions}, "
        f"an answer in {answers}"
    )
    return said + (
        f" (images refused: {', '.join(f'{k} {v}' for k, v in problems.most_common())})" if problems else ""
    )


def _refuse(
    family: Family, field: str, column: str, read: int, what: str, problems: Counter[str], examples: dict[str, str]
) -> None:
    key = f"source.columns.{field}"
    detail = ""
    if field == "image" and problems:
        reason, _ = problems.most_common(1)[0]
        detail = f": {reason}, e.g. {examples[reason]}"
    raise FamilyConfigError(
        f"{locate(family, key)}: families.{family.name}.{key}: none of the first {read} records holds {what} in "
        f"column {column!r}{detail}",
        hint=f"`{_preview(family)}` shows the records as read; name the column that holds it",
    )


def _preview(family: Family) -> str:
    """The `rs families preview` command for `family`, with its families file."""
    return invocation.command("families", "preview", family.name, config=family.path, carry=("--config",))
