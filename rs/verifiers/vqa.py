"""``vqa``: VQAv2 soft accuracy (VQAv2, TextVQA, OK-VQA, VizWiz, A-OKVQA direct answers).

A prediction earns ``min(1, k / 3)`` where ``k`` is the number of annotators who gave the same answer after the
official normalisation (GT-Vision-Lab/VQA ``vqaEval.py``). Deviations from that script, each deliberate:

* Normalisation is applied to prediction and references **always**. The official local script skips it when all
  ten references are identical, so ``"Two"`` against ten ``"2"`` scores 0 there but 1 on the EvalAI server.
* The official period regex ``(?!<=\\d)(\\.)(?!\\d)`` is a mistyped look-behind; what it actually does — delete
  every ``.`` not followed by a digit, so ``"3."`` becomes ``"3"`` — is kept, without the accidental 32-period
  limit (``re.UNICODE`` passed as ``count``).
* Fewer than three references are not annotator votes but alternative answers: any match scores 1.0. With a
  single reference a match is therefore accepted (not 1/3). Annotators are counted before answers that
  normalise to nothing are dropped, so ten annotators of whom nine answered "" or "the" leave one vote (1/3),
  not one alternative answer; repeats are votes (the sources keep them).
* ``leave_one_out=True`` reproduces the official averaging over the n subsets of n−1 annotators (three matching
  annotators out of ten then score 0.9, not 1.0); it is off by default so that ``threshold=1.0`` reads as
  "at least three annotators agree".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from rs.answers import Kind, Vocabulary, render
from rs.answers.values import reference_values
from rs.verifiers.base import Item, Param, Verifier, VerifierError, as_references, register

__all__ = ["VqaVerifier", "vqa_normalise", "vqa_score"]

# Official `contractions` table (apostrophe-less spelling -> spelling with apostrophes). Its capitalised keys
# ("Im", "Ive", "Id've", "I'dve") can never fire because the text is lower-cased first, so they are omitted;
# the result is identical.
_CONTRACTIONS = {
    "aint": "ain't",
    "arent": "aren't",
    "cant": "can't",
    "couldve": "could've",
    "couldnt": "couldn't",
    "couldn'tve": "couldn't've",
    "couldnt've": "couldn't've",
    "didnt": "didn't",
    "doesnt": "doesn't",
    "dont": "don't",
    "hadnt": "hadn't",
    "hadnt've": "hadn't've",
    "hadn'tve": "hadn't've",
    "hasnt": "hasn't",
    "havent": "haven't",
    "hed": "he'd",
    "hed've": "he'd've",
    "he'dve": "he'd've",
    "hes": "he's",
    "howd": "how'd",
    "howll": "how'll",
    "hows": "how's",
    "isnt": "isn't",
    "itd": "it'd",
    "itd've": "it'd've",
    "it'dve": "it'd've",
    "itll": "it'll",
    "let's": "let's",
    "maam": "ma'am",
    "mightnt": "mightn't",
    "mightnt've": "mightn't've",
    "mightn'tve": "mightn't've",
    "mightve": "might've",
    "mustnt": "mustn't",
    "mustve": "must've",
    "neednt": "needn't",
    "notve": "not've",
    "oclock": "o'clock",
    "oughtnt": "oughtn't",
    "ow's'at": "'ow's'at",
    "'ows'at": "'ow's'at",
    "'ow'sat": "'ow's'at",
    "shant": "shan't",
    "shed've": "she'd've",
    "she'dve": "she'd've",
    "she's": "she's",
    "shouldve": "should've",
    "shouldnt": "shouldn't",
    "shouldnt've": "shouldn't've",
    "shouldn'tve": "shouldn't've",
    "somebody'd": "somebodyd",
    "somebodyd've": "somebody'd've",
    "somebody'dve": "somebody'd've",
    "somebodyll": "somebody'll",
    "somebodys": "somebody's",
    "someoned": "someone'd",
    "someoned've": "someone'd've",
    "someone'dve": "someone'd've",
    "someonell": "someone'll",
    "someones": "someone's",
    "somethingd": "something'd",
    "somethingd've": "something'd've",
    "something'dve": "something'd've",
    "somethingll": "something'll",
    "thats": "that's",
    "thered": "there'd",
    "thered've": "there'd've",
    "there'dve": "there'd've",
    "therere": "there're",
    "theres": "there's",
    "theyd": "they'd",
    "theyd've": "they'd've",
    "they'dve": "they'd've",
    "theyll": "they'll",
    "theyre": "they're",
    "theyve": "they've",
    "twas": "'twas",
    "wasnt": "wasn't",
    "wed've": "we'd've",
    "we'dve": "we'd've",
    "weve": "we've",
    "werent": "weren't",
    "whatll": "what'll",
    "whatre": "what're",
    "whats": "what's",
    "whatve": "what've",
    "whens": "when's",
    "whered": "where'd",
    "wheres": "where's",
    "whereve": "where've",
    "whod": "who'd",
    "whod've": "who'd've",
    "who'dve": "who'd've",
    "wholl": "who'll",
    "whos": "who's",
    "whove": "who've",
    "whyll": "why'll",
    "whyre": "why're",
    "whys": "why's",
    "wont": "won't",
    "wouldve": "would've",
    "wouldnt": "wouldn't",
    "wouldnt've": "wouldn't've",
    "wouldn'tve": "wouldn't've",
    "yall": "y'all",
    "yall'll": "y'all'll",
    "y'allll": "y'all'll",
    "yall'd've": "y'all'd've",
    "y'alld've": "y'all'd've",
    "y'all'dve": "y'all'd've",
    "youd": "you'd",
    "youd've": "you'd've",
    "you'dve": "you'd've",
    "youll": "you'll",
    "youre": "you're",
    "youve": "you've",
}
# Official `manualMap`: only none/zero..ten; "no" is deliberately not 0.
_NUMBER_WORDS = {
    "none": "0",
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
}
_ARTICLES = frozenset({"a", "an", "the"})
_PUNCT = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!")
_COMMA_BETWEEN_DIGITS = re.compile(r"\d,\d")
_PERIOD = re.compile(r"\.(?!\d)")


def _process_punctuation(text: str) -> str:
    """Official ``processPunctuation``: delete a mark if it touches a space (or digits are comma-grouped), else
    replace it by a space; then delete periods not followed by a digit."""
    grouped = _COMMA_BETWEEN_DIGITS.search(text) is not None
    out = text
    for p in _PUNCT:
        if p in out:
            if grouped or p + " " in text or " " + p in text:
                out = out.replace(p, "")
            else:
                out = out.replace(p, " ")
    return _PERIOD.sub("", out) if "." in out else out


def _process_digit_article(text: str) -> str:
    """Official ``processDigitArticle``: lower-case, number words -> digits, drop articles, add apostrophes."""
    words = []
    for word in text.lower().split():
        word = _NUMBER_WORDS.get(word, word)
        if word not in _ARTICLES:
            words.append(_CONTRACTIONS.get(word, word))
    return " ".join(words)


@lru_cache(maxsize=1 << 16)
def vqa_normalise(text: str) -> str:
    """The official VQA answer normalisation (see module docstring for the two deliberate deviations)."""
    text = text.replace("\n", " ").replace("\t", " ").strip()
    return _process_digit_article(_process_punctuation(text))


def _accuracy(matches: int, n: int, leave_one_out: bool) -> float:
    if n < 3:
        return 1.0 if matches else 0.0
    if not leave_one_out:
        return min(1.0, matches / 3)
    # Annotator i matched: the other n-1 hold matches-1 agreeing answers; not matched: all `matches`.
    total = matches * min(3, matches - 1) + (n - matches) * min(3, matches)
    return total / (3 * n)


def vqa_score(prediction: str, references: str | Sequence[str], *, leave_one_out: bool = False) -> float:
    """Soft VQA accuracy of ``prediction``."""
    refs = [vqa_normalise(r) for r in as_references(references)]
    annotators = len(refs)  # counted before empty answers are dropped: they are votes for nothing, not absences
    refs = [r for r in refs if r]
    if not refs:
        return 0.0
    norm = vqa_normalise(prediction)
    return _accuracy(refs.count(norm), annotators, leave_one_out) if norm else 0.0


@register
class VqaVerifier(Verifier):
    """Accept when the soft VQA accuracy reaches ``threshold``; see the module docstring."""

    name = "vqa"
    version = "4"
    title = "VQA soft accuracy"
    identifiers_as_written = True
    PARAMS = {
        "threshold": Param(float, 1.0, "minimum soft accuracy in (0, 1] to accept; 1.0 = at least 3 annotators"),
        "leave_one_out": Param(bool, False, "average over the n subsets of n-1 annotators, as the official script"),
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._threshold = self._params["threshold"]
        self._loo = self._params["leave_one_out"]

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        t = params["threshold"]
        if not 0.0 < t <= 1.0:
            raise VerifierError(
                f"Parameter 'threshold' of verifier 'vqa' must be in (0, 1], got {t!r}; 1.0 accepts answers "
                "given by at least 3 annotators, 0.6 (with leave_one_out) by at least 2."
            )

    @property
    def description(self) -> str:
        t = self._threshold
        if self._loo:
            scoring = (
                "averaged, as in the official script, over every way of leaving one annotator out (three "
                "agreeing annotators out of ten then score 0.9)"
            )
            accept = f"It is accepted when the score is at least **{t:g}**."
        else:
            scoring = "without the official leave-one-annotator-out averaging"
            need = next(k for k in range(1, 4) if min(1.0, k / 3) >= t)
            accept = (
                f"It is accepted when the score is at least **{t:g}**, i.e. when at least {need} "
                f"annotator{'s' if need > 1 else ''} gave the same answer."
            )
        return (
            "The VQAv2 soft accuracy: an answer scores min(1, k / 3), where k is the number of human annotators "
            f"who gave the same answer, {scoring}. {accept} Both sides are first normalised as in the official "
            'VQA evaluation: lowercased, number words up to ten written as digits, the articles "a", "an" and '
            '"the" removed, missing apostrophes restored ("dont" becomes "don\'t"), most punctuation removed or '
            "replaced by a space, and periods dropped unless they are decimal points.\n\n"
            "With fewer than three references, the references are alternative correct answers rather than "
            "annotator votes, and matching any one of them scores 1; annotators whose answer normalises to "
            "nothing still count as annotators."
        )

    def compare(self, value: str, references: Sequence[str], *, item: Item | None = None) -> bool:
        return vqa_score(value, references, leave_one_out=self._loo) >= self._threshold

    def compare_value(
        self,
        kind: Kind,
        value: Any,
        references: Sequence[str],
        *,
        item: Item | None = None,
        vocabulary: Vocabulary | None = None,
    ) -> bool:
        if kind is Kind.NUMBER:  # the annotators' votes, each read as its number
            numbers = reference_values(kind, references)
            return (
                numbers is not None
                and value.qualifier is None
                and any(
                    self.compare(render(reading), [render(r.value) for r in numbers]) for reading in value.readings()
                )
            )
        return super().compare_value(kind, value, references, item=item, vocabulary=vocabulary)

    def near_value(self, kind: Kind, value: Any, references: Sequence[str], *, item: Item | None = None) -> bool:
        """An answer some annotators gave, too few for the threshold ("2" where two of four said 2, "yes" where one of
        ten did), is a human's answer as much as the majority's: the judge's, never certainly wrong."""
        if super().near_value(kind, value, references, item=item):
            return True
        if kind is Kind.NUMBER:
            return self.same_value(kind, value, references, item=item)
        given = reference_values(kind, references)
        return given is not None and value in given

    def same_value(
        self,
        kind: Kind,
        value: Any,
        references: Sequence[str],
        *,
        item: Item | None = None,
        vocabulary: Vocabulary | None = None,
    ) -> bool:
        """Free text is an annotator's answer once the VQA normalisation (punctuation, articles, number words, all
        notation) is applied to both."""
        if kind is Kind.TEXT:
            norm = vqa_normalise(str(value))
            return bool(norm) and any(vqa_normalise(r) == norm for r in references)
        return super().same_value(kind, value, references, item=item, vocabulary=vocabulary)
