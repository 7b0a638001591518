"""Verifier base class, parameter validation and the registry.

A verifier decides whether a model's *final answer* (reasoning already removed, see :mod:`rs.answers.extract`) matches
the official reference. Each verifier lives in its own module and registers itself with :func:`register`, so
adding one is a new module in this package (the registry imports them all) or anywhere else once imported.

Parameters are declared as a class attribute (``PARAMS``) rather than read from ``__init__`` signatures so that a
config loader can validate a ``verifier: {name: ..., params: {...}}`` block with :func:`resolve_params` before
anything is instantiated — and so that optional dependencies (``math-verify``) are only needed to *run* a
verifier, not to check a config that mentions it.
"""

from __future__ import annotations

import abc
import re
import string
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from typing import Any, ClassVar, NamedTuple, Protocol

from rs.answers.grade import Grader, Outcome
from rs.answers.numbers import Number, decimal_places
from rs.answers.values import Kind, Vocabulary, classify, polar_of, reference_values
from rs.errors import UsageError
from rs.registry import VERIFIERS, UnknownNameError

__all__ = [
    "Item",
    "ItemInfo",
    "Param",
    "Verifier",
    "VerifierError",
    "as_references",
    "plain_number",
    "get_verifier",
    "known_verifiers",
    "register",
    "resolve_params",
    "verifier_params",
]

# Enum members as module names where every check passes (Python 3.11 looks an enum class's attributes up through a hook).
_NUMBER, _TEXT, _ACCEPTED = Kind.NUMBER, Kind.TEXT, Outcome.ACCEPTED

VERSION = "4"
"""The verifiers' shared rules (this module): bump when a change decides some match otherwise (`rs.pipeline.versions`); a
verifier's own rules are versioned by its class's `version`."""


class VerifierError(UsageError, ValueError):
    """Raised for an unknown verifier, a bad parameter, or a verifier whose optional dependency is missing."""


class Item(Protocol):
    """What a verifier may know of the item it verifies besides the references (`rs.records.QAItem` is one)."""

    @property
    def question(self) -> str:
        """The question as the source recorded it (its words are neutral beside a stated value)."""
        ...

    @property
    def options(self) -> Sequence[str]:
        """The multiple-choice option texts in label order; empty when the item has none."""
        ...

    @property
    def qtype(self) -> str | None:
        """The question type, when the source knows it."""
        ...


@dataclass(frozen=True)
class ItemInfo:
    """An :class:`Item` built by hand (tests, calibration cases)."""

    options: Sequence[str] = ()
    qtype: str | None = None
    question: str = ""


class Param(NamedTuple):
    """Declaration of one verifier parameter: its type, default and a one-line explanation."""

    type: type
    default: Any
    doc: str


