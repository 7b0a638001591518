"""Answer verifiers: decide whether a model's final answer matches the official reference.

Usage:

    >>> from rs.verifiers import get_verifier
    >>> v = get_verifier("relaxed", tolerance=0.05)
    >>> v.match("19", "20"), v.name, v.params
    (True, 'relaxed', {'tolerance': 0.05, 'year_guard': True})

``prediction`` is the final answer with reasoning already removed (:func:`rs.extract.split_reasoning`); ``None``
(no final answer) never matches. ``reference`` is a string or a list of strings.

Config loaders validate a verifier block without instantiating it (and without optional dependencies) via
:func:`resolve_params` / :func:`verifier_params`. To add a verifier, write a module with a
``@register``-decorated :class:`Verifier` subclass and import it below.
"""

from rs.verifiers.base import (
    Param,
    Verifier,
    VerifierError,
    get_verifier,
    known_verifiers,
    register,
    resolve_params,
    verifier_params,
)

# Importing a module registers its verifier.
from rs.verifiers import alnum, anls, count, exact, math, mcq, relaxed, vqa  # noqa: E402, F401  isort: skip

__all__ = [
    "Param",
    "Verifier",
    "VerifierError",
    "get_verifier",
    "known_verifiers",
    "register",
    "resolve_params",
    "verifier_params",
]
