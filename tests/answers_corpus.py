"""A corpus of realistic final answers, with their truth, for every verifier the families use.

Written from how instruction-tuned and thinking VLMs answer after their reasoning: bare values, markdown, the usual
wrappers (`Answer:`, `Final answer:`, `The answer is`, bold, `\\boxed{}`, `$\\boxed{\\text{}}$`, answer tags, quotes),
number words, units, percent signs, sentences, a first line with an explanation, an explanation then the answer,
corrections with and without keywords, conditional alternatives, hedges, synonyms and near misses. Each case says
whether its final answer is right (`truth`); cases whose truth is debatable are left out.

`bench/answers.py` prints what the verifiers make of it; `tests/answers/test_answers.py` holds the figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from rs.answers import Vocabulary


@dataclass(frozen=True)
class Case:
    verifier: str
    phrasing: str
    """The phrasing class."""
    answer: str
    references: tuple[str, ...]
    truth: bool
    question: str = ""
    options: tuple[str, ...] = ()
    params: tuple[tuple[str, object], ...] = ()
    closed_set: bool = False
    """Graded with the family's closed set of answers (CLEVR's)."""
    literal: bool = False
    """Graded as a transcription family's (`answers: {literal: true}`)."""


CLEVR_ANSWERS = Vocabulary.build(
    [
        "gray",
        "red",
        "blue",
        "green",
        "brown",
        "purple",
        "cyan",
        "yellow",
        "cube",
        "sphere",
        "cylinder",
        "rubber",
        "metal",
        "large",
        "small",
    ],
    synonyms={
        "gray": ["grey"],
        "cube": ["cubes", "block", "blocks"],
        "sphere": ["spheres", "ball", "balls"],
        "cylinder": ["cylinders"],
        "rubber": ["matte"],
        "metal": ["metallic", "shiny"],
        "large": ["big"],
        "small": ["tiny"],
    },
    categories={
        "color": ["gray", "red", "blue", "green", "brown", "purple", "cyan", "yellow"],
        "shape": ["cube", "sphere", "cylinder"],
        "material": ["rubber", "metal"],
        "size": ["large", "small"],
    },
)

WORDS = "zero one two three four five six seven eight nine ten eleven twelve".split()

# Phrasings of one stated value v: (class, template). The answer states v and nothing against it.
WRAPPED = [
    ("bare", "{v}"),
    ("bare", " {v} "),
    ("bare", "{v}."),
    ("markdown", "**{v}**"),
    ("markdown", "*{v}*"),
    ("markdown", "`{v}`"),
    ("wrapper", "Answer: {v}"),
    ("wrapper", "**Answer:** {v}"),
    ("wrapper", "Final answer: {v}"),
    ("wrapper", "**Final Answer:** {v}"),
    ("wrapper", "Final Answer: **{v}**"),
    ("wrapper", "The answer is {v}."),
    ("wrapper", "The final answer is **{v}**."),
    ("wrapper", "\\boxed{{{v}}}"),
    ("wrapper", "$\\boxed{{\\text{{{v}}}}}$"),
    ("wrapper", "<answer>{v}</answer>"),
    ("wrapper", "<answer> {v} </answer>"),
    ("wrapper", '"{v}"'),
    ("wrapper", "**Final Answer**\n\n{v}"),
    ("wrapper", "Answer: {v}\n\nAnswer: {v}"),
]
# The stated value followed or preceded by an explanation that states no value of its kind.
EXPLAINED_AFTER = [
    "{v}\n\nThis is what the image shows.",
    "{v}\n\n**Explanation:** it is clearly visible in the image.",
    "Answer: {v}\n\nI looked at the whole image before answering.",
]
EXPLAINED_BEFORE = [
    "After looking at the image carefully:\n\nAnswer: {v}",
    "Looking at the image, the answer is {v}.",
    "I examined every part of the picture.\n\n\\boxed{{{v}}}",
]
# A right-looking value, then another value: the final answer is the second (corrections) or none (alternatives).
CORRECTED = [
    ("correction, keyword", "{v}\n\nWait, actually it is {w}."),
    ("correction, keyword", "Answer: {v}\n\nNo, it's {w}."),
    ("correction, keyword", "\\boxed{{{v}}}\n\nHmm, on second thought: {w}."),
    ("correction, no keyword", "{v}\n\nOn closer inspection, it is {w}."),
    ("correction, no keyword", "\\boxed{{{v}}}\n\nOn closer inspection, the correct value is {w}."),
    ("correction, no keyword", "{v}\n{w}"),
    ("correction, no keyword", "Answer: {v}\n\nLooking again: {w}."),
    ("alternative", "{v} or {w}"),
    ("alternative", "Answer: {v}\n\n({w} if the partly hidden one is counted)"),
    ("alternative", "Either {v} or {w}."),
    ("two marks", "\\boxed{{{v}}} or \\boxed{{{w}}}"),
    ("two marks", "<answer>{v}</answer> ... <answer>{w}</answer>"),
]
HEDGED = ["Probably {v}.", "Maybe {v}?", "{v}?", "I think it might be {v}, but I'm not sure.", "Possibly {v}."]