class Verifier(abc.ABC):
    """Decides whether a final answer matches a reference.

    Subclasses set ``name`` (registry key), ``title`` (short human name used as a dataset-card heading),
    ``version`` (bumped when it decides otherwise) and ``PARAMS``, implement :meth:`compare` (the metric on a clean
    answer) and :attr:`description`, and may override :meth:`kind` (what the answer is read for),
    :meth:`compare_numbers` and :meth:`check_params` for range checks. Instances are immutable after construction
    and safe to share between threads (except ``math``, see its docstring).
    """

    name: ClassVar[str]
    title: ClassVar[str]
    version: ClassVar[str]
    """Bumped when the verifier decides some match otherwise: the sample stage re-verifies (`rs.pipeline.versions`). A class
    that declares none is keyed by its code."""
    PARAMS: ClassVar[dict[str, Param]] = {}

    def __init__(self, **params: Any) -> None:
        self._params = resolve_params(self.name, params)

    @property
    def params(self) -> dict[str, Any]:
        """Resolved parameters, defaults filled in (a copy; mutating it changes nothing)."""
        return dict(self._params)

    @property
    @abc.abstractmethod
    def description(self) -> str:
        """Plain-words Markdown saying how a match is decided, with the actual parameter values.

        Used verbatim on dataset cards, so it must describe the behaviour exactly and never mention code.
        """

    def compare(self, value: str, references: Sequence[str], *, item: Item | None = None) -> bool:
        """The verifier's own metric (alnum, relaxed accuracy, ANLS, ...) on a clean answer ``value``.

        ``value`` is what :mod:`rs.answers` read as the stated answer: wrappers removed and, for a typed value, its
        canonical form ("3" for "three.", "sphere" for "Ball", "yes" for "**Yes**"). A reference that is empty
        after normalisation never matches. ``references`` may hold several answers: for most verifiers any may
        match, for ``vqa`` they are the annotators' votes.

        A verifier written before answers were read for it (one that overrides :meth:`match` only) is given the
        stated answer through its own ``match``.
        """
        if type(self).match is not Verifier.match:
            return type(self).match(self, value, references, item=item)
        raise NotImplementedError(f"{type(self).__name__} must implement compare(value, references, *, item=None)")

    notation_only: ClassVar[bool] = False
    """Whether :meth:`compare` forgives notation only (case, punctuation, spacing, accents, a count's leading zero):
    then a match is the same value (:meth:`same_value`). ``alnum``, ``exact``, ``count`` and ``mcq`` are such
    metrics; ANLS (a distance), relaxed accuracy (a tolerance), VQA accuracy and math-verify (equivalences) are not."""
    letters: ClassVar[str] = string.ascii_uppercase
    """The option labels, in order, when an item has options (``mcq`` sets its own)."""
    identifiers_as_written: ClassVar[bool] = False
    """Whether a reference written as a fraction or in LaTeX ("2/4", "12/05", "\\frac{1}{2}") is an identifier, a page
    or a date compared as written (notation only), never as a value ("1/2" is not "2/4"): the text metrics' references
    (``anls``, ``exact``, ``alnum``, ``vqa``)."""

    def kind(
        self, references: Sequence[str], *, item: Item | None = None, vocabulary: Vocabulary | None = None
    ) -> Kind:
        """The kind of value the references are (a number, yes/no, an option, a term of the closed set, free text):
        what the answer is read for. An item with options whose every reference names one (its letter or its text)
        is read for options whatever the verifier; else from the references themselves (:func:`rs.answers.classify`)."""
        options = getattr(item, "options", None)
        if (
            options
            and (options := tuple(options))
            and references
            and all(option_index(r, options, self.letters) is not None for r in references)
        ):
            return Kind.OPTION
        kind = classify(references, vocabulary)
        if kind is _NUMBER and self.identifiers_as_written and any(_WRITTEN_AS_IDENTIFIER(r) for r in references):
            return _TEXT  # "2/4", "12/05": a page, a date or a code, compared as written
        return kind

    def compare_value(
        self,
        kind: Kind,
        value: Any,
        references: Sequence[str],
        *,
        item: Item | None = None,
        vocabulary: Vocabulary | None = None,
    ) -> bool:
        """Whether a typed ``value`` of ``kind`` read from the answer matches the references.

        Numbers are compared by value (:meth:`compare_numbers`); a yes/no or a term is given to :meth:`compare` in
        its canonical form, with the references in theirs.
        """
        if kind is _NUMBER:
            numbers = reference_values(kind, references)
            return numbers is not None and self.compare_numbers(value, numbers)
        if kind is Kind.POLAR:
            return self.compare(value, [polar_of(r) or r for r in references], item=item)
        if kind is Kind.TERM and vocabulary:
            return self.compare(value, [vocabulary.canonical(r) or r for r in references], item=item)
        if kind is Kind.OPTION:
            options = tuple(getattr(item, "options", ()) or ())
            target = {option_index(r, options, self.letters) for r in references} - {None}
            return str(value) in {self.letters[i] for i in target if i < len(self.letters)}
        return self.compare(str(value), references, item=item)

    def same_value(
        self,
        kind: Kind,
        value: Any,
        references: Sequence[str],
        *,
        item: Item | None = None,
        vocabulary: Vocabulary | None = None,
    ) -> bool:
        """Whether ``value`` is a reference once notation only is normalised: a number of the same value (a percent
        sign, grouping, LaTeX, words are notation; a conversion is not), free text equal once case, punctuation
        and spacing are folded (:func:`text_key`), a yes/no, option or term that is the reference's."""
        if self.notation_only:
            return self.compare_value(kind, value, references, item=item, vocabulary=vocabulary)
        if kind is _NUMBER:
            numbers = reference_values(kind, references)
            if numbers is not None:
                for r in numbers:
                    if value.agrees(r):
                        return True
            return False
        if kind is Kind.TEXT:
            key = text_key(str(value))
            return bool(key) and any(text_key(r) == key for r in references)
        return self.compare_value(kind, value, references, item=item, vocabulary=vocabulary)

    def own_leniency(self, kind: Kind, value: Any, references: Sequence[str], *, item: Item | None = None) -> bool:
        """Whether a match beyond notation is the task's own leniency, accepted without a judge (none by default;
        ``relaxed`` on a value read off an axis)."""
        return False

    def near_value(self, kind: Kind, value: Any, references: Sequence[str], *, item: Item | None = None) -> bool:
        """Whether a notation, scale or tolerance difference could make ``value`` a reference: a percent conversion,
        a scale word ("12.5 billion" for 12.5 "in billions"), the other separators ("1.000" for 1000, "2,500" for
        2.5), a rounding at either side's precision ("1/3" for 0.33). Such a value is never certainly wrong.

        It is asked only of a value the metric does not match (:meth:`compare_value` is False: a match is never
        certainly wrong either), so a metric's own leniency (``relaxed``'s tolerance) need not be repeated here."""
        if kind is not _NUMBER:
            return False
        numbers = reference_values(kind, references)
        if numbers is None:
            return True
        question = getattr(item, "question", None)
        scales = bool(question) and _SCALE_QUESTION.search(question) is not None
        for r in numbers:
            if near_number(value, r, scales=scales):
                return True
        return False

    def compare_numbers(self, value: Number, references: Sequence[Number]) -> bool:
        """Whether a number equals one of the reference numbers (a percent sign read either way: "42%" is 42 or
        0.42); a qualified number ("about 3") never does."""
        return any(value.agrees(r) for r in references)

    def certain_kind(
        self, kind: Kind, references: Sequence[str], *, item: Item | None = None, vocabulary: Vocabulary | None = None
    ) -> bool:
        """Whether a clean value of ``kind`` that differs from ``references`` is certainly wrong: every reference is a
        value of that kind too (free text never is)."""
        return kind is not _TEXT and reference_values(kind, references, vocabulary) is not None

    def certain_value(self, kind: Kind, value: Any) -> bool:
        """Whether a stated ``value`` of ``kind`` is one this verifier can call wrong for sure (a count verifier: a
        whole number, not "seven hundredths")."""
        return True

    def grader(self) -> Grader:
        """A grader reading answers for this verifier, without a family's closed set of answers."""
        grader = self.__dict__.get("_grader")
        if grader is None:
            grader = self.__dict__["_grader"] = Grader(self)
        return grader

    def match(self, prediction: str | None, reference: str | Sequence[str], *, item: Item | None = None) -> bool:
        """Whether ``prediction`` (final answer, reasoning removed; ``None`` = no answer) is accepted against
        ``reference``: read once (:mod:`rs.answers`), one clean value matching, nothing else stated against it.

        ``item`` is what else is known of the item (its question, its multiple-choice options in label order, its
        question type; a ``QAItem`` will do).
        """
        grader = self.__dict__.get("_grader") or self.grader()
        grade = grader.grade(prediction, reference if type(reference) is str else as_references(reference), item=item)
        return grade.outcome is _ACCEPTED

    def contradicts(self, prediction: str | None, reference: str | Sequence[str], *, item: Item | None = None) -> bool:
        """Whether ``prediction`` is *certainly* wrong: one clean value of the reference's kind that differs from
        every reference after notation is normalised, with nothing in the rest that matches. The judge may not
        overrule such a rejection. Anything not read for sure is undecided, the judge's."""
        return self.grader().grade(prediction, as_references(reference), item=item).certain

    @property
    def contradiction_rule(self) -> str | None:
        """Plain words, for the card, saying which rejections are certain; ``None``: none."""
        return (
            "An answer that states one value of the reference's kind (a number, yes or no, an option, a term of the "
            "family's answers), plainly, different from every reference beyond any notation, scale word, percent "
            "conversion, rounding or tolerance, with nothing after it that retracts, corrects or hedges it (in any "
            "script) and nothing said after it that matches or nearly matches."
        )

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        """Range/consistency checks on already type-checked params; raise :class:`VerifierError` on failure."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params.items())
        return f"{type(self).__name__}({args})"


def register(cls: type[Verifier]) -> type[Verifier]:
    """Class decorator adding a verifier to the registry (:data:`rs.registry.VERIFIERS`) under ``cls.name``."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__name__} must set a non-empty class attribute `name` to be registered.")
    return VERIFIERS.register(name)(cls)


