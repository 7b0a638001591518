"""What a library would cost the project, for `bench/validate.py` and `bench/retry.py`: lines, import time, installed size."""

from __future__ import annotations

import importlib.metadata
import inspect
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def import_seconds(*modules: str, after: str | None = None, repeat: int = 5) -> float:
    """Seconds importing `modules` takes in a fresh interpreter that imported `after` first (`-X importtime`: the
    cumulative figures of the named modules, so what `after` or the interpreter imported already is not counted),
    the least of `repeat` runs."""
    least = float("inf")
    code = "; ".join(f"import {m}" for m in ([after] if after else []) + list(modules))
    for _ in range(repeat):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code], check=True, capture_output=True, text=True
        )
        fields = [line.split("|") for line in done.stderr.splitlines() if line.count("|") == 2]
        least = min(least, sum(int(f[1]) for f in fields if f[2].rstrip() in {f" {m}" for m in modules}) / 1e6)
    return least


def installed_bytes(*distributions: str) -> int:
    total = 0
    for name in distributions:
        for file in importlib.metadata.distribution(name).files or []:
            located = Path(file.locate())
            if located.is_file():
                total += located.stat().st_size
    return total


def code_lines(*objects: object) -> int:
    """Lines of code (no blank lines, comments or docstring lines) of functions, classes or modules."""
    count, in_doc = 0, False
    for obj in objects:
        for line in inspect.getsource(obj).splitlines():
            stripped = line.strip()
            quotes = stripped.count('"""')
            if in_doc or quotes:
                in_doc = in_doc != (quotes % 2 == 1)
                continue
            if stripped and not stripped.startswith("#"):
                count += 1
    return count


def run_tests(tests: list[str], swap: str | None) -> tuple[str, float]:
    """pytest's last line and the wall seconds of `tests`; `swap`, when given, runs first in every Python process the
    tests start (a `sitecustomize` on PYTHONPATH), before the code it patches is imported by its callers."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as folder:
        if swap is not None:
            Path(folder, "sitecustomize.py").write_text(
                f"import sys\nsys.path.insert(0, {str(ROOT / 'bench')!r})\n{swap}"
            )
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [folder, env.get("PYTHONPATH")]))
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", *tests],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - start
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    return "; ".join([done.stdout.strip().splitlines()[-1], *failed]), seconds
