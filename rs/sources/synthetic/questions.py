"""CLEVR and CLEVR-Math questions, each answered from the scene graph it is asked about."""

from __future__ import annotations

import itertools
import logging
import random
from typing import Mapping, Sequence

from .scenes import ATTRIBUTE_ORDER, ATTRIBUTES, SHAPES, SYNONYMS, Scene, SceneObject

logger = logging.getLogger(__name__)

# --- question templates -----------------------------------------------------------------------
# {p}: plural noun phrase ("red cubes"), {s}: singular ("small rubber sphere"), {a_s}: with article.

COUNT_TEMPLATES = (
    "How many {p} are there?",
    "What number of {p} are there?",
    "How many {p} are visible?",
)
EXIST_TEMPLATES = (
    "Are there any {p}?",
    "Is there {a_s}?",
    "Are any {p} visible?",
)
QUERY_TEMPLATES: dict[str, tuple[str, ...]] = {
    "color": ("What color is the {s}?", "What is the color of the {s}?", "The {s} is what color?"),
    "shape": ("What shape is the {s}?", "What is the shape of the {s}?", "What shape does the {s} have?"),
    "size": ("What size is the {s}?", "What is the size of the {s}?", "How big is the {s}?"),
    "material": ("What material is the {s}?", "What is the {s} made of?", "What is the material of the {s}?"),
}
COMPARE_COUNT_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("Are there more {a} than {b}?", ">"),
    ("Are there fewer {a} than {b}?", "<"),
    ("Is the number of {a} greater than the number of {b}?", ">"),
    ("Is the number of {a} less than the number of {b}?", "<"),
    ("Is the number of {a} the same as the number of {b}?", "="),
    ("Are there the same number of {a} and {b}?", "="),
    ("Are there an equal number of {a} and {b}?", "="),
)
COMPARE_ATTRIBUTE_TEMPLATES: dict[str, tuple[str, ...]] = {
    "color": (
        "Is the {a} the same color as the {b}?",
        "Does the {a} have the same color as the {b}?",
        "Do the {a} and the {b} have the same color?",
    ),
    "shape": (
        "Is the {a} the same shape as the {b}?",
        "Does the {a} have the same shape as the {b}?",
        "Do the {a} and the {b} have the same shape?",
    ),
    "size": (
        "Is the {a} the same size as the {b}?",
        "Does the {a} have the same size as the {b}?",
        "Do the {a} and the {b} have the same size?",
    ),
    "material": (
        "Is the {a} made of the same material as the {b}?",
        "Does the {a} have the same material as the {b}?",
        "Are the {a} and the {b} made of the same material?",
    ),
}
SUBTRACT_TEMPLATES = (
    "Subtract all {a}. How many {t} are left?",
    "Subtract all {a}. Subtract all {b}. How many {t} are left?",
)
ADD_TEMPLATES = ("Add {k} {a}. How many {t} exist?",)

CLEVR_QTYPES: dict[str, float] = {
    "count": 0.25,
    "exist": 0.2,
    "query_attribute": 0.25,
    "compare_count": 0.15,
    "compare_attribute": 0.15,
}
"""CLEVR-style question types and how often each is drawn."""
CLEVRMATH_QTYPES: dict[str, float] = {"subtract": 0.6, "add": 0.4}
STYLES = ("clevr", "clevrmath", "mixed")


# --- scene queries ----------------------------------------------------------------------------

Filter = dict[str, str]
"""Attribute -> canonical value an object must have; {} matches everything."""


def matches(obj: SceneObject, flt: Mapping[str, str]) -> bool:
    return all(getattr(obj, attr) == value for attr, value in flt.items())


def count(scene: Scene, flt: Mapping[str, str]) -> int:
    return sum(matches(o, flt) for o in scene.objects)


def noun_phrase(flt: Mapping[str, str], rng: random.Random, *, plural: bool) -> str:
    """'big blue things', 'small metallic ball': adjectives in CLEVR order, synonyms drawn by rng."""
    words = [rng.choice(SYNONYMS.get(flt[a], (flt[a],))) for a in ATTRIBUTE_ORDER[:3] if a in flt]
    noun = rng.choice(SYNONYMS[flt.get("shape", "thing")])
    words.append(noun + "s" if plural else noun)
    return " ".join(words)


