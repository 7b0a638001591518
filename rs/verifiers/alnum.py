"""``alnum``: the scene-text recognition (STR) evaluation protocol.

IIIT5K, CUTE80, SVT, IC13/15, WordArt and Total-Text are scored by folding case, deleting every character that
is not a letter or digit and requiring equality. VLM outputs, unlike STR decoders, are not restricted to ASCII, so
both sides are first decomposed with Unicode compatibility normalisation (NFKD) and reduced to ASCII: accents are
dropped ("Café" == "cafe"), ligatures and superscripts become their base characters ("ﬁne" == "fine",
"x²" == "x2"), and characters with no ASCII decomposition (Arabic-Indic digits, CJK) disappear from a reference. A
*prediction* holding such a letter or digit is rejected instead: what would disappear may be a word ("不是3" is
"not 3", "大约3" "about 3"). Case is folded with
``str.casefold`` *before* decomposition, so "Straße" == "STRASSE". ``str.isalnum`` is deliberately not used: it
keeps "é", "ß" and "²", which an ASCII reference can never contain.

Another deviation: when either side is a plain number (``plain_number``), both must be, of the same value, because
deleting every other character merges different values ("-5" and "5", "3.5" and "35", "1.0" and "10", "1/2" and
"12", "10²" and "102", "$5" and "5"); a false accept there puts a wrong count or value into training data (CLEVR is
scored with this verifier).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

from rs.verifiers.base import Item, Verifier, plain_number, register, text_key

__all__ = ["AlnumVerifier", "alnum_normalise"]

_ALNUM = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
# bytes.translate deletes first, then maps: drop every byte that is not [0-9A-Za-z], lower-case the rest.
_DELETE = bytes(b for b in range(256) if b not in _ALNUM)
_LOWER = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")


@lru_cache(maxsize=1 << 16)
def alnum_normalise(text: str) -> str:
    """Casefold, NFKD-decompose, keep only ``[0-9a-z]``.

    Cached: references come from small answer vocabularies and predictions repeat, so most calls are hits.
    """
    if not text.isascii():
        text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", text).casefold())
    return text.encode("ascii", "ignore").translate(_LOWER, _DELETE).decode("ascii")


@lru_cache(maxsize=1 << 12)
def _foreign(char: str) -> bool:
    """A letter or digit with no ASCII form ("不", "н", "٣", "Ø"): normalisation would drop it unread."""
    if unicodedata.category(char)[0] not in "LN":
        return False
    return not any(c.isascii() and c.isalnum() for c in unicodedata.normalize("NFKD", char.casefold()))


def _drops_words(prediction: str) -> bool:
    """Whether ``prediction`` holds letters or digits that normalisation would drop unread: "不是3" is "not 3"."""
    return not prediction.isascii() and any(not c.isascii() and _foreign(c) for c in prediction)


def _same_number(prediction: str, reference: str) -> bool:
    """When either side is a plain number, both are, of the same value: the protocol's normalisation would otherwise
    merge "-5" and "5", "3.5" and "35", "1/2" and "12", "10²" and "102", "$5" and "5" (it drops every other character)."""
    if prediction.isdigit() and reference.isdigit() and prediction.isascii() and reference.isascii():
        return True  # equal once normalised, and nothing was dropped: the common case, a count
    if _DIGIT_LIKE(prediction) is None and _DIGIT_LIKE(reference) is None:
        return True  # no number on either side: words
    number, other = plain_number(_unwrapped(prediction)), plain_number(_unwrapped(reference))
    return number == other if number is not None and other is not None else number is None and other is None


_DIGIT_LIKE = re.compile(r"[0-9\u00b2\u00b3\u00b9\u00bc-\u00be\u2070-\u2089\u2150-\u215f]").search
"""An ASCII digit, or a character NFKD turns into one (superscripts, subscripts, vulgar fractions)."""


def _unwrapped(text: str) -> str:
    """An answer without the emphasis, brackets or quotes around it ("**5**", "(5)"), a Unicode minus read as one."""
    return text.strip().strip("*_()[]{}\"'` \t").replace("\u2212", "-")


@register
class AlnumVerifier(Verifier):
    """Case- and punctuation-insensitive exact match on ``[0-9a-z]`` (see the module docstring).

    A reference that normalises to the
    empty string (e.g. ``"!!!"``) never matches, not even an empty prediction: STR protocols drop such labels.
    """

    name = "alnum"
    version = "3"
    title = "scene-text recognition protocol"
    identifiers_as_written = True
    notation_only = True
    PARAMS = {}

    @property
    def description(self) -> str:
        return (
            "The standard evaluation protocol for scene-text recognition (IIIT5K, CUTE80, SVT, IC13/15, WordArt, "
            "Total-Text): fold case and drop every non-alphanumeric character from both sides, then require an "
            'exact match. "HELLO!", "hello" and "Hello." are therefore the same answer; but when either side is a '
            'plain number, both must be, of the same value, so "-5" does not match "5", nor "3.5" "35", nor "1/2" '
            '"12", nor "$5" "5".\n\n'
            "Accented and compatibility characters are reduced to their plain ASCII letters and digits first, so "
            '"Café" matches "cafe" and "ﬁne" "fine" (not "²" "2": a number is read as a number, above). A '
            "prediction holding a letter with no ASCII equivalent (another script's words) matches "
            'only a reference identical to it (case and punctuation aside, "東京" for "東京"), never one read without '
            'them; another script\'s digits are read as the digits they are ("٣" is 3); in a '
            "reference such characters are dropped, and a reference with no letters or digits left never matches "
            "anything."
        )

    def compare(self, value: str, references: Sequence[str], *, item: Item | None = None) -> bool:
        if _drops_words(value):
            # another script's letters or digits are never dropped unread; an answer identical to its reference
            # ("東京", "ÆON") is that reference
            key = text_key(value)
            return bool(key) and any(text_key(r) == key for r in references)
        norm = alnum_normalise(value)
        return any(norm == ref and _same_number(value, r) for r in references if (ref := alnum_normalise(r)))
