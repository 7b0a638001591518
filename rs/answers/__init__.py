"""Reading final answers: one reading shared by every verifier, typed values, and a three-way decision.

* :mod:`rs.answers.reading`: the stated answer (wrappers removed once) and the rest of the text;
* :mod:`rs.answers.numbers`: numbers as answers write them (digits, fractions, LaTeX, percent, words);
* :mod:`rs.answers.values`: the kind of value a reference is, and every value of that kind a text states;
* :mod:`rs.answers.grade`: accepted, certainly wrong, or undecided (the judge's).
"""

from rs.answers.grade import LITERAL_RULE, READING_RULES, Grade, Grader, Outcome
from rs.answers.numbers import Number, read_numbers, render
from rs.answers.reading import Reading, read, unwrap
from rs.answers.values import Kind, Vocabulary, classify, polar_of

__all__ = [
    "LITERAL_RULE",
    "READING_RULES",
    "Grade",
    "Grader",
    "Kind",
    "Number",
    "Outcome",
    "Reading",
    "Vocabulary",
    "classify",
    "polar_of",
    "read",
    "read_numbers",
    "render",
    "unwrap",
]

VERSION = "6"
"""How a final answer is read: bump when a change reads some answer otherwise (`rs.pipeline.versions`)."""
