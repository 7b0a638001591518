"""``mcq``: multiple-choice letter match (AI2D, ScienceQA, A-OKVQA MC, MMMU, MathVista MC).

Reference extractors guess when they cannot parse: MMMU and ScienceQA fall back to a *random* option, MathVista
to the nearest option by edit distance, several others to the first capital letter in the text ("A dog is shown,
so the answer is B" → A). For rejection sampling a guess is a coin-flip false accept, so :func:`extract_choice`
returns ``None`` whenever the answer does not name exactly one option.

Extraction, in order:

1. If the answer has ``<answer>…</answer>`` tags (else ``\\boxed{…}``), their contents are read: every one must name
   the same letter, the text around them must state no other (``\\boxed{A} or \\boxed{B}``,
   ``<answer>B</answer> Actually the answer is A`` name no option) and nothing after the last may doubt it.
2. A bare letter, optionally wrapped: ``B``, ``(B)``, ``B.``, ``**B**``, ``[B]``, ``\\text{B}``, ``b``.
3. Letters stated as the answer — ``Answer: B``, ``The answer is (B)``, ``Final answer: **B**`` — plus a leading
   ``B) text`` / ``B. text`` / ``(B) text`` or a first line holding only the letter (``B\n\nBecause …``). Upper-case letters only here, so the article "a" is never option A.
   If these name two different letters (``The answer is A. No wait, the answer is C``) there is no answer.
   Nor is there when what follows the first statement doubts or takes it back (``B\n\nActually, A``, ``B. Wait…``,
   ``A could also be right``), names another letter on its own after it (``B. No, A.``, ``B. Make that A``),
   another line of the answer is just another letter (``B\nA``), it later says another letter is right
   (``C is also correct``, ``No, C is the right one``), names another letter after a clause opened by a negation
   or contrast (``B. However, C ...``, ``\\boxed{B}, although C ...``) or opens a later line with another letter
   as an option (``A) cat\\nB) dog``: the options restated); the same holds in step 4 and after a tag or box.
   Explanations that negate the other options (``B. A is wrong``, ``A is not correct``) are read.
4. Only if step 3 found nothing: ``option B`` / ``choice B`` / ``I choose B``, again only if exactly one letter.
5. If the option texts are known (the item's ``options``), an answer equal to one option's text (ignoring case,
   surrounding whitespace and a trailing period) selects that option.

Valid letters are the first ``len(options)`` of ``letters`` when options are given, else all of ``letters``; a
letter outside them is not an answer. ``Answer: AB`` and ``A and B`` name no single option and never match.

A letter followed straight by a word ("The answer is A dog") is the article "A", the pronoun "I" or the start of
an option's text, not a choice, unless the words are that option's own text; when the options are known, a letter
whose text is another option's ("Answer: A. dog" where dog is B) is a contradiction and names no option.
Certain rejections (``contradicts``): the answer commits to one valid letter that differs from the reference's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from rs.extract import answer_tag_spans, boxed_spans, hedges, outside_spans
from rs.verifiers.base import Item, Param, Verifier, VerifierError, as_references, register

__all__ = ["McqVerifier", "extract_choice"]

_BARE = re.compile(r"[\W_]*(?:\\text(?:bf)?\s*\{)?[\W_]*([A-Za-z])[\W_]*")
_ANSWER_MARKER = re.compile(
    r"(?i:\b(?:final\s+|correct\s+)?answer\s*(?:is\s*:?|:|：|=)?\s*(?:option\s+|choice\s+)?)"
    r"[*_(\[{\s]*(?:\\text(?:bf)?\s*\{)?\s*([A-Z])(?![A-Za-z0-9])"
)
# "B) text", "B. text", "(B) text", "B: text", or a first line holding only the (wrapped) letter.
_LEADING = re.compile(r"\s*[*_]*\s*[(\[]?([A-Z])(?:(?:[)\]]|[)\]]?[.:])[*_]*\s+\S|[)\].:*_]*[ \t]*\n)")
_OPTION_MARKER = re.compile(
    r"(?i:\b(?:option|choice|choose|select|pick)\s*:?\s*)[*_(\[\s]*([A-Z])(?![A-Za-z0-9])"
)


def _norm_option(text: str) -> str:
    text = " ".join(text.casefold().split()).strip("*_ ")
    return text[:-1].rstrip() if text.endswith(".") else text


_AFTER_LETTER = re.compile(r"[)\].:*_]*[ \t]*(?P<words>[^\n]*)")
_WORD_NEXT = re.compile(r"[ \t]+[A-Za-z]")
_CONFLICT = "\x00"  # a letter whose text names another option: no answer at all
_WRAPPED = re.compile(r"\(([A-Z])\)")


def _read_letter(text: str, m: re.Match[str], valid: str, options: Sequence[str] | None, *, word: bool = True) -> str | None:
    """The letter a marker match names, unless it is really a word: the article "A", the pronoun "I", or the
    start of an option's text ("A cat" where no option is "cat" under A); after "option" or "choice" (`word`
    False) a letter is always a letter. When the options are known, the text right after the letter must not be
    another option's text ("Answer: A. dog" where dog is B)."""
    letter = m.group(1)
    after = text[m.end(1):]
    words = _norm_option(_AFTER_LETTER.match(after).group("words").split(".")[0]) if options else ""
    if word and after[:1] in (" ", "\t") and _WORD_NEXT.match(after):  # "A cat": no ")", "." or ":" between the letter and the next word
        phrase = _norm_option(text[m.start(1):].split("\n", 1)[0])
        if options:
            if letter in valid and _norm_option(options[valid.index(letter)]) in (words, phrase):
                return letter
            if any(_norm_option(o) in (words, phrase) for o in options):
                return _CONFLICT
        if letter in ("A", "I"):
            return None
    if options and words and letter in valid:
        mine = _norm_option(options[valid.index(letter)])
        if words != mine and any(_norm_option(o) == words for o in options):
            return _CONFLICT
    return letter


