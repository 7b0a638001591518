"""A small family whose answers are known: images and questions in a parquet file, the model's answers in a replay
engine's JSON Lines file (`rs.engines.replay`), its families.yaml the base `REPLAY` of tests/family_yaml.py with a test's
own blocks. Shared by the tests that route, publish and audit a recovery pass without a model."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from family_yaml import REPLAY, family_yaml
from PIL import Image

from rs.families import Family, load_families
from rs.pipeline.publish.stage import PublishReport, publish
from rs.pipeline.write.samples import LAYOUT

Answer = "str | tuple[str, str]"
"""An answer, or (the answer, the value its reasoning concludes); a full text when it starts with <think>."""
Case = tuple[str, str, "Answer | None", list[Answer]]
"""question, reference, greedy answer (None: cut off), the samples at 0.7."""

RECOVERY_CASES: list[Case] = [
    ("How many shapes?", "2", "2", ["2", "5"]),  # accepted; with difficulty: pass rate 0.5
    (
        "How many triangles?",
        "4",
        "6",
        ["6", ("4", "6")],
    ),  # certainly wrong; recovered by a sample whose reasoning says 6
    ("Is there a circle?", "yes", "banana", ["banana", "yes"]),  # undecided (the judge's); recovered by sample 1
    ("How many circles?", "3", None, ["3", "3"]),  # cut off; recovered with cut_off
    ("How many squares?", "1", "1", ["1", "1"]),  # accepted
]
"""Five questions meeting a recovery pass in each way (tests/audit/test_audit.py publishes them under every option that changes
a card): accepted (for a pass rate), certainly wrong and recovered by a sample whose reasoning concludes another value,
undecided and recovered, cut off and recovered, accepted."""


def image(n: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (16, 16), (40 * n, 200 - 30 * n, 90)).save(out, "PNG")
    return out.getvalue()


def answer_text(answer: Answer) -> str:
    """A thinking model's output concluding `answer` (a full text starting with <think> is kept as it is)."""
    if isinstance(answer, tuple):
        final, concluded = answer
    elif answer.startswith("<think>"):
        return answer
    else:
        final = concluded = answer
    return f"<think>\nI count carefully and conclude {concluded}.\n</think>\n\n{final}"


def publish_in(tmp_path: Path, family: Family, **kwargs: Any) -> PublishReport:
    """Publish `family` with its build, cache and output folders under `tmp_path` (`build/`, `cache.sqlite`, `out/`),
    without progress bars; `kwargs` go to `publish` (an `engine_factory`, say)."""
    return publish(
        family,
        out=tmp_path / "out",
        build_root=tmp_path / "build",
        cache_path=tmp_path / "cache.sqlite",
        progress=False,
        **kwargs,
    )


def repos_of(outcome: PublishReport) -> dict[str, Path]:
    """Each published repo's folder, by split or repo name."""
    return {split: Path(where) for split, where in outcome.where.items()}


