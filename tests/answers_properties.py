"""Generated answers for the reading's properties: a value x a presentation x a continuation, each with its truth.

The corpus (tests/answers_corpus.py) holds answers written one by one; it cannot show what it was not written to
contain. Here an answer is composed from three independent parts, so every presentation meets every value and every
continuation:

* a **value** of one verifier's task (:class:`Spec`): a right value in several notations, wrong values of the same
  kind, and near misses of each leniency a metric has (one edit away, one count away, a year one away, a percent
  converted, a scaled value), each labelled with its truth;
* a **presentation** (:data:`PRESENTATIONS`): bare, markdown, LaTeX, a box, tags, quotes, code, a bullet, an
  ``Answer:`` line, a sentence, a heading, another script's answer mark;
* a **continuation** (:data:`CONTINUATIONS`): none, an explanation, another value of the same kind, a retraction, a
  correction that states a value (in English, after a dash, in Chinese), a hedge.

The truth of a composed answer is the truth of its last committed value: a correction's value, else the value; a
retraction or a hedge commits to nothing (:attr:`Case.truth` None). The invariants (:func:`violations`):

* a wrong answer, or one that commits to nothing, is never accepted, in any presentation;
* a right answer is never rejected for certain, and neither is one that commits to nothing;
* a retraction or a hedge leaves the answer undecided;
* the same value and continuation get the same outcome in every presentation.

`tests/answers/test_answer_properties.py` draws these with hypothesis (fixed seed); `bench/answers.py --properties N` enumerates
N cases per verifier and prints the violations per verifier and mechanism.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from rs.answers import Grade, Grader, Outcome, Vocabulary
from rs.verifiers import get_verifier
from rs.verifiers.base import ItemInfo

WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty"
).split()
TENS = {30: "thirty", 40: "forty", 50: "fifty", 60: "sixty", 70: "seventy", 80: "eighty", 90: "ninety"}


@dataclass(frozen=True)
class Value:
    text: str
    truth: bool | None
    """None: a value that commits to nothing the reading may decide (a mark whose text is another option's, the
    question restated, a looping digit run): never accepted, never certainly wrong."""
    mechanism: str
    """What the value tests: ``right`` (a notation of the reference), ``wrong``, or a near miss (``near:...``)."""
    own: bool = False
    """A near miss the task's own leniency accepts (relaxed accuracy on a value read off an axis): it may be accepted."""


@dataclass(frozen=True)
class Spec:
    """One item of a verifier's task, with values of each kind for it."""

    verifier: str
    references: tuple[str, ...]
    values: tuple[Value, ...]
    question: str = ""
    options: tuple[str, ...] = ()
    vocabulary: bool = False
    literal: bool = False
    params: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class Case:
    spec: Spec
    value: Value
    presentation: str
    continuation: str
    answer: str
    truth: bool | None
    """The last committed value's truth; None when the answer commits to nothing (a retraction, a hedge)."""
    mechanism: str = field(default="")
    other: str = ""
    """The value the continuation states, if it states one."""


