"""The model-as-judge second pass, and the measurement of how far it can be trusted.

String verifiers under-credit answers that are right but phrased differently. Each rejected item
with a final answer is re-examined in a second pass by the same model (by default): it sees the
question, the reference and the candidate (and the item's image, with `judge.sees_image`; text only
otherwise), is told to compare and never to solve, and answers
exactly one of CORRECT / WRONG / UNSURE (constrained decoding where the engine supports it;
anything else counts as UNSURE). Only CORRECT promotes.

How it may reason is the family's choice (`judge.mode`), made explicit because thinking models
differ in how reasoning is switched off: `label_only` switches it off (`enable_thinking: false`,
and on the `vllm` engine a reasoning block the template leaves open, or opens by itself, is closed
in the prompt) so the label is the first thing decoded; `think_then_label` lets it reason within
`think_budget` tokens and constrains the label only after the reasoning ends. Either way the label
is read after the judge's reasoning: a label with no closed reasoning before it, where some was
expected, is UNSURE.

A judge is measured on every run before it may promote anything (`rs.pipeline.sample.calibration`), and a
candidate with nothing to grade (no letter or digit, or one of the "master key" phrases that are
known to fool judges into CORRECT) is never sent to it, nor an item whose annotators' most frequent answer
the verifier itself rejects (`rs.pipeline.sample`: a judge shown that answer would undo the verifier's vote threshold).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from jinja2 import Environment, FileSystemLoader, StrictUndefined, Template

from rs.engines.base import Generation, Request, SamplingSettings
from rs.engines.cached_engine import CachedEngine
from rs.engines.reasoning import ReasoningFormat
from rs.families.schema import JudgeConfig, ReasoningConfig
from rs.util.shipped import TEMPLATES

LABELS = ("CORRECT", "WRONG", "UNSURE")
PROMPT_TEMPLATE = "judge_prompt.jinja"
"""What the judge is asked, in `TEMPLATES`."""
VERSION = "2"
"""(2: the prompt says when the image is shown, `judge.sees_image`.) The judge and its prompt: bump when either changes what the judge is asked or how its verdict is read (`rs.pipeline.versions`)."""


def fence(text: str) -> str:
    """Fence untrusted text with more backticks than it contains in a row, so it cannot close the fence."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}\n{text}\n{ticks}"


def prompt_template(name: str, template_dir: Path = TEMPLATES) -> Template:
    """A prompt's Jinja template (the judge's, the adjudicator's): an undefined name is an error, nothing is escaped,
    and `fence` quotes a text so that nothing in it can close its block."""
    env = Environment(
        loader=FileSystemLoader(template_dir),
        undefined=StrictUndefined,
        keep_trailing_newline=False,
        autoescape=False,
    )
    env.globals["fence"] = fence
    return env.get_template(name)


def parse_verdict(text: str) -> str:
    """The label, when the output is exactly one label; anything else is UNSURE, never CORRECT."""
    stripped = text.strip()
    return stripped if stripped in LABELS else "UNSURE"


# Phrases that elicit CORRECT from LLM judges whatever the reference ("One Token to Fool LLM-as-a-Judge",
# Zhao et al. 2025), compared with letters and digits only.
MASTER_KEYS = frozenset(
    {
        "solution",
        "thoughtprocess",
        "letssolvethisproblemstepbystep",
        "letsthinkstepbystep",
        "answer",
        "finalanswer",
        "theansweris",
        "thecorrectansweris",
        "correct",
        "wrong",
        "unsure",
        "thisiscorrect",
    }
)
_ALNUM = re.compile(r"[^0-9a-z]+")


def judgeable(candidate: str | None) -> bool:
    """Whether a candidate holds anything to grade: a letter or digit, and more than a master-key phrase."""
    if not candidate:
        return False
    key = _ALNUM.sub("", candidate.casefold())
    return any(c.isalnum() for c in candidate) and key not in MASTER_KEYS


