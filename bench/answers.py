"""How the verifiers read realistic final answers: false accepts, false rejects (certain apart) per verifier and class.

    python bench/answers.py            # the table, then the totals
    python bench/answers.py --show 20  # also the first 20 errors of each kind
    python bench/answers.py --properties          # also 100,000 generated answers per verifier (tests/answers_properties.py)
    python bench/answers.py --properties 20000    # fewer

The corpus is tests/answers_corpus.py (cases written from how VLMs answer, each with its truth). A false accept
puts a wrong answer into training data; a certain false reject publishes a right answer as the model's error with
no judge to rescue it; an undecided right answer is the judge's work.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import answers_properties  # noqa: E402
from answers_corpus import CLEVR_ANSWERS, Case, corpus  # noqa: E402

from rs.answers import Grader, Outcome  # noqa: E402
from rs.verifiers import get_verifier  # noqa: E402
from rs.verifiers.base import ItemInfo  # noqa: E402


def grade_all(cases: list[Case]) -> list[tuple[Case, Outcome]]:
    graders: dict[tuple, Grader] = {}
    out = []
    for case in cases:
        key = (case.verifier, case.params, case.closed_set, case.literal)
        if key not in graders:
            graders[key] = answers_properties.make_grader(
                get_verifier(case.verifier, **dict(case.params)),
                CLEVR_ANSWERS if case.closed_set else None,
                case.literal,
            )
        item = ItemInfo(options=case.options, question=case.question)
        out.append((case, graders[key].grade(case.answer, case.references, item=item).outcome))
    return out


def tally(graded: list[tuple[Case, Outcome]]) -> dict[tuple[str, str], Counter[str]]:
    table: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for case, outcome in graded:
        row = table[(case.verifier, case.phrasing)]
        row["cases"] += 1
        row["right"] += case.truth
        if outcome is Outcome.ACCEPTED and not case.truth:
            row["false_accept"] += 1
        if case.truth and outcome is not Outcome.ACCEPTED:
            row["false_reject"] += 1
            row["certain_false_reject"] += outcome is Outcome.CERTAIN
        row["undecided"] += outcome is Outcome.UNDECIDED
    return table


def properties(per_verifier: int, seed: int = 39) -> dict[tuple[str, str], Counter[str]]:
    """At least ``per_verifier`` generated answers for each verifier (value x presentation x continuation), graded;
    per verifier and mechanism, how many break each invariant of `tests/answers_properties.py`."""
    rng = random.Random(seed)
    graders = answers_properties.Graders()
    table: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for verifier, make in sorted(answers_properties.SPECS.items()):
        count = 0
        while count < per_verifier:
            outcomes: dict[tuple, set[Outcome]] = defaultdict(set)
            spec = make(rng)
            for case in answers_properties.cases(spec):
                outcome = graders.grade(case).outcome
                row = table[(verifier, case.mechanism)]
                row["cases"] += 1
                if case.truth is True:
                    row["right"] += 1
                    row["false reject"] += outcome is not Outcome.ACCEPTED  # the judge's, or certain (counted below)
                for broken in answers_properties.violations(case, outcome):
                    row[broken] += 1
                outcomes[answers_properties.group(case)].add(outcome)
                count += 1
            for key, seen in outcomes.items():
                if len(seen) > 1:
                    table[
                        (
                            verifier,
                            key[2]
                            if answers_properties.CONTINUATIONS[key[2]][1] != "plain"
                            else next(v.mechanism for v in spec.values if v.text == key[1]),
                        )
                    ]["inconsistent"] += 1
    return table


def print_properties(table: dict[tuple[str, str], Counter[str]]) -> None:
    print(
        f"\n{'verifier':8} {'mechanism':28} {'cases':>7} {'right':>7} {'false acc':>9} {'false rej':>9} "
        f"{'certain fr':>10} {'turn decided':>12} {'inconsistent':>12}"
    )
    totals: dict[str, Counter[str]] = defaultdict(Counter)
    rows = sorted(table.items())
    for (verifier, _), row in rows:
        totals[verifier].update(row)
    for (verifier, mechanism), row in rows + [((verifier, "all"), row) for verifier, row in sorted(totals.items())]:
        print(
            f"{verifier:8} {mechanism:28} {row['cases']:7} {row['right']:7} {row['false accept']:9} "
            f"{row['false reject']:9} {row['certain false reject']:10} {row['turn decided']:12} {row['inconsistent']:12}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--show", type=int, default=0, help="print the first N errors of each kind")
    parser.add_argument(
        "--properties",
        type=int,
        nargs="?",
        const=100_000,
        default=0,
        metavar="N",
        help="also grade N generated answers per verifier (default 100000) and print the invariants they break",
    )
    args = parser.parse_args()
    graded = grade_all(corpus())
    table = tally(graded)
    print(
        f"{'verifier':8} {'class':26} {'cases':>5} {'right':>5} {'false acc':>9} {'false rej':>9} {'certain':>7} {'undecided':>9}"
    )
    totals: Counter[str] = Counter()
    for (verifier, phrasing), row in sorted(table.items()):
        totals.update(row)
        print(
            f"{verifier:8} {phrasing:26} {row['cases']:5} {row['right']:5} {row['false_accept']:9} {row['false_reject']:9} "
            f"{row['certain_false_reject']:7} {row['undecided']:9}"
        )
    print(
        f"{'all':8} {'':26} {totals['cases']:5} {totals['right']:5} {totals['false_accept']:9} {totals['false_reject']:9} "
        f"{totals['certain_false_reject']:7} {totals['undecided']:9}"
    )
    if args.show:
        for title, wrong in (
            ("false accepts", lambda c, o: o is Outcome.ACCEPTED and not c.truth),
            ("certain false rejects", lambda c, o: o is Outcome.CERTAIN and c.truth),
            ("undecided right answers", lambda c, o: o is Outcome.UNDECIDED and c.truth),
        ):
            shown = [(c, o) for c, o in graded if wrong(c, o)][: args.show]
            print(f"\n{title}:")
            for c, _ in shown:
                print(f"  {c.verifier:8} {c.phrasing:24} {c.answer!r} vs {c.references[:2]!r}")
    if args.properties:
        print_properties(properties(args.properties))


if __name__ == "__main__":
    main()
