"""Answer verifiers: decide whether a model's final answer matches the official reference.

Usage:

    >>> from rs.verifiers import get_verifier
    >>> v = get_verifier("relaxed", tolerance=0.05)
    >>> v.match("19.5", "20.5"), v.name, v.params
    (True, 'relaxed', {'tolerance': 0.05, 'year_guard': True})

``prediction`` is the final answer with reasoning already removed (:func:`rs.answers.extract.split_reasoning`); ``None``
(no final answer) never matches. ``reference`` is a string or a list of strings.

Config loaders validate a verifier block without instantiating it (and without optional dependencies) via
:func:`resolve_params` / :func:`verifier_params`. To add a verifier, write a module in this
package with a ``@register``-decorated :class:`Verifier` subclass: the registry (:data:`rs.registry.VERIFIERS`)
imports every module here on first lookup.
"""

from rs.verifiers.base import (
    Item,
    ItemInfo,
    Param,
    Verifier,
    VerifierError,
    get_verifier,
    known_verifiers,
    register,
    resolve_params,
    verifier_params,
)

__all__ = [
    "Item",
    "ItemInfo",
    "Param",
    "Verifier",
    "VerifierError",
    "get_verifier",
    "known_verifiers",
    "register",
    "resolve_params",
    "verifier_params",
]