def known_verifiers() -> list[str]:
    """Names of all registered verifiers, sorted."""
    return VERIFIERS.names()


def _verifier_class(name: str) -> type[Verifier]:
    try:
        return VERIFIERS.get(name)
    except UnknownNameError as err:
        raise VerifierError(str(err)) from None


def verifier_params(name: str) -> dict[str, tuple[type, Any]]:
    """``{param: (type, default)}`` for verifier ``name``; raises :class:`VerifierError` if the name is unknown.

    Works without the verifier's optional dependencies installed, so configs can be validated anywhere.
    """
    return {key: (spec.type, spec.default) for key, spec in _verifier_class(name).PARAMS.items()}


def _describe_params(name: str, specs: Mapping[str, Param]) -> str:
    if not specs:
        return f"Verifier {name!r} takes no parameters."
    listed = "; ".join(
        f"{key} ({spec.type.__name__}, default {spec.default!r}): {spec.doc}" for key, spec in specs.items()
    )
    return f"Valid parameters for verifier {name!r}: {listed}."


def _coerce(name: str, key: str, spec: Param, value: Any, specs: Mapping[str, Param]) -> Any:
    expected = spec.type
    # bool is an int subclass: `tolerance=True` is a config mistake, not 1.0.
    ok = not isinstance(value, bool) or expected is bool
    if ok and expected is float:
        ok = isinstance(value, (int, float))
        value = float(value) if ok else value
    elif ok:
        ok = isinstance(value, expected)
    if not ok:
        raise VerifierError(
            f"Parameter {key!r} of verifier {name!r} must be {expected.__name__}, got {type(value).__name__} "
            f"{value!r}. {_describe_params(name, specs)}"
        )
    return value