def _phrasings(verifier: str, right: str, wrong: str, refs: tuple[str, ...], **kw: object) -> Iterator[Case]:
    """Every phrasing class for one reference, with a right and a wrong stated value."""
    for phrasing, template in WRAPPED:
        yield Case(verifier, phrasing, template.format(v=right), refs, True, **kw)  # type: ignore[arg-type]
        yield Case(verifier, phrasing, template.format(v=wrong), refs, False, **kw)  # type: ignore[arg-type]
    for template in EXPLAINED_AFTER:
        yield Case(verifier, "first line + explanation", template.format(v=right), refs, True, **kw)  # type: ignore[arg-type]
        yield Case(verifier, "first line + explanation", template.format(v=wrong), refs, False, **kw)  # type: ignore[arg-type]
    for template in EXPLAINED_BEFORE:
        yield Case(verifier, "explanation then answer", template.format(v=right), refs, True, **kw)  # type: ignore[arg-type]
        yield Case(verifier, "explanation then answer", template.format(v=wrong), refs, False, **kw)  # type: ignore[arg-type]
    for phrasing, template in CORRECTED:
        right_last = phrasing.startswith("correction")
        # a correction's final answer is the second value; an alternative or two marks state no single answer
        yield Case(verifier, phrasing, template.format(v=right, w=wrong), refs, False, **kw)  # type: ignore[arg-type]
        yield Case(verifier, phrasing, template.format(v=wrong, w=right), refs, right_last, **kw)  # type: ignore[arg-type]
    for template in HEDGED:
        yield Case(verifier, "hedge", template.format(v=wrong), refs, False, **kw)  # type: ignore[arg-type]


def _clevr() -> Iterator[Case]:
    colours = ["gray", "red", "blue", "green", "brown", "purple", "cyan", "yellow"]
    shapes = ["cube", "sphere", "cylinder"]
    for i, colour in enumerate(colours):
        other = colours[(i + 3) % len(colours)]
        q = f"What color is the large {shapes[i % 3]} behind the small {other} thing?"
        yield from _phrasings("alnum", colour, other, (colour,), question=q, closed_set=True)
        yield Case(
            "alnum",
            "explanation, other kind",
            f"{colour.title()}\n\nThe {shapes[i % 3]} is {colour}; two other objects are in front.",
            (colour,),
            True,
            question=q,
            closed_set=True,
        )
        yield Case("alnum", "near miss", other.title(), (colour,), False, question=q, closed_set=True)
    for shape, synonyms in (
        ("sphere", ["Ball", "ball", "balls", "spheres", "A ball."]),
        ("cube", ["block", "Block", "cubes"]),
        ("cylinder", ["cylinders", "Cylinder."]),
    ):
        q = "What shape is the small rubber object to the left of the red thing?"
        for spelling in synonyms:
            yield Case("alnum", "synonym", spelling, (shape,), True, question=q, closed_set=True)
            yield Case("alnum", "synonym", f"Answer: {spelling}", (shape,), True, question=q, closed_set=True)
        yield from _phrasings(
            "alnum", shape, "cylinder" if shape != "cylinder" else "cube", (shape,), question=q, closed_set=True
        )
    for material, spellings in (("metal", ["metallic", "Metallic", "shiny"]), ("rubber", ["matte", "Matte."])):
        q = "What material is the big cyan cube?"
        for spelling in spellings:
            yield Case("alnum", "synonym", spelling, (material,), True, question=q, closed_set=True)
            yield Case("alnum", "synonym", f"The cube is {spelling}.", (material,), True, question=q, closed_set=True)
        yield from _phrasings(
            "alnum", material, "rubber" if material == "metal" else "metal", (material,), question=q, closed_set=True
        )
    for size, spelling in (("large", "big"), ("small", "tiny")):
        q = "What size is the gray sphere?"
        yield Case("alnum", "synonym", spelling, (size,), True, question=q, closed_set=True)
        yield from _phrasings(
            "alnum", size, "small" if size == "large" else "large", (size,), question=q, closed_set=True
        )
    for yes in ("yes", "no"):
        no = "no" if yes == "yes" else "yes"
        q = "Are there more cubes than cylinders?"
        yield from _phrasings("alnum", yes.title(), no.title(), (yes,), question=q, closed_set=True)
        yield Case(
            "alnum",
            "explanation, other kind",
            f"{yes.title()}\n\nThere are 5 cubes and 2 cylinders.",
            (yes,),
            True,
            question=q,
            closed_set=True,
        )
        yield Case(
            "alnum",
            "sentence",
            f"{yes.title()}, there are more cubes than cylinders."
            if yes == "yes"
            else "No, there are not more cubes than cylinders.",
            (yes,),
            True,
            question=q,
            closed_set=True,
        )
    for n in range(0, 11):
        q = "How many objects are there?"
        yield from _phrasings("alnum", str(n), str(n + 1), (str(n),), question=q, closed_set=True)
        yield Case("alnum", "number words", WORDS[n], (str(n),), True, question=q, closed_set=True)
        yield Case("alnum", "number words", f"{WORDS[n].title()}.", (str(n),), True, question=q, closed_set=True)
        yield Case("alnum", "units", f"{n} objects", (str(n),), True, question=q, closed_set=True)
        yield Case("alnum", "sentence", f"There are {n} objects.", (str(n),), True, question=q, closed_set=True)
        yield Case("alnum", "near miss", str(n + 2), (str(n),), False, question=q, closed_set=True)