def with_article(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def filter_of(obj: SceneObject, attrs: Sequence[str]) -> Filter:
    return {a: getattr(obj, a) for a in ATTRIBUTE_ORDER if a in attrs}


def sample_filter(scene: Scene, rng: random.Random, *, from_scene: float = 0.7) -> Filter:
    """A 1-3 attribute filter: usually one some object satisfies (non-zero counts), else random."""
    k = rng.choices((1, 2, 3), weights=(4, 4, 2))[0]
    attrs = rng.sample(ATTRIBUTE_ORDER, k)
    if rng.random() < from_scene:
        return filter_of(rng.choice(scene.objects), attrs)
    return {a: rng.choice(ATTRIBUTES[a]) for a in ATTRIBUTE_ORDER if a in attrs}


def unique_description(
    scene: Scene, obj: SceneObject, rng: random.Random, exclude: str | None = None
) -> Filter | None:
    """A filter that picks out `obj` alone, never naming `exclude` (the attribute being asked about).

    Usually the shortest such description, sometimes an over-specified one, as in CLEVR.
    """
    attrs = [a for a in ATTRIBUTE_ORDER if a != exclude]
    unique = [
        flt
        for k in range(1, len(attrs) + 1)
        for combo in itertools.combinations(attrs, k)
        if count(scene, flt := filter_of(obj, combo)) == 1
    ]
    if not unique:
        return None
    shortest = [f for f in unique if len(f) == len(unique[0])]
    return rng.choice(shortest if rng.random() < 0.6 else unique)


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


# --- CLEVR questions --------------------------------------------------------------------------

QA = tuple[str, str, str]


def _q_count(scene: Scene, rng: random.Random) -> QA:
    flt = {} if rng.random() < 0.05 else sample_filter(scene, rng)
    q = rng.choice(COUNT_TEMPLATES).format(p=noun_phrase(flt, rng, plural=True))
    return q, str(count(scene, flt)), "count"


def _q_exist(scene: Scene, rng: random.Random) -> QA:
    # Aim for yes and no equally often: random filters alone match too often to give many "no".
    want_yes = rng.random() < 0.5
    for _ in range(10):
        flt = sample_filter(scene, rng, from_scene=1.0 if want_yes else 0.0)
        if (count(scene, flt) > 0) == want_yes:
            break
    template = rng.choice(EXIST_TEMPLATES)
    q = template.format(p=noun_phrase(flt, rng, plural=True), a_s=with_article(noun_phrase(flt, rng, plural=False)))
    return q, _yes_no(count(scene, flt) > 0), "exist"


def _q_query(scene: Scene, rng: random.Random) -> QA | None:
    attr = rng.choice(ATTRIBUTE_ORDER)
    obj = rng.choice(scene.objects)
    desc = unique_description(scene, obj, rng, exclude=attr)
    if desc is None:
        return None
    q = rng.choice(QUERY_TEMPLATES[attr]).format(s=noun_phrase(desc, rng, plural=False))
    return q, getattr(obj, attr), "query_attribute"


def _q_compare_count(scene: Scene, rng: random.Random) -> QA | None:
    template, relation = rng.choice(COMPARE_COUNT_TEMPLATES)
    a = sample_filter(scene, rng)
    ca = count(scene, a)
    # Draw the second set until the answer is the one aimed at ("same number" is rarely true by chance).
    want = rng.random() < 0.5
    for _ in range(20):
        b = sample_filter(scene, rng)
        cb = count(scene, b)
        answer = {">": ca > cb, "<": ca < cb, "=": ca == cb}[relation]
        if b != a and answer == want:
            break
    if a == b:
        return None
    q = template.format(a=noun_phrase(a, rng, plural=True), b=noun_phrase(b, rng, plural=True))
    return q, _yes_no(answer), "compare_count"


def _q_compare_attribute(scene: Scene, rng: random.Random) -> QA | None:
    attr = rng.choice(ATTRIBUTE_ORDER)
    first = rng.choice(scene.objects)
    others = [o for o in scene.objects if o is not first]
    same = [o for o in others if getattr(o, attr) == getattr(first, attr)]
    # Sometimes force a partner that shares the attribute: with chance matches, yes and no come out even.
    second = rng.choice(same if same and rng.random() < 0.2 else others)
    da = unique_description(scene, first, rng, exclude=attr)
    db = unique_description(scene, second, rng, exclude=attr)
    if da is None or db is None:
        return None
    q = rng.choice(COMPARE_ATTRIBUTE_TEMPLATES[attr]).format(
        a=noun_phrase(da, rng, plural=False), b=noun_phrase(db, rng, plural=False)
    )
    return q, _yes_no(getattr(first, attr) == getattr(second, attr)), "compare_attribute"


_CLEVR_GENERATORS = {
    "count": _q_count,
    "exist": _q_exist,
    "query_attribute": _q_query,
    "compare_count": _q_compare_count,
    "compare_attribute": _q_compare_attribute,
}


# --- CLEVRMath questions ----------------------------------------------------------------------


def _target_phrase(rng: random.Random, shape: str | None) -> str:
    """What a CLEVRMath question counts at the end: all objects, or one shape."""
    return noun_phrase({"shape": shape} if shape else {}, rng, plural=True)


def _q_subtract(scene: Scene, rng: random.Random) -> QA:
    removed = [sample_filter(scene, rng, from_scene=0.85)]
    if rng.random() < 0.4:
        second = sample_filter(scene, rng, from_scene=0.85)
        if second != removed[0]:
            removed.append(second)
    target = rng.choice(SHAPES) if rng.random() < 0.25 else None
    if {"shape": target} in removed:
        target = None  # "Subtract all cubes. How many cubes are left?" is always 0
    # An object matched by both subtractions is removed once: count the survivors, not the removals.
    left = sum(
        1 for o in scene.objects if not any(matches(o, f) for f in removed) and (target is None or o.shape == target)
    )
    phrases = [noun_phrase(f, rng, plural=True) for f in removed]
    template = SUBTRACT_TEMPLATES[len(removed) - 1]
    q = template.format(a=phrases[0], b=phrases[-1], t=_target_phrase(rng, target))
    return q, str(left), "subtract"


def _q_add(scene: Scene, rng: random.Random) -> QA:
    k = rng.randint(1, 3)
    added = sample_filter(scene, rng, from_scene=0.5)
    if rng.random() < 0.7:
        added.setdefault("shape", rng.choice(SHAPES))  # CLEVRMath mostly adds named shapes
    target = None
    if rng.random() < 0.25 and "shape" in added:
        target = added["shape"] if rng.random() < 0.5 else rng.choice(SHAPES)
    if target is None:
        answer = len(scene.objects) + k
    else:
        answer = count(scene, {"shape": target}) + (k if added["shape"] == target else 0)
    q = ADD_TEMPLATES[0].format(k=k, a=noun_phrase(added, rng, plural=k > 1), t=_target_phrase(rng, target))
    return q, str(answer), "add"


_CLEVRMATH_GENERATORS = {"subtract": _q_subtract, "add": _q_add}


def _draw_questions(
    scene: Scene, rng: random.Random, n: int, generators: Mapping, weights: Mapping[str, float]
) -> list[QA]:
    """n distinct questions; a generator may decline (no unique referent) and another type is drawn."""
    out: list[QA] = []
    seen: set[str] = set()
    kinds, w = list(weights), list(weights.values())
    for _ in range(max(n, 1) * 30):
        if len(out) >= n:
            break
        qa = generators[rng.choices(kinds, weights=w)[0]](scene, rng)
        if qa is not None and qa[0] not in seen:
            seen.add(qa[0])
            out.append(qa)
    if len(out) < n:
        logger.debug("only %d of %d distinct questions for a %d-object scene", len(out), n, len(scene.objects))
    return out


def clevr_questions(scene: Scene, rng: random.Random, n: int) -> list[QA]:
    """n distinct CLEVR-style (question, answer, qtype) triples, answers computed from the scene."""
    return _draw_questions(scene, rng, n, _CLEVR_GENERATORS, CLEVR_QTYPES)


def clevrmath_questions(scene: Scene, rng: random.Random, n: int) -> list[QA]:
    """n distinct CLEVRMath-style subtract/add triples, answers computed from the scene."""
    return _draw_questions(scene, rng, n, _CLEVRMATH_GENERATORS, CLEVRMATH_QTYPES)


def questions_for(scene: Scene, rng: random.Random, n: int, style: str) -> list[QA]:
    if style == "clevr":
        return clevr_questions(scene, rng, n)
    if style == "clevrmath":
        return clevrmath_questions(scene, rng, n)
    n_math = sum(rng.random() < 0.5 for _ in range(n))
    qa = clevr_questions(scene, rng, n - n_math) + clevrmath_questions(scene, rng, n_math)
    rng.shuffle(qa)
    return qa
