"""Throughput benchmark for the answer verifiers.

    python bench/verifiers.py [--n 1000000] [--seed 0] [--repeat 3] [--only alnum,relaxed] [--against REV]

For each verifier it generates ``--n`` realistic (prediction, reference) pairs deterministically — short answers
as produced for CLEVR, CLEVR-Math, ChartQA, GQA, VQAv2, DocVQA and multiple-choice sets, with a mix of exact
matches, harmless variants (case, punctuation, a sentence or explanation around the answer) and wrong answers —
then times ``Verifier.match`` over all of them on one CPU core and prints a table. The slow verifiers (``vqa``,
``anls``, ``math``) run on fewer pairs, shown in the ``pairs`` column.

With ``--against REV`` (a git revision, for example ``HEAD~3`` or ``main``) the verifiers of that revision run on
the same pairs in the same process, alternating pass by pass with this checkout's, and a ``ratio`` column says how
fast this checkout is relative to it: the machine's noise then cancels out. Each side keeps its fastest of
``--repeat`` passes.

Rejection sampling verifies every sample of a multi-million-item family, so the string verifiers must not be
the bottleneck: ``alnum``, ``relaxed``, ``exact`` and ``count`` are expected to reach 300,000 checks/s.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import io
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rs.verifiers import VerifierError, get_verifier  # noqa: E402

TARGET = 300_000
TARGETED = ("alnum", "relaxed", "exact", "count")
# Fraction of --n used for verifiers that are not throughput targets and are much slower per call.
SCALE = {"vqa": 0.2, "anls": 0.2, "math": 0.002}

Pair = tuple[str, "str | list[str]"]

COLORS = "gray red blue green brown purple cyan yellow".split()
SHAPES = "cube sphere cylinder".split()
CLEVR_WORDS = COLORS + SHAPES + ["small", "large", "rubber", "metal", "yes", "no"]
NUMBER_WORDS = "zero one two three four five six seven eight nine ten".split()
STR_WORDS = (
    "hello stop exit open coffee hotel london school parking taxi market bank street avenue sale police "
    "pizza burger station garden museum pharmacy bakery cinema library"
).split()
LABELS = "Asia Europe Africa Yes No Male Female Online Retail Democrats Republicans Q1 Q2 Q3 Q4".split()
DOC_ANSWERS = [
    "ITC Limited",
    "Coca Cola Company",
    "12/15/88",
    "John Smith",
    "Research and Development",
    "Annual Report 2019",
    "Board of Directors",
    "$1,234",
    "45%",
    "March 3, 1997",
    "R. J. Reynolds",
    "Philip Morris",
    "Department of Health",
    "Total revenue",
    "Chicago, Illinois",
    "P.O. Box 1234",
]
VQA_ANSWERS = ["yes", "no", "2", "3", "red", "dog", "cat", "tennis", "pizza", "frisbee", "white", "black and white"]


def _case(rng: random.Random, s: str) -> str:
    r = rng.random()
    return s.upper() if r < 0.1 else s.capitalize() if r < 0.3 else s


def gen_alnum(rng: random.Random) -> Pair:
    ref = rng.choice(CLEVR_WORDS + STR_WORDS + [str(i) for i in range(11)])
    r = rng.random()
    if r < 0.45:
        pred = ref
    elif r < 0.65:
        pred = _case(rng, ref) + rng.choice(["", "!", ".", "?"])
    elif r < 0.72:
        pred = f"{_case(rng, ref)}\n\nThe image shows the word {ref}."
    elif r < 0.78:
        pred = f"The answer is {ref}."
    elif r < 0.8:
        pred = rng.choice(["Café", "CAFÉ", "ﬁne", "Straße"])
    else:
        pred = _case(rng, rng.choice(CLEVR_WORDS + STR_WORDS))
    return pred, ref


def gen_relaxed(rng: random.Random) -> Pair:
    kind = rng.random()
    if kind < 0.5:  # CLEVR-Math small integers
        t = rng.randint(0, 10)
        ref = str(t)
        r = rng.random()
        pred = ref if r < 0.8 else str(rng.randint(0, 10)) if r < 0.95 else f"{t}."
    elif kind < 0.8:  # ChartQA values
        t = round(rng.uniform(0.5, 5000), rng.choice([0, 1, 2]))
        ref = f"{t:g}"
        r = rng.random()
        if r < 0.5:
            pred = ref
        elif r < 0.7:
            pred = f"{t * rng.uniform(0.97, 1.03):.2f}"
        elif r < 0.8:
            pred = f"{t:,.0f}" if t >= 1000 else f"{t}%"
        else:
            pred = f"{t * rng.uniform(0.5, 1.5):.1f}"
    elif kind < 0.9:  # percentages
        t = rng.randint(1, 99)
        ref = f"{t}%"
        pred = rng.choice([ref, f"{t / 100:g}", f"{t}", f"{t + rng.randint(-3, 3)}%"])
    else:  # text labels
        ref = rng.choice(LABELS)
        pred = rng.choice([ref, ref.lower(), ref + ".", rng.choice(LABELS)])
    return pred, ref


def gen_exact(rng: random.Random) -> Pair:
    ref = rng.choice(CLEVR_WORDS + ["left", "right", "t shirt", "black and white"])
    r = rng.random()
    if r < 0.5:
        pred = ref
    elif r < 0.7:
        pred = _case(rng, ref) + rng.choice(["", ".", " "])
    elif r < 0.77:
        pred = f"{_case(rng, ref)}\nIt is the {ref} one."
    elif r < 0.8:
        pred = f"  {ref.upper()}  "
    else:
        pred = rng.choice(CLEVR_WORDS)
    return pred, ref


def gen_count(rng: random.Random) -> Pair:
    t = rng.randint(0, 10)
    ref = str(t)
    r = rng.random()
    if r < 0.55:
        pred = ref
    elif r < 0.65:
        pred = NUMBER_WORDS[t].capitalize() + rng.choice(["", "."])
    elif r < 0.72:
        pred = f"There are {t} {rng.choice(SHAPES)}s."
    elif r < 0.75:
        pred = f"{t} or {t + 1}"
    elif r < 0.78:
        pred = f"Answer: {t}"
    elif r < 0.8:
        pred = f"{t}\n\nI counted {t} objects in total."
    else:
        pred = str(rng.randint(0, 10))
    return pred, ref


def gen_vqa(rng: random.Random) -> Pair:
    main = rng.choice(VQA_ANSWERS)
    k = rng.randint(0, 10)
    refs = [main] * k + [rng.choice(VQA_ANSWERS) for _ in range(10 - k)]
    rng.shuffle(refs)
    pred = rng.choice([main, main.capitalize() + ".", f"a {main}", rng.choice(VQA_ANSWERS), "two"])
    return pred, refs


def gen_anls(rng: random.Random) -> Pair:
    ref = rng.choice(DOC_ANSWERS)
    r = rng.random()
    if r < 0.4:
        pred = ref
    elif r < 0.6:
        pred = ref.lower() + rng.choice(["", "."])
    elif r < 0.75:  # one typo
        i = rng.randrange(len(ref))
        pred = ref[:i] + rng.choice("abcdefghij") + ref[i + 1 :]
    elif r < 0.8:
        pred = f"{ref}\nIt is printed at the top of the page."
    else:
        pred = rng.choice(DOC_ANSWERS)
    return pred, ref


def gen_mcq(rng: random.Random) -> Pair:
    ref = rng.choice("ABCD")
    letter = ref if rng.random() < 0.7 else rng.choice("ABCD")
    pred = rng.choice(
        [
            letter,
            f"({letter})",
            f"{letter}.",
            f"The answer is {letter}.",
            f"Answer: {letter}",
            f"{letter}) a small dog",
            f"**{letter}**",
            "A and B",
            f"\\boxed{{{letter}}}",
        ]
    )
    return pred, ref


def gen_math(rng: random.Random) -> Pair:
    a, b = rng.randint(1, 9), rng.randint(2, 9)
    pairs = [
        (f"\\boxed{{\\frac{{{a}}}{{{b}}}}}", f"{a / b:.6f}"),
        (f"The answer is ${a * b}$.", str(a * b)),
        (f"\\boxed{{{a + b}}}", str(a + b + rng.randint(0, 1))),
        (f"\\boxed{{{a}\\sqrt{{{b}}}}}", f"\\sqrt{{{a * a * b}}}"),
        (f"\\boxed{{x={a}}}", str(a)),
    ]
    pred, ref = rng.choice(pairs)
    return pred, ref


GENERATORS: dict[str, Callable[[random.Random], Pair]] = {
    "alnum": gen_alnum,
    "relaxed": gen_relaxed,
    "exact": gen_exact,
    "count": gen_count,
    "vqa": gen_vqa,
    "anls": gen_anls,
    "mcq": gen_mcq,
    "math": gen_math,
}


def _pairs(name: str, n: int, seed: int) -> tuple[list[str], list]:
    rng = random.Random(f"{seed}:{name}")
    gen = GENERATORS[name]
    pairs = [gen(rng) for _ in range(n)]
    return [p for p, _ in pairs], [r for _, r in pairs]


def bench(
    name: str, n: int, seed: int, repeat: int = 3, old_get: Callable | None = None
) -> tuple[tuple[int, float, float], tuple[int, float, float] | None] | None:
    """``(pairs, best seconds, match rate)`` of this checkout's verifier ``name``, and of ``old_get``'s when given.

    With an old tree the two verifiers alternate pass by pass over the same pairs, so a slow spell of the machine
    hits both sides alike; each side keeps its fastest pass.
    """
    try:
        verifiers = [get_verifier(name)]
    except VerifierError as e:
        print(f"{name}: skipped ({e})", file=sys.stderr)
        return None
    if old_get is not None:
        try:
            verifiers.append(old_get(name))
        except Exception as e:  # the old tree's own VerifierError class, or it lacks this verifier
            print(f"{name}: old tree skipped ({e})", file=sys.stderr)
    preds, refs = _pairs(name, n, seed)
    best = [float("inf")] * len(verifiers)
    hits = [0] * len(verifiers)
    order = list(range(len(verifiers)))
    for _ in range(repeat):
        for i in order:
            verifier = verifiers[i]
            start = time.perf_counter()
            hits[i] = sum(map(verifier.match, preds, refs))
            best[i] = min(best[i], time.perf_counter() - start)
        order.reverse()  # new-old, old-new, ...: neither side always runs first
    rows = [(n, seconds, h / n) for seconds, h in zip(best, hits)]
    return rows[0], rows[1] if len(rows) > 1 else None


def _old_get_verifier(rev: str) -> Callable:
    """``get_verifier`` of the ``rs`` package at git revision ``rev``, imported beside this checkout's.

    The old modules are imported under their own names, then this checkout's are put back in ``sys.modules``;
    the old verifier classes keep their modules alive.
    """
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "rs"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise SystemExit(f"--against {rev}: git archive failed: {archive.stderr.decode().strip()}")
    tmp = tempfile.mkdtemp(prefix="rs-bench-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tmp, filter="data")

    def ours(module: str) -> bool:
        return module == "rs" or module.startswith("rs.")

    saved = {k: m for k, m in sys.modules.items() if ours(k)}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, tmp)
    try:
        verifiers = importlib.import_module("rs.verifiers")
        verifiers.known_verifiers()  # a registry that finds its modules on first use must find the old ones
        return verifiers.get_verifier
    finally:
        sys.path.remove(tmp)
        for k in [k for k in sys.modules if ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="pairs per targeted verifier (default 1,000,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="", help="comma-separated verifier names (default: all)")
    parser.add_argument("--against", metavar="REV", help="also time the verifiers of git revision REV; print ratios")
    parser.add_argument("--repeat", type=int, default=3, help="passes over the pairs; the fastest counts (default 3)")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    names = [s for s in args.only.split(",") if s] or list(GENERATORS)
    unknown = sorted(set(names) - set(GENERATORS))
    if unknown:
        parser.error(f"unknown verifier(s) {', '.join(unknown)}; choose from {', '.join(GENERATORS)}")

    old_get = _old_get_verifier(args.against) if args.against else None
    extra = f" {'old/s':>11} {'ratio':>6}" if old_get else ""
    header = f"{'verifier':<9} {'pairs':>10} {'seconds':>8} {'checks/s':>11} {'match rate':>10}{extra}  target"
    print(header)
    print("-" * len(header))
    failed = False
    for name in names:
        n = max(1, int(args.n * SCALE.get(name, 1.0)))
        result = bench(name, n, args.seed, args.repeat, old_get)
        if result is None:
            print(f"{name:<9} {'-':>10} {'-':>8} {'-':>11} {'-':>10}  skipped (dependency missing)")
            continue
        (pairs, seconds, rate), old = result
        per_s = pairs / seconds
        if old_get is not None:
            extra = f" {old[0] / old[1]:>11,.0f} {per_s / (old[0] / old[1]):>5.2f}x" if old else f" {'-':>11} {'-':>6}"
        if name in TARGETED:
            ok = per_s >= TARGET
            failed |= not ok
            verdict = f"{'PASS' if ok else 'FAIL'} (>= {TARGET:,}/s)"
        else:
            verdict = "reported only"
        print(f"{name:<9} {pairs:>10,} {seconds:>8.2f} {per_s:>11,.0f} {rate:>10.1%}{extra}  {verdict}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
