"""Table-driven tests for rs.answers.extract (cases from the verifier research notes, §0)."""

from __future__ import annotations

import pytest

from rs.answers import read
from rs.answers.extract import boxed_spans, reasoning_state, split_reasoning


@pytest.mark.parametrize(
    ("text", "reasoning", "answer"),
    [
        # no tags at all
        ("4", "", "4"),
        ("  The answer is 4.  \n", "", "The answer is 4."),
        ("a < b so 3", "", "a < b so 3"),
        ("", "", ""),
        # closed block, answer after the last closing tag
        ("<think>I count 3... no, 4.</think>\nThe answer is 4.", "I count 3... no, 4.", "The answer is 4."),
        ("<thinking>hmm</thinking> yes", "hmm", "yes"),
        # case-insensitive tags (lmms-eval would keep <THINK>)
        ("<THINK>x</THINK> 5", "x", "5"),
        ("<Thinking>x</THINKING>\n5", "x", "5"),
        ("<think >x</ think> 5", "x", "5"),
        # closing tag only: the chat template pre-filled <think>
        ("I count 3 cubes... no, 4.</think>\n4", "I count 3 cubes... no, 4.", "4"),
        ("reasoning</think>\\boxed{\\frac{1}{2}}", "reasoning", "\\boxed{\\frac{1}{2}}"),
        # several blocks: text after the LAST closing tag only
        ("<think>a</think> first <think>b</think> 7", "a first b", "7"),
        ("x</think> y </think> z", "x y", "z"),
        # unclosed opening tag: truncated, no final answer
        ("<think>unfinished reasoning that was truncated", "unfinished reasoning that was truncated", None),
        ("<think>a</think> 5 <think>second thoughts", "a", None),
        ("Sure. <THINKING>never closed", "never closed", None),
        # closed, then nothing
        ("<think>only reasoning</think>   ", "only reasoning", ""),
        # other tags are not think tags
        ("<answer>5</answer>", "", "<answer>5</answer>"),
        ("<thinker>5", "", "<thinker>5"),
    ],
)
def test_split_reasoning(text: str, reasoning: str, answer: str | None) -> None:
    assert split_reasoning(text) == (reasoning, answer)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("So the area is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("\\boxed{3} then corrected: \\boxed{5}", "5"),
        ("\\boxed{3} wait \\boxed{\\sqrt{\\frac{a}{b^{2}}}}", "\\sqrt{\\frac{a}{b^{2}}}"),
        ("\\boxed{\\sqrt{\\frac{a}{b^{2}}}}", "\\sqrt{\\frac{a}{b^{2}}}"),
        ("\\boxed{ 12 }", "12"),
        ("\\boxed {7}", "7"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces are not counted
        ("\\boxed{\\text{C}}", "\\text{C}"),
        ("\\boxed{}", ""),
        ("\\boxed{2} and \\boxed{\\frac{1}{", None),  # last box unclosed: do not fall back to a draft
        ("\\boxed 5", None),
        ("\\fbox{5}", None),
        ("\\boxedfoo{5}", None),
        ("\\boxed{4} \\boxed 5", "4"),  # the non-standard form is skipped, not an answer
        ("no box here", None),
        ("", None),
    ],
)
def test_boxes(text: str, expected: str | None) -> None:
    spans = boxed_spans(text)  # None when a box never closes: no falling back to an earlier one, a draft
    assert (spans[-1][2] if spans else None) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Final Answer: 12\n", "12"),
        ("Final Answer: 12", "12"),
        ("Step...\n**Final Answer:** 12", "12"),
        ("**Answer**: B", "B"),
        ("answer: yes", "yes"),
        ("ANSWER : no", "no"),
        ("Answer：42", "42"),  # full-width colon
        ("Left: 437 + 2*234 = 905\n\nFinal Answer: **73**", "73"),
        ("Answer: 3\nwait\nAnswer: 4", ""),  # lines that disagree state nothing (rs.answers)
        ("- Final answer: 7  ", "7"),
        ("Answer: 5\r\n", "5"),
        ("The final answer is 5", None),  # not an `Answer:` line (a sentence mark)
        ("The answer: maybe 5", None),  # must start the line
        ("Answer:   \n", None),  # empty value
        ("no marker", None),
        ("AnSwEr: 9", "9"),
    ],
)
def test_answer_lines(text: str, expected: str | None) -> None:
    reading = read(text)
    assert (reading.stated if reading.mark == "line" else None) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer> B </answer>", "B"),
        ("<answer>1</answer> then <answer>2</answer>", ""),  # tags that disagree state nothing
        ("<ANSWER>x</Answer>", "x"),
        ("<answer>unclosed", None),
        ("</answer> only", None),
        ("<answer>a</answer> <answer>unclosed", "a"),
        ("plain", None),
        ("<answer></answer>", ""),
    ],
)
def test_answer_tags(text: str, expected: str | None) -> None:
    reading = read(text)
    assert (reading.stated if reading.mark == "tag" else None) == expected


