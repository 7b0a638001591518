"""The documentation site: it builds with broken links as errors, and its reference pages are the code's own words."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rs import reference
from rs.cli.main import COMMANDS
from rs.families import schema
from rs.families.keys import walk
from rs.splits import REJECT_REASONS
from rs.verifiers import known_verifiers

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_with_broken_links_as_errors(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for page in reference.pages():
        assert (site / page.removesuffix(".md") / "index.html").is_file(), page
    # a link to a page that does not exist fails the build (strict): the check is real
    broken = tmp_path / "docs"
    broken.mkdir()
    (broken / "index.md").write_text("[gone](nowhere.md)\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"site_name: t\ndocs_dir: {broken}\nstrict: true\n")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "-f", str(config), "--site-dir", str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0 and "nowhere.md" in done.stderr


def test_the_reference_pages_name_every_key_verifier_reason_and_command() -> None:
    pages = reference.pages()
    keys = pages["reference/families.md"]
    for key in walk(schema.FamilyConfig, "families.NAME"):
        assert f"`{key.path}`" in keys
    assert "`evaluation.NAME.source`" in keys
    verifiers = pages["reference/verifiers.md"]
    for name in known_verifiers():
        assert f"## `{name}`" in verifiers
    assert "| `tolerance` | `float` |" in verifiers
    reasons = pages["reference/reasons.md"]
    for reason, meaning in REJECT_REASONS.items():
        assert f"| `{reason}` | {reference.cell(meaning)} |" in reasons
    commands = pages["reference/commands.md"]
    for name in COMMANDS:
        assert f"## `rs {name}`" in commands
    assert "### `rs families validate`" in commands and "--cards-only" in commands


def test_a_change_to_the_code_changes_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new reason, key, flag or verifier parameter is on the page without anyone writing it there."""
    monkeypatch.setitem(REJECT_REASONS, "brand_new", "a reason added to the code")
    assert "| `brand_new` | a reason added to the code |" in reference.reasons_page()

    @dataclasses.dataclass
    class Extra(schema.CardConfig):
        shiny: int = 3
        """A key added to the schema."""

    assert "| `card.shiny` | `int` | `3` | A key added to the schema. |" in reference.table(
        ("key", "type", "default", "meaning"),
        [
            (f"`{k.path}`", reference._either(k.type or ""), reference._default(k.default or ""), k.doc)
            for k in walk(Extra, "card")
        ],
    )

    def main(argv: list[str], *, prog: str) -> int:
        parser = argparse.ArgumentParser(prog=prog)
        parser.add_argument("--brand-new-flag", help="a flag added to a command")
        parser.parse_args(argv)
        return 0

    from rs.verifiers.base import Param
    from rs.verifiers.relaxed import RelaxedVerifier

    params = {**RelaxedVerifier.PARAMS, "brand_new_knob": Param(int, 7, "a parameter added to a verifier")}
    monkeypatch.setattr(RelaxedVerifier, "PARAMS", params)
    assert "| `brand_new_knob` | `int` | `7` | a parameter added to a verifier |" in reference.verifiers_page()

    monkeypatch.setitem(COMMANDS, "brandnew", ("rs.cli.brandnew", "a command added"))
    monkeypatch.setattr(reference, "import_for_good", lambda module: SimpleNamespace(main=main))
    page = reference.commands_page()
    assert "## `rs brandnew`" in page and "--brand-new-flag" in page and "a flag added to a command" in page


def test_every_cleaning_reason_the_code_can_give_is_declared_and_on_the_page() -> None:
    """The reasons a step returns, a record is refused for (`RefusedImage`) or an image problem is named, read from the
    code itself: each is declared with its meaning, so the reference and exclusions.jsonl say the same."""
    import ast

    from rs.pipeline import clean as clean_package
    from rs.pipeline.clean import step_reasons
    from rs.sources import mapping

    declared = {reason for reasons in step_reasons().values() for reason in reasons}
    found: set[str] = set()
    for module in (*Path(clean_package.__file__).parent.glob("*.py"), Path(mapping.__file__)):
        for node in ast.walk(ast.parse(module.read_text())):
            if (
                isinstance(node, ast.Return)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                if "_" in node.value.value and " " not in node.value.value:
                    found.add(node.value.value)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "RefusedImage" and node.args:
                found.add(node.args[0].value)
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["reason"]:
                found |= {
                    c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                }
    found.discard("imagefolder")
    assert found and found <= declared, sorted(found - declared)
    page = reference.reasons_page()
    for step, reasons in step_reasons().items():
        for reason, meaning in reasons.items():
            assert f"| `{reason}` | `{step}` | {reference.cell(meaning)} |" in page


def test_a_step_that_drops_for_an_undeclared_reason_stops_the_run() -> None:
    from rs.pipeline.clean.base import ItemFilter, StepCard, UndeclaredReason
    from rs.records import QAItem

    class Sloppy(ItemFilter):
        name = "sloppy"
        card = StepCard("Sloppy", "drops everything")
        reasons = {"declared": "what it says"}

        def check(self, item: QAItem, image_sha256: str, image_id: str | None) -> str | None:
            return "undeclared"

    with pytest.raises(UndeclaredReason, match="'sloppy' dropped an item for 'undeclared'") as err:
        Sloppy()(QAItem("q?", "a", "r0"), "sha", None)
    assert "reasons" in err.value.hint


def test_every_benchmark_script_is_on_the_benchmarks_page() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    scripts = [p for p in sorted((ROOT / "bench").glob("*.py")) if "__main__" in p.read_text(encoding="utf-8")]
    assert len(scripts) >= 10
    missing = [p.name for p in scripts if f"| `bench/{p.name}` |" not in page]
    assert not missing, f"bench scripts with no row on docs/benchmarks.md: {missing}"


def test_the_published_page_names_every_reject_reason() -> None:
    """docs/published.md lists the reasons by name and sends the reader to the generated meanings: a reason added to the
    code and not to the page fails here."""
    page = (ROOT / "docs" / "published.md").read_text(encoding="utf-8")
    assert "reference/reasons.md#why-a-question-is-in-the-rejected-split" in page
    assert [r for r in REJECT_REASONS if f"`{r}`" not in page] == []
