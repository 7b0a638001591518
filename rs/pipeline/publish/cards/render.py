"""Dataset cards: one README per split, rendered with Jinja from the family's stats and real examples.

Every number on a card comes from the `stats.json` of the build that produced the split, and the
examples are rows of that split. Dataset text is untrusted: table cells escape everything that
could break the layout (pipes, newlines, backticks, HTML, Markdown), and long fields go in
HTML-escaped `<pre>` blocks that nothing inside can close. The card is checked by parsing it
back with `huggingface_hub.DatasetCard` and comparing its front matter with the repo's files.
"""

from __future__ import annotations

import fnmatch
import hashlib
import heapq
import html
import json
import re
from functools import cache
from pathlib import Path
from typing import Any, Iterable, Iterator

from datasets import DatasetInfo, SplitDict, SplitInfo
from datasets.info import DatasetInfosDict
from huggingface_hub import DatasetCard, DatasetCardData
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from rs.errors import RsError
from rs.pipeline.clean import StepCard, step_cards
from rs.pipeline.publish.cards.decontam import card_sets
from rs.pipeline.publish.cards.figures import Figure
from rs.pipeline.write.report import PASS_RATE_BINS, CleaningSummary, FamilyReport, pass_rate_bin
from rs.pipeline.write.samples import REPO_NUMBERS
from rs.splits import REJECT_REASONS
from rs.splits_schema import ROW_SCHEMAS, features
from rs.store import read_records
from rs.util import invocation
from rs.util.shipped import TEMPLATES
from rs.util.text import counted, pct

HUB_URL = "https://huggingface.co/datasets"
DATA_GLOB = "data/train-*"


class CardError(RsError, ValueError):
    """A rendered card that does not describe its repo (front matter vs files, missing section)."""


_CELL = str.maketrans(
    {
        "|": "&#124;",
        "`": "&#96;",
        "*": "&#42;",
        "[": "&#91;",
        "]": "&#93;",
        "\\": "&#92;",
        "~": "&#126;",
        "#": "&#35;",
        "!": "&#33;",
    }
)
_EMPHASIS_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")
"""An underscore that could open or close emphasis: not between two letters or digits (`judge_blocked` is plain text)."""


def cell(value: Any) -> str:
    """One table cell of untrusted text: HTML escaped, Markdown neutralised, newlines as <br>."""
    text = _EMPHASIS_UNDERSCORE.sub("&#95;", html.escape(str(value), quote=False).translate(_CELL))
    return text.replace("\r\n", "\n").replace("\n", "<br>") if text else "&#8203;"


def pre(value: Any) -> str:
    """A long untrusted field as a code block: an HTML `<pre>` block, so nothing inside it (fences,
    `</details>`, blank lines, Markdown) can end it early or render as markup."""
    return f"<pre><code>{html.escape(str(value), quote=False)}</code></pre>"


def code(value: Any) -> str:
    """Text as an inline code span, fenced with more backticks than it holds in a row (so it cannot close early)."""
    text = str(value)
    ticks = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def literal(value: str) -> str:
    """A configured string as its JSON literal in a code span: newlines show as `\\n`, quotes as they are."""
    return code(json.dumps(value, ensure_ascii=False))


