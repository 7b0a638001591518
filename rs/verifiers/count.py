"""``count``: the answer must state exactly one whole number, equal to the reference count.

Counting questions (CLEVR, CLEVR-Math, Super-CLEVR) have integer answers, and models wrap them in a sentence
("There are 3 cubes.") or spell them out ("three"). Taking "the last number in the text" is the common lenient
alternative, but it turns ``5 objects (3 red + 2 blue)`` into 2 and ``3 or 4`` into 4. Here the answer is read once
by :mod:`rs.answers` (its stated answer must be one clean number, and nothing after it may state another), and this
verifier compares: the number must be a whole number without a percent sign or a qualifier, equal to the reference.

Numbers are read as :mod:`rs.answers.numbers` reads them: digits (``1,000`` grouping), number words
("twenty-one", "none", "no objects" is 0), fraction words ("seven hundredths" is 7/100, never 7), LaTeX; a
hedged, bounded or negated count ("about 3", "at least 3", "3+", "not 3") is not the count. The reference itself
must be a single whole number (digits or a number word); any other reference never matches.

Deviation from the reference metrics: lmms-eval and VLMEvalKit count tasks take the last number in the text or
an exact string match; this verifier reads only a single stated integer and concludes nothing otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from rs.answers import Kind, Number, Vocabulary, read_numbers
from rs.verifiers.base import Item, Verifier, register

__all__ = ["CountVerifier"]


def _count(number: Number) -> int | None:
    if number.qualifier or number.percent or number.value.denominator != 1:
        return None
    return number.value.numerator


@register
class CountVerifier(Verifier):
    """Exactly one whole number in the stated answer, equal to the integer reference; see the module docstring."""

    name = "count"
    version = "1"
    title = "single-integer count match"
    notation_only = True
    PARAMS = {}

    @property
    def description(self) -> str:
        return (
            "The answer must state one whole number, and it must equal the reference count. Digits and number "
            'words both count ("3", "three", "twenty-one"; "none" and "no objects" are 0), and the number may sit '
            'in a sentence ("There are 3 cubes."). A non-integer ("3.5", "seven hundredths"), a percent, or a '
            'hedged, bounded or negated count ("about 3", "at least 3", "3+", "not 3") is not a count; "3.0" is 3.'
        )

    def kind(
        self, references: Sequence[str], *, item: Item | None = None, vocabulary: Vocabulary | None = None
    ) -> Kind:
        return Kind.NUMBER

    def compare_numbers(self, value: Number, references: Sequence[Number]) -> bool:
        count = _count(value)
        return count is not None and any(_count(r) == count for r in references)

    def certain_value(self, kind: Kind, value: Number) -> bool:
        return _count(value) is not None

    def compare(self, value: str, references: Sequence[str], *, item: Item | None = None) -> bool:
        numbers = read_numbers(value)
        if not numbers or len(numbers) != 1:
            return False
        refs = [r[0] for r in map(read_numbers, references) if r and len(r) == 1]
        return self.compare_numbers(numbers[0], refs)
