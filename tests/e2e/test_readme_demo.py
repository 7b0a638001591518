"""README.md's sample of `make demo` is what `make demo` prints: the demo is run here as the Makefile runs it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from checkout import ROOT

from rs.audit import audit


def _script():
    spec = importlib.util.spec_from_file_location("readme_demo", ROOT / "scripts" / "readme_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.vllm
def test_the_readme_shows_what_the_demo_prints(tinyclevr_published) -> None:
    work, printed = tinyclevr_published.work, tinyclevr_published.stdout  # `make demo`'s command, run once a session
    stats = json.loads((work / "build" / "TinyCLEVR" / "stats.json").read_text())
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    script = _script()
    for repo in sorted((work / "out" / "local").iterdir()):  # the demo's cards tell the truth, on any CPU
        if not repo.name.startswith("."):
            result = audit(repo, build=work / "build")
            assert result.ok, result.render()
    # the judge's figures are near ties of the demo model and may differ on another CPU: their lines' shape only
    assert script.portable(script.summary(printed)) in script.portable(readme)
    docs = script.documents()
    new = script.updated_documents(docs, printed, stats)
    for name, text in docs.items():
        assert script.portable(new[name]) == script.portable(text), (
            f"{name}'s demo figures are stale: run `make readme-demo`"
        )
    if script.summary(printed) in readme:  # the judge's verdicts as where the README was written: its counts too
        said = script.audit_said(work / "out")
        assert script.updated_documents(docs, printed, stats, said) == docs, (
            f"the audit example says otherwise than `rs audit`: {said}"
        )


def test_the_script_rewrites_only_the_sample() -> None:
    script = _script()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    printed = (
        "TinyCLEVR: 1 source QA, 0 dropped by cleaning, 1 accepted (1 by the verifier, 0 by the judge), 0 rejected; accept rate 100.0%\n"
        "  recovery: accept rate 100.0% greedy, 100.0% after recovery; 0 of 0 sampled rejections recovered (0 samples at "
        "temperature 0.7, sampled: nothing)\n"
        "  rejected by reason: none\n  judge: BLOCKED, it promotes nothing: too few cases\n"
        "  TinyCLEVR_RS_think: 1 rows, 1 QA, 1 shard -> out/local/TinyCLEVR_RS_think (1 added)\n"
    )
    new = script.updated(readme, printed, {"prompts": {"multiple_choice_items": 1234}})
    assert (
        "e.g.:\n\n```\nTinyCLEVR: 1 source QA" in new
        and "judge: BLOCKED, it promotes nothing: too few cases\n```\n" in new
    )
    assert "TinyCLEVR_RS_think: 1 rows" not in new and "The 1,234\nquestions with lettered options" in new
    assert (
        new.count("\n")
        == readme.count("\n") - readme.split("e.g.:\n\n```\n", 1)[1].split("\n```\n", 1)[0].count("\n") + 3
    )
    # the recovery paragraph's figures, on the page that holds it, are the summary's: its questions, greedy acceptances
    # and recoveries; no other page changes
    docs = script.documents()
    stats = {
        "prompts": {"multiple_choice_items": 1234},
        "question_types": {"types": {"count": {"accept_rate": 0.5}, "color": {"accept_rate": 1.0}}},
    }
    pages = script.updated_documents(docs, printed, stats)
    (recovery,) = [name for name in docs if "the greedy pass accepts on" in docs[name]]
    assert recovery != "README.md" and pages["README.md"] == new
    assert (
        "the greedy pass accepts on 1 of 1 questions (100.0%), is right at least once in 4 samples on 0 of\nthe 0 "
        in pages[recovery]
    )
    assert "rejections it sampled (`make demo`; 100.0% after recovery)" in pages[recovery]
    assert {name for name in docs if pages[name] != docs[name]} <= {
        "README.md",
        recovery,
        *[n for n in docs if "own cards the types" in docs[n]],
    }
    # the per-type sentence is the build's question types: the two of lowest accept rate, those always accepted
    rates = {"count": 0.5, "exist": 1.0, "add": 0.75, "subtract": 1.0}
    typed = {
        "prompts": {"multiple_choice_items": 1},
        "question_types": {"types": {k: {"accept_rate": v} for k, v in rates.items()}},
    }
    assert (
        "On `make demo`'s own cards the types the demo model fails most are `count` (50.0% accepted) and `add` (75.0% "
        "accepted); it accepts every `exist` and `subtract` question."
    ) in script.type_rates(next(t for t in docs.values() if "own cards the types" in t), typed)
    masked = script.portable(printed)
    assert "judge: BLOCKED, it promotes nothing: too few cases" in masked and "accept rate #" not in masked
    assert (
        script.portable("  judge calibration: positives 19/81 [15.6%, 33.8%]")
        == "  judge calibration: positives #/# [#%, #%]"
    )
    with pytest.raises(script.ReadmeDrift, match="now passes its calibration"):
        script.updated(
            readme, printed.replace("BLOCKED, it promotes nothing: too few cases", "passed its calibration"), {}
        )


def test_the_readme_holds_no_merge_markers() -> None:
    """A merge left unresolved shows both sides to the reader; none may be left."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    markers = [n for n, line in enumerate(lines, 1) if line.startswith(("<<<<<<< ", ">>>>>>> ")) or line == "======="]
    assert markers == []


