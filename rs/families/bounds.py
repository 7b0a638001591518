"""Bounds on what a families file may make the loader do, checked on the composed YAML before any other walk.

YAML aliases share one node among every place that names it: ten anchors of ten aliases each stand for 10^10
nodes in a file of a few hundred bytes (a "billion laughs"). Composing is cheap (the nodes are shared), but
everything after it walks the values as written out: the duplicate-key check, the merge of `defaults`, the
type checks, a vocabulary or engine arguments turned into Python objects and hashed. So the file is measured as
those walks would see it, aliases expanded (each node counted once per place it is reached, with memoisation so
that the measuring itself is linear in the composed nodes), and refused beyond `MAX_EXPANDED_NODES` at the line of
the smallest block that goes over it. An alias inside its own anchor (a recursive structure) is refused too: no
value of a family is recursive, and the walks would not end.
"""

from __future__ import annotations

from pathlib import Path

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_FILE_BYTES = 4 * 2**20
"""A families file larger than this (4 MiB) is refused unread: the shipped one is under 50 kB, and PyYAML reads about
a megabyte a second (a 50 MB instruction took minutes before anything was checked)."""

MAX_EXPANDED_NODES = 1_000_000
"""Nodes a families file may stand for once its aliases are written out (`defaults:` counted once per family it is
merged into). The shipped families.yaml stands for about 10,000 (measured by `expanded_size`); a hand-written file
a hundred times larger is still far below, and a million nodes are walked in a few seconds, where the 10^10 of an
alias bomb would take hours."""

MAX_DEPTH = 100
"""Levels of lists and mappings within one another (the shipped families.yaml has 7): the loader's walks recurse once
per level, so a deeper file would end in a RecursionError instead of an error that says where."""


class ExpansionError(ValueError):
    """A families file that stands for too many nodes, or a recursive one: `node` is where, `problem` what."""

    def __init__(self, node: Node, problem: str):
        super().__init__(problem)
        self.node = node
        self.problem = problem


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def expanded_size(root: Node, limit: int = MAX_EXPANDED_NODES) -> int:
    """Nodes below and including `root` with every alias written out; `ExpansionError` beyond `limit` or on a cycle.

    Iterative (a deeply nested file does not exhaust Python's stack here) and memoised by node: a node shared by
    many aliases is measured once and counted wherever it is reached. Its nesting (height, aliases followed) is bounded
    by `MAX_DEPTH` the same way."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    heights: dict[int, int] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            size = 1 + sum(sizes[id(child)] for child in _children(node))
            if size > limit:
                largest = max(_children(node), key=lambda child: sizes[id(child)])
                raise ExpansionError(
                    node,
                    f"this block stands for more than {limit:,} values once its YAML aliases are written out "
                    f"(about {size:,}; the largest part, at line {largest.start_mark.line + 1}, about "
                    f"{sizes[id(largest)]:,}): aliases of aliases multiply; write the values out or share fewer levels",
                )
            height = 1 + max((heights[id(child)] for child in _children(node)), default=0)
            if height > MAX_DEPTH:
                raise ExpansionError(
                    node, f"nested more than {MAX_DEPTH} lists or mappings deep; no setting of a family needs so many"
                )
            sizes[key], heights[key] = size, height
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise ExpansionError(node, "a YAML alias inside its own anchor makes a value that contains itself")
        on_path.add(key)
        stack.append((node, True))
        for child in reversed(_children(node)):
            if id(child) in on_path:
                raise ExpansionError(child, "a YAML alias inside its own anchor makes a value that contains itself")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def check_file_size(path: Path) -> str | None:
    """`file: problem` when the families file is over `MAX_FILE_BYTES`, else None (an unreadable one: the read says why)."""
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if size <= MAX_FILE_BYTES:
        return None
    return (
        f"{path}: {size:,} bytes, over the {MAX_FILE_BYTES:,} a families file may have (the shipped one is under "
        "50 kB): a setting of a family is a few lines; keep data (vocabularies, prompts) short or in the source"
    )


def check_expansion(path: Path, root: MappingNode, limit: int = MAX_EXPANDED_NODES) -> str | None:
    """`file:line: problem` when the families file at `path` (composed to `root`) stands for too much, else None.

    The whole document is measured, then `defaults:` once more for each family beyond the first (the loader merges it
    into every family and walks the result)."""
    try:
        total = expanded_size(root, limit)
        sections = {k.value: v for k, v in root.value if isinstance(k, ScalarNode)}
        defaults, families = sections.get("defaults"), sections.get("families")
        if defaults is not None and isinstance(families, MappingNode) and len(families.value) > 1:
            extra = expanded_size(defaults, limit) * (len(families.value) - 1)
            if total + extra > limit:
                raise ExpansionError(
                    defaults,
                    f"defaults: merged into each of the {len(families.value)} families, the file stands for more "
                    f"than {limit:,} values (about {total + extra:,}); move what only some families need into them",
                )
    except ExpansionError as err:
        return f"{path}:{err.node.start_mark.line + 1}: {err.problem}"
    return None
