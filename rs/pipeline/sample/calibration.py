"""How far the judge can be trusted: measured on every run, before it may promote anything.

The cases are drawn from the run's own answers while they stream past, each sample being the k
items with the smallest hash of their key, so the single-process stage and the Ray driver draw
the same cases whatever the order:

- **positives**: answers the verifier accepted; a sound judge says CORRECT.
- **easy negatives**: an answer paired with *another* item's question and reference.
- **hard negatives**: near misses built like the rejections a judge really meets. For an accepted
  item, the same question and reference with a candidate that is wrong for it: another option
  letter for multiple choice, a nearby different number for a numeric reference, otherwise an
  answer the model gave to another question of the same kind in this family; and a near miss of
  each leniency a metric has (one count away, a value a thousand times or a percent conversion
  away, a text one letter away), which the verifiers now leave undecided for the judge. The
  verifier checks that each one is not accepted for the item's references.
- **certain rejections**: real rejections that the verifier knows are wrong
  (`Verifier.contradicts`); the judge sees them anyway, and its verdicts are a measurement on the
  very cases it meets (none of them can promote).

The gate is evidence, not luck: each check's 95% Wilson lower bound must reach its threshold, and
positives and hard negatives need at least `min_calibration_cases` each. Easy negatives are
reported only.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import re
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

from rs.answers import Grader
from rs.families.schema import JudgeConfig
from rs.pipeline.sample.judge import LABELS, Judge, JudgeCase
from rs.records import QAItem
from rs.util.progress import progress
from rs.verifiers import Verifier

VERSION = "4"
"""How the judge is measured: bump when a change measures or gates it otherwise (`rs.pipeline.versions`; 3: the cases carry
their question's image, for a judge that sees it; 4: a blocked judge gives every reason that holds)."""

T = TypeVar("T")


def _rank(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")


class BottomK(Generic[T]):
    """The k distinct keys with the smallest hash, with their values: a deterministic sample of a stream in O(k)."""

    def __init__(self, k: int):
        self.k = k
        self._heap: list[tuple[int, str, T]] = []  # max-heap on the rank, via negation
        self._keys: set[str] = set()

    def offer(self, key: str, value: T) -> None:
        if key in self._keys or self.k <= 0:
            return
        entry = (-_rank(key), key, value)
        if len(self._heap) < self.k:
            heapq.heappush(self._heap, entry)
        elif entry[0] > self._heap[0][0]:
            self._keys.discard(heapq.heapreplace(self._heap, entry)[1])
        else:
            return
        self._keys.add(key)

    def items(self) -> list[T]:
        """The values, smallest hash first."""
        return [value for _, _, value in sorted(self._heap, key=lambda e: (-e[0], e[1]))]


@dataclass(frozen=True)
class Answered:
    """An answered item as calibration needs it: its judge case and what the verifier compares against (it is the
    verifier's `Item`: options and question type)."""

    case: JudgeCase
    references: tuple[str, ...]
    options: tuple[str, ...] = ()
    kind: str = ""
    qtype: str | None = None


ImageSource = Callable[[set[str]], Iterable[tuple[str, bytes]]]
"""The image bytes of a set of image hashes, each hash once, in the clean store's row order (`rs.store.clean_images`)."""


@dataclass
class CalibrationCases:
    """The judge's calibration cases, each with its image's hash and never its bytes (a judge that sees the image gets
    them read again, `with_images`: about 4 x `judge.calibration_samples` images held for a whole pass were up to a GB)."""

    positives: list[JudgeCase]
    easy: list[JudgeCase]
    hard: list[JudgeCase]

    def all(self) -> list[JudgeCase]:
        return self.positives + self.easy + self.hard

    def checks(self) -> list[tuple[str, list[JudgeCase]]]:
        """The cases of each check (`CHECKS`) with its name: the positives, the easy and the hard negatives."""
        return [("positive", self.positives), ("easy", self.easy), ("hard", self.hard)]

    def grouped(self) -> Iterator[tuple[str, JudgeCase]]:
        """Each case with the name of its check, in `checks` order."""
        for name, group in self.checks():
            for case in group:
                yield name, case

    def hashes(self) -> set[str]:
        """The hashes of the cases' images."""
        return {case.image_sha256 for case in self.all() if case.image_sha256}

    def with_images(self, images: Iterable[tuple[str, bytes]]) -> Iterator[tuple[str, JudgeCase]]:
        """Each case with the name of its check and its image's bytes, in the order `images` gives them (`ImageSource` of
        `hashes`: the clean store's row order, each image read once), so a caller that asks each case as it comes holds
        a batch of images, not every case's. The cases of one image come in `grouped`'s order."""
        waiting: dict[str, list[tuple[str, JudgeCase]]] = {}
        for name, case in self.grouped():
            if not case.image_sha256:
                raise ValueError(
                    f"the judge's calibration case {case.item_key or case.question!r} names no image: a judge that sees "
                    "the image cannot be asked about it"
                )
            waiting.setdefault(case.image_sha256, []).append((name, case))
        for sha, image in images:
            for name, case in waiting.pop(sha, ()):
                yield name, replace(case, image=image)
        if waiting:
            sha, [(_, case), *_] = next(iter(waiting.items()))
            raise RuntimeError(
                f"the image {sha} of the judge's calibration case {case.item_key or case.question!r} is not in the "
                "cleaned rows: the clean store changed during the run; rebuild the family"
            )


def asked(judge: Judge, cases: CalibrationCases, images: ImageSource | None) -> Iterator[tuple[str, JudgeCase]]:
    """The calibration cases as the judge is asked about them, each with the name of its check: a judge that sees the
    image gets each case with its image's bytes, read from `images` in row order (`CalibrationCases.with_images`);
    otherwise, or without `images` (the requests listed for their keys only: the hash keys them), in `grouped` order
    without bytes."""
    if judge.sees_image and images is not None:
        return cases.with_images(images(cases.hashes()))
    return cases.grouped()


_WORD = re.compile(r"[a-z]+")
_NUMBER_REFERENCE = re.compile(r"[+-]?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.([0-9]+))?(%?)")


def question_kind(item: QAItem) -> str:
    """The kind of question, for borrowing answers: the source's question type, else its first two words."""
    if item.qtype:
        return f"type:{item.qtype}"
    return " ".join(_WORD.findall(item.question.lower())[:2])


class CalibrationSampler:
    """Collects the calibration cases from the answers as `SamplingPass.verify` sees them."""

    def __init__(self, verifier: Verifier, samples: int, *, letters: str = "ABCDEFGHIJ", grader: Grader | None = None):
        self.verifier = verifier
        self.grader = grader or verifier.grader()
        self.samples = samples
        self.letters = letters
        self._accepted: BottomK[Answered] = BottomK(2 * samples)
        self._answered: BottomK[Answered] = BottomK(2 * samples)
        self._kind_answers: BottomK[tuple[str, str]] = BottomK(64 * samples)

    def offer(self, answered: Answered, accepted: bool) -> None:
        """One verified answer; its case is kept with its image's hash only, its bytes dropped (`CalibrationCases`)."""
        if answered.case.image is not None:
            answered = replace(answered, case=replace(answered.case, image=None))
        key = answered.case.item_key or answered.case.question
        self._answered.offer(key, answered)
        if accepted:
            self._accepted.offer(key, answered)
            self._kind_answers.offer(
                f"{answered.kind}\x00{answered.case.candidate}", (answered.kind, answered.case.candidate)
            )

    def cases(self) -> CalibrationCases:
        accepted = self._accepted.items()
        return CalibrationCases([a.case for a in accepted[: self.samples]], self._easy(), self._hard(accepted))

    def _differs(self, candidate: str, base: Answered) -> bool:
        return bool(candidate.strip()) and not self.grader.grade(candidate, list(base.references), item=base).accepted

    def _easy(self) -> list[JudgeCase]:
        """A candidate paired with another item's question and reference, which the verifier says differ."""
        pool = self._answered.items()
        cases = []
        for i, mine in enumerate(pool):
            for other in pool[i + 1 :] + pool[:i]:
                if other.case.item_key != mine.case.item_key and self._differs(mine.case.candidate, other):
                    cases.append(
                        JudgeCase(
                            other.case.question,
                            other.case.reference,
                            mine.case.candidate,
                            f"{mine.case.item_key}~{other.case.item_key}",
                            other.case.image_sha256,  # the question's own image: the candidate is what is foreign
                        )
                    )
                    break
            if len(cases) >= self.samples:
                break
        return cases

    def _hard(self, accepted: list[Answered]) -> list[JudgeCase]:
        by_kind: dict[str, list[str]] = {}
        for kind, answer in self._kind_answers.items():
            by_kind.setdefault(kind, []).append(answer)
        cases = []
        for base in accepted:
            candidate = self.near_miss(base, by_kind.get(base.kind, []))
            if candidate is not None and _rank(f"{base.case.item_key}\x00shape") % 2:
                # the right answer, then a wrong value: the shape a verifier leaves undecided, the judge's to read
                corrected = f"{base.case.candidate}\n\nOn closer inspection: {candidate}"
                candidate = corrected if self._differs(corrected, base) else candidate
            if candidate is not None:
                cases.append(replace(base.case, candidate=candidate, item_key=f"{base.case.item_key}~near"))
            if len(cases) >= self.samples:
                break
        return cases

    def near_miss(self, base: Answered, same_kind: list[str]) -> str | None:
        """A candidate that is wrong for this item's question and reference, in the shape of its accepted answer."""
        salt = base.case.item_key or base.case.question
        # Each leniency a metric has gets its near misses (one count away, a scaled or percent-converted value, one
        # edit away), so the judge is measured on what the verifiers now leave to it; which comes first is drawn per item.
        kinds: list[list[str]] = []
        if base.options:
            kinds.append(_other_options(base, self.letters, salt))
        if (number := _NUMBER_REFERENCE.fullmatch(base.case.reference.strip().rstrip("."))) is not None:
            kinds.append(_nearby_numbers(base, number, salt))
            kinds.append(_scaled_numbers(base, number))
        elif not base.options:
            kinds.append(_one_edit(base, salt))
        kinds = _rotated(kinds, f"{salt}\x00leniency")
        borrowed = sorted((a for a in same_kind if a != base.case.candidate), key=lambda a: _rank(f"{salt}\x00{a}"))
        if _rank(f"{salt}\x00borrow") % 2:  # another answer of the kind first, half of the time
            kinds.insert(0, borrowed)
        else:
            kinds.append(borrowed)
        return next((a for kind in kinds for a in kind if self._differs(a, base)), None)


def _rotated(values: list[str], salt: str) -> list[str]:
    if not values:
        return values
    shift = _rank(salt) % len(values)
    return values[shift:] + values[:shift]


def _standalone(token: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9.]){re.escape(token)}(?![A-Za-z0-9])")


def _other_options(base: Answered, letters: str, salt: str) -> list[str]:
    """The accepted answer with its option letter (and the option's text) swapped for another option's."""
    valid = letters[: len(base.options)]
    reference = base.case.reference.strip().strip("().").upper()
    if len(reference) != 1 or reference not in valid:
        return []
    mine = base.options[valid.index(reference)]
    out = []
    for letter in _rotated([c for c in valid if c != reference], salt):
        theirs = base.options[valid.index(letter)]
        text = _standalone(reference).sub(letter, base.case.candidate)
        if mine.strip() and theirs.strip():
            text = re.sub(re.escape(mine.strip()), lambda _: theirs.strip(), text, flags=re.IGNORECASE)
        out.append(text if text != base.case.candidate else letter)
    return out


def _nearby_numbers(base: Answered, number: re.Match[str], salt: str) -> list[str]:
    """The accepted answer with the reference's number replaced by nearby different ones."""
    written = number.group(0)
    value = float(written.replace(",", "").rstrip("%"))
    decimals = len(number.group(1) or "")
    suffix = number.group(2)
    if decimals == 0 and value.is_integer():
        n = int(value)
        values = [str(n + d) for d in (1, -1, 2, -2, 10) if n + d >= 0 or n < 0]
    else:
        values = [f"{value * f:.{decimals}f}" for f in (1.25, 0.8, 1.5, 0.5, 2.0)]
    values = [v + suffix for v in dict.fromkeys(values) if v + suffix != written]
    plain = written.replace(",", "")
    found = _standalone(written) if _standalone(written).search(base.case.candidate) else _standalone(plain)
    out = []
    for value_text in _rotated(values, salt):
        text = found.sub(value_text, base.case.candidate)
        out.append(text if text != base.case.candidate else value_text)
    return out


def _scaled_numbers(base: Answered, number: re.Match[str]) -> list[str]:
    """The reference's number at another scale: a thousand times it, and read through a percent sign the other way
    ("30%" as "0.3%", "30" as "3000%"), the conversions a metric may make."""
    written = number.group(0)
    value = float(written.replace(",", "").rstrip("%"))
    if value == 0:
        return []
    scaled = [f"{value * 1000:g}" + number.group(2)]
    scaled.append(f"{value / 100:g}%" if number.group(2) else f"{value * 100:g}%")
    plain = written.replace(",", "")
    found = _standalone(written) if _standalone(written).search(base.case.candidate) else _standalone(plain)
    out = []
    for value_text in (s for s in scaled if s != written):
        text = found.sub(value_text, base.case.candidate)
        out.append(text if text != base.case.candidate else value_text)
    return out


_EDIT_WORD = re.compile(r"[A-Za-z]{4,}")


def _one_edit(base: Answered, salt: str) -> list[str]:
    """The reference one letter away, in a word of four letters or more ("Jenson" for "Jensen", "Lessor" for
    "Lessee"): what ANLS forgives and a careful grader does not."""
    reference = base.case.reference.strip()
    words = list(_EDIT_WORD.finditer(reference))
    if not words:
        return []
    word = words[_rank(salt) % len(words)]
    at = word.start() + 1 + _rank(f"{salt}\x00at") % (len(word.group(0)) - 1)
    old = reference[at]
    new = "o" if old.lower() not in "o" else "e"
    new = new.upper() if old.isupper() else new
    return [reference[:at] + new + reference[at + 1 :]]


@dataclass
class Check:
    """One calibration check: how often the judge agreed, with a 95% Wilson interval."""

    agreed: int
    total: int
    low: float
    high: float

    @property
    def rate(self) -> float | None:
        return self.agreed / self.total if self.total else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rate": self.rate}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Check:
        return cls(data["agreed"], data["total"], data["low"], data["high"])


def wilson(agreed: int, total: int, z: float = 1.959964) -> Check:
    if total == 0:
        return Check(0, 0, 0.0, 1.0)
    p = agreed / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return Check(agreed, total, max(0.0, centre - half), min(1.0, centre + half))


CHECKS = ("positive", "easy", "hard", "certain")


@dataclass
class Calibration:
    """The checks, and whether the judge may promote anything for this family on this run."""

    positive: Check
    """Verifier-accepted items the judge called CORRECT."""
    easy: Check
    """Easy negatives (another item's question and reference) the judge did NOT call CORRECT."""
    hard: Check
    """Hard negatives (a near miss on the same question) the judge did NOT call CORRECT."""
    certain: Check
    """Real rejections the verifier knows are wrong that the judge did NOT call CORRECT."""
    min_positive_agreement: float
    min_negative_agreement: float
    min_calibration_cases: int
    promotes: bool
    blocked_reason: str | None
    verdicts: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for name in CHECKS:
            d[name] = getattr(self, name).to_dict()
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        return cls(**{**data, **{name: Check.from_dict(data[name]) for name in CHECKS}})


def gate(positive: Check, hard: Check, certain: Check, config: JudgeConfig) -> str | None:
    """Why the judge may not promote on this run (every reason that holds, too few cases first), or None when every
    check has the evidence it needs."""
    need = config.min_calibration_cases
    reasons = [
        f"too few calibration cases to trust the judge: {check.total} {what}, at least {need} needed"
        for check, what in (
            (positive, "verifier-accepted items"),
            (hard, "hard negatives (near misses on the same question)"),
        )
        if check.total < need
    ]
    checks = [(hard, config.min_negative_agreement, "hard negatives", "called {wrong} of {total} CORRECT")]
    if certain.total >= need:
        checks.append(
            (
                certain,
                config.min_negative_agreement,
                "rejections the verifier knows are wrong",
                "called {wrong} of {total} CORRECT",
            )
        )
    checks.append(
        (positive, config.min_positive_agreement, "verifier-accepted items", "called {agreed} of {total} CORRECT")
    )
    for check, threshold, what, said in checks:
        if check.total and check.low < threshold:
            told = said.format(wrong=check.total - check.agreed, agreed=check.agreed, total=check.total)
            reasons.append(
                f"on {what} the judge {told}: agreement {check.rate:.1%}, whose 95% lower bound "
                f"{check.low:.1%} is below {threshold:.0%}"
            )
    return "; ".join(reasons) or None


def calibrate(
    judge: Judge,
    cases: CalibrationCases,
    certain_verdicts: dict[str, int],
    *,
    images: ImageSource | None = None,
    show_progress: bool = False,
) -> Calibration:
    """Run the judge on the calibration cases; decide, with the verdicts it gave to certain rejections, if it may promote.

    `images`: where a judge that sees the image gets the cases' images (`asked`; it is refused without);
    `show_progress`: a bar of the cases judged (the judge's own phase, after the answers: on a large family, minutes)."""
    if judge.sees_image and images is None:
        raise ValueError("judge.sees_image is on: the judge's calibration needs the cases' images (pass `images`)")
    counts = {name: dict.fromkeys(LABELS, 0) for name in CHECKS}
    names: deque[str] = deque()

    def judged(named: Iterable[tuple[str, JudgeCase]]) -> Iterator[JudgeCase]:
        for name, case in named:
            names.append(name)
            yield case

    if judge.sees_image:  # in one pass over the images, in row order
        parts: list[Iterable[tuple[str, JudgeCase]]] = [asked(judge, cases, images)]
    else:  # check by check, as a text-only judge always was
        parts = [[(name, case) for case in group] for name, group in cases.checks()]
    with progress(len(cases.all()), "judge calibration", unit="case", enabled=show_progress) as bar:
        for part in parts:
            for _, label, _ in judge.verdicts(judged(part), desc="judge calibration"):
                counts[names.popleft()][label] += 1
                bar.update()
    counts["certain"].update({label: certain_verdicts.get(label, 0) for label in LABELS})

    def not_correct(name: str) -> Check:
        total = sum(counts[name].values())
        return wilson(total - counts[name]["CORRECT"], total)

    positive = wilson(counts["positive"]["CORRECT"], len(cases.positives))
    easy, hard, certain = not_correct("easy"), not_correct("hard"), not_correct("certain")
    c = judge.config
    reason = gate(positive, hard, certain, c)
    return Calibration(
        positive,
        easy,
        hard,
        certain,
        c.min_positive_agreement,
        c.min_negative_agreement,
        c.min_calibration_cases,
        reason is None,
        reason,
        counts,
    )
