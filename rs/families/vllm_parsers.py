"""The reasoning parser names of the installed vLLM, read from its source without importing it (an import takes ~10 s).

`model.reasoning.parser: qwen4` was refused only once the model loaded, after cleaning; the loader
checks the name against this list instead. Outside `rs.engines` so that the families schema can use
it (`rs.engines` imports `rs.families`).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

__all__ = ["known_reasoning_parsers"]


@functools.cache
def known_reasoning_parsers() -> frozenset[str] | None:
    """The reasoning parser names the installed vLLM registers (`vllm.reasoning`'s table, read without importing it);
    None when vLLM is not installed or the table is not where it was (then the name is left to vLLM)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "reasoning" / "__init__.py"
    try:
        module = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError):
        return None
    for node in module.body:
        target = (
            node.targets[0]
            if isinstance(node, ast.Assign) and len(node.targets) == 1
            else getattr(node, "target", None)
        )
        if (
            isinstance(target, ast.Name)
            and target.id == "_REASONING_PARSERS_TO_REGISTER"
            and isinstance(node.value, ast.Dict)
        ):
            names = {k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            return frozenset(names) or None
    return None
