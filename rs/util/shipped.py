"""Where the folders shipped beside the code are: `templates/` (the cards' and the judge's Jinja) and `builders/`.

They live at the top of a source checkout, and a wheel maps them into the package (pyproject's
`package-dir`: `rs.templates`, `rs.builders`), so code asks here rather than building a path from its own file.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
CHECKOUT = PACKAGE.parent


def shipped(name: str) -> Path:
    """`name` (a folder or file path such as `templates/judge_prompt.jinja`) inside the installed package, else at the
    top of the source checkout."""
    inside = PACKAGE / name
    return inside if inside.exists() else CHECKOUT / name


TEMPLATES = shipped("templates")
"""The Jinja templates: the cards (`card.md.jinja` and its parts, `verifiers/`) and the judge's prompt."""
