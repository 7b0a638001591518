"""mkdocs hook: adds the reference pages rendered from the code (`rs.reference`) to the site at build time."""

from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files

from rs.reference import pages


def on_files(files: Files, config: Any) -> Files:
    for path, markdown in pages().items():
        files.append(File.generated(config, path, content=markdown))
    return files
