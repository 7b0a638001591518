"""The import contracts in pyproject.toml hold: no cycles, the build runs one way, nothing in the library imports the CLI."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from checkout import ROOT


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Contracts: 4 kept, 0 broken." in done.stdout


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
                names = ([inner.module or ""] if isinstance(inner, ast.ImportFrom) and not inner.level else
                         ["."] if isinstance(inner, ast.ImportFrom) else
                         [a.name for a in inner.names] if isinstance(inner, ast.Import) else [])
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
    assert set(setuptools["packages"]) == folders | {"rs.builders", "rs.templates", "rs.templates.verifiers"}  # a data folder too
    assert setuptools["package-dir"] == {"rs.builders": "builders", "rs.templates": "templates"}
    links = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "rs").rglob("*") if p.is_symlink())
    assert links == ["rs/families/families.yaml"]  # the one link left: the top-level families.yaml, copied into a wheel


def test_only_the_build_imports_the_datasets_builder() -> None:
    """Import-linter sees builders/ as the top-level package it is in a checkout, so it cannot see `rs.builders`
    imported by rs's own modules: rs.pipeline.build alone may import it (it sits above the builder in the layers)."""
    importers = []
    for path in sorted((ROOT / "rs").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if any(n == "rs.builders" or n.startswith("rs.builders.") for n in names):
                importers.append(str(path.relative_to(ROOT)))
    assert importers == ["rs/pipeline/build.py"]
