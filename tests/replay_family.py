"""A small family whose answers are known: images and questions in a parquet file, the model's answers in a replay
engine's JSON Lines file (`rs.engines.replay`). Shared by the tests that route a recovery pass without a model."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from rs.families import Family, load_families

Case = tuple[str, str, "str | None", list[str]]
"""question, reference, greedy answer (None: cut off; a full text when it starts with <think>), the samples at 0.7."""


def image(n: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (16, 16), (40 * n, 200 - 30 * n, 90)).save(out, "PNG")
    return out.getvalue()


def answer_text(answer: str) -> str:
    """A thinking model's output concluding `answer` (a full text starting with <think> is kept as it is)."""
    return answer if answer.startswith("<think>") else f"<think>\nI count carefully and conclude {answer}.\n</think>\n\n{answer}"


def write_family(tmp_path: Path, family_yaml: str, cases: list[Case], name: str = "Shapes") -> Family:
    """`tmp_path/data/shapes.parquet`, `tmp_path/answers.jsonl` and `tmp_path/families.yaml`; the family `name`."""
    (tmp_path / "data").mkdir()
    rows = [{"image": {"bytes": image(n), "path": None}, "question": q, "answer": a} for n, (q, a, _, _) in enumerate(cases)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data" / "shapes.parquet")
    with open(tmp_path / "answers.jsonl", "w") as fh:
        for n, (_, _, greedy, samples) in enumerate(cases):
            if greedy is None:
                fh.write(json.dumps({"key": f"{n}#0", "text": "<think>\nI count one, two", "finish_reason": "length"}) + "\n")
            else:
                fh.write(json.dumps({"key": f"{n}#0", "text": answer_text(greedy)}) + "\n")
            for i, answer in enumerate(samples):
                fh.write(json.dumps({"key": f"{n}#0", "sample": i, "temperature": 0.7, "text": answer_text(answer)}) + "\n")
    (tmp_path / "families.yaml").write_text(family_yaml)
    return load_families(tmp_path / "families.yaml")[name]


def rebuilt_sentence(repo: str, *, local: bool) -> str:
    """The sentence a card of repos rebuilt from the samples repo `repo` gains (templates/card.md.jinja)."""
    return (f"> **Rebuilt from the samples repo** `{repo}` ({'a local folder; ' if local else ''}layout 2), without the family's "
            "build: its rows hold every answer and the cleaned questions, its `rs/run.json` the stages' reports.")


def differ_by_the_source_alone(built: Path, rebuilt: Path, repo: str, *, local: bool) -> list[Path]:
    """The repos `rs refilter` wrote from a build (`built`) and from its samples repo `repo` (`rebuilt`): the same files,
    byte for byte, but each card's sentence naming the samples repo and `rs/stats.json`'s `filter.source`. Returns the
    files that differ."""
    files = sorted(p.relative_to(built) for p in built.rglob("*") if p.is_file() and ".rs-publish" not in p.parts)
    assert files == sorted(p.relative_to(rebuilt) for p in rebuilt.rglob("*") if p.is_file() and ".rs-publish" not in p.parts)
    differing = [f for f in files if (built / f).read_bytes() != (rebuilt / f).read_bytes()]
    assert {f.name for f in differing} == {"README.md", "stats.json"}, differing
    for f in differing:
        if f.name == "stats.json":
            mine, theirs = json.loads((built / f).read_text()), json.loads((rebuilt / f).read_text())
            assert theirs["filter"].pop("source") == {"repo": repo, "local": local, "layout": "2"}
            assert mine["filter"].pop("source") is None and mine == theirs
        else:
            lines = (rebuilt / f).read_text().splitlines()
            at = lines.index(rebuilt_sentence(repo, local=local))
            assert lines[at - 1] == ">"
            assert lines[: at - 1] + lines[at + 1:] == (built / f).read_text().splitlines(), f
    return differing
