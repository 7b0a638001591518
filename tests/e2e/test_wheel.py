"""The package works outside the checkout: a wheel built from it carries the templates, the default
families.yaml and the builder inside `rs`, installs no other top-level package and no model; with the
`rs-demo` wheel (demo/: the demo and test models, found through its entry point) it publishes TinyCLEVR
and re-renders its cards from another directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("vllm")

from checkout import ROOT  # noqa: E402

ENV = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
ENV.pop("PYTHONPATH", None)  # the installed wheel's code, never a checkout's on the path


def _run(cmd: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{cmd}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Built from a copy: setuptools writes build/ and rs.egg-info/ next to the sources.
    source = tmp_path_factory.mktemp("source") / "rs"
    shutil.copytree(
        ROOT,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(".git", ".venv", "build", "out", "*.egg-info", "__pycache__", ".*cache*"),
    )
    dist = tmp_path_factory.mktemp("dist")
    for folder in (source, source / "demo"):  # rs, and rs-demo: the demo and test models
        built = _run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--wheel-dir",
                str(dist),
                str(folder),
            ],
            cwd=dist,
        )
        assert (
            "absent from the `packages` configuration" not in built.stdout + built.stderr
        )  # setuptools' warning: every data
        # folder (templates/verifiers, the demo model's weights) is listed as a package
    (built,) = dist.glob("rs-0*.whl")
    return built


@pytest.fixture(scope="module")
def demo_wheel(wheel: Path) -> Path:
    (built,) = wheel.parent.glob("rs_demo-*.whl")
    return built


def test_wheel_holds_one_package_with_its_data_and_the_demo_models_come_apart(wheel: Path, demo_wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/", 1)[0] for n in names} == {"rs", f"rs-{wheel.name.split('-')[1]}.dist-info"}
    shipped = set(names)
    templates = {f"rs/{p.relative_to(ROOT).as_posix()}" for p in (ROOT / "templates").rglob("*.jinja")}
    builders = {f"rs/{p.relative_to(ROOT).as_posix()}" for p in (ROOT / "builders").glob("*.py")}
    assert templates and builders
    assert templates | builders | {"rs/families/families.yaml"} <= shipped
    assert zipfile.ZipFile(wheel).read("rs/families/families.yaml") == (ROOT / "families.yaml").read_bytes()
    assert not [
        n for n in names if "demo" in n or "tiny" in n or n.endswith(".safetensors")
    ]  # no model in the runtime

    demo_names = set(zipfile.ZipFile(demo_wheel).namelist())
    demo = {
        p.relative_to(ROOT / "demo").as_posix()
        for p in (ROOT / "demo" / "rs_demo").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert {n.split("/", 1)[0] for n in demo_names} == {
        "rs_demo",
        f"rs_demo-{demo_wheel.name.split('-')[1]}.dist-info",
    }
    assert "rs_demo/demo_model/weights/model.safetensors" in demo and demo <= demo_names


def test_installed_wheel_publishes_tinyclevr_and_renders_its_cards_elsewhere(
    wheel: Path, demo_wheel: Path, tmp_path: Path
) -> None:
    env = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(env)], cwd=tmp_path)
    python = env / "bin" / "python"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            str(wheel),
            str(demo_wheel),
        ],
        cwd=tmp_path,
    )
    # The dependencies come from this environment's site-packages as a plain path: its .pth files, among them the
    # editable install of the checkout, are not run, so `rs` can only be the wheel's.
    purelib = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path
        ).stdout.strip()
    )
    (purelib / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([str(python), "-m", "rs.util.torchvision_cpu", "install"], cwd=tmp_path)  # as make setup does in .venv/

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = _run(
        [
            str(python),
            "-c",
            "import rs, rs_demo, importlib.util; print(rs.__file__); print(rs_demo.__file__); "
            "print(importlib.util.find_spec('builders'))",
        ],
        cwd=elsewhere,
    ).stdout.split()
    assert where == [str(purelib / "rs" / "__init__.py"), str(purelib / "rs_demo" / "__init__.py"), "None"]

    assert "TinyCLEVR" in _run([str(env / "bin" / "rs"), "families", "validate"], cwd=elsewhere).stdout
    out = elsewhere / "out"
    published = _run(
        [str(env / "bin" / "rs"), "publish", "TinyCLEVR", "--out", str(out), "--limit", "4"], cwd=elsewhere
    )
    assert "cards:" in published.stdout
    cards = sorted(out.rglob("README.md"))
    assert len(cards) == 4  # the three splits and the recovery's preference pairs
    before = {card: card.read_bytes() for card in cards}
    for card in cards:
        card.unlink()
    _run(
        [
            str(python),
            "-m",
            "rs.publish",
            "TinyCLEVR",
            "--out",
            str(out),
            "--cards-only",
            "--build-dir",
            str(tmp_path / "none"),
        ],
        cwd=elsewhere,
    )
    assert {card: card.read_bytes() for card in cards} == before
