"""Questions that need no image: every question asked again with the same prompt and its image removed (`blind:`).

Studies of VLM benchmarks find many questions answerable from the text alone, and a model keeps most of its accuracy
when prompted as if the image were there; a rejection-sampled set full of them teaches guessing from priors. So the
probe reuses the production prompt byte for byte (the instruction appended as the model received it), only without
the image, at temperature 0:

- a **multiple-choice** question is asked `blind.rotations` times, its options rotated by one place each time (the
  first time exactly as asked with the image, its reference letter moved with its option): it is *marked* only when
  the answer is right in every rotation, so that a guess right at chance, or a bias for one letter, is not;
- any other question is asked once at temperature 0 (and `blind.samples` more times at the recovery's temperature,
  for a pass rate): it is *marked* when the temperature-0 answer is right.

Each answer is read and verified by the family's reader and verifier like any answer (no judge: an answer the
verifier cannot decide is not right). One record per question, in item order, is written beside the items store
(`blind-*.parquet`, `BLIND`); every split publishes it per question (`rs.splits_schema.BLIND`), and the cards give the
share of marked questions per question type. Marked, never dropped: the RL repo leaves them out only with `blind.rl:
false`. The requests carry no image, so they never share a cache key with the questions asked with one
(`rs.engines.cached_engine.cache_key`: the image's hash is "").
"""

from __future__ import annotations

import string
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import pyarrow as pa

from rs.engines.base import Generation, Request, SamplingSettings
from rs.engines.machine import made_on_id
from rs.engines.ordered import InOrder
from rs.families.schema import BlindConfig, FamilyConfig, RecoveryConfig
from rs.prompt import Instructions, build_prompt
from rs.records import QAItem, Row
from rs.store import ParquetStreamWriter
from rs.util.progress import progress

if TYPE_CHECKING:
    from rs.engines.cached_engine import CachedEngine

VERSION = "2"
"""What the no-image pass asks, how it marks a question and what it records: bump when a change asks, marks or records
some question otherwise (`rs.pipeline.versions`; 2: each answer's machine, `made_on`)."""

BLIND = pa.schema(
    [
        ("row", pa.int64()),
        ("key", pa.string()),
        ("multiple_choice", pa.bool_()),
        ("answers", pa.list_(pa.string())),
        ("right", pa.list_(pa.bool_())),
        ("errors", pa.int32()),
        ("marked", pa.bool_()),
        ("made_on", pa.list_(pa.string())),
    ]
)
"""The items store's `blind-*.parquet`: one record per question, in item order: whether it was asked in rotations, each
answer's final answer (null where it gave none) and whether the verifier accepted it (the temperature-0 one first: the
first rotation, or the answer before the samples), the answers that failed in the engine, the mark, and the id of the
machine that made each answer (`rs.records.ItemRecord.made_on`; null where not known): the provenance counts them
(`rs.pipeline.write.made_on`)."""


def rotated(item: QAItem, shift: int, letters: str) -> QAItem | None:
    """`item` with its options rotated `shift` places (option `shift` first) and its reference letter moved with its
    option; None when the question does not end with its options' lettered block as cleaning renders it
    (`rs.pipeline.clean.multiple_choice.render`) or its reference is not one of their letters. Rotation 0 is `item`."""
    options = list(item.options)
    n = len(options)
    if n < 2 or n > len(letters) or item.answer not in letters[:n]:
        return None
    block = "".join(f"\n{letters[i]}. {option}" for i, option in enumerate(options))
    if not item.question.endswith(block):
        return None
    if shift % n == 0:
        return item
    stem = item.question[: len(item.question) - len(block)]
    moved = options[shift % n :] + options[: shift % n]
    answer = letters[(letters.index(item.answer) - shift) % n]
    question = stem + "".join(f"\n{letters[i]}. {option}" for i, option in enumerate(moved))
    return replace(item, question=question, answer=answer, options=tuple(moved), references=())


@dataclass(frozen=True)
class Ask:
    """One no-image request about one question: the item it is graded as (a rotation's own options and letter)."""

    item: QAItem
    request: Request
    sampled: bool
    """Drawn at the recovery's temperature (`BlindPass.sample_settings`), not at temperature 0."""