def num(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def chars(text: str) -> str:
    """How long a field is, as a reader reads it: "1 char", "1,234 chars"."""
    return counted(len(text), "char")


@cache
def _env(templates: Path) -> Environment:
    """One environment a templates folder a process: it compiles each template once (a card renders a dozen), and
    reloads one edited since."""
    env = Environment(
        loader=FileSystemLoader(templates), undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False
    )
    env.filters.update(cell=cell, chars=chars, code=code, counted=counted, literal=literal, num=num, pct=pct, pre=pre)
    return env


def image_extension(data: bytes) -> str:
    if data.startswith(b"\x89PNG"):
        return "png"
    if data.startswith(b"\xff\xd8"):
        return "jpg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    return "bin"


def _category(split: str, qa: dict[str, Any]) -> str:
    if split == "pairs":
        return f"{qa['chosen_from']}/{qa['rejected_from']}"
    if split == "samples":
        return qa["accepted_by"] or qa["reason"]
    if split == "rl":
        return qa["question_type"] or PASS_RATE_BINS[pass_rate_bin(qa["pass_rate"])]
    return qa["reason"] if split == "rejected" else qa["accepted_by"]


def _entries(row: dict[str, Any], split: str) -> Iterator[tuple[dict[str, Any], bytes]]:
    """A split row's QA items with their image; a pairs row is one item."""
    if split in ("pairs", "rl"):
        yield {k: v for k, v in row.items() if k not in ("images", "clean_meta")}, row["images"][0]["bytes"]
    elif split == "samples":
        yield {k: v for k, v in row.items() if k not in ("image", "clean_meta")}, row["image"]["bytes"]
    else:
        for qa in row["qa"]:
            yield qa, row["image"]["bytes"]


def select_examples(split_dir: str | Path, split: str, n: int = 3) -> list[dict[str, Any]]:
    """Pick `n` QA items of a split, deterministically and representatively.

    Items are ranked by a hash of (image hash, question); the best-ranked item of each category
    (rejection reason, or who accepted) comes first, so the examples are not all of one kind; the
    rest are filled by rank. Memory is bounded by the number of categories and `n`.
    """
    best_by_category: dict[str, tuple[int, dict[str, Any]]] = {}
    overall: list[tuple[int, int, dict[str, Any]]] = []  # max-heap (negated rank) of the n best
    counter = 0
    for row in read_records(split_dir, "train", batch_rows=32):
        for qa, image in _entries(row, split):
            digest = hashlib.sha256(f"{row['image_sha256']}\x00{qa['question']}".encode()).digest()
            rank = int.from_bytes(digest[:8], "big")
            entry = {"qa": qa, "image": image, "image_sha256": row["image_sha256"]}
            cat = _category(split, qa)
            if cat not in best_by_category or rank < best_by_category[cat][0]:
                best_by_category[cat] = (rank, entry)
            counter += 1
            item = (-rank, counter, entry)
            if len(overall) < n:
                heapq.heappush(overall, item)
            elif item[:2] > overall[0][:2]:
                heapq.heapreplace(overall, item)
    chosen = [entry for _, entry in sorted(best_by_category.values(), key=lambda e: e[0])][:n]
    seen = {(e["image_sha256"], e["qa"]["question"]) for e in chosen}
    for _, _, entry in sorted(overall, key=lambda e: e[:2], reverse=True):
        if len(chosen) >= n:
            break
        if (entry["image_sha256"], entry["qa"]["question"]) not in seen:
            chosen.append(entry)
    return chosen


def select_overturns(split_dir: str | Path, split: str, n: int = 3) -> list[dict[str, str]]:
    """Up to `n` answers of an accepted split that the judge promoted, deterministically, for the card.

    Reads only the `qa` column; ranked by a hash of the question, as the examples are.
    """
    if split in ("rejected", "pairs", "samples", "rl"):
        return []
    best: list[tuple[int, int, dict[str, str]]] = []  # max-heap (negated rank) of the n best
    counter = 0
    for row in read_records(split_dir, "train", batch_rows=256, columns=["qa"]):
        for qa in row["qa"]:
            if qa["accepted_by"] != "judge":
                continue
            rank = int.from_bytes(hashlib.sha256(qa["question"].encode()).digest()[:8], "big")
            counter += 1
            item = (-rank, counter, {k: qa[k] for k in ("question", "reference", "answer")})
            if len(best) < n:
                heapq.heappush(best, item)
            elif item[:2] > best[0][:2]:
                heapq.heapreplace(best, item)
    return [entry for _, _, entry in sorted(best, key=lambda e: e[:2], reverse=True)]


def attach_image_paths(examples: list[dict[str, Any]]) -> list[tuple[str, bytes]]:
    """Name each example's original image file in the repo; returns (path, bytes) to write."""
    files = []
    for i, example in enumerate(examples, 1):
        example["image_path"] = f"images/example-{i}.{image_extension(example['image'])}"
        files.append((example["image_path"], example["image"]))
    return files


SHORT_FIELD = 200
"""A reasoning or wrong answer up to this many characters on one line is shown in the example's table:
behind a collapsed <details> a reader would have to click to see a one-word `wrong_vlm`."""


def _example_view(split: str, example: dict[str, Any], image_path: str) -> dict[str, Any]:
    qa = example["qa"]
    if split in ("samples", "rl"):
        fields, long = _question_row_fields(split, qa)
    elif split == "pairs":
        fields = [
            (k, qa[k])
            for k in (
                "question",
                "reference",
                "chosen_answer",
                "chosen_by",
                "chosen_from",
                "rejected_answer",
                "rejected_from",
                "rejected_reason",
                "pass_rate",
                "k",
            )
        ]
        long = [("chosen", qa["chosen"][0]["content"]), ("rejected", qa["rejected"][0]["content"])]
    elif split == "rejected":
        fields = [("question", qa["question"]), ("answer", qa["answer"]), ("reason", qa["reason"])]
        long = [("wrong_vlm", qa["wrong_vlm"])]
        if "pass_rate" in qa:
            fields += [("pass_rate", qa["pass_rate"]), ("k", qa["k"])]
    else:
        fields = [
            ("question", qa["question"]),
            ("answer", qa["answer"]),
            ("reference", qa["reference"]),
            ("accepted_by", qa["accepted_by"]),
        ]
        long = [("reasoning", qa["reasoning"])] if split == "think" else []
        if "pass_rate" in qa:
            fields += [(k, qa[k]) for k in ("greedy_answer", "sample", "temperature", "pass_rate", "k")]
    fields += [(k, v) for k, v in long if len(v) <= SHORT_FIELD and "\n" not in v and "\r" not in v]
    details = [(k, v) for k, v in long if (k, v) not in fields]
    return {"image_path": image_path, "fields": fields, "details": details}


def _question_row_fields(split: str, qa: dict[str, Any]) -> tuple[list[tuple[str, Any]], list[tuple[str, str]]]:
    """An example row of the samples or RL repo: its table's fields, and its long fields (each generation's text)."""
    if split == "rl":
        return [
            (k, qa[k])
            for k in (
                "question",
                "solution",
                "question_type",
                "pass_rate",
                "passed",
                "k",
                "pass_rate_low",
                "pass_rate_high",
            )
        ], []
    fields = [
        (k, qa[k])
        for k in (
            "question",
            "reference",
            "question_type",
            "accepted",
            "accepted_by",
            "reason",
            "published",
            "pass_rate",
            "k",
        )
    ]
    fields += [(f"generation {i}", _generation_line(g)) for i, g in enumerate(qa["generations"])]
    texts = [(f"generation {i}: text", g["text"]) for i, g in enumerate(qa["generations"])]
    return fields, [(k, v) for k, v in texts if v is not None]  # None: withheld, too large (`too_large`)


def _generation_line(g: dict[str, Any]) -> str:
    """One generation of a samples row, on one line of the example's table."""
    drawn = "greedy" if g["kind"] == "greedy" else f"sample {g['sample']} ({g['sampled_for']})"
    judged = f", judge {g['judge']}" if g["judge"] else ""
    fate = f"accepted by {g['accepted_by']}" if g["accepted"] else f"rejected: {g['reason']}"
    final = "text withheld (too large)" if g.get("too_large") else f"final {g['final']!r}"
    return (
        f"{drawn}, T={g['temperature']}, seed {g['seed']}: {final}, ending {g['ending']}, "
        f"reader {g['reader']}{judged}; {fate}"
    )


def card_numbers(split: str, data_dir: str | Path) -> dict[str, Any] | None:
    """The numbers a repo's card states of its own files, computed from them (`rs.pipeline.write.samples.REPO_NUMBERS`); None for a
    repo kind whose card numbers are the family's (stats.json)."""
    compute = REPO_NUMBERS.get(split)
    return compute(data_dir) if compute is not None else None


def _policies(cleaning: CleaningSummary) -> list[dict[str, Any]]:
    cards = step_cards()
    steps = [s for s in cards if s in cleaning.steps] + [s for s in cleaning.steps if s not in cards]
    out = []
    for step in steps:
        stats = cleaning.steps[step]
        card = cards.get(step) or StepCard(
            step, f"The `{step}` step (a plug-in not installed where this card was rendered)."
        )
        counts = sorted(
            {
                **stats["dropped"],
                **{f"rewritten: {k}": v for k, v in stats["rewritten"].items()},
                **{f"marked: {k}": v for k, v in stats["marked"].items()},
            }.items()
        )
        out.append({"title": card.title, "text": card.text, "counts": counts, "rewrites": card.shows_rewrites})
    return out


SIZE_CATEGORIES = (
    "n<1K",
    "1K<n<10K",
    "10K<n<100K",
    "100K<n<1M",
    "1M<n<10M",
    "10M<n<100M",
    "100M<n<1B",
    "1B<n<10B",
    "10B<n<100B",
    "100B<n<1T",
    "n>1T",
)
"""The Hub's `size_categories` values, each ten times the one before."""


def size_category(rows: int) -> str:
    """The Hub's size category of a split of `rows` rows."""
    for power, name in enumerate(SIZE_CATEGORIES[:-1], start=3):
        if rows < 10**power:
            return name
    return SIZE_CATEGORIES[-1]


SPLIT_TITLES = {
    "think": "accepted, with reasoning",
    "nothink": "accepted, answers only",
    "rejected": "rejected",
    "pairs": "preference pairs",
    "samples": "every sample",
    "rl": "questions for RL",
}


def card_data(report: FamilyReport, card: dict[str, Any], split: str) -> DatasetCardData:
    """The YAML front matter: metadata, and `configs` / `dataset_info` matching the repo's files."""
    split_stats = report.splits[split]
    info = DatasetInfo(
        features=features(split, recovery=report.recovery is not None, blind=report.blind is not None),
        splits=SplitDict(
            {"train": SplitInfo(name="train", num_bytes=split_stats.dataset_bytes, num_examples=split_stats.rows)}
        ),
    )
    info.download_size = split_stats.bytes
    info.dataset_size = split_stats.dataset_bytes
    data = DatasetCardData(
        license=card["license"],
        language=card["language"],
        task_categories=card["task_categories"],
        size_categories=[size_category(split_stats.rows)],
        pretty_name=f"{card['pretty_name']} ({SPLIT_TITLES[split]})",
        source_datasets=card["source_datasets"] or None,
        tags=sorted({*card["tags"], "rejection-sampling", split}),
        configs=[{"config_name": "default", "data_files": [{"split": "train", "path": DATA_GLOB}]}],
    )
    DatasetInfosDict({"default": info}).to_dataset_card_data(data)  # `dataset_info` as `push_to_hub` writes it
    return data


def sibling_link(repo: str, namespace: str, *, local: bool) -> str:
    """Where a card links a sibling repo: its Hub page, or for a local target the sibling folder's card beside it."""
    return f"../{repo}/README.md" if local else f"{HUB_URL}/{namespace}/{repo}"


def render_card(
    report: FamilyReport,
    family_card: dict[str, Any],
    split: str,
    namespace: str,
    examples: list[dict[str, Any]],
    overturns: list[dict[str, str]] | None = None,
    *,
    local: bool = False,
    figures: list[Figure] | None = None,
    numbers: dict[str, Any] | None = None,
) -> str:
    """The README.md of one split's repo: the card template over the family's report.

    `local`: the repos are published to a local folder (`--out`), so the siblings are linked relatively.
    `numbers`: for the samples and RL repos, `card_numbers` of the repo's files (required there).
    """
    if split in REPO_NUMBERS and numbers is None:
        raise CardError(f"the {split} card states numbers of its own files: pass `card_numbers({split!r}, data_dir)`")
    calibration = report.judge.calibration
    if calibration is not None and "hard" not in calibration:
        raise CardError(
            f"the stats of {report.family} were measured by an older rs, before the judge was calibrated on "
            "hard negatives; rebuild the family "
            f"(`{invocation.command('publish', report.family)}` without --cards-only)"
        )
    repos = {s: summary.repo for s, summary in report.splits.items()}
    verifier = report.verifier
    custom = TEMPLATES / "verifiers" / f"{verifier.name}.md.jinja"
    body = (
        _env(TEMPLATES)
        .get_template("card.md.jinja")
        .render(
            pretty_name=family_card["pretty_name"],
            repo=repos[split],
            split=split,
            split_stats=report.splits[split],
            totals=report.totals,
            verifier=verifier,
            verifier_template=f"verifiers/{custom.name}" if custom.exists() else "verifiers/default.md.jinja",
            siblings=[{"repo": repo, "url": sibling_link(repo, namespace, local=local)} for repo in repos.values()],
            description=family_card["description"],
            model=report.model,
            engine=report.engine,
            sampling=report.sampling,
            prompts=report.prompts,
            repos=repos,
            judge=report.judge,
            calibration=calibration,
            overturns=overturns or [],
            schema_fields="{" + ", ".join(f"`{k}`" for k in _qa_fields(split, report)) + "}",
            recovery=report.recovery,
            pass_rate_bins=PASS_RATE_BINS,
            reasons=REJECT_REASONS,
            cleaning=report.cleaning,
            policies=_policies(report.cleaning),
            examples=[_example_view(split, e, e["image_path"]) for e in examples],
            source=report.source,
            citation=family_card["citation"],
            figures=figures or [],
            limit=report.limit,
            endings=report.endings,
            decontamination=card_sets(report.cleaning.decontamination),
            provenance=report.provenance,
            audit_target=repos[split] if local else f"{namespace}/{repos[split]}",
            numbers=numbers,
            types=report.question_types,
            blind=report.blind,
            route_filter=report.filter,
        )
    )
    data = card_data(report, family_card, split)
    return f"---\n{data.to_yaml()}\n---\n\n{body}"


def _qa_fields(split: str, report: FamilyReport) -> list[str]:
    """The fields a split's rows (pairs) or QA structs (the three) hold, in order."""
    blind = report.blind is not None
    if split in ROW_SCHEMAS:
        return list(features(split, blind=blind))
    return list(features(split, recovery=report.recovery is not None, blind=blind)["qa"].feature)


REQUIRED_SECTIONS = (
    "## How the data was produced",
    "## How a match is decided",
    "## Second pass: model-as-judge",
    "## Schema",
    "## Cleaning applied before rejection sampling",
    "## Examples",
)


def check_card(text: str, repo_folder: str | Path) -> DatasetCard:
    """Parse a card back with huggingface_hub and check it against the repo folder's files."""
    folder = Path(repo_folder)
    card = DatasetCard(text)
    data = card.data
    for key in ("license", "task_categories", "language", "size_categories", "pretty_name", "configs", "dataset_info"):
        if not getattr(data, key, None):
            raise CardError(f"{folder}/README.md: front matter has no {key}")
    files = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
    for config in data.configs:
        for entry in config["data_files"]:
            if not fnmatch.filter(files, entry["path"]):
                raise CardError(f"{folder}/README.md: configs path {entry['path']!r} matches no file in the repo")
    shards = fnmatch.filter(files, DATA_GLOB)
    rows = data.dataset_info["splits"][0]["num_examples"]
    if f"| shards | {len(shards):,} |" not in card.text:
        raise CardError(f"{folder}/README.md: the stats table does not say {len(shards)} shards")
    for section in REQUIRED_SECTIONS:
        if section not in card.text:
            raise CardError(f"{folder}/README.md: missing section {section!r}")
    for link in _image_links(card.text):
        if link not in files:
            raise CardError(f"{folder}/README.md: image {link} is not in the repo")
    if f"| rows | {rows:,} |" not in card.text:
        raise CardError(f"{folder}/README.md: the stats table rows differ from dataset_info ({rows})")
    return card


def _image_links(text: str) -> Iterable[str]:
    import re

    return re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text)