CLEVR = Vocabulary.build(
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
_CATEGORY = {
    "color": ["gray", "red", "blue", "green", "brown", "purple", "cyan", "yellow"],
    "shape": ["cube", "sphere", "cylinder"],
    "material": ["rubber", "metal"],
    "size": ["large", "small"],
}
_SYNONYMS = {
    "gray": ["grey", "Gray"],
    "cube": ["block", "Cube"],
    "sphere": ["ball", "Sphere"],
    "metal": ["metallic", "shiny"],
    "rubber": ["matte"],
    "large": ["big"],
    "small": ["tiny"],
}

# name -> template; {v} is the value. Math delimiters only around what LaTeX can hold.
PRESENTATIONS: dict[str, str] = {
    "bare": "{v}",
    "period": "{v}.",
    "bold": "**{v}**",
    "italic": "*{v}*",
    "code": "`{v}`",
    "quote": '"{v}"',
    "curly quote": "“{v}”",
    "latex text": "$\\text{{{v}}}$",
    "box": "\\boxed{{{v}}}",
    "tag": "<answer>{v}</answer>",
    "answer line": "Answer: {v}",
    "bold line": "**Answer:** {v}",
    "sentence": "The answer is {v}.",
    "bullet": "- {v}",
    "heading": "**Final Answer**\n\n{v}",
    "other script": "答案：{v}",
}
# name -> (template, kind); {o} is another value. Kinds: plain (no effect), other (another value stated beside),
# turn (retracts or hedges, states nothing), correct (states {o} as the final answer).
CONTINUATIONS: dict[str, tuple[str, str]] = {
    "none": ("", "plain"),
    "explanation": ("\n\nThis is what the image shows.", "plain"),
    "explanation before": ("", "plain"),  # handled in compose: an explanation before an answer line
    "same-kind value": ("\n\nIt could also be {o}.", "other"),
    "retraction": ("\n\nNo wait, I had that backwards.", "turn"),
    "retraction, no keyword": ("\n\n...on second look I was wrong.", "turn"),
    "hedge": ("\n\nI'm not completely sure.", "turn"),
    "hedge, other script": ("\n\n（可能不对）", "turn"),
    "correction": ("\n\nWait, actually it is {o}.", "correct"),
    "correction, same line": (" wait, {o}", "correct"),
    "correction, dash": (" — no, {o}.", "correct"),
    "correction, other script": ("\n应为{o}", "correct"),
    "correction, other script 2": ("\n\n更正：{o}", "correct"),
}


def compose(value: str, presentation: str, continuation: str, other: str) -> str:
    template, _ = CONTINUATIONS[continuation]
    shown = PRESENTATIONS[presentation].format(v=value)
    if continuation == "explanation before":  # an explanation, then the answer under a mark
        marked = shown.startswith(("Answer", "**Answer", "**Final", "答案", "\\boxed", "<answer>"))
        return "I looked at every part of the image.\n\n" + (shown if marked else f"Answer: {shown}")
    return shown + template.format(o=other)


def truth_of(value: Value, continuation: str, other: Value) -> bool | None:
    kind = CONTINUATIONS[continuation][1]
    if kind == "turn":
        return None
    if kind == "correct":
        return other.truth
    if kind == "other":
        if other.text == value.text or other.truth is None:
            return value.truth  # the same value again, or beside it what commits to nothing: the value decides
        return None if value.truth != other.truth else value.truth
    return value.truth


# ---- specs, one generator per verifier ----


def _count(rng: random.Random) -> Spec:
    n = rng.randint(0, 40)
    right = [Value(str(n), True, "right")] + ([Value(WORDS[n], True, "right")] if n <= 20 else [])
    wrong = [Value(str(m), False, "wrong") for m in rng.sample([m for m in range(0, 45) if m != n], 2)]
    wrong.append(Value(str(n + 1), False, "near:one count away"))
    if rng.random() < 0.5:
        return Spec("count", (str(n),), tuple(right + wrong), question="How many objects are there?")
    # the question states the reference's number itself: restating the question is no answer (issue 60)
    question = f"The model has ___ dots divided into {n} equal groups. How many groups are there?"
    echo = [
        Value(f"The model has ___ dots divided into {n} equal groups", None, "near:question echo"),
        Value(f"The dots are divided into {n} equal groups", None, "near:question echo"),
        Value(f"{n}%", None, "near:percent added"),
    ]
    return Spec("count", (str(n),), tuple(right + wrong + echo), question=question)


def _relaxed(rng: random.Random) -> Spec:
    kind = rng.choice(["axis", "count", "year", "percent", "scale", "thousands", "unit"])
    if kind == "thousands":
        n = rng.randint(1, 999) * 1000 + rng.randint(0, 999)
        return Spec(
            "relaxed",
            (str(n),),
            (
                Value(str(n), True, "right"),
                Value(f"{n:,}", True, "right"),
                Value(f"{n // 1000}.{n % 1000:03d}", True, "near:other separators"),  # a thousands point
                Value(f"{n // 1000}.{n % 1000:03d}1", False, "wrong"),
            ),
            question="How many visitors came in 2015?",
        )
    if kind == "unit":
        n = rng.randint(1, 99)
        return Spec(
            "relaxed",
            (str(n * 10),),
            (
                Value(str(n * 10), True, "right"),
                Value(f"{n * 10} mm", True, "right"),
                Value(f"{n} cm", True, "near:another unit"),
                Value(f"{n * 30 + 7} mm", False, "wrong"),
            ),
            question="How long is the bar, in millimetres?",
        )
    if kind == "axis":
        r = rng.randint(100, 9999) / 10
        while r == int(r):
            r = rng.randint(100, 9999) / 10
        within = round(r * 1.03, 1)
        return Spec(
            "relaxed",
            (f"{r:g}",),
            (
                Value(f"{r:g}", True, "right"),
                Value(f"{r:.2f}", True, "right"),
                Value(f"{within:g}", True, "near:within tolerance", own=True),
                Value(f"{round(r * 2 + 1, 1):g}", False, "wrong"),
            ),
            question="What is the value of the blue bar in 2015?",
        )
    if kind == "count":
        n = rng.randint(20, 90)
        return Spec(
            "relaxed",
            (str(n),),
            (
                Value(str(n), True, "right"),
                Value(str(n + 1), False, "near:one count away"),
                Value(str(n * 3), False, "wrong"),
                Value(f"{n}%", None, "near:percent added"),  # a percent sign a count lacks (issue 60)
                Value(f"{n - 1}.{'9' * rng.randint(12, 60)}", None, "near:digit run"),  # a looping model
            ),
            question="How many bars are there?",
        )
    if kind == "year":
        y = rng.randint(1950, 2023)
        return Spec(
            "relaxed",
            (str(y),),
            (
                Value(str(y), True, "right"),
                Value(str(y - 1), False, "near:year one away"),
                Value(str(y - 40), False, "wrong"),
            ),
            question="In which year was the value highest?",
        )
    if kind == "percent":
        p = rng.choice([10, 20, 30, 40, 50, 60, 70, 80, 90])
        return Spec(
            "relaxed",
            (f"{p}%",),
            (
                Value(f"{p}%", True, "right"),
                Value(f"{p} percent", True, "right"),
                Value(f"{TENS.get(p, WORDS[min(p, 20)])} percent" if p in TENS or p <= 20 else f"{p}%", True, "right"),
                Value(f"{p / 100:g}%", False, "near:percent converted"),
                Value(f"{p * 100}%", False, "near:percent converted"),
                Value(f"{p + 25}%", False, "wrong"),
            ),
            question="What share of respondents agreed?",
        )
    r = rng.randint(11, 99) / 2
    return Spec(
        "relaxed",
        (f"{r:g}",),
        (
            Value(f"{r:g}", True, "right"),
            Value(f"{r:g} billion", True, "near:scale word"),
            Value(f"{r * 3 + 1:g}", False, "wrong"),
        ),
        question="What was the revenue in 2019 (in billions)?",
    )


def _alnum(rng: random.Random) -> Spec:
    kind = rng.choice(["term", "polar", "negated polar", "count", "literal", "options"])
    if kind == "negated polar":  # "No" may agree with the negation; "There is no red cube" affirms the proposition
        ref = rng.choice(["yes", "no"])
        other = "no" if ref == "yes" else "yes"
        return Spec(
            "alnum",
            (ref,),
            (
                Value(ref.title(), True, "right"),
                Value(other.title(), False, "near:reply to a negation"),
                Value("There is no red cube", ref == "yes", "near:negated statement"),
            ),
            question="Is there no red cube?",
            vocabulary=True,
        )
    if kind == "term":
        category = rng.choice(list(_CATEGORY))
        term, other = rng.sample(_CATEGORY[category], 2)
        values = [Value(term, True, "right")] + [Value(s, True, "right") for s in _SYNONYMS.get(term, [])]
        values += [Value(other, False, "wrong"), Value(f"not {term}", False, "near:negated")]
        return Spec("alnum", (term,), tuple(values), question=f"What {category} is the large object?", vocabulary=True)
    if kind == "polar":
        ref = rng.choice(["yes", "no"])
        other = "no" if ref == "yes" else "yes"
        return Spec(
            "alnum",
            (ref,),
            (Value(ref, True, "right"), Value(ref.title(), True, "right"), Value(other.title(), False, "wrong")),
            question="Is the cube made of metal?",
            vocabulary=True,
        )
    if kind == "count":
        n = rng.randint(0, 12)
        return Spec(
            "alnum",
            (str(n),),
            (Value(str(n), True, "right"), Value(WORDS[n], True, "right"), Value(str(n + 2), False, "wrong")),
            question="How many cubes are there?",
            vocabulary=True,
        )
    if kind == "literal":
        n = rng.randint(1, 12)
        word = rng.choice([WORDS[n], "東京", "ÆON", "Café", "STOP", "Hotel"])
        values = [Value(word, True, "right"), Value(word.upper(), True, "right")]
        if word == WORDS[n]:
            values.append(Value(str(n), False, "near:digit for word"))
        values.append(Value("Motel", False, "wrong"))
        return Spec("alnum", (word,), tuple(values), question="What is the word in the image?", literal=True)
    options = tuple(rng.sample(["cube", "sphere", "cylinder"], 3))
    i = rng.randrange(3)
    j = (i + 1) % 3
    letter = "ABC"[i]
    return Spec(
        "alnum",
        (letter,),
        (
            Value(letter, True, "right"),
            Value(options[i], True, "right"),
            Value(f"the {('first', 'second', 'third')[i]} one", True, "right"),
            Value(options[j], False, "wrong"),
            Value("ABC"[j], False, "wrong"),
            Value(f"not {letter}", False, "near:negated"),
            *_marks(letter, "ABC"[j], options[i], options[j]),
        ),
        question="What shape is the small object?\n" + "\n".join(f"{'ABC'[k]}. {o}" for k, o in enumerate(options)),
        options=options,
    )


def _marks(letter: str, other: str, text: str, other_text: str) -> list[Value]:
    """An option letter read out of a word or an expression, and a mark whose text is not its option's (issue 60)."""
    return [
        Value(f"({letter}) {other_text}", None, "near:mark with another's text"),
        Value(f"{other}. {text}", None, "near:mark with another's text"),
        Value(f"({letter}) 140", None, "near:mark with a value"),
        Value(f"the distance between point {letter} and the island is 15 miles", None, "near:letter in a sentence"),
        Value(f"\\frac{{1}}{{2}}({letter.lower()}^{{2}}+{letter}^{{2}})", None, "near:letter in an expression"),
        Value(f"~~({other})~~ {text}", None, "near:struck-out mark"),
    ]


_NAMES = [
    "Jensen",
    "Lessee",
    "Harrison",
    "Department of Health",
    "Board of Directors",
    "Phoenix Corporation",
    "Margaret",
]


def _one_edit(rng: random.Random, text: str) -> str:
    positions = [k for k, c in enumerate(text) if c.isalpha() and k > 1]
    k = rng.choice(positions)
    c = "o" if text[k].lower() != "o" else "e"
    return text[:k] + c + text[k + 1 :]


def _anls(rng: random.Random) -> Spec:
    if rng.random() < 0.25:  # a page, a date or a code written as a fraction: a string, never a value (issue 60)
        a, b = rng.randint(1, 9), rng.randint(2, 9)
        k = rng.randint(2, 4)
        page = f"{a * k}/{b * k}"
        return Spec(
            "anls",
            (page,),
            (
                Value(page, True, "right"),
                Value(f"{a}/{b}", None, "near:equal fraction"),
                Value(f"{a * k}/{b * k + 1}", False, "wrong"),
                Value(f"{a * k}/{b * k}%", None, "near:percent added"),
            ),
            question="Which page is the table on?",
        )
    name = rng.choice(_NAMES)
    other = rng.choice([n for n in _NAMES if n != name])
    return Spec(
        "anls",
        (name,),
        (
            Value(name, True, "right"),
            Value(name.upper(), True, "right"),
            Value(name.lower(), True, "right"),
            Value(_one_edit(rng, name), False, "near:one edit away"),
            Value(other, False, "wrong"),
        ),
        question="Who signed the letter?",
    )


def _vqa(rng: random.Random) -> Spec:
    kind = rng.choice(["word", "number", "polar"])
    if kind == "word":
        ref, other = rng.sample(["stop", "pepsi", "red", "tennis", "pizza", "kitchen"], 2)
        return Spec(
            "vqa",
            (ref,) * 8 + ("other",) * 2,
            (Value(ref, True, "right"), Value(ref.upper(), True, "right"), Value(other, False, "wrong")),
            question="What does the sign say?",
        )
    if kind == "number":
        n = rng.randint(2, 12)
        return Spec(
            "vqa",
            (str(n),) * 9 + ("1",),
            (
                Value(str(n), True, "right"),
                Value(WORDS[n], True, "right"),
                Value("1", True, "near:minority annotator"),  # one of ten said it: the judge's
                Value(str(n + 3), False, "wrong"),
            ),
            question="How many people are there?",
        )
    ref = rng.choice(["yes", "no"])
    return Spec(
        "vqa",
        (ref,) * 10,
        (Value(ref, True, "right"), Value("no" if ref == "yes" else "yes", False, "wrong")),
        question="Is it raining?",
    )


def _mcq(rng: random.Random) -> Spec:
    options = tuple(rng.sample(["larva", "pupa", "adult", "egg", "nymph", "seed"], 4))
    i = rng.randrange(4)
    j = (i + rng.randint(1, 3)) % 4
    letter, other = "ABCD"[i], "ABCD"[j]
    negative = rng.random() < 0.5
    question = (
        ("Which is NOT a stage of the life cycle?" if negative else "Which stage is shown?")
        + "\n"
        + "\n".join(f"{'ABCD'[k]}. {o}" for k, o in enumerate(options))
    )
    ordinal = ("first", "second", "third", "fourth")[i] if i < 3 else "last"
    return Spec(
        "mcq",
        (letter,),
        (
            Value(letter, True, "right"),
            Value(f"({letter})", True, "right"),
            Value(f"Option {letter}", True, "right"),
            Value(options[i], True, "right"),
            Value(f"the {ordinal} option", True, "right"),
            Value(other, False, "wrong"),
            Value(options[j], False, "wrong"),
            Value(f"not {letter}", False, "near:negated"),
            *_marks(letter, other, options[i], options[j]),
        ),
        question=question,
        options=options,
    )


def _exact(rng: random.Random) -> Spec:
    ref, other = rng.sample(["Paris", "blue whale", "photosynthesis", "Mount Everest", "oxygen"], 2)
    return Spec(
        "exact",
        (ref,),
        (Value(ref, True, "right"), Value(ref.lower(), True, "right"), Value(other, False, "wrong")),
        question="What is shown?",
    )


def _math(rng: random.Random) -> Spec:
    kind = rng.choice(["fraction", "fraction", "radical", "pi", "power", "unit", "thousands"])
    if kind != "fraction":
        return _latex(rng, kind)
    a, b = rng.choice([(1, 2), (2, 5), (3, 4), (1, 3), (2, 3), (5, 8)])
    from fractions import Fraction

    dec = Fraction(a, b)
    right = [Value(f"{a}/{b}", True, "right"), Value(f"\\frac{{{a}}}{{{b}}}", True, "right")]
    if dec.denominator in (2, 4, 5, 8):
        right.append(Value(f"{float(dec):g}", True, "right"))
    wrong = dec + Fraction(1, 7)
    return Spec(
        "math",
        (f"\\frac{{{a}}}{{{b}}}",),
        (*right, Value(f"{wrong.numerator}/{wrong.denominator}", False, "wrong")),
        question="What fraction of the shapes are shaded?",
    )


def _latex(rng: random.Random, kind: str) -> Spec:
    """LaTeX the number reader must not read away, nor read first: radicals, multiples of pi, powers, units in \\text
    and \\mathrm, thin-space thousands (issue 60)."""
    q = "What is the length of the side?"
    if kind == "radical":
        n = rng.choice([2, 3, 5, 6, 7, 10, 11])
        k = rng.choice([2, 3])
        ref = f"{k}\\sqrt{{{n}}}"
        values = (
            Value(ref, True, "right"),
            Value(f"\\sqrt{{{n * k * k}}}", True, "latex form"),
            Value(str(k), False, "wrong"),  # the radical read away
            Value(str(k * n), False, "wrong"),
            Value(f"{ref}+", None, "near:operator left over"),
            Value(f"\\approx {ref}", None, "near:qualified"),
            Value(f"{k}\\sqrt{{{n + 1}}}", False, "wrong"),
        )
        return Spec("math", (ref,), values, question=q)
    if kind == "pi":
        k = rng.choice([2, 4, 5, 8])
        values = (
            Value(f"\\frac{{\\pi}}{{{k}}}", True, "right"),
            Value(f"\\pi/{k}", True, "latex form"),
            Value(f"{1 / k:g}\\pi", True, "latex form"),
            Value(str(k), False, "wrong"),
            Value(f"\\frac{{\\pi}}{{{k + 1}}}", False, "wrong"),
        )
        return Spec("math", (f"\\frac{{\\pi}}{{{k}}}",), values, question="What is the angle in radians?")
    if kind == "power":
        base, e = rng.choice([(2, 5), (3, 3), (2, 7), (5, 3)])
        values = (
            Value(f"{base}^{{{e}}}", True, "right"),
            Value(str(base**e), True, "latex form"),
            Value(f"{base}^{{{e + 1}}}", False, "wrong"),
            Value(str(base), False, "wrong"),
        )
        return Spec("math", (f"{base}^{{{e}}}",), values, question="How many arrangements are there?")
    if kind == "unit":
        n = rng.randint(2, 90)
        values = (
            Value(str(n), True, "right"),
            Value(f"{n}\\text{{ cm}}", True, "right"),
            Value(f"{n} \\mathrm{{cm}}", True, "right"),
            Value(f"{n + 3}\\text{{ cm}}", False, "wrong"),
            Value(f"{n}\\sqrt{{2}}\\text{{ cm}}", False, "wrong"),
        )
        return Spec("math", (str(n),), values, question="What is the length of the side, in cm?")
    n = rng.randint(1, 99) * 1000 + rng.randint(0, 999)
    values = (
        Value(str(n), True, "right"),
        Value(f"{n // 1000}\\,{n % 1000:03d}", True, "right"),
        Value(f"{n // 1000}{{,}}{n % 1000:03d}", True, "right"),
        Value(f"{n // 1000 + 1}\\,{n % 1000:03d}", False, "wrong"),
    )
    return Spec("math", (str(n),), values, question="How many visitors came?")


SPECS: dict[str, Callable[[random.Random], Spec]] = {
    "alnum": _alnum,
    "anls": _anls,
    "count": _count,
    "exact": _exact,
    "math": _math,
    "mcq": _mcq,
    "relaxed": _relaxed,
    "vqa": _vqa,
}


def cases(spec: Spec) -> Iterator[Case]:
    """Every value of ``spec`` in every presentation and continuation; a continuation that states a value states each
    of the spec's values in turn."""
    for value in spec.values:
        for continuation, (template, kind) in CONTINUATIONS.items():
            mechanism = value.mechanism if kind == "plain" else continuation
            for other in spec.values if "{o}" in template else (value,):
                truth = truth_of(value, continuation, other)
                for presentation in PRESENTATIONS:
                    yield Case(
                        spec,
                        value,
                        presentation,
                        continuation,
                        compose(value.text, presentation, continuation, other.text),
                        truth,
                        mechanism,
                        other.text,
                    )


def make_grader(verifier: object, vocabulary: Vocabulary | None, literal: bool) -> Grader:
    """A grader as a family's run builds it; on a commit from before `answers: {literal: true}` (to measure it), without."""
    try:
        return Grader(verifier, vocabulary, literal=literal)  # type: ignore[arg-type]
    except TypeError:
        return Grader(verifier, vocabulary)  # type: ignore[arg-type]


class Graders:
    """One grader per verifier, closed set and literal flag, as a family's run builds them."""

    def __init__(self) -> None:
        self._graders: dict[tuple, Grader] = {}

    def grade(self, case: Case) -> Grade:
        spec = case.spec
        key = (spec.verifier, spec.params, spec.vocabulary, spec.literal)
        if key not in self._graders:
            self._graders[key] = make_grader(
                get_verifier(spec.verifier, **dict(spec.params)), CLEVR if spec.vocabulary else None, spec.literal
            )
        item = ItemInfo(options=spec.options, question=spec.question)
        return self._graders[key].grade(case.answer, spec.references, item=item)


def violations(case: Case, outcome: Outcome) -> list[str]:
    """The invariants ``outcome`` breaks for ``case`` (see the module docstring); presentation invariance is checked
    across cases by the caller (:func:`group`)."""
    broken = []
    if outcome is Outcome.ACCEPTED and case.truth is not True:
        broken.append("false accept")
    if outcome is Outcome.CERTAIN and case.truth is not False:
        broken.append("certain false reject")
    if CONTINUATIONS[case.continuation][1] == "turn" and outcome is not Outcome.UNDECIDED:
        broken.append("turn decided")
    return broken


def group(case: Case) -> tuple:
    """The cases that must share one outcome: the same item, value and continuation (with what it states)."""
    return (id(case.spec), case.value.text, case.continuation, case.other)
