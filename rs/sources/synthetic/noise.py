"""The defects real pools have, injected on purpose: off-task rows, sentence references, flattened multiple choice, ..."""

from __future__ import annotations

import logging
import random
from typing import Callable, TypeVar

from .questions import (
    COUNT_TEMPLATES,
    EXIST_TEMPLATES,
    QA,
    QUERY_TEMPLATES,
    Filter,
    count,
    filter_of,
    noun_phrase,
    sample_filter,
    unique_description,
    with_article,
)
from .scenes import ATTRIBUTE_ORDER, ATTRIBUTES, Scene, SceneObject

logger = logging.getLogger(__name__)

T = TypeVar("T")


# --- noise ------------------------------------------------------------------------------------

ITEM_NOISE = (
    "off_task",
    "sentence_answer",
    "flattened_mc",
    "empty_field",
    "foreign_source",
    "wrong_image_ref",
    "duplicate_qa",
)
"""Per-item noise kinds, rolled in this order for every clean item (so adding one never shifts another)."""
IMAGE_NOISE = ("duplicate_image", "corrupt_image", "empty_image")
REFERENCE_NOISE = ("wrong_reference",)
"""Noise the cleaning cannot see: a clean question whose reference is a wrong value of the right kind (what a
mislabelled pool holds). Rolled from a generator of its own per item, so turning it on shifts no other kind."""
QUESTION_PLANTS = ("guessable",)
"""Clean questions a text-only reader can answer: the question states its own answer before asking it ("The large
sphere is red. What color is the large sphere?"), its reference right. Rolled from a generator of its own per item, on the
items no other kind replaced and `wrong_reference` did not plant, so turning it on shifts no other kind; the truth is the
source's (`SyntheticSource.guessable`), what the no-image pass's mark is measured against (`bench/suspect.py`)."""
NOISE_KINDS = ITEM_NOISE + IMAGE_NOISE + REFERENCE_NOISE + QUESTION_PLANTS

FOREIGN_SOURCES = ("vqav2", "visual7w", "localized_narratives", "cocoqa", "aokvqa")
"""What `foreign_source` writes in `QAItem.source`: names of other Cauldron subsets."""

_NUMBER_WORDS = ("One", "Two", "Three", "Four", "Five")
OFF_TASK_TEMPLATES: tuple[tuple[str, str, dict[str, tuple[str, ...]]], ...] = (
    (
        "How many airplanes with propellers can be identified in this photo?",
        "{n} {plane} with propellers can be identified in the photo.",
        {},
    ),
    (
        "What is the man on the left holding?",
        "The man on the left is holding {thing}.",
        {"thing": ("an umbrella", "a tennis racket", "a cup of coffee", "a kite")},
    ),
    (
        "What color is the bus parked near the curb?",
        "The bus parked near the curb is {c}.",
        {"c": ("red", "white", "yellow", "blue")},
    ),
    (
        "What is the weather like in this picture?",
        "The weather appears to be {w}.",
        {"w": ("sunny and clear", "overcast and rainy", "snowy and cold", "foggy")},
    ),
    (
        "What does the sign in the photo say?",
        'The sign in the photo says "{t}".',
        {"t": ("STOP", "Main Street", "No Parking", "Open 24 Hours")},
    ),
    ("How many people are sitting on the bench?", "There are {n_lower} people sitting on the bench.", {}),
    (
        "What kind of animal is lying on the couch?",
        "A {a} is lying on the couch.",
        {"a": ("dog", "cat", "puppy", "kitten")},
    ),
    (
        "Where was this photo most likely taken?",
        "This photo was most likely taken {where}.",
        {"where": ("at a train station", "in a kitchen", "on a beach", "in a city park")},
    ),
    (
        "What is the woman in the red dress doing?",
        "The woman in the red dress is {doing}.",
        {"doing": ("talking on the phone", "walking her dog", "reading a book", "riding a bicycle")},
    ),
    (
        "What time of day does it appear to be in the image?",
        "It appears to be {when} in the image.",
        {"when": ("early morning", "late afternoon", "night", "midday")},
    ),
    (
        "What brand name is written on the side of the truck?",
        'The side of the truck says "{b}".',
        {"b": ("Coca-Cola", "FedEx", "Budweiser", "Pepsi")},
    ),
    (
        "Why is the giraffe bending its neck?",
        "The giraffe is bending its neck to {why}.",
        {"why": ("eat leaves from the ground", "drink water", "reach the fence")},
    ),
)
"""General-VQA rows with nothing to do with a CLEVR scene, answered by a full sentence."""