def _count() -> Iterator[Case]:
    for n in range(0, 13):
        q = "Subtract all red cubes. Subtract all small spheres. How many objects are left?"
        yield from _phrasings("count", str(n), str(n + 1), (str(n),), question=q)
        yield Case("count", "number words", WORDS[n], (str(n),), True, question=q)
        yield Case("count", "number words", f"{WORDS[n].title()}.", (str(n),), True, question=q)
        yield Case("count", "units", f"{n} objects", (str(n),), True, question=q)
        yield Case("count", "sentence", f"There are {n} objects left.", (str(n),), True, question=q)
        yield Case("count", "sentence", f"{n} objects are left.", (str(n),), True, question=q)
        yield Case("count", "near miss", f"{n + 1} objects", (str(n),), False, question=q)
        yield Case("count", "number words", f"{WORDS[n]} hundredths", (str(n),), False, question=q)
        yield Case("count", "hedge", f"about {n}", (str(n),), False, question=q)
        yield Case("count", "hedge", f"at least {n}", (str(n),), False, question=q)
    q = "Subtract all cylinders. How many objects are left?"
    yield Case("count", "sentence", "There are no objects left.", ("0",), True, question=q)
    yield Case("count", "sentence", "None.", ("0",), True, question=q)


def _relaxed() -> Iterator[Case]:
    q = "What is the value of the blue bar in 2015?"
    for ref, right_forms, wrong in (
        ("42", ["42", "42.0", "42%", "42 %", "forty-two"], "48"),
        ("13.5", ["13.5", "13.50", "13.5%"], "15"),
        ("2556.25", ["2,556.25", "$2,556.25", "2556.25"], "3656.25"),
        ("0.42", ["0.42"], "0.52"),
        ("13%", ["13", "13%", "13 %"], "17"),
        ("2010", ["2010"], "2008"),
        ("120", ["120", "one hundred twenty", "120.0"], "150"),
        ("7.5", ["7.5", "7 1/2", "7½", "15/2"], "8.5"),
    ):
        for form in right_forms:
            # a percent sign a bare reference lacks, where the question asks no percentage, is right on a percent axis
            # and wrong on any other: the judge's (issue 60), no notation the reading may take for granted
            phrasing = "percent added" if "%" in form and "%" not in ref else "notation"
            yield Case("relaxed", phrasing, form, (ref,), True, question=q)
            yield Case("relaxed", phrasing, f"The answer is {form}.", (ref,), True, question=q)
        yield from _phrasings("relaxed", right_forms[0], wrong, (ref,), question=q)
        yield Case("relaxed", "near miss", wrong, (ref,), False, question=q)
    yield Case("relaxed", "near miss", "2008", ("2010",), False, question="In which year was the value highest?")
    yield Case("relaxed", "units", "5 million", ("5",), False, question=q)
    for form, ref in (("42%", "0.42"), ("0.13", "13%")):  # a percent conversion the metric makes: the judge's
        yield Case("relaxed", "leniency", form, (ref,), True, question=q)
        yield Case("relaxed", "leniency", f"The answer is {form}.", (ref,), True, question=q)
    yield from _phrasings("relaxed", "Yes", "No", ("Yes",), question="Is the blue bar higher than the red one?")
    yield from _phrasings("relaxed", "Brazil", "Chile", ("Brazil",), question="Which country has the highest value?")


