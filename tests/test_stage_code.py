"""A stage's results follow its code: a changed verifier (built in or a plug-in) re-runs the sample stage from the cache."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from rs.families import load_families
from rs.registry import VERIFIERS
from rs.stages import BuildContext, code_fingerprint, sample_fingerprint

PLUGIN = '''
from rs.verifiers import Verifier, register


@register
class Pedantic(Verifier):
    name = "pedantic_{tag}"
    title = "exact, and then some"
    description = "equal strings"

    def match(self, prediction, reference, *, item=None):
        return prediction == reference{rule}
'''

@pytest.fixture(autouse=True)
def registry_left_as_found():
    """The verifiers these tests register leave the registry with them (other tests list every verifier)."""
    yield
    for name in [n for n in VERIFIERS._entries if n.startswith("pedantic_")]:
        del VERIFIERS._entries[name]


FAMILY = """\
families:
  Strict:
    source: {{kind: synthetic}}
    instruction: "?"
    verifier: {{name: pedantic_{tag}}}
    model: {{id: some/model}}
    card: {{pretty_name: S, description: d, license: mit, citation: ""}}
"""


def test_the_sample_stage_is_keyed_by_the_code_that_decides_including_a_plugin_verifier(tmp_path: Path, monkeypatch) -> None:
    tag = tmp_path.name.replace("-", "_")
    module = tmp_path / f"rs_pedantic_{tag}.py"
    module.write_text(PLUGIN.format(tag=tag, rule=""))
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__(module.stem)  # registers the verifier, as an installed plug-in's entry point would
    (tmp_path / "families.yaml").write_text(FAMILY.format(tag=tag))
    ctx = BuildContext(load_families(tmp_path / "families.yaml")["Strict"], tmp_path / "build")
    clean = SimpleNamespace(fingerprint="the same cleaned rows")

    before = sample_fingerprint(ctx, clean)
    assert sample_fingerprint(ctx, clean) == before
    module.write_text(PLUGIN.format(tag=tag, rule=" and prediction.strip() == prediction"))  # the plug-in is upgraded
    code_fingerprint.cache_clear()  # a new process: the code is read again
    assert sample_fingerprint(ctx, clean) != before


def test_a_reworded_judge_prompt_and_a_verifier_defined_in_a_notebook_key_the_stage_too(tmp_path: Path, monkeypatch) -> None:
    import sys
    import types

    import rs.stages

    prompt = tmp_path / "judge_prompt.jinja"
    prompt.write_bytes(rs.stages.JUDGE_PROMPT.read_bytes())
    monkeypatch.setattr(rs.stages, "JUDGE_PROMPT", prompt)
    tag = tmp_path.name.replace("-", "_")
    notebook = types.ModuleType(f"notebook_{tag}")  # no file, no spec: a class typed into a notebook or a script's __main__
    monkeypatch.setitem(sys.modules, notebook.__name__, notebook)
    exec(PLUGIN.format(tag=tag, rule=""), notebook.__dict__)
    (tmp_path / "families.yaml").write_text(FAMILY.format(tag=tag))
    ctx = BuildContext(load_families(tmp_path / "families.yaml")["Strict"], tmp_path / "build")
    clean = SimpleNamespace(fingerprint="the same cleaned rows")

    before = sample_fingerprint(ctx, clean)
    prompt.write_text(prompt.read_text() + "\nBe strict.\n")
    reworded = sample_fingerprint(ctx, clean)
    assert reworded != before
    notebook.Pedantic.match = lambda self, prediction, reference, *, item=None: prediction.strip() == reference
    assert sample_fingerprint(ctx, clean) != reworded  # the method changed in the notebook
