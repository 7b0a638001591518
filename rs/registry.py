"""One small registry for every plug-in kind: source kinds, engine kinds, cleaning steps, verifiers, built-in models.

A plug-in is a module that registers itself on import (``@SOURCES.register("hub")``). A registry
imports the modules of its package the first time it is asked for a name, so adding a kind is its
module and nothing else; a plug-in that lives outside the package is registered by importing it, or
by an entry point in its distribution's metadata (group ``rs.sources``, ``rs.engines``,
``rs.cleaning``, ``rs.verifiers`` or ``rs.models``, value: the module to import).

Source and engine kinds are classes with a ``Config`` dataclass, the block ``families.yaml`` gives
them; its ``kind`` field is the registered name. Cleaning steps are keyed instead: the name is the
step's key under ``cleaning:``. The families loader validates each block against its plug-in's
``Config``, with the file and line of every problem.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Generic, TypeVar

from rs.errors import UsageError

__all__ = ["CLEANING", "ENGINES", "MODELS", "SOURCES", "VERIFIERS", "KindConfig", "Registry", "UnknownNameError"]

T = TypeVar("T")


class UnknownNameError(UsageError, ValueError):
    """A name no plug-in of that kind registered; the message lists the registered ones."""


@dataclass(kw_only=True)
class KindConfig:
    """A plug-in's block in ``families.yaml``: ``kind`` names the registered plug-in, the subclass holds its keys."""

    kind: str


class Registry(Generic[T]):
    """Plug-ins of one kind by name, found in ``package`` (and in ``rs.<group>`` entry points) on first use.

    Example:
        >>> from rs.registry import SOURCES
        >>> SOURCES.names()
        ['files', 'hub', 'synthetic']
    """

    def __init__(
        self, what: str, *, package: str | None, group: str, default: str | None = None, by: str = "kind"
    ) -> None:
        self.what = what
        self.by = by
        """How a families.yaml block names its plug-in: by its `kind` field, or by its `key` in a mapping."""
        self.default = default
        """The kind a block without `kind` gets, if any."""
        self.package = package
        self.group = group
        self._entries: dict[str, T] = {}
        self._discovered = False

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator adding ``entry`` under ``name``; registering another entry under a taken name is a bug."""

        def add(entry: T) -> T:
            existing = self._entries.get(name)
            if existing is not None and existing is not entry:
                raise TypeError(f"{self.what} {name!r} is already registered by {_qualname(existing)}")
            self._entries[name] = entry
            return entry

        return add

    def get(self, name: str) -> T:
        """The plug-in registered as ``name``; raises :class:`UnknownNameError` listing the registered names."""
        self._discover()
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise UnknownNameError(f"Unknown {self.what} {name!r}. Known: {', '.join(self.names())}.") from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        self._discover()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self._discover()
        return name in self._entries

    def items(self) -> list[tuple[str, T]]:
        """``(name, plug-in)`` pairs, sorted by name."""
        self._discover()
        return sorted(self._entries.items())

    def _discover(self) -> None:
        if self._discovered:
            return
        self._discovered = True  # first: a module being imported may look itself up
        if self.package is not None:
            package = importlib.import_module(self.package)
            for module in pkgutil.iter_modules(package.__path__):
                if not module.name.startswith("_"):
                    importlib.import_module(f"{self.package}.{module.name}")
        for entry_point in metadata.entry_points(group=self.group):
            module = entry_point.value.split(":", 1)[0]
            try:
                importlib.import_module(module)
            except ImportError as err:
                raise UsageError(
                    f"the {self.what} plug-in {entry_point.name!r} (entry point group {self.group}) names module {module!r}, "
                    f"which cannot be imported: {err}. Reinstall the distribution that provides it, or uninstall it."
                ) from err


def _qualname(entry: object) -> str:
    return f"{getattr(entry, '__module__', '?')}.{getattr(entry, '__qualname__', entry)!s}"


SOURCES: Registry[type] = Registry("source kind", package="rs.sources", group="rs.sources")
"""Source kinds: classes with a ``Config`` (a :class:`KindConfig`) and ``from_config(config, base_dir=)``."""
ENGINES: Registry[type] = Registry("engine kind", package="rs.engines", group="rs.engines", default="vllm")
"""Engine kinds: classes with a ``Config`` (a :class:`KindConfig`) and ``from_config(config, model, base_dir=)``."""
CLEANING: Registry[type] = Registry("cleaning step", package="rs.pipeline.clean", group="rs.cleaning", by="key")
"""Optional cleaning steps by their key under ``cleaning:``: ``ItemFilter`` classes with a ``Config`` and an ``order``."""
VERIFIERS: Registry[type] = Registry("verifier", package="rs.verifiers", group="rs.verifiers")
"""Verifiers: :class:`rs.verifiers.base.Verifier` subclasses by ``name``."""
MODELS: Registry[Any] = Registry("built-in model", package=None, group="rs.models")
"""Models named ``rs:NAME`` in families.yaml, by NAME: :class:`rs.engines.models.BuiltinModel` objects. rs ships none:
the demo and test models (``rs:demo-vlm``, ``rs:tiny-vlm``, ``rs:tiny-qwen3vl``) come with the ``rs-demo``
distribution (``demo/``), which registers them through its ``rs.models`` entry point."""