def _bare_letter(text: str) -> str | None:
    """The upper-cased letter of a (stripped) answer that is just a wrapped letter ("b", "(B)", "**B**")."""
    return _bare_letter_cached(text) if len(text) <= 16 else _bare_letter_uncached(text)


def _bare_letter_uncached(text: str) -> str | None:
    bare = _BARE.fullmatch(text)
    return None if bare is None else bare.group(1).upper()


# Short answers repeat ("B", "(B)", "**B**"): the regex runs once per distinct one.
_bare_letter_cached = lru_cache(maxsize=1 << 12)(_bare_letter_uncached)


@lru_cache(maxsize=64)
def _answers(valid: str) -> frozenset[str]:
    """What a marker may name: a valid letter or the conflict sign."""
    return frozenset(valid) | {_CONFLICT}


def _one(letters: set[str]) -> str | None:
    if _CONFLICT in letters:
        return None
    return next(iter(letters)) if len(letters) == 1 else None


def extract_choice(text: str, letters: str = "ABCD", options: Sequence[str] | None = None) -> str | None:
    """The single option letter ``text`` commits to, or ``None`` (see the module docstring for the rules).

    Example:
        >>> extract_choice("The correct answer is **B**. Here's why: A is wrong.")
        'B'
        >>> extract_choice("Both A and B are possible.") is None
        True
    """
    valid = letters[: len(options)] if options else letters
    spans = answer_tag_spans(text) if "<" in text else []
    if not spans and "\\boxed" in text:
        spans = boxed_spans(text)
        if spans is None:
            return None  # a box never closed: truncated
    if spans:
        return _marked_choice(text, spans, letters, valid, options)
    return _plain_choice(text.strip(), valid, options)


def _marked_choice(text: str, spans: list[tuple[int, int, str]], letters: str, valid: str,
                   options: Sequence[str] | None) -> str | None:
    """The letter every answer tag (or box) names, when the text around them neither states another letter nor
    takes the answer back after the last one ("\\boxed{A} or \\boxed{B}", "<answer>B</answer> Actually, A")."""
    chosen = {extract_choice(content, letters, options) for _, _, content in spans}
    if len(chosen) != 1 or None in chosen:
        return None
    (letter,) = chosen
    if _taken_back(text, letter, spans[-1][1], valid):
        return None
    stated, _ = _stated(outside_spans(text, spans).strip(), valid, options)
    return letter if stated <= {letter} else None


def _stated(text: str, valid: str, options: Sequence[str] | None) -> tuple[set[str], int]:
    """Letters stated as the answer ("Answer: B", "The answer is (B)", a leading "B) text" or "B" line), and where
    the first statement ends (len(text) when there is none)."""
    stated: set[str] = set()
    first = len(text)
    for m in _ANSWER_MARKER.finditer(text):
        if (letter := _read_letter(text, m, valid, options)) is not None:
            stated.add(letter)
            first = min(first, m.end(1))
    leading = _LEADING.match(text)
    if leading is not None and (letter := _read_letter(text, leading, valid, options)) is not None:
        stated.add(letter)
        first = min(first, leading.end(1))
    return stated & _answers(valid), first


