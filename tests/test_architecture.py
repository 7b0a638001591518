"""The import contracts in pyproject.toml hold: no cycles, the build and the stages run one way, nothing in the library imports
the CLI, nothing below sampling imports an engine, the engines import no family, checking a family imports no dataset
library; and what import-linter cannot see, run."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from checkout import ROOT


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Contracts: 8 kept, 0 broken." in done.stdout


CLEANING_LOADS_NO_ENGINE = """
import sys
engines = lambda: sorted(m for m in sys.modules if m == "rs.engines" or m.startswith("rs.engines."))
from rs.pipeline.clean import Cleaner
assert engines() == [], engines()
from rs.families import get_family
from rs.sources import open_source
family = get_family("TinyCLEVR")
read_families = engines()  # the loader checks each engine block against its kind's config: ENGINES finds them
source = open_source(family)
rows = list(Cleaner(family.config, source.provenance(), base_dir=family.path.parent).rows(source, limit=4))
assert len(rows) == 4, rows
assert engines() == read_families, sorted(set(engines()) - set(read_families))
assert not {"vllm", "transformers", "openai"} & set(sys.modules), {"vllm", "transformers", "openai"} & set(sys.modules)
"""


def test_cleaning_loads_no_engine(tmp_path: Path) -> None:
    """import-linter reads import statements; this runs the code. `import rs.pipeline.clean` loads no rs.engines module,
    and cleaning TinyCLEVR's first rows (decontamination included) loads none beyond those families.yaml's loader finds
    through the ENGINES registry, and neither vLLM, transformers nor openai."""
    env = {**os.environ, "RS_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", CLEANING_LOADS_NO_ENGINE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]


def test_the_engines_load_no_family() -> None:
    """What the engines' contract cannot see: importing `rs.families.X` runs `rs.families` (the registry and its loader)
    first. No engine module but rs.engines.factory loads any of rs.families."""
    modules = sorted(p.stem for p in (ROOT / "rs" / "engines").glob("*.py") if p.stem not in ("__init__", "factory"))
    script = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module('rs.engines.' + m)\n"
        "print(sorted(m for m in sys.modules if m == 'rs.families' or m.startswith('rs.families.')))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == "[]"


def test_the_package_imports_its_own_modules_at_the_top() -> None:
    """An import inside a function may only defer an optional third-party dependency (vllm, ray, openai, ...).

    The package's own modules are imported at module level, so import-linter and a reader see every
    dependency; `__main__` modules (entry points) are exempt.
    """
    deferred = []
    for path in sorted((ROOT / "rs").rglob("*.py")) + sorted((ROOT / "builders").glob("*.py")):
        if path.name == "__main__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for inner in ast.walk(node):
                names = (
                    [inner.module or ""]
                    if isinstance(inner, ast.ImportFrom) and not inner.level
                    else ["."]
                    if isinstance(inner, ast.ImportFrom)
                    else [a.name for a in inner.names]
                    if isinstance(inner, ast.Import)
                    else []
                )
                if any(n == "." or n == "rs" or n.startswith("rs.") or n == "builders" for n in names):
                    deferred.append(f"{path.relative_to(ROOT)}:{inner.lineno} in {node.name}()")
    assert not deferred, "imports of the package inside functions:\n" + "\n".join(deferred)


def test_rs_console_script_dispatches_to_the_commands() -> None:
    from rs.cli.main import COMMANDS, main

    assert set(COMMANDS) == {"publish", "sample", "plan", "families", "cache", "audit", "refilter"}
    assert main(["families", "validate"]) == 0
    assert main(["nope"]) == 2


def test_the_wheel_lists_every_package_and_maps_the_shipped_folders_without_links() -> None:
    """pyproject lists the packages (setuptools' find does not see a mapped folder): a package missing from the list
    would be missing from the wheel. builders/ and templates/ are mapped into `rs`, not linked."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "rs").rglob("__init__.py")}
    assert set(setuptools["packages"]) == folders | {
        "rs.builders",
        "rs.templates",
        "rs.templates.verifiers",
    }  # a data folder too
    assert setuptools["package-dir"] == {"rs.builders": "builders", "rs.templates": "templates"}
    links = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "rs").rglob("*") if p.is_symlink())
    assert links == [
        "rs/families/families.yaml"
    ]  # the one link left: the top-level families.yaml, copied into a wheel


def test_only_the_build_imports_the_datasets_builder() -> None:
    """Import-linter sees builders/ as the top-level package it is in a checkout, so it cannot see `rs.builders`
    imported by rs's own modules: the write stage's split writing alone may import it (it sits above the builder in the layers)."""
    importers = []
    for path in sorted((ROOT / "rs").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if any(n == "rs.builders" or n.startswith("rs.builders.") for n in names):
                importers.append(str(path.relative_to(ROOT)))
    assert importers == ["rs/pipeline/write/splits.py"]


def test_each_stage_implements_the_contract_under_its_name_in_the_pipelines_order() -> None:
    """The stages the build runs (`rs.pipeline.build`), as `rs.pipeline.STAGES` names them; those that keep a store go
    through `ensure`'s reuse (`StoredStage`), the others run each time."""
    from rs.pipeline import STAGES
    from rs.pipeline.clean.stage import CleanStage
    from rs.pipeline.recover import RecoverStage
    from rs.pipeline.route import RouteStage
    from rs.pipeline.sample.stage import SampleStage
    from rs.pipeline.stage import Stage, StoredStage
    from rs.pipeline.write.stage import WriteStage

    built = (CleanStage, SampleStage, RecoverStage, RouteStage, WriteStage)
    assert [stage.name for stage in built] == list(STAGES[: len(built)])
    for stage in built:
        assert all(callable(getattr(stage, method, None)) for method in ("fingerprint", "requests", "run")), stage
    assert [StoredStage in stage.__mro__ for stage in built] == [True, True, True, False, False]
    assert Stage in StoredStage.__mro__


def test_the_benchmarks_import_only_what_the_package_has() -> None:
    """The bench/ scripts run by hand, not in the suite, and import the package inside functions: a module moved or a
    name renamed broke two of them unseen (bench/build.py, bench/validate_libs.py). Every `from rs... import name` in
    bench/ resolves to a module or an attribute."""
    missing = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "rs":
                where = f"bench/{path.name}:{node.lineno}"
                try:
                    module = importlib.import_module(node.module)
                except ImportError as err:
                    missing.append(f"{where}: {err}")
                    continue
                for alias in node.names:
                    submodule = hasattr(module, "__path__") and importlib.util.find_spec(f"{node.module}.{alias.name}")
                    if not hasattr(module, alias.name) and not submodule:
                        missing.append(f"{where}: {node.module} has no {alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "rs" and importlib.util.find_spec(alias.name) is None:
                        missing.append(f"bench/{path.name}:{node.lineno}: no module {alias.name}")
    assert not missing, "\n".join(missing)