def resolve_params(name: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Validate ``params`` for verifier ``name`` and return them with defaults filled in, without instantiating.

    Raises :class:`VerifierError` naming the offending parameter and listing the valid ones with their types and
    defaults, so a config loader can report the problem before any work starts.
    """
    cls = _verifier_class(name)
    specs = cls.PARAMS
    params = dict(params or {})
    unknown = sorted(set(params) - set(specs))
    if unknown:
        raise VerifierError(f"Unknown parameter {unknown[0]!r} for verifier {name!r}. {_describe_params(name, specs)}")
    resolved = {
        key: _coerce(name, key, spec, params[key], specs) if key in params else spec.default
        for key, spec in specs.items()
    }
    cls.check_params(resolved)
    return resolved


def get_verifier(name: str, **params: Any) -> Verifier:
    """Instantiate the verifier registered as ``name`` with ``params`` (validated, defaults filled).

    Example:
        >>> v = get_verifier("relaxed", tolerance=0.05)
        >>> v.match("19.5", "20.5")  # within 5%, a value read off an axis (a whole number may be a count: the judge's)
        True
    """
    return _verifier_class(name)(**params)


def as_references(reference: str | Sequence[str] | int | float) -> tuple[str, ...]:
    """Normalise a reference argument to a tuple of strings.

    Accepts one string, a list/tuple of strings, or numbers (converted with ``str``), because dataset columns
    sometimes store counts as integers. Anything else is a data bug and raises :class:`VerifierError`.
    """
    if isinstance(reference, str):
        return (reference,)
    if isinstance(reference, (list, tuple)):
        return tuple(_one_reference(r) for r in reference)
    return (_one_reference(reference),)


def _one_reference(reference: Any) -> str:
    if isinstance(reference, str):
        return reference
    if isinstance(reference, (int, float)) and not isinstance(reference, bool):
        return str(reference)
    raise VerifierError(
        f"A reference must be a string, a number or a list of those; got {type(reference).__name__} "
        f"{reference!r}. Check the dataset's answer column."
    )


def option_index(reference: str, options: Sequence[str], letters: str = string.ascii_uppercase) -> int | None:
    """The option a reference names: its bare letter ("B", "(B)") or its text; None when it names none."""
    ref = reference.strip().strip("().").strip()
    if len(ref) == 1 and ref.upper() in letters[: len(options)]:
        return letters.index(ref.upper())
    key = text_key(reference)
    hits = [i for i, o in enumerate(options) if key and text_key(o) == key]
    return hits[0] if len(hits) == 1 else None


_PUNCT = re.compile(r"(?<!\d)[^\w\s](?!\d)|_")


@lru_cache(maxsize=1 << 14)
def text_key(text: str) -> str:
    """Free text with its notation folded: compatibility forms, case, accents on Latin letters ("Café" is "cafe"),
    punctuation not between digits, spacing."""
    text = unicodedata.normalize("NFKC", text).casefold()
    if not text.isascii():
        bare = "".join(c for c in unicodedata.normalize("NFKD", text) if unicodedata.category(c) != "Mn")
        text = bare if bare.isascii() else text
    return " ".join(_PUNCT.sub(" ", text).split())


_WRITTEN_AS_IDENTIFIER = re.compile(r"[/:½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅛⅜⅝⅞⅐⅑⅒]|\\[dt]?frac").search
"""A reference written with a fraction bar, LaTeX or a colon: in a text metric's item, an identifier as much as a value."""

_SCALES = (Fraction(100), Fraction(1000), Fraction(10**6), Fraction(10**9), Fraction(10**12))


_SCALE_QUESTION = re.compile(
    r"\b(?:hundreds|thousands|millions|billions|trillions|percent|percentage|%)", re.IGNORECASE
)


def near_number(value: Number, reference: Number, *, scales: bool = False) -> bool:
    """Whether ``value`` may be ``reference`` written at another scale (when either is written with a scale word or
    the question names one, ``scales``), through a percent sign, with the other separators ("1.000" for 1000), or
    rounded."""
    if value.qualifier or reference.qualifier:
        return True
    a, b = value.value, reference.value
    if (value.regrouped is not None and value.regrouped == b) or (
        reference.regrouped is not None and reference.regrouped == a
    ):
        return True  # "1.000" for 1000, "2,500" for 2.5: a thousands point or a decimal comma
    if value.percent != reference.percent and value.converts(reference):
        return True
    if (scales or value.scaled or reference.scaled) and any(a == b * s or a * s == b for s in _SCALES):
        return True
    (an, ad), (bn, bd) = a.as_integer_ratio(), b.as_integer_ratio()
    if (an == bn and ad == bd) or ad == bd == 1:
        return False  # the same value, or two whole numbers
    # within half a unit of the last decimal place either is written to (0.005 for 0.33; none for 1/3, which has no
    # finite decimal): |a - b| <= 1 / (2 * 10**places), in integers
    places = [p for p in (decimal_places(ad), decimal_places(bd)) if p is not None]
    if not places:
        return False
    return 2 * 10 ** min(places) * abs(an * bd - bn * ad) <= ad * bd


_PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?")


def plain_number(text: str) -> Decimal | None:
    """The value of an answer that is just a number ("12", "-3.5", "1,234", "7."), else None.

    ASCII digits only, an optional sign, strict thousands grouping, one trailing period allowed:
    what `contradicts` may compare as numbers without guessing.
    """
    text = text.strip()
    if text[-1:] == ".":
        text = text[:-1]
    if _PLAIN_NUMBER.fullmatch(text) is None:
        return None
    return Decimal(text.replace(",", ""))