def _anls() -> Iterator[Case]:
    q = "What is the title of the person who signed the letter?"
    for ref, right, wrong in (
        ("Chairman of the Board", "Chairman of the Board", "Secretary of the Board"),
        ("ITC Limited", "ITC Limited", "ITC Holdings"),
        ("John A. Smith", "John A. Smith", "John B. Smith"),
        ("Department of Health", "Department of Health", "Department of Wealth"),
    ):
        yield from _phrasings("anls", right, wrong, (ref,), question=q)
    for template in ("{v}", "**{v}**", "Answer: {v}", "The answer is {v}."):  # a typo ANLS forgives: the judge's
        yield Case(
            "anls", "leniency", template.format(v="Department of Helth"), ("Department of Health",), True, question=q
        )
    for ref, right, wrong in (("1998", "1998", "1988"), ("$2,556.25", "$2,556.25", "$2,656.25"), ("42", "42", "24")):
        yield from _phrasings("anls", right, wrong, (ref,), question="What is the total shown on the form?")
        yield Case(
            "anls", "sentence", f"The total is {right}.", (ref,), True, question="What is the total shown on the form?"
        )
    yield Case("anls", "notation", "45%", ("45",), True, question="What percentage of respondents agreed?")
    yield Case("anls", "notation", "13", ("13%",), True, question="What percentage of respondents agreed?")
    yield Case("anls", "near miss", "007", ("7",), False, question="What is the agent's number?")


def _vqa() -> Iterator[Case]:
    q = "What does the sign say?"
    for ref, right, wrong in (
        ("stop", "STOP", "GO"),
        ("2", "two", "3"),
        ("yes", "Yes", "No"),
        ("coca cola", "Coca Cola", "Pepsi"),
    ):
        refs = (ref,) * 8 + ("other",) * 2
        yield from _phrasings("vqa", right, wrong, refs, question=q)
    yield Case("vqa", "number words", "eleven", ("11",) * 10, True, question="How many people are there?")


def _mcq() -> Iterator[Case]:
    options = ("larva", "pupa", "adult", "egg")
    q = "Which stage of the life cycle is shown?\nA. larva\nB. pupa\nC. adult\nD. egg"
    for i, letter in enumerate("ABCD"):
        wrong = "ABCD"[(i + 1) % 4]
        yield from _phrasings("mcq", letter, wrong, (letter,), question=q, options=options)
        for form in (
            f"({letter})",
            f"{letter}.",
            f"{letter})",
            f"Option {letter}",
            f"The correct option is {letter}.",
            f"{letter} ({options[i]})",
            f"{letter}. {options[i]}",
            options[i],
            options[i].title(),
        ):
            yield Case("mcq", "option forms", form, (letter,), True, question=q, options=options)
        yield Case(
            "mcq", "option forms", f"{letter} ({options[(i + 1) % 4]})", (letter,), False, question=q, options=options
        )
        yield Case(
            "mcq",
            "correction, no keyword",
            f"Answer: {letter}\n\nThe picture shows the {options[(i + 2) % 4]}.",
            (letter,),
            False,
            question=q,
            options=options,
        )


def _math() -> Iterator[Case]:
    q = "What fraction of the shapes are shaded?"
    for ref, right_forms, wrong in (
        ("\\frac{2}{5}", ["2/5", "**2/5**", "\\frac{2}{5}", "0.4", "\\dfrac{2}{5}"], "3/5"),
        ("7.5", ["7.5", "7 1/2 cups", "7½", "15/2", "\\frac{15}{2}"], "8"),
        ("\\frac{3}{5}", ["The answer is 3/5.", "3/5", "$\\frac{3}{5}$"], "2/5"),
        ("4", ["4", "x = 4", "four"], "3/4"),
    ):
        for form in right_forms:
            yield Case("math", "notation", form, (ref,), True, question=q)
        yield from _phrasings(
            "math", right_forms[0].removeprefix("The answer is ").rstrip("."), wrong, (ref,), question=q
        )
    yield Case("math", "notation", "**3/4**", ("3",), False, question=q)
    yield Case("math", "notation", "The answer is **1/4**.", ("1",), False, question=q)
    yield Case("math", "notation", "(1, 2)", ("(1,2)",), True, question="Which point is on the line?")


