"""README.md's sample of `make demo` is what `make demo` prints: the demo is run here as the Makefile runs it."""

from __future__ import annotations

import importlib.util
import json

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
    assert script.portable(script.updated(readme, printed, stats)) == script.portable(readme), (
        "README.md's demo sample is stale: run `make readme-demo`"
    )


def test_the_script_rewrites_only_the_sample() -> None:
    script = _script()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    printed = (
        "TinyCLEVR: 1 source QA, 0 dropped by cleaning, 1 accepted (1 by the verifier, 0 by the judge), 0 rejected; accept rate 100.0%\n"
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
        == readme.count("\n") - readme.split("e.g.:\n\n```\n", 1)[1].split("\n```\n", 1)[0].count("\n") + 2
    )
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
