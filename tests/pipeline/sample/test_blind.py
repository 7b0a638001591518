"""The no-image pass without a model: a multiple-choice question's rotations, which requests are sent (the prompt byte for
byte, no image, keyed apart from the image's), and how a question is marked (right in every rotation; right at
temperature 0), through a scripted engine and the real cache (the demo model's run is in tests/e2e/test_blind_demo.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import pytest

from rs.answers import Grader
from rs.engines.base import Generation, Request, SamplingSettings
from rs.engines.cached_engine import CachedEngine
from rs.engines.generation_cache import GenerationCache
from rs.families.schema import BlindConfig
from rs.pipeline.sample.blind import BlindPass, Marked, published, regraded, rotated
from rs.pipeline.sample.requests import sampling_request
from rs.prompt import Instructions
from rs.records import QAItem, Row
from rs.store import read_records
from rs.verifiers import get_verifier

LETTERS = "ABCDEFGHIJ"
MC = QAItem(
    "What shape is the red object?\nA. cube\nB. sphere\nC. cylinder", "B", "r0", options=("cube", "sphere", "cylinder")
)
COUNT = QAItem("How many cubes are there?", "3", "r1")
INSTRUCTIONS = Instructions("\nAnswer the question using a single word or phrase.")


def test_a_rotation_moves_the_reference_letter_with_its_option() -> None:
    assert rotated(MC, 0, LETTERS) is MC
    one = rotated(MC, 1, LETTERS)
    assert one is not None and one.question == "What shape is the red object?\nA. sphere\nB. cylinder\nC. cube"
    assert one.answer == "A" and one.options == ("sphere", "cylinder", "cube")
    two = rotated(MC, 2, LETTERS)
    assert two is not None and two.answer == "C" and two.question.endswith("\nA. cylinder\nB. cube\nC. sphere")
    assert rotated(MC, 3, LETTERS) is MC  # a full turn
    # options the question does not end with (not rendered by cleaning), or a reference that is no letter: no rotation
    assert rotated(QAItem("Pick one: cube or sphere", "A", "r", options=("cube", "sphere")), 1, LETTERS) is None
    assert rotated(QAItem(MC.question, "sphere", "r", options=MC.options), 1, LETTERS) is None


class Scripted:
    """An engine that answers a prompt as `answer(request, settings)` says, and records what it was sent."""

    kind = "scripted"

    def __init__(self, answer: Any):
        self.answer, self.sent = answer, []

    def identity(self) -> dict[str, Any]:
        return {"model": "scripted"}

    def generate(self, requests: Sequence[Request], settings: SamplingSettings) -> list[Generation]:
        self.sent += [(r, settings) for r in requests]
        return [
            Generation.from_text(self.answer(r, settings), finish_reason="stop", model="scripted") for r in requests
        ]

    def load(self) -> None:
        pass

    def close(self) -> None:
        pass


def blind_pass(engine: Scripted, cache: GenerationCache, **config: Any) -> BlindPass:
    greedy = SamplingSettings(temperature=0.0, max_tokens=16)
    return BlindPass(
        BlindConfig(**config),
        Instructions(INSTRUCTIONS.default),
        LETTERS,
        CachedEngine(engine, cache, batch_size=4, progress=False),
        greedy,
        SamplingSettings(temperature=0.7, top_p=0.95, seed=0, max_tokens=16),
    )


def grader_of(name: str):
    grader = Grader(get_verifier(name))

    def grade(item: QAItem, prompt: str, gen: Generation) -> Any:
        class V:
            generation = gen
            verified = gen.answer is not None and grader.grade(gen.answer, item.all_references(), item=item).accepted

        return V()

    return grade


def always_option(text: str):
    """A reader that always picks the option `text`, wherever it is: right in every rotation."""

    def answer(request: Request, settings: SamplingSettings) -> str:
        for line in request.prompt.split("\n"):
            if line.endswith(f". {text}"):
                return line[0]
        return "4"

    return answer


@pytest.mark.parametrize(
    "answer,marked,right",
    [
        (always_option("sphere"), True, [True, True, True]),  # it knows the answer without looking
        (lambda r, s: "B", False, [True, False, False]),  # always the same letter: right once, at chance
        (always_option("cube"), False, [False, False, False]),
    ],
)
def test_a_multiple_choice_question_is_marked_only_when_right_in_every_rotation(
    tmp_path: Path, answer: Any, marked: bool, right: list[bool]
) -> None:
    engine = Scripted(answer)
    with GenerationCache(tmp_path / "cache.sqlite") as cache:
        marks = list(blind_pass(engine, cache, rotations=4).run([Row(b"png", "ab" * 32, [MC])], grader_of("mcq")))
    assert [(m.multiple_choice, m.right, m.marked) for m in marks] == [(True, right, marked)]
    assert len(engine.sent) == 3  # rotations capped at the options' number
    sent = [r for r, _ in engine.sent]
    # no image, and the first rotation is byte for byte the prompt the model was asked with the image
    assert all(r.image is None and r.image_sha256 is None for r in sent)
    with_image = sampling_request(MC, INSTRUCTIONS, "ab" * 32)
    assert sent[0].prompt == with_image.prompt and len({r.prompt for r in sent}) == 3


def test_another_question_is_marked_on_its_temperature_0_answer_and_sampled_for_a_pass_rate(tmp_path: Path) -> None:
    engine = Scripted(lambda r, s: "3" if s.temperature == 0 or r.sample % 2 else "2")
    with GenerationCache(tmp_path / "cache.sqlite") as cache:
        asker = blind_pass(engine, cache, samples=4)
        [mark] = asker.run([Row(b"png", "cd" * 32, [COUNT])], grader_of("alnum"))
        keys = [key for key, _, _ in asker.keyed([Row(b"", "cd" * 32, [COUNT])])]
        image_key = asker.runner.key(sampling_request(COUNT, INSTRUCTIONS, "cd" * 32), asker.settings)
    assert mark.right == [True, False, True, False, True] and mark.marked and not mark.multiple_choice
    assert published(mark.record()) == {"answer": "3", "right": True, "passed": 3, "k": 5, "marked": True}
    assert [s.temperature for _, s in engine.sent] == [0.0, 0.7, 0.7, 0.7, 0.7]
    assert [r.sample for r, _ in engine.sent] == [0, 0, 1, 2, 3]
    assert len(set(keys)) == 5 and image_key not in keys  # never the answer given with the image


def test_a_wrong_temperature_0_answer_is_not_marked_whatever_the_samples(tmp_path: Path) -> None:
    engine = Scripted(lambda r, s: "2" if s.temperature == 0 else "3")
    with GenerationCache(tmp_path / "cache.sqlite") as cache:
        [mark] = blind_pass(engine, cache, samples=2).run([Row(b"", "ef" * 32, [COUNT])], grader_of("alnum"))
    assert mark.right == [False, True, True] and not mark.marked


def test_the_records_are_written_in_item_order_and_counted(tmp_path: Path) -> None:
    engine = Scripted(always_option("sphere"))
    rows = [Row(b"", "ab" * 32, [MC, COUNT]), Row(b"", "cd" * 32, [QAItem("How many spheres?", "4", "r2")])]
    with GenerationCache(tmp_path / "cache.sqlite") as cache:
        report = blind_pass(engine, cache).write(rows, grader_of("alnum"), tmp_path / "items")
        again = blind_pass(Scripted(lambda r, s: "never asked"), cache).write(
            rows, grader_of("alnum"), tmp_path / "again"
        )
    records = list(read_records(tmp_path / "items", "blind"))
    assert [(r["row"], r["key"], r["marked"]) for r in records] == [
        (0, "r0#0", True),
        (0, "r1#0", False),
        (1, "r2#0", True),
    ]
    assert (report.questions, report.multiple_choice, report.marked, report.right, report.answers) == (3, 1, 2, 2, 5)
    assert report.requests == 5 and report.engine_calls == 5
    assert again.engine_calls == 0 and list(read_records(tmp_path / "again", "blind")) == records  # from the cache


def test_marked_needs_an_answer() -> None:
    assert not Marked(0, "k", False).marked and not Marked(0, "k", True).marked


@pytest.mark.parametrize("config,key", [({"rotations": 0}, "rotations"), ({"samples": -1}, "samples")])
def test_the_settings_are_checked(config: dict, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        BlindConfig(**config)


def test_a_record_graded_again_reads_each_stored_answer_against_the_rotation_it_answered(tmp_path: Path) -> None:
    """`rs refilter`'s re-read: the stored final answers graded by the reader now, each against its own rotation's letter;
    an answer that was never given stays wrong."""
    with GenerationCache(tmp_path / "cache.sqlite") as cache:
        asker = blind_pass(Scripted(always_option("sphere")), cache)
    asks = asker.asks(MC)
    stored = {"row": 0, "key": MC.key, "multiple_choice": True, "answers": ["B", "A", None], "right": [False] * 3}
    grader = Grader(get_verifier("mcq"))
    new = regraded(
        {**stored, "errors": 1, "marked": False},
        asks,
        lambda item, a: grader.grade(a, [item.answer], item=item).accepted,
    )
    assert new["right"] == [True, True, False] and not new["marked"] and new["errors"] == 1
    new = regraded(
        {**stored, "answers": ["B", "A", "C"], "errors": 0, "marked": False},
        asks,
        lambda item, a: grader.grade(a, [item.answer], item=item).accepted,
    )
    assert new["right"] == [True, True, True] and new["marked"]
    with pytest.raises(ValueError, match="2 no-image answers stored, 3 asked now"):
        regraded({**stored, "answers": ["B", "A"], "errors": 0, "marked": False}, asks, lambda item, a: True)


def test_the_rl_repo_leaves_a_marked_question_out_only_when_asked() -> None:
    """Marked, never dropped: the RL repo keeps a question right without the image unless `blind.rl: false` (or `rs
    refilter --no-rl-keeps-blind`) says otherwise; an unmarked one is kept either way."""
    from rs.pipeline.route import Decision, Outcome, RouteFilter, Routes, in_rl_bounds

    sample = {"final": "3"}
    marked = Outcome(Decision(True, by="verifier"), Decision(True, by="verifier"), sample, [sample, sample], 1)
    marked = dataclasses.replace(marked, blind={"marked": True, "right": [True]})
    unmarked = dataclasses.replace(marked, blind={"marked": False, "right": [False]})
    assert in_rl_bounds(marked, (0.0, 1.0)) and in_rl_bounds(unmarked, (0.0, 1.0), keeps_blind=False)
    assert not in_rl_bounds(marked, (0.0, 1.0), keeps_blind=False)
    routes = Routes(True, rl_bounds=(0.0, 1.0), blind=True)
    leave = RouteFilter(rl_keeps_blind=False)
    assert leave.apply(routes).rl_keeps_blind is False and RouteFilter().apply(routes).rl_keeps_blind is True
    assert leave.changes(routes) == [
        "the RL repo leaves out the questions answered right without the image (the family: keeps them)"
    ]
