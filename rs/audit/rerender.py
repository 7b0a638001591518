"""The card rendered again from what the repo holds, and held against its README.md line by line.

The patterns of `rs.audit.card_text` read the statements the audit holds against the rows one by one; what they do
not read (the decontamination tables, the cleaning counts, the per-type table, the sampling parameters, the judge's
thresholds, the examples) would pass unchecked. So the whole card is rendered again, with this rs's templates, from
the repo's own files: `rs/stats.json`, the examples and the judge's overturns chosen afresh from the shards (as the
publish chose them), the samples and RL repos' numbers recomputed from their shards, the figures' descriptions from
the stats. Every line that differs is a finding. What the card takes from the family's `card:` block (its name,
description, licence, tags, citation) is in no file but the cards: it is read from this card and must be the same
on every sibling card.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from rs.audit.checkers import LAST, Audit, Finding, checker
from rs.audit.repo import RepoFiles, load_yaml
from rs.pipeline.publish.cards.decontam import pair_files
from rs.pipeline.publish.cards.figures import FUNNEL, LENGTHS, Figure, funnel_alt, lengths_alt
from rs.pipeline.publish.cards.render import (
    HUB_URL,
    SPLIT_TITLES,
    attach_image_paths,
    card_numbers,
    render_card,
    select_examples,
    select_overturns,
)


def family_card(repo: RepoFiles) -> dict[str, Any]:
    """The family's `card:` block as this repo's card states it: its front matter, its description and citation."""
    data = repo.front_matter
    title = f" ({SPLIT_TITLES.get(repo.split, '')})"
    pretty = str(data.get("pretty_name") or "")
    tags = [t for t in data.get("tags") or [] if t not in ("rejection-sampling", repo.split)]
    return {
        "pretty_name": pretty[: -len(title)] if pretty.endswith(title) else pretty,
        "license": data.get("license"),
        "language": data.get("language"),
        "task_categories": data.get("task_categories"),
        "source_datasets": data.get("source_datasets") or [],
        "tags": tags,
        "description": _between(repo.body, _DESCRIPTION),
        "citation": _between(repo.body, _CITATION),
    }


_DESCRIPTION = re.compile(
    r"^The (?:three splits|\d+ repos) of this family: [^\n]*\n\n(.*?)\n(?:\n## At a glance\n|## How the data was produced\n)",
    re.M | re.S,
)
_CITATION = re.compile(r"^## Source and citation\n.*?\n```bibtex\n(.*?)\n```", re.M | re.S)


def _between(body: str, pattern: re.Pattern[str]) -> str:
    """The card's free text where rs writes it ("" where it cannot be found: the card rendered again then differs)."""
    match = pattern.search(body)
    return match.group(1) if match else ""


def _target(repo: RepoFiles) -> tuple[str, bool]:
    """The namespace and whether the siblings are linked as local folders, as the card links them."""
    body = repo.body
    if "](../" in body:
        return "local", True
    marker = f"]({HUB_URL}/"
    if marker in body:
        namespace = body.split(marker, 1)[1].split("/", 1)[0]
        return namespace, False
    return "local", True


def _figures(a: Audit) -> list[Figure]:
    """The figures the card shows (their descriptions from the stats; the images are not drawn again)."""
    report = a.report
    out = [Figure(FUNNEL, b"", funnel_alt(report))]
    if any(h.total for h in report.lengths.values()):
        out.append(Figure(LENGTHS, b"", lengths_alt(report)))
    return out


def _examples(a: Audit) -> list[dict[str, Any]]:
    """The examples chosen afresh from the shards as the publish chose them; their image files and `rs/examples.json`
    held against them."""
    repo = a.repo
    chosen = select_examples(repo.root / "data", repo.split)
    for path, data in attach_image_paths(chosen):
        file = repo.root / path
        a.same(
            f"{path} (the bytes of the example's image in the shards)",
            f"{repo.name}/{path}",
            file.read_bytes() == data if file.is_file() else "missing",
            True,
        )
    stored = [{k: v for k, v in e.items() if k != "image"} for e in chosen]
    examples_file = repo.root / "rs" / "examples.json"
    if examples_file.is_file():
        a.same(
            "rs/examples.json (the examples chosen from the shards)",
            f"{repo.name}/rs/examples.json",
            repo.json(examples_file),
            _jsonable(stored),
        )
    return stored


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, ensure_ascii=False))