@pytest.mark.parametrize(
    ("text", "opened", "expected"),
    [
        ("◁think▷two cubes◁/think▷\n\n2", False, ("two cubes", "2")),
        ("two cubes◁/think▷2", True, ("two cubes", "2")),  # the template pre-filled the opening marker
        ("two cubes, never closed", True, ("two cubes, never closed", None)),
        ("◁think▷never closed", False, ("never closed", None)),
        ("a plain answer", False, ("", "a plain answer")),
        ("<think>other markers</think> 3", False, ("", "<think>other markers</think> 3")),  # not this model's markers
    ],
)
def test_split_reasoning_with_other_markers(text: str, opened: bool, expected: tuple[str, str | None]) -> None:
    assert split_reasoning(text, start="◁think▷", end="◁/think▷", opened=opened) == expected


def test_an_opened_prompt_makes_a_plain_output_unclosed_reasoning() -> None:
    assert split_reasoning("looks like an answer", opened=True) == ("looks like an answer", None)
    assert split_reasoning("reasoning</think>\n\nblue", opened=True) == ("reasoning", "blue")


@pytest.mark.parametrize(
    ("tail", "state"),
    [
        ("<|im_start|>assistant\n<think>\n", "open"),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", "closed"),
        ("<|im_start|>assistant\n", "none"),
        ("<think>\n\n</think>\n\n<|im_start|>assistant\n", "none"),  # a closed block of an earlier turn
        ("user: what is <think>?<|im_end|>\n<|im_start|>assistant\n", "none"),
    ],
)
def test_reasoning_state_of_a_prompt_tail(tail: str, state: str) -> None:
    assert reasoning_state(tail) == state


def test_reasoning_state_with_other_markers() -> None:
    assert reasoning_state("<|im_start|>assistant\n◁think▷", start="◁think▷", end="◁/think▷") == "open"
    assert reasoning_state("assistant\n◁think▷\n\n◁/think▷\n\n", start="◁think▷", end="◁/think▷") == "closed"


def test_answer_tags_that_disagree_are_no_final_answer() -> None:
    """A family reading `<answer>` tags: two pairs holding different answers name no answer (review: the last won)."""
    from rs.engines.base import Generation
    from rs.engines.reasoning import ReasoningFormat
    from rs.families.schema import ReasoningConfig

    fmt = ReasoningFormat(ReasoningConfig(answer_start="<answer>", answer_end="</answer>"))

    def answer(text: str) -> str | None:
        return fmt.read(Generation(text=text, reasoning=None, answer=None, finish_reason="stop")).answer

    assert answer("<think>r</think><answer>3</answer> or <answer>4</answer>") is None
    assert answer("<think>r</think><answer>3</answer>\nWait: <answer>4</answer>") is None
    assert answer("<think>r</think><answer>4</answer>, so <answer> 4 </answer>") == "4"  # restated: one answer
    assert answer("<think>r</think><answer>4</answer>") == "4"