def write_family(tmp_path: Path, cases: list[Case], *, name: str = "Shapes", **blocks: object) -> Family:
    """`tmp_path/data/shapes.parquet`, `tmp_path/answers.jsonl` and `tmp_path/families.yaml` (`REPLAY` with `blocks`
    merged in); the family `name`."""
    (tmp_path / "data").mkdir(parents=True)
    rows = [
        {"image": {"bytes": image(n), "path": None}, "question": q, "answer": a}
        for n, (q, a, _, _) in enumerate(cases)
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data" / "shapes.parquet")
    with open(tmp_path / "answers.jsonl", "w") as fh:
        for n, (_, _, greedy, samples) in enumerate(cases):
            if greedy is None:
                fh.write(
                    json.dumps({"key": f"{n}#0", "text": "<think>\nI count one, two", "finish_reason": "length"})
                    + "\n"
                )
            else:
                fh.write(json.dumps({"key": f"{n}#0", "text": answer_text(greedy)}) + "\n")
            for i, answer in enumerate(samples):
                fh.write(
                    json.dumps({"key": f"{n}#0", "sample": i, "temperature": 0.7, "text": answer_text(answer)}) + "\n"
                )
    (tmp_path / "families.yaml").write_text(family_yaml(name, REPLAY, **blocks))
    return load_families(tmp_path / "families.yaml")[name]


def rebuilt_sentence(repo: str, *, local: bool) -> str:
    """The sentence a card of repos rebuilt from the samples repo `repo` gains (templates/card.md.jinja)."""
    return (
        f"> **Rebuilt from the samples repo** `{repo}` ({'a local folder; ' if local else ''}layout {LAYOUT}), without the family's "
        "build: its rows hold every answer and the cleaned questions, its `rs/run.json` the stages' reports."
    )


def differ_by_the_source_alone(built: Path, rebuilt: Path, repo: str, *, local: bool) -> list[Path]:
    """The repos `rs refilter` wrote from a build (`built`) and from its samples repo `repo` (`rebuilt`): the same files,
    byte for byte, but each card's sentence naming the samples repo and `rs/stats.json`'s `filter.source`. Returns the
    files that differ."""
    files = sorted(p.relative_to(built) for p in built.rglob("*") if p.is_file() and ".rs-publish" not in p.parts)
    assert files == sorted(
        p.relative_to(rebuilt) for p in rebuilt.rglob("*") if p.is_file() and ".rs-publish" not in p.parts
    )
    differing = [f for f in files if (built / f).read_bytes() != (rebuilt / f).read_bytes()]
    assert {f.name for f in differing} == {"README.md", "stats.json"}, differing
    for f in differing:
        if f.name == "stats.json":
            mine, theirs = json.loads((built / f).read_text()), json.loads((rebuilt / f).read_text())
            assert theirs["filter"].pop("source") == {"repo": repo, "local": local, "layout": LAYOUT}
            assert mine["filter"].pop("source") is None and mine == theirs
        else:
            lines = (rebuilt / f).read_text().splitlines()
            at = lines.index(rebuilt_sentence(repo, local=local))
            assert lines[at - 1] == ">"
            assert lines[: at - 1] + lines[at + 1 :] == (built / f).read_text().splitlines(), f
    return differing


HOSTILE_Q = "What | is `this`?\n<script>alert(1)</script> </details> **bold** [x](javascript:alert(1))"
HOSTILE_A = "a|b`c`</details><b>"
HOSTILE = {
    "source": {"kind": "files", "path": "train.jsonl", "columns": {"id": "id"}},
    "instruction": "\nAnswer briefly.",
    "verifier": {"name": "exact"},
    "model": {"id": "replayed/model", "revision": "abc123"},
    "engine": {"kind": "replay", "replay_path": "replay.jsonl"},
    "judge": {"calibration_samples": 4, "min_negative_agreement": 0.5},
    "publish": {"namespace": "tester", "target": "local"},
    "card": {
        "pretty_name": "Hostile VQA",
        "description": "A family whose text tries to break the card.",
        "license": "mit",
        "citation": "@misc{hostile, title={Hostile}}",
    },
}
"""A family whose questions and answers carry Markdown, HTML and table syntax (tests/pipeline/publish/test_cards.py, tests/pipeline/publish/test_publish_hub.py)."""


def write_hostile_family(tmp_path: Path, images: dict[str, bytes]) -> Family:
    """`Hostile`: six images (`images` of conftest.py), each with a hostile question and a count, answered from replay.jsonl
    (every hostile one wrong)."""
    (tmp_path / "img").mkdir()
    lines, replay = [], []
    colours = ["red", "blue", "green"]
    for i in range(6):
        name = f"img/{i}.png"
        (tmp_path / name).write_bytes(images[colours[i % 3]])
        for j, (q, a) in enumerate([(HOSTILE_Q + f" #{i}", HOSTILE_A), (f"How many things #{i}?", str(i))]):
            lines.append({"image": name, "question": q, "answer": a, "id": f"r{i}-{j}"})
    for line in lines:
        key = f"{line['id']}#0"
        text = (
            f"<think>thinking about {line['question']}</think>{line['answer']}"
            if line["id"].endswith("-1")
            else "<think>hm</think>" + HOSTILE_A + "!!\n```\n</details>"
        )
        replay.append({"key": key, "text": text})
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(record) for record in lines))
    (tmp_path / "replay.jsonl").write_text("\n".join(json.dumps(r) for r in replay))
    (tmp_path / "families.yaml").write_text(family_yaml("Hostile", HOSTILE))
    return load_families(tmp_path / "families.yaml")["Hostile"]