def _differ(rendered: list[str], held: list[str]) -> list[tuple[int, str, str]]:
    """The lines of `held` that differ from `rendered`: (line, held, rendered), 1-based in `held`."""
    differ: list[tuple[int, str, str]] = []
    matcher = difflib.SequenceMatcher(None, rendered, held, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        mine, theirs = rendered[i1:i2], held[j1:j2]
        for k in range(max(len(mine), len(theirs))):
            differ.append(
                (
                    j1 + min(k, max(len(theirs) - 1, 0)) + 1,
                    theirs[k] if k < len(theirs) else "(no such line)",
                    mine[k] if k < len(mine) else "(no such line)",
                )
            )
    return differ


@checker(LAST)
def rendered_again(a: Audit) -> None:
    """The card rendered again from the repo's files, line by line; the family's `card:` block the same on every card."""
    repo, report = a.repo, a.report
    namespace, local = _target(repo)
    examples = _examples(a)
    overturns = select_overturns(repo.root / "data", repo.split)
    numbers = card_numbers(repo.split, repo.root / "data")
    text = render_card(
        report,
        family_card(repo),
        repo.split,
        namespace,
        examples,
        overturns,
        local=local,
        figures=_figures(a),
        numbers=numbers,
    )
    body = text[text.index("\n---\n", 4) + 5 :]
    rendered, held = body.split("\n"), repo.body.split("\n")
    offset = repo.readme[: len(repo.readme) - len(repo.body)].count("\n")
    differ = _differ(rendered, held)
    a.checked += 1
    named = {f.where for f in a.findings}  # a statement another check named already is not named twice
    differ = [d for d in differ if f"{repo.name}/README.md:{d[0] + offset}" not in named]
    for line, stated, truth in differ[:50]:
        stated, truth = _window(stated, truth)
        a.findings.append(
            _finding(
                "the card's text (rendered again from rs/stats.json and the shards)",
                f"{repo.name}/README.md:{line + offset}",
                stated,
                truth,
            )
        )
    if len(differ) > 50:
        a.notes.append(f"{len(differ) - 50} more lines of the card differ from the card rendered again")
    _front_matter(a, text[4 : text.index("\n---\n", 4)])
    for path, data in pair_files(report.cleaning.decontamination):
        file = repo.root / path
        a.same(
            f"{path} (the decontamination example pair in rs/stats.json)",
            f"{repo.name}/{path}",
            file.read_bytes() == data if file.is_file() else "missing",
            True,
        )
    _same_on_every_card(a)


WINDOW = 60
"""Characters of a long differing line shown either side of where it first differs."""


def _window(held: str, rendered: str) -> tuple[str, str]:
    """Two lines cut to where they differ (`…` for what is left out), so a finding shows the difference, not a paragraph."""
    if len(held) <= 2 * WINDOW and len(rendered) <= 2 * WINDOW:
        return held, rendered
    start = next((i for i, (x, y) in enumerate(zip(held, rendered)) if x != y), min(len(held), len(rendered)))
    end = 0  # common suffix, not reaching into the difference
    while end < min(len(held), len(rendered)) - start and held[-1 - end] == rendered[-1 - end]:
        end += 1

    def cut(text: str) -> str:
        lo, hi = max(0, start - WINDOW), min(len(text), len(text) - end + WINDOW)
        return ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")

    return cut(held), cut(rendered)


def _finding(what: str, where: str, stated: Any, truth: Any) -> Finding:
    return Finding(what, where, stated, truth, "rendered again it is")


def _front_matter(a: Audit, rendered: str) -> None:
    """The front matter as rendered again, key by key (the `card:` block's keys are this card's own)."""
    mine = load_yaml(rendered) or {}
    theirs = a.repo.front_matter
    where = f"{a.repo.name}/README.md front matter"
    for key in sorted(set(mine) | set(theirs)):
        a.same(
            f"front matter {key}",
            where,
            theirs.get(key, "absent"),
            mine.get(key, "absent"),
            source="rendered again it is",
        )


def _same_on_every_card(a: Audit) -> None:
    """The family's `card:` block, which only the cards state, is the same on each of the family's readable cards."""
    mine = family_card(a.repo)
    for _, other in sorted(a.family.siblings.items()):
        if other is a.repo:
            continue
        theirs = family_card(other)
        for key in (
            "pretty_name",
            "license",
            "language",
            "task_categories",
            "source_datasets",
            "tags",
            "description",
            "citation",
        ):
            a.same(
                f"the family's card.{key} (stated on every card of the family)",
                f"{a.repo.name}/README.md",
                mine[key],
                theirs[key],
                source=f"{other.name}/README.md states",
            )