# Flattened multiple choice: the question, then options in prose. `{q}` is a clean query_attribute question.
MC_FORMATS = (
    "{q} Options: {comma}.",  # e.g. "Options: red, blue, green, cyan."
    "{q} Choose from: {paren}",  # e.g. "Choose from: (a) cube (b) sphere (c) cylinder"
    "{q} Select one: {or_list}",  # e.g. "Select one: cube, sphere or cylinder"
    "{q}\n{lines}\nAnswer with the option's letter from the given choices directly.",  # "A. cube\nB. sphere"
)
_MC_OPTION_COUNT = {"color": 4, "shape": 3, "size": 2, "material": 2}


# --- noise items ------------------------------------------------------------------------------


def off_task(rng: random.Random) -> tuple[str, str]:
    question, answer, slots = rng.choice(OFF_TASK_TEMPLATES)
    n = rng.randrange(len(_NUMBER_WORDS))
    fills = {k: rng.choice(v) for k, v in slots.items()}
    fills |= {
        "n": _NUMBER_WORDS[n],
        "n_lower": _NUMBER_WORDS[max(n, 1)].lower(),
        "plane": "airplane" if n == 0 else "airplanes",
    }
    return question, answer.format(**fills)


_SHAPE_ADJECTIVE = {"cube": "cubic", "sphere": "round", "cylinder": "cylindrical"}


def sentence_qa(scene: Scene, rng: random.Random) -> QA:
    """A clean question whose reference is a correct full sentence rather than a word."""
    kind = rng.choice(("query_attribute", "query_attribute", "count", "exist"))
    if kind == "query_attribute":
        attr = rng.choice(ATTRIBUTE_ORDER)
        obj = rng.choice(scene.objects)
        desc = unique_description(scene, obj, rng, exclude=attr)
        if desc is not None:
            if attr == "shape" and rng.random() < 0.5:
                desc = filter_of(obj, [*desc, "shape"])  # the real rows often name what they ask about
            s = noun_phrase(desc, rng, plural=False)
            value = getattr(obj, attr)
            q = rng.choice(QUERY_TEMPLATES[attr]).format(s=s)
            if attr == "shape":
                a = rng.choice((f"The {s} has a {_SHAPE_ADJECTIVE[value]} shape.", f"The {s} is a {value}."))
            elif attr == "material":
                a = f"The {s} is made of {value}."
            else:
                a = f"The {s} is {value}."
            return q, a, "query_attribute"
    flt = sample_filter(scene, rng)
    n = count(scene, flt)
    p, s = noun_phrase(flt, rng, plural=True), noun_phrase(flt, rng, plural=False)
    if kind == "exist":
        q = rng.choice(EXIST_TEMPLATES).format(p=p, a_s=with_article(s))
        return q, (f"Yes, there is {with_article(s)}." if n else f"No, there are no {p}."), "exist"
    q = rng.choice(COUNT_TEMPLATES).format(p=p)
    a = f"There is 1 {s}." if n == 1 else (f"There are no {p}." if n == 0 else f"There are {n} {p}.")
    return q, a, "count"


