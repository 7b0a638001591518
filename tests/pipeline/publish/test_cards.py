"""Cards and the local publish target: front matter vs files, every section, numbers vs stats.json, hostile text."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import datasets
import pytest
from huggingface_hub import DatasetCard
from replay_family import HOSTILE_A, HOSTILE_Q, publish_in, write_hostile_family

from rs.pipeline.publish.cards.html import render, render_repo
from rs.pipeline.publish.cards.render import (
    SHORT_FIELD,
    SPLIT_TITLES,
    _example_view,
    cell,
    chars,
    sibling_link,
    size_category,
)
from rs.pipeline.publish.stage import publish
from rs.splits import SPLITS
from rs.splits_schema import features
from rs.util.text import counted


@pytest.fixture
def family(tmp_path: Path, images: dict[str, bytes]):
    return write_hostile_family(tmp_path, images)


def test_cards_describe_their_repos(family, tmp_path: Path) -> None:
    outcome = publish_in(tmp_path, family)
    stats = outcome.report.to_dict()
    for split in SPLITS:
        repo = tmp_path / "out" / "tester" / family.repo_name(split)
        text = (repo / "README.md").read_text()
        card = DatasetCard(text)
        data = card.data
        assert (
            data.license == "mit" and data.task_categories == ["visual-question-answering"] and data.language == ["en"]
        )
        assert data.size_categories == ["n<1K"] and data.pretty_name == f"Hostile VQA ({SPLIT_TITLES[split]})"
        assert data.configs == [{"config_name": "default", "data_files": [{"split": "train", "path": "data/train-*"}]}]
        s = stats["splits"][split]
        assert data.dataset_info["splits"][0]["num_examples"] == s["rows"]
        assert sorted(p.name for p in (repo / "data").iterdir()) == s["files"]
        assert (
            f"| rows | {s['rows']:,} |" in text
            and f"| QA pairs | {s['qa']:,} |" in text
            and f"| shards | {s['shards']} |" in text
        )
        t = stats["totals"]
        assert f"| accepted / rejected (whole family) | {t['accepted']:,} / {t['rejected']:,} |" in text
        cal = stats["judge"]["calibration"]
        assert f"the judge said `CORRECT` to {cal['positive']['agreed']}" in text
        assert f"of {cal['hard']['total']} near misses built like real rejections" in text
        assert f"of {cal['easy']['total']} answers paired with another item's question and reference" in text
        assert "**It did not pass on this run and promoted nothing**: too few calibration cases" in text
        for section in (
            "## How the data was produced",
            "## How a match is decided",
            "## Second pass: model-as-judge",
            "## Schema",
            "## Cleaning applied before rejection sampling",
            "## Examples",
            "### Example 1",
        ):
            assert section in text, section
        assert "`replayed/model` at revision `abc123`" in text
        assert "\n- **Provenance check.**" in text and "\n- **Deduplication.**" in text  # one list item per line
        assert "\n- `clean_meta` —" in text and "\n- `image_sha256` —" in text
        assert "\n\n**Calibration, measured on this run.**" in text
        for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
            assert (repo / link).is_file()
        for other in SPLITS:  # a local target links its siblings beside it, not to Hub repos that do not exist
            if other != split:
                assert f"[`{family.repo_name(other)}`](../{family.repo_name(other)}/README.md)" in text
                assert (repo / ".." / family.repo_name(other) / "README.md").is_file()
        assert "huggingface.co/datasets/tester" not in text and "&#95;" not in text.split("## Examples")[0]
        # the two figures, drawn from the same report as the text, their numbers in the alt text
        t = stats["totals"]
        funnel_alt = re.search(r"!\[(Bar chart of the [^\]]*)\]\(figures/qa-funnel\.png\)", text).group(1)
        assert f"{t['source_qa']:,} source QA: {t['dropped_by_cleaning']:,} dropped by cleaning" in funnel_alt
        assert f"{t['accepted']:,} accepted ({t['accepted_by']['verifier']:,} by the verifier" in funnel_alt
        assert (repo / "figures/qa-funnel.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        # the replay engine counts no tokens: no lengths to draw, and no figure pretending otherwise
        assert stats["lengths"]["accepted"]["total"] == 0 and not (repo / "figures/answer-lengths.png").exists()
        assert "answer-lengths.png" not in text
        loaded = datasets.load_dataset(str(repo), split="train")
        assert loaded.features == features(split) and loaded.num_rows == s["rows"]


def test_a_publish_draws_its_figures_once_and_every_repo_shows_the_same(family, tmp_path: Path, monkeypatch) -> None:
    from rs.pipeline.publish.cards import figures

    drawn: list[str] = []
    funnel = figures.funnel
    monkeypatch.setattr(figures, "_DRAWN", {})  # nothing drawn before in this process
    monkeypatch.setattr(figures, "funnel", lambda report: drawn.append(report.family) or funnel(report))
    publish_in(tmp_path, family)
    repos = [tmp_path / "out" / "tester" / family.repo_name(split) for split in SPLITS]
    assert drawn == [family.name]
    assert len({(repo / figures.FUNNEL).read_bytes() for repo in repos}) == 1 and len(repos) == 3


def test_size_categories_are_the_hubs_up_to_a_trillion() -> None:
    assert [size_category(n) for n in (0, 999, 1_000, 99_999, 10**9 - 1, 10**9, 10**10, 10**12 - 1, 10**12)] == [
        "n<1K",
        "n<1K",
        "1K<n<10K",
        "10K<n<100K",
        "100M<n<1B",
        "1B<n<10B",
        "10B<n<100B",
        "100B<n<1T",
        "n>1T",
    ]


def test_a_cell_leaves_plain_underscores_and_escapes_those_that_could_emphasise() -> None:
    assert cell("judge_blocked") == "judge_blocked" and cell("snake_case_name") == "snake_case_name"
    assert (
        cell("_x_") == "&#95;x&#95;"
        and cell("a _b_ c") == "a &#95;b&#95; c"
        and cell("__init__") == "&#95;&#95;init&#95;&#95;"
    )


def test_hub_cards_link_their_siblings_on_the_hub() -> None:
    assert sibling_link("CLEVR_RS_think", "org", local=False) == "https://huggingface.co/datasets/org/CLEVR_RS_think"
    assert sibling_link("CLEVR_RS_think", "org", local=True) == "../CLEVR_RS_think/README.md"


def test_hostile_text_cannot_break_the_card(family, tmp_path: Path) -> None:
    publish_in(tmp_path, family)
    text = (tmp_path / "out" / "tester" / family.repo_name("rejected") / "README.md").read_text()
    assert "<script>" not in text and "**bold**" not in text and "](javascript:" not in text
    body = text.split("## Examples", 1)[1]
    for line in body.splitlines():
        if line.startswith("| `"):
            assert line.count("|") == 3, line  # a cell's pipes are escaped
    # a candidate that closes fences and details stays inside its block
    assert body.count("<details>") == body.count("</details>") == 3
    assert "&lt;/details&gt;" in body and "a|b`c`" in body
    assert cell("a|b\nc`d") == "a&#124;b<br>c&#96;d"


def test_cards_read_on_the_hub_as_written(family, tmp_path: Path) -> None:
    """Each card rendered to HTML as the Hub would: tables are tables, images are the repo's files, nothing the
    sanitiser drops, no Markdown or entity shown as text, and the hostile dataset text shown exactly as written."""
    publish_in(tmp_path, family)
    for split in SPLITS:
        repo = tmp_path / "out" / "tester" / family.repo_name(split)
        card = (repo / "README.md").read_text()
        rendered = render_repo(repo)
        assert rendered.problems == [], (split, rendered.problems)
        assert "license:" not in rendered.text  # the front matter is metadata, not text
        assert (
            rendered.html.count("<table>") == card.count("\n|---") == 1 + card.count("\n### Example ")
        )  # stats, examples
        assert "<th>statistic</th>" in rendered.html and "<th></th>" not in rendered.html  # no empty header row
        images = re.findall(r'<img src="file://([^"]+)"', rendered.html)
        assert len(images) == card.count("](images/") + card.count("](figures/") >= 4 and all(
            Path(i).is_file() for i in images
        )
        for other in SPLITS:  # sibling links resolve to the sibling's card beside it
            if other != split:
                assert (
                    f'href="{(repo.parent / family.repo_name(other) / "README.md").resolve().as_uri()}"'
                    in rendered.html
                )
    rendered = render_repo(tmp_path / "out" / "tester" / family.repo_name("rejected"))
    for line in HOSTILE_Q.splitlines():  # a table cell shows the question's lines as they are, nothing rendered
        assert line in rendered.text
    assert (
        HOSTILE_A in rendered.text and HOSTILE_A + "!!\n```\n</details>" in rendered.code
    )  # the answer; wrong_vlm in its block
    assert "<script>" not in rendered.html and "javascript:" not in rendered.html.replace("(javascript:alert(1))", "")


def test_the_rendered_card_check_finds_what_a_reader_would_see_broken(tmp_path: Path) -> None:
    """A card with one of each defect: every one is named; the same card written correctly has none."""
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "f.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    broken = (
        "---\nlicense: mit\n---\n\n| rows | 3 |\n| shards | 1 |\n\nreason `judge&#95;blocked`, judge&amp;#95;blocked, "
        "**bold **, judge\\\\_blocked (double escaped)\n\n![funnel](figures/missing.png) <script>alert(1)</script>\n"
    )
    problems = render(broken, tmp_path).problems
    for expected in (
        "a table row shown as text: '| rows | 3 |'",
        "a character reference shown in code: '&#95;'",
        "a character reference shown as text: '&#95;'",
        "emphasis markers shown as text: '**'",
        "a backslash escape shown as text: '\\\\_'",
        "<img> to figures/missing.png : no such file",
        "<script> dropped with its content",
    ):
        assert any(p.startswith(expected) for p in problems), (expected, problems)
    fixed = (
        "---\nlicense: mit\n---\n\n| statistic | value |\n|---|---|\n| rows | 3 |\n\nreason `judge_blocked`, judge_blocked, "
        "**bold**, judge_blocked\n\n![funnel](figures/f.png)\n"
    )
    assert render(fixed, tmp_path).problems == []
    quoted = "What **is** this? </details>"  # the dataset's own text, shown literally on purpose
    assert render(f"| q | a |\n|---|---|\n| {cell(quoted)} | 1 |\n", tmp_path, quoted=[quoted]).problems == []


def test_a_short_one_line_field_is_in_the_examples_table_and_a_long_one_in_a_block() -> None:
    def view(wrong_vlm: str) -> dict:
        qa = {"question": "q", "answer": "a", "reason": "wrong_answer", "wrong_vlm": wrong_vlm}
        return _example_view("rejected", {"qa": qa}, "images/example-1.png")

    assert ("wrong_vlm", "6") in view("6")["fields"] and view("6")["details"] == []
    for long in ("x" * (SHORT_FIELD + 1), "two\nlines"):
        assert view(long)["details"] == [("wrong_vlm", long)] and all(
            k != "wrong_vlm" for k, _ in view(long)["fields"]
        )
    assert chars("6") == "1 char" and chars("x" * 1234) == "1,234 chars"


def test_counts_of_one_are_singular_on_the_cards_and_in_the_summary(family, tmp_path: Path) -> None:
    from rs.cli.publish import summary

    train = tmp_path / "train.jsonl"
    train.write_text("\n".join(train.read_text().splitlines()[:2]))  # one image, its two questions in two records
    outcome = publish_in(tmp_path, family)
    card = (tmp_path / "out" / "tester" / family.repo_name("rejected") / "README.md").read_text()
    assert (
        "2 QA pairs in 2 source records; 2 kept in 1 row (one per image; 1 record repeated an image already seen "
        "and was merged into its row)"
    ) in card
    assert ", 1 shard -> " in summary(family, outcome, dry_run=False)
    assert counted(1, "family", "families") == "1 family" and counted(1234, "QA pair") == "1,234 QA pairs"


def test_cards_only_touches_only_card_files_and_never_samples(family, tmp_path: Path) -> None:
    publish_in(tmp_path, family)
    repo = tmp_path / "out" / "tester" / family.repo_name("think")
    data_before = {p.name: p.stat().st_mtime_ns for p in (repo / "data").iterdir()}
    (repo / "README.md").write_text("stale card")
    (tmp_path / "cache.sqlite").unlink()  # with no cache and no sampling report, any resampling needs the model
    (tmp_path / "build" / family.name / "sample.json").unlink()

    def no_engines(_family):
        raise AssertionError("--cards-only must not load a model")

    outcome = publish_in(tmp_path, family, cards_only=True, engine_factory=no_engines)
    assert not (tmp_path / "cache.sqlite").exists()
    changed = {c.path for r in outcome.results.values() for c in r.changes if c.action != "unchanged"}
    assert changed == {"README.md"}
    assert {p.name: p.stat().st_mtime_ns for p in (repo / "data").iterdir()} == data_before
    assert (repo / "README.md").read_text().startswith("---\n")


def test_cards_only_without_the_build_uses_the_published_repo(family, tmp_path: Path) -> None:
    publish_in(tmp_path, family)
    card = (tmp_path / "out" / "tester" / family.repo_name("rejected") / "README.md").read_text()
    shutil.rmtree(tmp_path / "build")
    publish_in(tmp_path, family, cards_only=True)
    assert (tmp_path / "out" / "tester" / family.repo_name("rejected") / "README.md").read_text() == card


def test_a_limited_trial_builds_beside_the_full_build_and_says_so_on_its_cards(family, tmp_path: Path) -> None:
    publish_in(tmp_path, family)
    full = {s: (tmp_path / "out" / "tester" / family.repo_name(s) / "README.md").read_text() for s in SPLITS}
    trial = publish(
        family,
        out=tmp_path / "trial",
        build_root=tmp_path / "build",
        cache_path=tmp_path / "cache.sqlite",
        progress=False,
        limit=2,
    )
    assert (
        trial.report.totals.source_qa == 4
        and trial.report.limit == 2
        and (tmp_path / "build" / family.name / "limit-2" / "stats.json").exists()
    )
    trial_card = (tmp_path / "trial" / "tester" / family.repo_name("think") / "README.md").read_text()
    assert "**A trial build**: only the first 2 images" in trial_card and "A trial build" not in full["think"]
    publish_in(tmp_path, family, cards_only=True)  # the full build's cards, not the trial's
    assert {s: (tmp_path / "out" / "tester" / family.repo_name(s) / "README.md").read_text() for s in SPLITS} == full


def test_a_limited_trial_is_never_published_to_the_hub(family, tmp_path: Path) -> None:
    from rs.errors import UsageError

    family.config.publish.target = "hub"
    with pytest.raises(
        UsageError, match="--limit 2 builds a trial of Hostile .* replace tester/Hostile_RS_think"
    ) as err:
        publish(
            family,
            build_root=tmp_path / "build",
            cache_path=tmp_path / "cache.sqlite",
            progress=False,
            limit=2,
            token="x",
        )
    assert "--out DIR" in err.value.hint and not (tmp_path / "build").exists()


def test_a_local_target_that_cannot_be_a_folder_is_refused_before_the_build(family, tmp_path: Path, capsys) -> None:
    from rs.cli.publish import main
    from rs.errors import UsageError

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(UsageError, match=f"--out {blocker}/sub: {blocker} is a file, not a folder"):
        publish(
            family,
            out=blocker / "sub",
            build_root=tmp_path / "build",
            cache_path=tmp_path / "cache.sqlite",
            progress=False,
        )
    family.config.publish.local_dir = str(blocker)
    with pytest.raises(UsageError, match=f"publish.local_dir {blocker}: {blocker} is a file"):
        publish(family, build_root=tmp_path / "build", cache_path=tmp_path / "cache.sqlite", progress=False)
    assert not (tmp_path / "build").exists()
    with pytest.raises(UsageError, match=f"--out {blocker}: {blocker} is a file, not a folder") as err:
        main(["Hostile", "--config", str(family.path), "--out", str(blocker), "--build-dir", str(tmp_path / "build")])
    assert (
        err.value.exit_code == 2
    )  # the command says so as a usage error (error: and hint:), before it reads the family


def test_second_publish_changes_nothing_and_dry_run_writes_nothing(family, tmp_path: Path) -> None:
    publish_in(tmp_path, family)
    again = publish_in(tmp_path, family)
    assert all(c.action == "unchanged" for r in again.results.values() for c in r.changes)
    dry = publish(
        family,
        out=tmp_path / "elsewhere",
        build_root=tmp_path / "build",
        cache_path=tmp_path / "cache.sqlite",
        progress=False,
        dry_run=True,
    )
    assert not (tmp_path / "elsewhere").exists()
    assert {c.action for r in dry.results.values() for c in r.changes} == {"add"}


def test_a_repo_the_hub_would_refuse_stops_the_publish_before_any_upload(family, tmp_path: Path, monkeypatch) -> None:
    from rs.pipeline.publish import repo_check as checks

    monkeypatch.setattr(
        checks, "MAX_ENTRIES_PER_FOLDER", 3
    )  # the assembled repos hold more: README, data, images, rs, figures
    with pytest.raises(
        checks.RepoCheckError, match=r"Hostile_RS_think: [0-9]+ entries, the Hub recommends fewer than 3 per folder"
    ):
        publish_in(tmp_path, family)
    assert not (tmp_path / "out").exists()  # nothing published, not even the first repo


def test_the_pre_publish_check_names_what_the_viewer_would_refuse(tmp_path: Path) -> None:
    import random
    import string

    import pyarrow as pa
    import pyarrow.parquet as pq

    from rs.pipeline.publish.repo_check import RepoCheckError, check_repo

    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    rng = random.Random(0)
    table = pa.table({"text": ["".join(rng.choices(string.ascii_letters, k=1000)) for _ in range(200)]})
    pq.write_table(
        table, repo / "data" / "train-00000-of-00001.parquet", row_group_size=200
    )  # one group of about 200 KB
    (repo / "README.md").write_text("card")
    check_repo(repo, row_group_bytes=1_000_000)
    with pytest.raises(
        RepoCheckError, match=r"train-00000-of-00001\.parquet: row group 0 holds [0-9,]+ bytes uncompressed"
    ):
        check_repo(repo, row_group_bytes=100_000)
    (repo / "data" / "train-00001-of-00002.jsonl").write_text("{}")
    with pytest.raises(
        RepoCheckError, match=r"data: files of \.jsonl, \.parquet; the viewer reads one format per split"
    ):
        check_repo(repo, row_group_bytes=1_000_000)


def test_zero_counts_are_worded_naturally(family, tmp_path: Path) -> None:
    train = tmp_path / "train.jsonl"
    train.write_text(
        train.read_text().splitlines()[0]
    )  # one record, one question, answered wrong: nothing merged or overruled
    outcome = publish_in(tmp_path, family)
    assert outcome.report.judge.contradicted == 0
    card = (tmp_path / "out" / "tester" / family.repo_name("rejected") / "README.md").read_text()
    assert "1 QA pair in 1 source record; 1 kept in 1 row (one per image), 0 dropped." in card
    assert "no rejection in this family was of this kind." in card
    assert "0 records" not in card and "the 0 of them" not in card