_CLAUSE_BREAK = re.compile(r"[\n.,;:!?]")
_LAST_LETTER = re.compile(r"(?<![A-Za-z0-9])([A-Z])[\W_]*$")
_LETTER = re.compile(r"(?<![A-Za-z0-9])([A-Z])(?![A-Za-z0-9])")
# A clause opened by a negation or contrast ("No, C ...", "However, C ...", ", although C ...", "Incorrect - C ...").
_CONTRAST_OPENING = re.compile(
    r"(?i)(?:^|[\n.;:!?,(\-–—])[\s*_]*(?:no|nope|not|however|but|though|although|wrong|incorrect|unless)\b")
# Another letter said to be right in its own sentence ("C is correct", "C is the right one", "C matches better"),
# unless a negation comes between ("A is not correct", "A is wrong, B is right" read for A).
_AFFIRMED = re.compile(
    r"(?<![A-Za-z0-9])([A-Z])(?![A-Za-z0-9])([^.\n;!?]{0,60}?)\b(?i:correct|right|true|answer|better|best|valid"
    r"|accurate|matches|fits)\b")
_NEGATION_BETWEEN = re.compile(r"(?i)\b(?:not|no|never|wrong|incorrect|isn|aren|doesn|don|cannot|neither|nor)\b|n't")


def _taken_back(text: str, letter: str, after: int, valid: str) -> bool:
    """Whether what follows a letter's statement (from ``after`` on) doubts it ("Actually, A", "Wait", "could also
    be") or names another letter on its own ("No, A.", "Make that A."), says another letter is right ("C is also
    correct"), names another letter after a clause opened by a negation or contrast ("However, C ..."), opens a later
    line with another letter as an option ("A) cat\\nB) dog"), or another line of the answer is just another letter
    ("B\\n\\nA")."""
    def another(candidate: str | None) -> bool:
        return candidate is not None and candidate in valid and candidate != letter

    rest = text[after:]
    if hedges(rest, negations=False):
        return True
    for m in _AFFIRMED.finditer(rest):
        if another(m.group(1)) and _NEGATION_BETWEEN.search(m.group(2)) is None:
            return True  # "B. C is also correct", "B\n\nNo, C is the right one."
    opening = _CONTRAST_OPENING.search(rest)
    if opening is not None and any(another(m.group(1)) for m in _LETTER.finditer(rest, opening.end())):
        return True  # "B\n\nHowever, C ...", "\\boxed{B}, although C ..."
    for line in rest.split("\n")[1:]:
        leading = _LEADING.match(line + "\n")
        if leading is not None and another(leading.group(1)):
            return True  # "A) cat\nB) dog\nC) bird": the options restated, none chosen
    if any(len(other := clause.strip(" \t*_()[]{}")) == 1 and another(other) for clause in _CLAUSE_BREAK.split(rest)):
        return True
    last = _LAST_LETTER.search(rest)
    if last is not None and another(last.group(1)):
        return True
    return "\n" in text and any(
        line and len(line) <= 16 and another(_bare_letter(line)) for line in (raw.strip() for raw in text.split("\n")))


def _plain_choice(text: str, valid: str, options: Sequence[str] | None) -> str | None:
    """:func:`extract_choice` of an answer without answer tags or boxes."""
    if not text:
        return None

    letter = _bare_letter(text)
    if letter is not None:
        return letter if letter in valid else None

    if "(" in text and len(set(_WRAPPED.findall(text)) & set(valid)) > 1:  # "(A) or (B)", "(B), not (A)": two options named
        return None
    stated, first = _stated(text, valid, options)
    if stated:
        letter = _one(stated)
        return None if letter is None or _taken_back(text, letter, first, valid) else letter

    named: set[str] = set()
    first = len(text)
    for m in _OPTION_MARKER.finditer(text):
        if (letter := _read_letter(text, m, valid, options, word=False)) is not None:
            named.add(letter)
            first = min(first, m.end(1))
    named &= _answers(valid)
    if named:
        letter = _one(named)
        return None if letter is None or _taken_back(text, letter, first, valid) else letter

    if options:
        wanted = _norm_option(text)
        hits = {valid[i] for i, opt in enumerate(options) if _norm_option(opt) == wanted}
        return _one(hits)
    return None


