"""Let PyPI's torchvision import beside the CPU build of torch: the CPU test environment's one fix-up.

Why: vLLM's Qwen2-VL / Qwen3-VL code imports transformers' Qwen2-VL image processor, which imports
torchvision; without it vLLM cannot even inspect the architecture ("Model architectures
['Qwen3VLForConditionalGeneration'] failed to be inspected"), so `rs:tiny-qwen3vl` (the default
model's architecture) could not be served here. The only torchvision wheels the registries serve
for Linux are CUDA builds. Beside `torch==2.13.0+cpu` their compiled ops do not load, and
`import torchvision` then dies with "operator torchvision::nms does not exist": its Python side
registers fake kernels for `torchvision::nms` and `torchvision::qnms`, ops that were never defined.

What: `make setup` installs that wheel without its dependencies (`torchvision==0.28.0`, the pair of
torch 2.13) and runs `python -m rs.util.torchvision_cpu install`, which puts a copy of this file and a
`.pth` line into the environment's site-packages. Every Python process of the environment (the
tests, the vLLM server, vLLM's own inspection subprocess, Ray workers) then runs `install_hook()` at
start-up: a finder that does nothing until the first `import torchvision`, and then, only when torch
is a CPU build and torchvision's compiled ops do not load, defines the schemas of those two ops so
the import succeeds. The image transforms work; `torchvision.ops.nms` itself does not, and nothing
rs or vLLM runs here calls it.

A GPU install (`pip install rs[vllm]` beside vLLM's CUDA torch and its matching torchvision) runs
none of this: it has no such `.pth`, and the hook would do nothing there (torch is not a CPU build).

Standard library only at import: the `.pth` line runs it in every process of the environment.
"""

from __future__ import annotations

import glob
import importlib.abc
import importlib.util
import os
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Any

MODULE_NAME = "_rs_torchvision_cpu"
"""The name of this file's copy in site-packages (independent of where `rs` itself is installed)."""
PTH_NAME = "rs-torchvision-cpu.pth"
#: The ops torchvision's Python side registers fake kernels for whether or not its compiled ops loaded.
SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)

_library: Any = None  # the torch.library.Library that holds the schemas (it must outlive the import)


def define_missing_ops() -> bool:
    """Before torchvision's first import: define its two ops' schemas if its compiled ops cannot load.

    Returns whether they were defined. Does nothing with a CUDA build of torch, without torchvision,
    or when torchvision's `_C` library loads (a matching build: it defines the ops itself).
    """
    global _library
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations or _library is not None:
        return False
    import torch

    if torch.version.cuda is not None or torch.version.hip is not None:
        return False
    for folder in spec.submodule_search_locations:
        for path in glob.glob(os.path.join(folder, "_C*.so")):
            try:
                torch.ops.load_library(path)
                return False  # a CPU torchvision: its own ops are there
            except Exception:  # OSError: a CUDA build's libraries are not on this machine
                pass
    _library = torch.library.Library("torchvision", "DEF")
    for schema in SCHEMAS:
        _library.define(schema)
    return True


class _BeforeTorchvision(importlib.abc.MetaPathFinder):
    """Runs `define_missing_ops` when `torchvision` is first imported, then steps aside for the real finders.

    Only when it is imported: asked for its spec alone (`importlib.util.find_spec("torchvision")`, which `datasets` does
    when it is imported) it gives the real finders' spec, its loader wrapped, and imports no torch."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torchvision":
            return None
        spec = _spec_elsewhere(name, path, target)
        if spec is not None and spec.loader is not None and not isinstance(spec.loader, _OpsFirst):
            spec.loader = _OpsFirst(spec.loader)
        return spec


def _spec_elsewhere(name: str, path: Any, target: Any) -> Any:
    """The spec the finders after this hook give `name`."""
    for finder in sys.meta_path:
        find = None if isinstance(finder, _BeforeTorchvision) else getattr(finder, "find_spec", None)
        spec = find(name, path, target) if find is not None else None
        if spec is not None:
            return spec
    return None


class _OpsFirst(importlib.abc.Loader):
    """torchvision's own loader, `define_missing_ops` run before it executes the package."""

    def __init__(self, loader: Any):
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        uninstall_hook()
        module.__loader__ = module.__spec__.loader = self.loader  # the package sees its own loader
        try:
            define_missing_ops()
        except Exception as err:  # never break an import over this; torchvision's own error follows
            print(f"{MODULE_NAME}: could not prepare torchvision's ops: {err!r}", file=sys.stderr)
        self.loader.exec_module(module)


def install_hook() -> None:
    """Put the finder first on `sys.meta_path` (once); it removes itself at the first `import torchvision`."""
    if "torchvision" not in sys.modules and not any(isinstance(f, _BeforeTorchvision) for f in sys.meta_path):
        sys.meta_path.insert(0, _BeforeTorchvision())


def uninstall_hook() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _BeforeTorchvision)]


def install(site_packages: Path | None = None) -> Path:
    """Copy this file into `site_packages` (the running environment's by default) with the `.pth` line that runs it."""
    target = Path(site_packages or sysconfig.get_paths()["purelib"])
    shutil.copyfile(__file__, target / f"{MODULE_NAME}.py")
    (target / PTH_NAME).write_text(f"import {MODULE_NAME}; {MODULE_NAME}.install_hook()\n")
    return target / PTH_NAME


def main(argv: list[str] | None = None) -> int:
    """`python -m rs.util.torchvision_cpu install [SITE_PACKAGES]`, as `make setup` runs it."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "install" or len(args) > 2:
        print(
            f"error: unknown arguments {' '.join(args) or '(none)'}\nhint: python -m rs.util.torchvision_cpu install [SITE_PACKAGES]",
            file=sys.stderr,
        )
        return 2
    print(f"installed {install(Path(args[1]) if len(args) == 2 else None)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
