"""Plug-ins of a package that is not `rs`: a source kind, an engine kind, a cleaning step and a verifier.

`tests/families/test_plugins.py` installs this module's distribution metadata (entry points in the groups
`rs.sources`, `rs.engines`, `rs.cleaning`, `rs.verifiers`) on a subprocess's path, as `pip install rs-parrots` would.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence

from PIL import Image

from rs.engines.base import EngineConfig, Generation, Request, SamplingSettings
from rs.pipeline.clean.base import ItemFilter, StepCard
from rs.records import QAItem
from rs.registry import CLEANING, ENGINES, SOURCES
from rs.sources.base import SourceRecord
from rs.verifiers import Verifier, register

# --- a source kind: questions written in the YAML, one plain image each --------------------------


@dataclass(kw_only=True)
class InlineSourceConfig:
    kind: Literal["inline"]
    questions: dict[str, str]
    """Question -> answer."""
    color: str = "red"


@SOURCES.register("inline")
class InlineSource:
    Config = InlineSourceConfig

    def __init__(self, config: InlineSourceConfig) -> None:
        self.config = config

    @classmethod
    def from_config(cls, config: InlineSourceConfig, *, base_dir: Path) -> InlineSource:
        return cls(config)

    @staticmethod
    def label(config: InlineSourceConfig) -> str:
        return f"{len(config.questions)} inline questions"

    def provenance(self) -> dict[str, str | None]:
        return {"dataset": "inline", "config": None, "split": "train", "revision": None}

    def __iter__(self) -> Iterator[SourceRecord]:
        for i, (question, answer) in enumerate(self.config.questions.items()):
            buf = io.BytesIO()
            Image.new("RGB", (32 + i, 32), self.config.color).save(buf, format="PNG")
            yield SourceRecord(record_id=f"q{i}", images=[buf.getvalue()], qa=[QAItem(question, answer, f"q{i}")])


# --- an engine kind: answers every question with the same words ----------------------------------


@dataclass(kw_only=True)
class ParrotEngineConfig(EngineConfig):
    kind: Literal["parrot"]
    says: str
    """What the engine answers, after a short reasoning block."""


@ENGINES.register("parrot")
class ParrotEngine:
    kind = "parrot"
    Config = ParrotEngineConfig
    runs_in_replica = False

    def __init__(self, says: str, model: str) -> None:
        self.says, self.model = says, model

    @classmethod
    def from_config(cls, config: ParrotEngineConfig, model: Any, *, base_dir: Path | None = None) -> ParrotEngine:
        return cls(config.says, model.id)

    def identity(self) -> dict[str, Any]:
        return {"model": self.model, "says": self.says}

    def generate(self, requests: Sequence[Request], settings: SamplingSettings) -> list[Generation]:
        text = settings.choices[0] if settings.choices else f"<think>I look.</think>{self.says}"
        return [Generation.from_text(text, finish_reason="stop", model=self.model) for _ in requests]

    def load(self) -> None:
        pass

    def close(self) -> None:
        pass


# --- a cleaning step: questions too long for this family ----------------------------------------


@dataclass
class ShortQuestionsConfig:
    enabled: bool = False
    max_words: int = 8


@CLEANING.register("short_questions")
class ShortQuestions(ItemFilter):
    name = "short_questions"
    Config = ShortQuestionsConfig
    order = 70
    card = StepCard("Short questions", "Questions of more words than the family allows are dropped.")
    reasons = {"long_question": "a question of more words than `max_words`"}

    def __init__(self, config: ShortQuestionsConfig) -> None:
        super().__init__()
        self.max_words = config.max_words

    def check(self, item: QAItem, image_sha256: str, image_id: str | None) -> str | None:
        return "long_question" if len(item.question.split()) > self.max_words else None


# --- a verifier ------------------------------------------------------------------------------------


@register
class FirstWordVerifier(Verifier):
    name = "first_word"
    title = "first-word match"
    version = "1"

    @property
    def description(self) -> str:
        return "The answer's first word, lower-cased and without trailing punctuation, must equal the reference."

    def match(self, prediction: str | None, reference: str | Sequence[str], *, item: Any = None) -> bool:
        refs = [reference] if isinstance(reference, str) else list(reference)
        words = (prediction or "").split()
        return bool(words) and words[0].rstrip(",.!?").lower() in [r.lower() for r in refs]