def _reference_letter(reference: str, valid: str, options: Sequence[str] | None) -> str | None:
    ref = reference.strip()
    letter = _bare_letter(ref)
    if letter is not None:
        return letter if letter in valid else None
    if options:
        wanted = _norm_option(ref)
        hits = [valid[i] for i, opt in enumerate(options) if _norm_option(opt) == wanted]
        return hits[0] if len(hits) == 1 else None
    return None


@register
class McqVerifier(Verifier):
    """The prediction must commit to exactly one option letter, equal to the reference letter."""

    name = "mcq"
    title = "multiple-choice letter match"
    PARAMS = {
        "letters": Param(str, "ABCDEFGH", "option labels in order, upper-case A-Z without repeats"),
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._letters = self._params["letters"]

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        letters = params["letters"]
        if (
            not letters
            or not letters.isascii()
            or not letters.isalpha()
            or not letters.isupper()
            or len(set(letters)) != len(letters)
        ):
            raise VerifierError(
                f"Parameter 'letters' of verifier 'mcq' must be distinct upper-case letters A-Z, got {letters!r}; "
                "e.g. 'ABCD' for four options."
            )

    @property
    def description(self) -> str:
        span = self._letters if len(self._letters) <= 2 else f"{self._letters[0]}–{self._letters[-1]}"
        return (
            f"Multiple choice with options labelled {span}. The answer must commit to exactly one option letter, "
            'which must equal the reference letter: a bare letter ("B", "(B)", "B.", "**B**"), a stated answer '
            '("Answer: B", "The answer is (B)", "B) the dog"), or, failing those, "option B" / "I choose B". '
            "Lower-case letters are only read when they are the whole answer, so the article \"a\" is never "
            "option A. When the option texts are known, an answer that repeats one option's text exactly selects "
            "that option.\n\n"
            "Nothing is ever guessed: an answer naming two different options (\"A and B\", \"the answer is A... "
            'no, C"), none at all, or a letter that is not an option is rejected — no random or nearest-option '
            "fallback as in some benchmark scripts. A letter followed directly by words (\"the answer is A dog\") "
            "is read as the article or the start of an option's text, not as a choice, unless the words are that "
            "option's own text; a letter paired with another option's text (\"A. dog\" when dog is option B) "
            "names no option. Nor does an answer that takes its letter back or doubts it (\"B\" then \"Actually, A\", "
            "\"B. Wait...\", \"A could also be right\"), names another letter on its own after it (\"B. No, A.\"), "
            "says another letter is right (\"C is also correct\"), names another letter after a negation or contrast "
            "opening a clause (\"B\" then \"However, C ...\"), has a line that is just another letter or opens "
            "with another letter as an option (the options restated: \"A) cat\" then \"B) dog\"), or marks two different "
            "letters (\"\\boxed{A} or \\boxed{B}\"); explanations that discuss the other options are fine."
        )

    def match(
        self,
        prediction: str | None,
        reference: str | Sequence[str],
        *,
        item: Item | None = None,
    ) -> bool:
        """Whether the letter extracted from ``prediction`` equals the reference letter.

        The item's options (their texts, in label order) are optional: when known, they limit the valid letters to
        their number and let a prediction or reference that repeats an option's text map to its letter.
        """
        if prediction is None:
            return False
        options = item.options if item is not None and item.options else None
        valid = self._letters[: len(options)] if options else self._letters
        if type(reference) is str:
            target = _reference_letter(reference, valid, options)
            return target is not None and extract_choice(prediction, self._letters, options) == target
        targets = {_reference_letter(r, valid, options) for r in as_references(reference)} - {None}
        if not targets:
            return False
        return extract_choice(prediction, self._letters, options) in targets

    def contradicts(
        self, prediction: str | None, reference: str | Sequence[str], *, item: Item | None = None
    ) -> bool:
        if prediction is None:
            return False
        options = item.options if item is not None and item.options else None
        valid = self._letters[: len(options)] if options else self._letters
        targets = {_reference_letter(r, valid, options) for r in as_references(reference)}
        if not targets or None in targets:
            return False
        chosen = extract_choice(prediction, self._letters, options)
        return chosen is not None and chosen not in targets

    @property
    def contradiction_rule(self) -> str:
        return "An answer that commits to exactly one option letter, different from the reference letter."