def _commands(readme: str) -> list[tuple[int, list[str]]]:
    """Every command the README shows: each line of its code blocks and each inline code span, as words (the variables
    set before it and a prompt left out), with its line number."""
    import re
    import shlex

    found: list[tuple[int, list[str]]] = []
    fenced = False
    for number, line in enumerate(readme.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        texts = [line] if fenced else re.findall(r"`([^`]+)`", line)
        for text in texts:
            for part in re.split(r"&&|\|\||[|;]", text.split(" # ")[0]):
                try:
                    words = shlex.split(part, comments=False)
                except ValueError:
                    continue
                while words and (re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]) or words[0] == "$"):
                    words.pop(0)
                if words and (words[0] == "rs" or (words[0].endswith("python") and words[1:2] == ["-m"])):
                    found.append((number, words))
    return found


def _module_runs(name: str) -> bool:
    """Whether `python -m NAME` runs something: a module with a main, or a package with a `__main__`."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return False
    if spec is None:
        return False
    if spec.submodule_search_locations is not None:
        return importlib.util.find_spec(f"{name}.__main__") is not None
    source = Path(spec.origin).read_text(encoding="utf-8") if spec.origin else ""
    return "__main__" in source or "run_as_program(" in source


def _subcommand_runs(words: list[str]) -> bool:
    """Whether `rs COMMAND [SUBCOMMAND]` names a command (and, for the commands that have them, a subcommand)."""
    from rs.cli.main import COMMANDS
    from rs.util.long_lived import import_for_good

    if len(words) < 2 or words[1].startswith("-"):
        return len(words) < 2 or words[1] in ("--help", "-h", "--version", "-V")
    if words[1] not in COMMANDS:
        return False
    if words[1] not in ("families", "cache") or len(words) < 3 or not words[2].isalpha() or not words[2].islower():
        return True
    module = import_for_good(COMMANDS[words[1]][0])
    with pytest.raises(SystemExit) as done:
        module.main([words[2], "--help"], prog=f"rs {words[1]}")
    return done.value.code == 0


def test_every_command_the_documentation_shows_exists(capsys) -> None:
    """`python -m rs.pipeline.sample` was in the README, and no such command exists: each `python -m X` the README and
    the pages of docs/ show names a module that runs, each `rs COMMAND [SUBCOMMAND]` a command."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    commands = [
        (f"{page.relative_to(ROOT)}:{number}", words)
        for page in pages
        for number, words in _commands(page.read_text(encoding="utf-8"))
    ]
    assert len(commands) > 40  # the parse finds them
    missing = [
        (where, " ".join(words))
        for where, words in commands
        if not (_subcommand_runs(words) if words[0] == "rs" else _module_runs(words[2] if len(words) > 2 else ""))
    ]
    capsys.readouterr()  # the --help texts
    assert missing == []