def _issue39() -> Iterator[Case]:
    """The mechanisms of issue 39: a metric's leniency, a negation, a position, a retraction, a correction the reader
    could not see, another task's reading, a rejection no grader would make, an identical answer (labelled by the
    last committed value; a retraction without a value has none, and is labelled wrong: it must not be accepted)."""
    doc = "Who signed the lease?"
    yield Case("anls", "leniency", "Jenson", ("Jensen",), False, question=doc)
    yield Case("anls", "leniency", "Signed by the Lessor", ("Signed by the Lessee",), False, question=doc)
    bars = "How many bars are there?"
    yield Case("relaxed", "leniency", "31", ("30",), False, question=bars)
    yield Case("relaxed", "leniency", "0.3%", ("30%",), False, question="What is the share?")
    yield Case("relaxed", "leniency", "3000%", ("30",), False, question="What is the share?")
    yield Case("relaxed", "leniency", "2009", ("2010",), False, question="In which year was it highest?")
    options = ("cat", "shark", "dog")
    not_q = "Which is NOT a mammal?\nA. cat\nB. shark\nC. dog"
    yield Case("mcq", "negation", "not B", ("B",), False, question=not_q, options=options)
    yield Case("mcq", "negation", "Not A", ("B",), False, question=not_q, options=options)
    yield Case("mcq", "position", "The second one", ("B",), True, question=not_q, options=options)
    yield Case("mcq", "position", "the last option", ("C",), True, question=not_q, options=options)
    yield Case("mcq", "position", "The first option.", ("B",), False, question=not_q, options=options)
    yield Case("alnum", "retraction", "Yes.\n\nNo wait, I had that backwards.", ("yes",), False, question="Is it red?")
    yield Case("alnum", "retraction", "No.\n\nNo wait, I had that backwards.", ("yes",), False, question="Is it red?")
    yield Case("count", "retraction", "3\n\n...on second look I was wrong.", ("3",), False, question="How many?")
    yield Case("count", "retraction", "4\n\n...on second look I was wrong.", ("3",), False, question="How many?")
    yield Case(
        "alnum", "retraction", "Red.\n\nWell, red-ish.", ("red",), False, question="What color?", closed_set=True
    )
    yield Case("count", "correction, dash", "5? No, 6 — 6.", ("6",), True, question="How many?")
    yield Case("count", "correction, same line", "5, wait, 6", ("6",), True, question="How many?")
    yield Case("count", "correction, other script", "5\n应为6", ("6",), True, question="How many?")
    yield Case("count", "correction, other script", "5\n\n更正：6", ("6",), True, question="How many?")
    yield Case("count", "correction, other script", "6\n应为5", ("6",), False, question="How many?")
    yield Case("alnum", "literal", "3", ("three",), False, question="What is the word in the image?", literal=True)
    yield Case("alnum", "literal", "three", ("three",), True, question="What is the word in the image?", literal=True)
    shapes = ("cube", "cylinder", "sphere")
    mc = "What shape is it?\nA. cube\nB. cylinder\nC. sphere"
    yield Case("alnum", "option text", "cylinder", ("B",), True, question=mc, options=shapes)
    yield Case("alnum", "option text", "cube", ("B",), False, question=mc, options=shapes)
    yield Case("vqa", "option text", "Cylinder", ("B",), True, question=mc, options=shapes)
    chart = "What was the revenue in 2019 (in billions)?"
    for answer, ref in (
        ("12.5 billion", "12.5"),
        ("1/3", "0.33"),
        ("\\frac{2}{3}", "0.67"),
        ("0.333...", "0.33"),
        ("$1\\,000$", "1000"),
        ("forty percent", "0.4"),
        ("40 percent", "40%"),
    ):
        yield Case("relaxed", "not certain", answer, (ref,), True, question=chart)
    for answer, ref in (("2_500", "2"), ("1,0000", "1000"), ("1O0", "10")):
        yield Case("count", "malformed", answer, (ref,), False, question="How many?")
    for answer in ("東京", "ÆON"):
        yield Case("alnum", "identical", answer, (answer,), True, question="What is the word in the image?")
    yield Case("count", "other digits", "٣", ("3",), True, question="How many?")


def corpus() -> list[Case]:
    """Every case, in a fixed order."""
    return [*_clevr(), *_count(), *_relaxed(), *_anls(), *_vqa(), *_mcq(), *_math(), *_issue39()]


# Classes in which no right answer may be rejected, certain or not: the reading's job is to read them.
MUST_READ = frozenset({"bare", "markdown", "wrapper", "synonym", "notation", "option forms", "number words", "units"})