@dataclass(frozen=True)
class JudgeCase:
    question: str
    reference: str
    candidate: str
    item_key: str | None = None
    image_sha256: str | None = None
    """The hash of the image the question is about: a judge that sees the image (`judge.sees_image`) is keyed by it."""
    image: bytes | None = field(default=None, repr=False, compare=False)
    """The image's bytes, where the caller read them (a request only listed for its cache key needs none)."""


class Judge:
    """Renders the judge prompt, runs it through the (cached) engine in the family's judge mode, reads the verdict.

    Args:
        runner: the judge model's engine, through the cache.
        config: the family's `judge` block (`mode`, budgets, calibration).
        reasoning: how the judge model marks its reasoning (`model.reasoning` of the judge model).
        chat_template_kwargs: the family's sampling arguments (a `think_then_label` judge reasons with them).
        tokenizer: the judge model's tokenizer, for a vLLM reasoning parser.
    """

    def __init__(
        self,
        runner: CachedEngine,
        config: JudgeConfig,
        *,
        reasoning: ReasoningConfig | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        tokenizer: Callable[[], Any] | None = None,
        template_dir: Path = TEMPLATES,
    ):
        self.runner = runner
        self.config = config
        self.template = prompt_template(PROMPT_TEMPLATE, template_dir)
        reasoning = reasoning or ReasoningConfig()
        if config.mode == "think_then_label":
            kwargs = dict(chat_template_kwargs or {})
            reasoning = dataclasses.replace(
                reasoning, required=reasoning.parser != "none"
            )  # the label comes after the reasoning
            self.reasoning = ReasoningFormat(reasoning, tokenizer=tokenizer, chat_template_kwargs=kwargs)
            self.settings = SamplingSettings(
                temperature=0.0,
                max_tokens=config.think_budget + config.max_tokens,
                chat_template_kwargs=kwargs,
                choices=LABELS,
                choices_after_reasoning=True,
            )
        else:
            kwargs = {**(chat_template_kwargs or {}), "enable_thinking": False}
            self.reasoning = ReasoningFormat(reasoning, tokenizer=tokenizer, chat_template_kwargs=kwargs)
            self.settings = SamplingSettings(
                temperature=0.0,
                max_tokens=config.max_tokens,
                chat_template_kwargs=kwargs,
                choices=LABELS,
                close_reasoning=self.reasoning.markers,
            )

    @property
    def sees_image(self) -> bool:
        return self.config.sees_image

    def prompt(self, case: JudgeCase) -> str:
        return self.template.render(
            question=case.question, reference=case.reference, candidate=case.candidate, sees_image=self.sees_image
        )

    def request(self, case: JudgeCase) -> Request:
        """The request that asks the judge about one case: text only, or with the case's image when the judge sees it
        (keyed by the image's hash, so a verdict with the image never answers for one without, nor the reverse)."""
        if not self.sees_image:
            return Request(prompt=self.prompt(case), item_key=case.item_key)
        if not case.image_sha256:
            raise ValueError(
                f"judge.sees_image is on but the judge case of {case.item_key or case.question!r} carries no image: "
                "its caller must pass the question's image (its hash at least)"
            )
        return Request(
            prompt=self.prompt(case), image=case.image or None, image_sha256=case.image_sha256, item_key=case.item_key
        )

    def verdict(self, generation: Generation) -> tuple[str, Generation]:
        """The label a judge generation says after its reasoning (a failed request or no closed reasoning is UNSURE),
        and the generation as the judge model's reasoning format reads it."""
        read = self.reasoning.read(generation)
        return (parse_verdict(read.answer) if read.answer is not None else "UNSURE"), read

    def label(self, generation: Generation) -> str:
        return self.verdict(generation)[0]

    def verdicts(
        self, cases: Iterable[JudgeCase], *, desc: str = "judge"
    ) -> Iterator[tuple[JudgeCase, str, Generation]]:
        cases = iter(cases)
        pending: list[JudgeCase] = []

        def requests() -> Iterator[Request]:
            for case in cases:
                pending.append(case)
                yield self.request(case)

        for _, generation in self.runner.run(requests(), self.settings, desc=desc):
            case = pending.pop(0)
            yield case, self.label(generation), generation