def flattened_mc(scene: Scene, rng: random.Random) -> tuple[str, str, bool] | None:
    """A query_attribute question with options in prose; ~10% have a reference matching no option.

    None when no object of the scene can be described uniquely (then nothing is injected).
    """
    if (drawn := _describable(scene, rng)) is None:
        return None
    attr, obj, desc = drawn
    question = rng.choice(QUERY_TEMPLATES[attr]).format(s=noun_phrase(desc, rng, plural=False))
    value = getattr(obj, attr)
    distractors = [v for v in ATTRIBUTES[attr] if v != value]
    options = [value, *rng.sample(distractors, _MC_OPTION_COUNT[attr] - 1)]
    rng.shuffle(options)
    fmt = rng.randrange(len(MC_FORMATS))
    text = _flatten(fmt, question, options)
    # Format 2 answers by letter or by text; format 4 asks for the letter; the others by text.
    by_letter = fmt == 3 or (fmt == 1 and rng.random() < 0.5)
    broken = rng.random() < 0.1
    if by_letter:
        i = len(options) if broken else options.index(value)
        answer = chr(65 + i) if fmt == 3 else f"({chr(97 + i)})"
    elif broken:
        answer = _outside_option(attr, options, rng)
    else:
        answer = value
    return text, answer, broken


def _describable(scene: Scene, rng: random.Random) -> tuple[str, SceneObject, Filter] | None:
    """An attribute and an object the scene describes uniquely without it, in up to 10 draws; None when none is found."""
    for _ in range(10):
        attr = rng.choice(ATTRIBUTE_ORDER)
        obj = rng.choice(scene.objects)
        if (desc := unique_description(scene, obj, rng, exclude=attr)) is not None:
            return attr, obj, desc
    return None


def _flatten(fmt: int, question: str, options: list[str]) -> str:
    """The question with its options in prose, in `MC_FORMATS[fmt]`'s layout."""
    return MC_FORMATS[fmt].format(
        q=question,
        comma=", ".join(options),
        paren=" ".join(f"({chr(97 + i)}) {o}" for i, o in enumerate(options)),
        or_list=(", ".join(options[:-1]) + " or " + options[-1]),
        lines="\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(options)),
    )


def _outside_option(attr: str, options: list[str], rng: random.Random) -> str:
    """A broken reference by text: a value of the attribute that no option offers (else any other attribute's value)."""
    outside = [v for v in ATTRIBUTES[attr] if v not in options]
    return rng.choice(outside or [v for a in ATTRIBUTE_ORDER if a != attr for v in ATTRIBUTES[a]])


def redraw(draw: Callable[[], T], taken: set[tuple[str, str]], tries: int = 8) -> T:
    """Call `draw` until its (question, answer) is not in `taken` (or tries run out)."""
    for _ in range(tries):
        value = draw()
        if value is None or (value[0], value[1]) not in taken:
            return value
    return value


_STATED = {
    "color": "The {s} is {v}.",
    "shape": "The {s} is a {v}.",
    "size": "The {s} is {v}.",
    "material": "The {s} is made of {v}.",
}
"""How a guessable question states its answer first (`guessable`)."""


def guessable(scene: Scene, rng: random.Random) -> QA | None:
    """A query_attribute question about an object the scene describes uniquely, its answer stated in the question before
    it is asked, the reference right; None when no object can be described uniquely (nothing is planted)."""
    if (drawn := _describable(scene, rng)) is None:
        return None
    attr, obj, desc = drawn
    phrase, value = noun_phrase(desc, rng, plural=False), getattr(obj, attr)
    question = rng.choice(QUERY_TEMPLATES[attr]).format(s=phrase)
    return f"{_STATED[attr].format(s=phrase, v=value)} {question}", value, "query_attribute"


def wrong_reference(answer: str, rng: random.Random) -> str | None:
    """A wrong value of the same kind as a clean reference: another count, the other yes/no, another value of the
    attribute; None for an answer of no such kind (nothing is planted)."""
    if answer.isdigit():
        n = int(answer)
        return str(rng.choice([m for m in (n - 2, n - 1, n + 1, n + 2) if m >= 0]))
    if answer in ("yes", "no"):
        return "no" if answer == "yes" else "yes"
    for values in ATTRIBUTES.values():
        if answer in values:
            return rng.choice([v for v in values if v != answer])
    return None
