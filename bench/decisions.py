"""Every decision the verifiers take on the answers the benches use, one line each, to check that a change decides alike.

    python bench/decisions.py OUT.gz                 # corpus, 100,000 generated answers per verifier, number shapes, bench pairs
    python bench/decisions.py OUT.gz --properties 2000 --pairs 10000   # smaller

Each line holds the case (verifier, answer, references, question, options) and what was decided: the reading
(stated answer, rest, mark, conflict) and the grade (outcome, kind, stated answer, value). The answers are those of
`bench/answers.py` (the corpus of tests/answers_corpus.py and, with the same seed, the generated answers of
tests/answers_properties.py), number-shaped answers (plain, grouped, padded, signed, malformed) against number
references for every verifier, and `bench/verifiers.py`'s pairs (without repeats). A change meant to speed the reading
up must leave the file byte for byte the same: `cmp` the files of both revisions.
"""

from __future__ import annotations

import argparse
import gzip
import io
import random
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TextIO

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import answers_properties  # noqa: E402
import verifiers as verifier_bench  # noqa: E402
from answers_corpus import CLEVR_ANSWERS, corpus  # noqa: E402

from rs.answers import Grade, read  # noqa: E402
from rs.verifiers import get_verifier  # noqa: E402
from rs.verifiers.base import ItemInfo, as_references  # noqa: E402


def _line(
    source: str, verifier: str, answer: str | None, refs: object, question: str, options: tuple, grade: Grade
) -> str:
    reading = read(answer) if answer is not None else None
    reading_text = "-" if reading is None else repr((reading.stated, reading.rest, reading.mark, reading.conflict))
    return (
        f"{source}\t{verifier}\t{answer!r}\t{refs!r}\t{question!r}\t{options!r}\t{reading_text}\t"
        f"{grade.outcome.value}\t{grade.kind.value}\t{grade.stated!r}\t{grade.value!r}\n"
    )


def _number_shapes() -> tuple[list[str], list[str]]:
    """Answers and references written as numbers are, plain and not quite (grouping, padding, percent, signs, periods,
    exponents, malformed digit strings), for the readings' number paths."""
    rng = random.Random(7)
    cores = [
        "0",
        "00",
        "7",
        "07",
        "007",
        "10",
        "42",
        "100",
        "1500",
        "2010",
        "1234",
        "12345",
        "3.5",
        "3.50",
        "0.5",
        ".5",
        "5.",
        "0.05",
        "12.345",
        "1,234",
        "12,345.6",
        "1,2345",
        "1,23",
        "1e3",
        "2.5e-2",
        "1_000",
        "0x10",
    ]
    cores += [f"{rng.uniform(0.5, 5000):.{rng.choice([0, 1, 2])}f}" for _ in range(20)]
    cores += [str(rng.randint(0, 100)) for _ in range(10)]
    answers = []
    for core in cores:
        answers += [
            core,
            f"{core}%",
            f"{core}.",
            f"-{core}",
            f"+{core}",
            f" {core} ",
            f"{core} %",
            f"{core}..",
            f"{core}\n",
            f"{core}\nI read it off the axis.",
            f"The answer is {core}.",
        ]
    answers += ["", " ", ".", "%", "-", "1.2.3", "1..2", "12a", "a12", "１２", "٣", "12 ", "\n12"]
    references = (
        cores[:27] + [f"{c}%" for c in cores[:12]] + cores[27:40] + ["-3", "+4", " 12", "12 ", "twelve", "yes", "Asia"]
    )
    return answers, references


@contextmanager
def _text_out(path: str) -> Iterator[TextIO]:
    """The output file, gzip when it ends in .gz: with no write time and no file name in its header, so two runs that
    decide alike write the same bytes and `cmp` compares them."""
    if not path.endswith(".gz"):
        with open(path, "w", encoding="utf-8") as out:
            yield out
        return
    with open(path, "wb") as raw, gzip.GzipFile("", "wb", fileobj=raw, mtime=0) as packed:
        with io.TextIOWrapper(packed, encoding="utf-8") as out:
            yield out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="file to write (gzip when it ends in .gz)")
    parser.add_argument(
        "--properties", type=int, default=100_000, help="generated answers per verifier (default 100000)"
    )
    parser.add_argument("--pairs", type=int, default=300_000, help="bench/verifiers.py --n (default 300000)")
    args = parser.parse_args()
    with _text_out(args.out) as out:
        graders: dict[tuple, object] = {}
        for case in corpus():
            key = (case.verifier, case.params, case.closed_set, case.literal)
            if key not in graders:
                graders[key] = answers_properties.make_grader(
                    get_verifier(case.verifier, **dict(case.params)),
                    CLEVR_ANSWERS if case.closed_set else None,
                    case.literal,
                )
            grade = graders[key].grade(
                case.answer, case.references, item=ItemInfo(options=case.options, question=case.question)
            )
            out.write(_line("corpus", case.verifier, case.answer, case.references, case.question, case.options, grade))
        # the generated answers, drawn exactly as bench/answers.py --properties draws them
        rng = random.Random(39)
        property_graders = answers_properties.Graders()
        for verifier, make in sorted(answers_properties.SPECS.items()):
            count = 0
            while count < args.properties:
                spec = make(rng)
                for case in answers_properties.cases(spec):
                    grade = property_graders.grade(case)
                    out.write(
                        _line("property", verifier, case.answer, spec.references, spec.question, spec.options, grade)
                    )
                    count += 1
        # number-shaped answers against number-shaped references, with and without a question, for every verifier
        answers, references = _number_shapes()
        for name in sorted(verifier_bench.GENERATORS):
            grader = get_verifier(name).grader()
            slow = name == "math"  # math-verify is slow: a sample
            for question in ("", "How many bars are there?", "What was the revenue (in billions)?")[
                : 1 if slow else 3
            ]:
                item = ItemInfo(question=question)
                for ref in references[::7] if slow else references:
                    for answer in answers[::5] if slow else answers:
                        grade = grader.grade(answer, (ref,), item=item)
                        out.write(_line("shapes", name, answer, (ref,), question, (), grade))
        for name in verifier_bench.GENERATORS:
            verifier = get_verifier(name)
            n = max(1, int(args.pairs * verifier_bench.SCALE.get(name, 1.0)))
            preds, refs = verifier_bench._pairs(name, n, 0)
            seen: set[tuple] = set()
            for pred, ref in zip(preds, refs):
                refs_t = ref if type(ref) is str else as_references(ref)
                if (pred, refs_t if type(refs_t) is str else tuple(refs_t)) in seen:
                    continue
                seen.add((pred, refs_t if type(refs_t) is str else tuple(refs_t)))
                grade = verifier.grader().grade(pred, refs_t)
                out.write(_line("bench", name, pred, refs_t, "", (), grade))


if __name__ == "__main__":
    main()