@dataclass
class Marked:
    """One question's no-image answers, graded: what its record and every split's `blind` column say."""

    row: int
    key: str
    multiple_choice: bool
    answers: list[str | None] = field(default_factory=list)
    right: list[bool] = field(default_factory=list)
    errors: int = 0
    made_on: list[str | None] = field(default_factory=list)
    """Each answer's machine id, as `answers` (`rs.engines.machine.made_on_id`)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    """Tokens of its requests (what `rs plan` projects the pass's cost from), not recorded per question."""

    @property
    def marked(self) -> bool:
        """Right in every rotation (multiple choice), or right at temperature 0 (the first answer)."""
        if not self.right:
            return False
        return all(self.right) if self.multiple_choice else self.right[0]

    def record(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "key": self.key,
            "multiple_choice": self.multiple_choice,
            "answers": self.answers,
            "right": self.right,
            "errors": self.errors,
            "marked": self.marked,
            "made_on": self.made_on,
        }


def published(record: dict[str, Any]) -> dict[str, Any]:
    """A question's `blind` column in the splits (`rs.splits_schema.BLIND`) from its record: the temperature-0 answer,
    whether it was right, the answers right of those drawn (`passed`, `k`), and the mark."""
    right = list(record["right"])
    return {
        "answer": record["answers"][0] or "" if record["answers"] else "",
        "right": bool(right and right[0]),
        "passed": sum(right),
        "k": len(right),
        "marked": bool(record["marked"]),
    }


@dataclass
class BlindReport:
    """What the no-image pass did (in `sample.json`)."""

    questions: int = 0
    multiple_choice: int = 0
    """Questions asked in rotations."""
    marked: int = 0
    """Questions marked: right in every rotation, or right at temperature 0."""
    right: int = 0
    """Questions whose temperature-0 answer (the first rotation) the verifier accepted."""
    answers: int = 0
    errors: int = 0
    """Answers that failed in the engine (never right)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    """The pass's tokens, its text-only prompts' and its answers' (an engine that counts none adds nothing)."""
    requests: int = 0
    engine_calls: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    """`rotations`, `samples`, and the samples' `temperature`, `top_p` and `seed`."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BlindReport:
        return cls(**data)


def sample_settings(config: FamilyConfig, greedy: SamplingSettings) -> SamplingSettings:
    """The settings `blind.samples` are drawn with: the greedy pass's, at the recovery's temperature, top_p, seed and
    budget (`rs.pipeline.recover.recovery_settings`; the recovery block's defaults without one)."""
    r = config.recovery or RecoveryConfig()
    return replace(
        greedy, temperature=r.temperature, top_p=r.top_p, seed=r.seed, max_tokens=r.max_tokens or greedy.max_tokens
    )


class BlindPass:
    """The no-image requests of a family's questions, run through the sampling pass's cached engine and graded by its
    reader (`rs.pipeline.sample.SamplingPass`: `grade` reads and verifies one answer)."""

    def __init__(
        self,
        config: BlindConfig,
        instructions: Instructions,
        letters: str,
        runner: CachedEngine,
        settings: SamplingSettings,
        sample_settings: SamplingSettings,
        *,
        progress: bool = False,
    ):
        """`settings`: the greedy pass's (temperature 0); `sample_settings`: the recovery's, for `config.samples`."""
        self.config, self.instructions, self.letters = config, instructions, letters or string.ascii_uppercase
        self.runner, self.settings, self.sample_settings = runner, settings, sample_settings
        self.progress = progress

    def rotates(self, item: QAItem) -> bool:
        """Whether `item` is asked in rotations: a question with options, asked with the multiple-choice instruction, that
        ends with its options' lettered block."""
        return (
            bool(item.options)
            and self.instructions.multiple_choice is not None
            and rotated(item, 0, self.letters) is not None
        )

    def asks(self, item: QAItem) -> list[Ask]:
        """The no-image requests about `item`, the temperature-0 ones first (the first exactly the prompt the model was
        asked with the image: `rs.pipeline.sample.requests.sampling_request`)."""
        instruction = self.instructions.for_item(item)
        if self.rotates(item):
            shown = [
                rotated(item, shift, self.letters) for shift in range(min(self.config.rotations, len(item.options)))
            ]
            return [Ask(one, _request(one, instruction), False) for one in shown if one is not None]
        first = _request(item, instruction)
        return [Ask(item, first, False)] + [Ask(item, first.one(i), True) for i in range(self.config.samples)]

    def keyed(self, rows: Iterable[Row]) -> Iterator[tuple[str, Request, SamplingSettings]]:
        """Every no-image request about `rows`' questions with its cache key and settings, in item order (rows read
        without their image bytes ask the same: no request carries an image)."""
        for row in rows:
            for item in row.qa:
                for ask in self.asks(item):
                    settings = self.sample_settings if ask.sampled else self.settings
                    yield self.runner.key(ask.request, settings), ask.request, settings

    def write(
        self,
        rows: Iterable[Row],
        grade: Callable[[QAItem, str, Generation], Any],
        out_dir: Any,
        *,
        total: int | None = None,
    ) -> BlindReport:
        """Ask and grade every question of `rows` (`run`), its record written to `blind-*.parquet` in `out_dir`; a
        progress bar of `total` questions when the pass shows progress."""
        report = BlindReport(settings=self.recorded())
        stats = self.runner.stats
        calls = (stats.requests, stats.engine_calls)
        with (
            ParquetStreamWriter(out_dir, "blind", BLIND, group_rows=10_000) as writer,
            progress(total, "no image", enabled=self.progress) as bar,
        ):
            for mark in self.run(rows, grade):
                bar.update()
                writer.write(mark.record())
                report.questions += 1
                report.multiple_choice += mark.multiple_choice
                report.marked += mark.marked
                report.right += bool(mark.right and mark.right[0])
                report.answers += len(mark.right)
                report.errors += mark.errors
                report.prompt_tokens += mark.prompt_tokens
                report.completion_tokens += mark.completion_tokens
        report.requests, report.engine_calls = stats.requests - calls[0], stats.engine_calls - calls[1]
        return report

    def recorded(self) -> dict[str, Any]:
        """What the report records of the pass's settings."""
        s = self.sample_settings
        return {
            "rotations": self.config.rotations,
            "samples": self.config.samples,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "seed": s.seed,
        }

    def run(self, rows: Iterable[Row], grade: Callable[[QAItem, str, Generation], Any]) -> Iterator[Marked]:
        """Ask every question of `rows` without its image, each answer graded by `grade(item, prompt, generation)` (a
        `Verification`: the sampling pass's reader, no calibration); the questions' marks in item order. The
        temperature-0 requests go to one stream, the samples to another (`rs.engines.ordered.InOrder`)."""

        def answered(unit: tuple[Marked, list[Ask]], at: int, generation: Generation) -> list[Any]:
            mark, asks = unit
            add_answer(mark, at, asks[at], generation, grade)
            return []

        streams = [self.runner.stream(self.settings), self.runner.stream(self.sample_settings)]
        # a sample goes straight to the second stream: the first answers nothing of it (`_Forward`)
        core = InOrder(streams, [_forward(answered), answered], batch=self.runner.batch_size)
        yield from (mark for mark, _ in core.run(self._units(rows)))

    def marked(self, item: QAItem, row: int) -> Marked:
        """A question's mark before its answers: one slot for each of its requests (`asks`)."""
        n = len(self.asks(item))
        return Marked(row, item.key, self.rotates(item), [None] * n, [False] * n, made_on=[None] * n)

    def _units(self, rows: Iterable[Row]) -> Iterator[tuple[tuple[Marked, list[Ask]], list[tuple[int, Request]]]]:
        for index, row in enumerate(rows):
            for item in row.qa:
                asks, mark = self.asks(item), self.marked(item, index)
                yield (mark, asks), [(at, ask.request) for at, ask in enumerate(asks) if not ask.sampled]


def _request(item: QAItem, instruction: str) -> Request:
    """A no-image request: the prompt as `rs.pipeline.sample.requests.sampling_request` builds it, no image."""
    return Request(prompt=build_prompt(item.question, instruction), item_key=item.key)


def _forward(answered: Callable[[Any, int, Generation], list[Any]]) -> Callable[[Any, int, Generation], list[Any]]:
    """The first stream's handler: records a temperature-0 answer; the first one sends the question's samples on."""

    def first(unit: tuple[Marked, list[Ask]], at: int, generation: Generation) -> list[tuple[int, Request]]:
        answered(unit, at, generation)
        _, asks = unit
        return [(i, ask.request) for i, ask in enumerate(asks) if ask.sampled] if at == 0 else []

    return first


def regraded(record: dict[str, Any], asks: list[Ask], right: Callable[[QAItem, str], bool]) -> dict[str, Any]:
    """A question's no-image record graded again from its stored final answers (`right(item, final answer)`: the
    reader now; `rs refilter`'s re-read), each against the item it was asked as (`asks`: a rotation's own letter)."""
    answers = list(record["answers"])
    if len(answers) != len(asks):
        raise ValueError(f"{record['key']}: {len(answers)} no-image answers stored, {len(asks)} asked now")
    made_on = record.get("made_on") or [None] * len(asks)  # a store written before rs recorded machines: not known
    mark = Marked(
        record["row"], record["key"], record["multiple_choice"], answers, [False] * len(asks), made_on=made_on
    )
    mark.errors = record["errors"]
    mark.right = [answer is not None and right(ask.item, answer) for ask, answer in zip(asks, answers)]
    return mark.record()


def add_answer(mark: Marked, at: int, ask: Ask, generation: Generation, grade: Callable[..., Any]) -> None:
    """Grade one no-image answer (`ask`, the question's `at`-th) into its question's mark."""
    v = grade(ask.item, ask.request, generation)
    gen = v.generation
    mark.errors += gen.error is not None
    mark.answers[at] = gen.answer if gen.error is None else None
    mark.right[at] = bool(v.verified)
    mark.made_on[at] = made_on_id(gen)
    mark.prompt_tokens += gen.prompt_tokens or 0
    mark.completion_tokens += gen.completion_tokens or 0
