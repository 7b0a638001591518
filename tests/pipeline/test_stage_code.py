"""The sample stage is keyed by the versions of what decides an answer's fate (`rs.pipeline.versions`), a plug-in verifier's
declared version or, where it declares none, its code: an edited comment re-verifies nothing, a bumped version or a
changed plug-in re-verifies every answer, from the generation cache."""

from __future__ import annotations

import importlib
import logging
import sys
import types
from pathlib import Path

import pytest
from family_yaml import MINIMAL, family_yaml
from faults import write_families

from rs.context import BuildContext
from rs.families import load_families
from rs.pipeline.sample.stage import SampleStage
from rs.pipeline.stage import ensure
from rs.registry import VERIFIERS
from rs.verifiers.exact import ExactVerifier

PLUGIN = '''
from rs.verifiers import Verifier, register


@register
class Pedantic(Verifier):
    """{doc}"""

    name = "pedantic_{tag}"
    title = "exact, and then some"
    description = "equal strings"{version}

    def match(self, prediction, reference, *, item=None):
        return prediction == reference{rule}
'''


@pytest.fixture(autouse=True)
def registry_left_as_found():
    """The verifiers these tests register leave the registry with them (other tests list every verifier)."""
    yield
    for name in [n for n in VERIFIERS._entries if n.startswith("pedantic_")]:
        del VERIFIERS._entries[name]


def strict_yaml(tag: str) -> str:
    """The family `Strict`, verified by the plug-in verifier `pedantic_<tag>`."""
    return family_yaml("Strict", MINIMAL, verifier={"name": f"pedantic_{tag}"}, card={"pretty_name": "S"})


def plugin(tmp_path: Path, monkeypatch, *, version: str = "", doc: str = "Equal strings.", rule: str = "") -> Path:
    """A plug-in verifier in its own module, imported as an installed plug-in's entry point would be."""
    tag = tmp_path.name.replace("-", "_")
    module = tmp_path / f"rs_pedantic_{tag}.py"
    module.write_text(PLUGIN.format(tag=tag, doc=doc, version=version, rule=rule))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module(module.stem)
    return module


def test_a_plugin_that_declares_no_version_is_keyed_by_its_code_without_comments(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    module = plugin(tmp_path, monkeypatch)
    (tmp_path / "families.yaml").write_text(strict_yaml(tmp_path.name.replace("-", "_")))
    ctx = BuildContext(load_families(tmp_path / "families.yaml")["Strict"], tmp_path / "build")

    with caplog.at_level(logging.WARNING, logger="rs.pipeline.pieces"):
        before = SampleStage().fingerprint(ctx)
    assert "declares no `version`" in caplog.text  # said once, with what to do
    module.write_text(module.read_text().replace('"""Equal strings."""', '"""Strings, equal."""  # reworded'))
    assert SampleStage().fingerprint(ctx) == before
    module.write_text(module.read_text().replace("== reference", "== reference and prediction.strip() == prediction"))
    assert SampleStage().fingerprint(ctx) != before  # the plug-in is upgraded: its answers are verified again


def test_a_plugin_that_declares_a_version_is_keyed_by_it_and_a_verifier_typed_in_a_notebook_by_its_code(
    tmp_path: Path, monkeypatch
) -> None:
    tag = tmp_path.name.replace("-", "_")
    notebook = types.ModuleType(
        f"notebook_{tag}"
    )  # no file, no spec: a class typed into a notebook or a script's __main__
    monkeypatch.setitem(sys.modules, notebook.__name__, notebook)
    exec(PLUGIN.format(tag=tag, doc="", version="", rule=""), notebook.__dict__)
    (tmp_path / "families.yaml").write_text(strict_yaml(tag))
    ctx = BuildContext(load_families(tmp_path / "families.yaml")["Strict"], tmp_path / "build")

    before = SampleStage().fingerprint(ctx)
    notebook.Pedantic.match = lambda self, prediction, reference, *, item=None: prediction.strip() == reference
    changed = SampleStage().fingerprint(ctx)
    assert changed != before  # the method changed in the notebook
    notebook.Pedantic.version = "1"
    declared = SampleStage().fingerprint(ctx)
    assert declared != changed
    notebook.Pedantic.match = lambda self, prediction, reference, *, item=None: prediction == reference
    assert SampleStage().fingerprint(ctx) == declared  # its author vouches for the version
    notebook.Pedantic.version = "2"
    assert SampleStage().fingerprint(ctx) != declared


def test_through_the_stage_a_comment_edit_reverifies_nothing_and_a_version_bump_reverifies_from_the_cache(
    tmp_path: Path, monkeypatch
) -> None:
    families = write_families(tmp_path, images=3, names=("Alpha",))
    module = plugin(tmp_path, monkeypatch, version='\n    version = "1"')
    tag = tmp_path.name.replace("-", "_")
    families.write_text(families.read_text().replace("verifier: {name: exact}", f"verifier: {{name: pedantic_{tag}}}"))
    exact = write_families(tmp_path / "exact", images=3, names=("Alpha",))

    def run(path: Path) -> tuple[int, int]:
        """(engines made, answers asked of the sampling engine): (0, 0) when the report is reused."""
        made = []

        def engines(family):
            from rs.engines.factory import engines_for

            made.append(family.name)
            return engines_for(family)

        ctx = BuildContext(
            load_families(path)["Alpha"],
            path.parent / "build",
            cache_path=tmp_path / "cache.sqlite",
            progress=False,
            engine_factory=engines,
        )
        report = ensure(SampleStage(), ctx)
        return len(made), report.sampling_engine_calls if made else 0

    monkeypatch.chdir(tmp_path)
    assert run(families)[1] == 6  # the first run asks every question
    assert run(families) == (0, 0)  # nothing changed: the report is reused
    module.write_text(module.read_text().replace('"""Equal strings."""', '"""Strings, equal."""\n    # a comment'))
    assert run(families) == (0, 0)
    monkeypatch.setattr(sys.modules[module.stem].Pedantic, "version", "2")
    assert run(families) == (1, 0)  # re-verified, every answer from the cache

    monkeypatch.chdir(tmp_path / "exact")
    run(exact)
    assert run(exact) == (0, 0)
    monkeypatch.setattr(ExactVerifier, "version", ExactVerifier.version + ".1")  # a built-in verifier bumped
    assert run(exact) == (1, 0)


def test_a_plugin_deriving_from_a_built_in_verifier_is_keyed_by_both_versions(tmp_path: Path, monkeypatch) -> None:
    tag = tmp_path.name.replace("-", "_")
    module = types.ModuleType(f"derived_{tag}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(
        f"""
from rs.verifiers import register
from rs.verifiers.exact import ExactVerifier


@register
class Stricter(ExactVerifier):
    name = "pedantic_{tag}"
    version = "1"
""",
        module.__dict__,
    )
    (tmp_path / "families.yaml").write_text(strict_yaml(tag))
    ctx = BuildContext(load_families(tmp_path / "families.yaml")["Strict"], tmp_path / "build")

    before = SampleStage().fingerprint(ctx)
    monkeypatch.setattr(ExactVerifier, "version", ExactVerifier.version + ".1")  # the rules it inherits changed
    assert SampleStage().fingerprint(ctx) != before
