"""The opt-in repos never fail a family over one huge answer either: a wrong answer the three splits publish only the
final answer of (`wrong_vlm`, `greedy_answer`) is still whole in the samples repo (its text, reasoning and final) and on
the rejected side of a preference pair. In the samples repo such a generation keeps its record, its text, reasoning and
final withheld (`too_large`); a pair is made with the first certainly wrong answer that fits its row, and a question
whose wrong answers all are too large makes none (`unpaired: too_large`). Both are counted on the cards, from the
repos' own files, and audited."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from replay_family import differ_by_the_source_alone, publish_in, repos_of, write_family

from rs.audit import Replay, audit
from rs.cli.main import main as rs_main
from rs.refilter.samples import SamplesRepoError

HUGE = "<think>\n" + "I count the squares one by one, again. " * 6_000 + "\n</think>\n\n5"
"""A wrong answer of some 234 KB of reasoning, over `row_group_bytes` (200KB) on its own: the splits publish its final
answer alone, the samples repo its text and reasoning too (twice that), the pairs repo its text."""

CASES = [
    ("How many shapes?", "2", "2", []),  # accepted by its greedy answer: not sampled
    ("How many squares?", "1", HUGE, ["1", "1"]),  # recovered; its one wrong answer is the huge one: no pair
    ("How many circles?", "3", HUGE, ["3", "4"]),  # recovered; paired with sample 1, the wrong answer that fits
    ("How many triangles?", "4", "6", ["6", "4"]),  # recovered; paired with its greedy answer
]


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    tmp_path = tmp_path_factory.mktemp("huge")
    family = write_family(
        tmp_path,
        CASES,
        judge={"enabled": False},
        shard={"row_group_bytes": "200KB"},
        recovery={"samples": 2, "temperature": 0.7, "pairs": True},
        publish={"samples": True},
    )
    return tmp_path, repos_of(publish_in(tmp_path, family))


def _rows(repo: Path) -> list[dict]:
    return [r for f in sorted((repo / "data").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def test_a_generation_over_its_share_keeps_its_record_without_its_text(published) -> None:
    """Before, the samples repo's row group held the huge answer's text and reasoning, over `shard.row_group_bytes`
    (RowGroupTooLarge): the whole family failed after sampling."""
    _, repos = published
    rows = {r["question"].split("\n")[0]: r for r in _rows(repos["samples"])}
    for question in ("How many squares?", "How many circles?"):
        greedy, *samples = rows[question]["generations"]
        assert greedy["too_large"] is True
        assert (greedy["text"], greedy["reasoning"], greedy["final"]) == (None, None, None)
        assert greedy["reader"] == "certain" and greedy["reason"] == "wrong_answer"  # its record is whole
        assert greedy["finish_reason"] == "stop" and greedy["kind"] == "greedy"
        assert all(not s["too_large"] and s["text"] and s["final"] for s in samples)
    assert not any(g["too_large"] for q in ("How many shapes?", "How many triangles?") for g in rows[q]["generations"])
    card = (repos["samples"] / "README.md").read_text()
    assert "2 generations were too large to publish (`too_large`)" in card, card


def test_a_pair_is_made_with_the_first_wrong_answer_that_fits(published) -> None:
    """Before, the pairs repo's row group held the huge answer as the rejected side, over `shard.row_group_bytes`."""
    _, repos = published
    pairs = {r["question"].split("\n")[0]: r for r in _rows(repos["pairs"])}
    assert sorted(pairs) == ["How many circles?", "How many triangles?"]
    circles = pairs["How many circles?"]
    assert (circles["rejected_from"], circles["rejected_sample"], circles["rejected_answer"]) == ("sample", 1, "4")
    assert pairs["How many triangles?"]["rejected_from"] == "greedy"
    card = (repos["pairs"] / "README.md").read_text()
    assert "and 1 had only certainly wrong responses too large to publish" in card, card


def test_the_repos_pass_their_audit(published) -> None:
    """Every number of the samples and pairs cards recomputed from their files, and the answers replayed."""
    tmp_path, repos = published
    replay = Replay(10, config=tmp_path / "families.yaml", cache=tmp_path / "cache.sqlite")
    for split in ("samples", "pairs", "think", "rejected"):
        result = audit(repos[split], build=tmp_path / "build" / "Shapes", replay=replay)
        assert result.ok, result.render()


def _refilter(tmp_path: Path, out: str, *argv: str) -> int:
    return rs_main(
        [
            "refilter",
            "Shapes",
            "--config",
            str(tmp_path / "families.yaml"),
            "--out",
            str(tmp_path / out),
            "--no-think-needs-agreeing-reasoning",
            *argv,
        ]
    )


def test_the_samples_repo_alone_rebuilds_the_withheld_texts_from_the_cache(published) -> None:
    """`rs refilter --from-samples`: the withheld texts are found again in the run's generation cache, and the repos are
    those of the build-based refilter, byte for byte, but the sentence naming the samples repo."""
    tmp_path, repos = published
    cache = ["--cache", str(tmp_path / "cache.sqlite")]
    assert _refilter(tmp_path, "from-build", "--build-dir", str(tmp_path / "build"), *cache) == 0
    rebuilt = ["--build-dir", str(tmp_path / "elsewhere"), *cache, "--from-samples", str(repos["samples"])]
    assert _refilter(tmp_path, "from-samples", *rebuilt) == 0
    local = tmp_path / "from-samples" / "local"
    differ_by_the_source_alone(tmp_path / "from-build" / "local", local, "Shapes_RS_samples", local=True)
    for repo in ("Shapes_RS_samples", "Shapes_RS_pairs"):
        assert (result := audit(local / repo)).ok, result.render()


def test_without_the_cache_the_withheld_texts_are_refused(published) -> None:
    """Without the cache, the withheld texts cannot be had: refused, naming them, before anything is written."""
    tmp_path, repos = published
    argv = ["--build-dir", str(tmp_path / "bare"), "--cache", str(tmp_path / "none.sqlite")]
    with pytest.raises(SamplesRepoError) as raised:
        _refilter(tmp_path, "refused", *argv, "--from-samples", str(repos["samples"]))
    assert "2 generation(s) the repo withholds (`too_large`" in str(raised.value), raised.value
    assert "(there is no generation cache at" in str(raised.value) and "--cache" in raised.value.hint
    assert "data row 1 (question '1#0': 'How many squares?" in str(raised.value)
    assert not (tmp_path / "refused").exists() and not (tmp_path / "bare" / "Shapes" / "from-samples").exists()
