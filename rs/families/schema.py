"""The shape of a family's configuration, as typed dataclasses.

`loader.py` validates YAML against these classes (keys, types, required fields) and reports the
file and line of every problem, so the classes are the single documentation of what
`families.yaml` accepts. Field docstrings are shown by `python -m rs.families keys`.

The `source` and `engine` blocks belong to plug-ins: their `kind` names a registered source or engine
kind (`rs.registry`), and the block is checked against that kind's own `Config`, which lives with it.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Literal

from rs.answers import Vocabulary
from rs.families.vllm_parsers import known_reasoning_parsers
from rs.hub.licenses import license_problem
from rs.hub.limits import DEFAULT_FILES_PER_COMMIT, check_files_per_commit
from rs.hub.names import namespace_problem
from rs.registry import CLEANING, ENGINES, SOURCES, KindConfig
from rs.util.config_checks import ConfigValueError, at_least, positive, within
from rs.util.sizes import parse_bytes

MULTIPLE_CHOICE_INSTRUCTION = "\nAnswer with the option's letter from the given choices directly."
"""What a question with options is asked with unless its family says otherwise (LLaVA's and lmms-eval's wording)."""

MAX_INSTRUCTION_CHARS = 4_096
"""Characters an instruction may have. The shipped ones are under 100 (LLaVA's "Answer the question using a single
word or phrase."), a detailed answer format a paragraph; each is appended to every question, stored in every row and
sent with every request, so a 50 MB one passed validate and failed the run after minutes and gigabytes."""

ByteSize = int | str
"""A byte count: an integer, or a string such as "500MB" / "1GiB"."""


@dataclass
class ReasoningConfig:
    """How a model's output marks its reasoning and its final answer (`rs.engines.reasoning`)."""

    parser: str = "tags"
    """`tags`: the `start` / `end` markers below; a vLLM reasoning parser (`vllm.reasoning`: qwen3, deepseek_r1,
    glm45, mistral, ...), which reads the model's own format with its tokenizer; or `none`: the model does not
    reason, its whole output is the answer."""
    start: str = "<think>"
    """Opens the reasoning (`tags`; the default also matches `<thinking>`, any case)."""
    end: str = "</think>"
    """Closes the reasoning (`tags`)."""
    answer_start: str | None = None
    """With `answer_end`: the final answer is what such a pair holds (`<answer>` ... `</answer>`); an output without
    one, or whose pairs hold different answers, has no final answer."""
    answer_end: str | None = None
    required: bool = False
    """An output without a closed reasoning block has no final answer, whatever the prompt. Whether the chat template
    opened the block in the prompt is detected by the `vllm` engine; set this where it cannot be (a remote server
    that does not separate the reasoning)."""

    @property
    def uses_vllm_parser(self) -> bool:
        """Whether `parser` names a vLLM reasoning parser (not `tags` or `none`)."""
        return self.parser not in ("tags", "none")

    def __post_init__(self) -> None:
        if (self.answer_start is None) != (self.answer_end is None):
            raise ValueError(
                "answer_start and answer_end go together: set both (e.g. <answer> and </answer>) or neither"
            )
        if self.parser == "tags" and not (self.start and self.end):
            raise ValueError("parser tags needs both markers: start (e.g. <think>) and end (e.g. </think>)")
        if self.parser == "none" and self.required:
            raise ValueError("parser none (the model does not reason) cannot require a reasoning block")
        if self.uses_vllm_parser and (known := known_reasoning_parsers()) is not None and self.parser not in known:
            close = difflib.get_close_matches(self.parser, sorted(known), n=1, cutoff=0.6)
            raise ConfigValueError(
                "parser",
                f"the installed vLLM has no reasoning parser {self.parser!r}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f"; tags (the start/end markers), none, or one of: {', '.join(sorted(known))}",
            )


@dataclass
class ModelConfig:
    id: str = field(metadata={"example": "Qwen/Qwen3-VL-8B-Thinking"})
    """Hub id or local path of the VLM."""
    revision: str | None = None
    """Hub revision (commit, tag or branch); recorded in every result and in the cache key."""
    reasoning: ReasoningConfig = field(default_factory=ReasoningConfig)
    """How its outputs mark reasoning and answer."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """The inverse of `dataclasses.asdict` (a Ray replica gets its model as plain data)."""
        return cls(**{**data, "reasoning": ReasoningConfig(**data.get("reasoning") or {})})


@dataclass
class RepetitionDetectionConfig:
    """`sampling.repetition_detection`: vLLM's `RepetitionDetectionParams` (checked against the installed vLLM's class).

    Generation ends (`repetition`) as soon as the output's last `min_count` x N tokens are one N-token pattern
    repeated, for some N from `min_pattern_size` to `max_pattern_size`: a loop stops within a few repetitions
    instead of running to `max_tokens`."""

    max_pattern_size: int = 128
    """Longest repeated pattern looked for, in tokens (a repeated sentence or short paragraph)."""
    min_pattern_size: int = 4
    """Shortest pattern, in tokens: shorter runs (separators, ellipses, `| --- |`) are never taken for a loop."""
    min_count: int = 4
    """Repetitions in a row that end generation (at least 2)."""

    def __post_init__(self) -> None:
        at_least(
            "min_count",
            self.min_count,
            2,
            what="repetitions in a row; to switch detection off, set repetition_detection: null",
        )
        at_least("min_pattern_size", self.min_pattern_size, 1, what="tokens of the shortest pattern")
        at_least("max_pattern_size", self.max_pattern_size, self.min_pattern_size, what="at least min_pattern_size")

    def as_tuple(self) -> tuple[int, int, int]:
        """`(min_pattern_size, max_pattern_size, min_count)`: what the engines and the cache take."""
        return (self.min_pattern_size, self.max_pattern_size, self.min_count)


@dataclass
class SamplingConfig:
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    max_tokens: int = 8192
    """Generation budget; an output cut off here has no final answer and is rejected as such."""
    chat_template_kwargs: dict[str, Any] = field(default_factory=lambda: {"enable_thinking": True})
    """Passed to the chat template; reasoning is switched on here."""
    repetition_detection: RepetitionDetectionConfig | None = None
    """End an output that loops (vLLM's `SamplingParams.repetition_detection`); null: off. Its answer is rejected as
    `degenerate_repetition`."""
    thinking_token_budget: int | None = None
    """Reasoning tokens an answer may use (vLLM's `SamplingParams.thinking_token_budget`): the reasoning is closed there
    and the model answers within what is left of `max_tokens`; null: no budget. Needs the model's reasoning markers
    (`model.reasoning`)."""

    def __post_init__(self) -> None:
        # vLLM refuses these only once the model has loaded; say so at validate time instead
        at_least("temperature", self.temperature, 0, what="0 is greedy decoding")
        if not 0 < self.top_p <= 1:
            raise ConfigValueError("top_p", f"must be above 0 and at most 1 (1 keeps every token), got {self.top_p!r}")
        at_least("max_tokens", self.max_tokens, 1, what="the tokens an answer may use, its reasoning included")
        at_least("thinking_token_budget", self.thinking_token_budget, 0, what="reasoning tokens; null for no budget")
        if self.thinking_token_budget is not None and self.thinking_token_budget >= self.max_tokens:
            raise ConfigValueError(
                "thinking_token_budget",
                f"{self.thinking_token_budget} is not below max_tokens "
                f"({self.max_tokens}), which counts the reasoning and the answer after it: the budget "
                "would never cut the reasoning and leave no room for the answer; lower it, or raise max_tokens",
            )


@dataclass
class RLConfig:
    """`recovery.difficulty.rl`: publish `<FAMILY>_RS_rl`, the questions the model answers right only sometimes, in the
    layout TRL's GRPO trainer reads (`rs.pipeline.write.samples`)."""

    min_pass_rate: float = 0.0
    """A question is kept when its pass rate is strictly above this (0: drop the ones never answered right)."""
    max_pass_rate: float = 1.0
    """... and strictly below this (1: drop the ones always answered right; Open-R1 keeps 0.1 < p < 0.9)."""

    def __post_init__(self) -> None:
        within("min_pass_rate", self.min_pass_rate, 0.0, 1.0, what="a pass rate")
        within("max_pass_rate", self.max_pass_rate, 0.0, 1.0, what="a pass rate")
        if self.max_pass_rate <= self.min_pass_rate:
            raise ConfigValueError(
                "max_pass_rate", f"must be above min_pass_rate ({self.min_pass_rate}), got {self.max_pass_rate!r}"
            )


@dataclass
class DifficultyConfig:
    samples: int = 0
    """Samples drawn for every accepted item too, as the recovery pass draws them, so that every question of the family
    gets a measured `pass_rate`; 0: only the rejected items are sampled."""
    rl: RLConfig | None = None
    """Publish `<FAMILY>_RS_rl` (off when absent): the questions whose pass rate is within the bounds, for RL."""

    def __post_init__(self) -> None:
        at_least("samples", self.samples, 0, what="samples per accepted item; 0 samples none")
        if self.rl is not None and not self.samples:
            raise ConfigValueError(
                "rl",
                "needs difficulty.samples above 0: without them an accepted question has no pass rate "
                "(write `difficulty: {samples: 4, rl: {}}`)",
            )


@dataclass
class RecoveryConfig:
    """A second chance for the rejected questions: `samples` more answers each, drawn above temperature 0."""

    samples: int = 4
    """Samples per rejected item (k); one request each (vLLM's `n`), sample `i` seeded `seed + i`."""
    temperature: float = 0.6
    """Above 0: the greedy answer was wrong, other paths through the reasoning may not be (Qwen samples its thinking
    models at 0.6, top_p 0.95, and advises against greedy decoding for them)."""
    top_p: float = 0.95
    seed: int = 0
    """Sample `i` is drawn with seed `seed + i`: a re-run, or a raised `samples`, draws the same samples."""
    max_tokens: int | None = None
    """Generation budget of a sample; null: `sampling.max_tokens`. Loop detection and the thinking budget are the
    sampling pass's."""
    cut_off: bool = False
    """Also sample the items whose greedy answer gave none (`no_final_answer`, `degenerate_repetition`)."""
    difficulty: DifficultyConfig = field(default_factory=DifficultyConfig)
    pairs: bool = False
    """Publish a fourth repo, `<FAMILY>_RS_pairs`: preference pairs of a verified answer and a wrong one to one question."""
    suspects: bool = True
    """Adjudicate the rejections whose answers all agree on one value the reference is not near (the same model, shown
    the image, picks between the two values in both orders; calibrated like the judge, under `judge`'s thresholds):
    those it sides against the reference are `suspect_reference`, not `wrong_answer` (`rs.pipeline.sample.adjudicate`)."""

    def __post_init__(self) -> None:
        at_least(
            "samples", self.samples, 1, what="samples per rejected item; to recover nothing, remove the recovery block"
        )
        positive(
            "temperature",
            self.temperature,
            what="the greedy pass is temperature 0: the same request again would give the same answer",
        )
        if not 0 < self.top_p <= 1:
            raise ConfigValueError("top_p", f"must be above 0 and at most 1 (1 keeps every token), got {self.top_p!r}")
        at_least(
            "max_tokens",
            self.max_tokens,
            1,
            what="the tokens a sample may use, its reasoning included; null for sampling.max_tokens",
        )


@dataclass
class BlindConfig:
    """`blind:`, the no-image pass (off when absent): every question asked again with the same prompt and its image removed,
    each answer verified by the family's verifier; the splits record it per question, and the cards give the share of
    questions right without the image (`rs.pipeline.sample.blind`). Marked, never dropped."""

    rotations: int = 4
    """A multiple-choice question is asked this many times at temperature 0, its options rotated by one place each time
    (the first time as the model was asked with the image): it is marked only when right in every rotation, so a lucky
    guess at chance is not."""
    samples: int = 0
    """Other questions: samples drawn besides the temperature-0 answer, at the recovery's temperature, top_p and seed
    (`recovery:`, its defaults without one), for a pass rate; 0 draws none. The mark is the temperature-0 answer's."""
    rl: bool = True
    """The RL repo (`recovery.difficulty.rl`) keeps the marked questions; false leaves them out."""

    def __post_init__(self) -> None:
        at_least("rotations", self.rotations, 1, what="times a multiple-choice question is asked; 1 asks it as it is")
        at_least("samples", self.samples, 0, what="samples drawn besides the temperature-0 answer; 0 draws none")


@dataclass
class JudgeConfig:
    enabled: bool = True
    model: ModelConfig | None = None
    """Judge model; empty means the sampling model itself."""
    max_tokens: int = 8
    """Tokens of the verdict (after the reasoning, in `think_then_label`)."""
    mode: Literal["label_only", "think_then_label"] = "label_only"
    """`label_only`: the reasoning is switched off (`enable_thinking: false`, and a block the template leaves open is
    closed in the prompt) and the label is the first thing decoded; `think_then_label`: the judge may reason for up to
    `think_budget` tokens, the label is constrained only after its reasoning ends (a vLLM reasoning parser in
    `model.reasoning.parser`, or a server started with `--reasoning-parser`), no end within the budget is UNSURE."""
    think_budget: int = 1024
    """Reasoning tokens a `think_then_label` judge may use before its label."""
    calibration_samples: int = 200
    """Cases per calibration check: verifier-accepted items, easy negatives, hard negatives (near misses)."""
    min_calibration_cases: int = 50
    """Fewest positives and fewest hard negatives the gate decides on; with fewer, the judge promotes nothing."""
    min_negative_agreement: float = 0.9
    """The 95% Wilson lower bound of the share of hard negatives (and, given enough of them, of the rejections
    the verifier knows are wrong) the judge did not call CORRECT must reach this, or it promotes nothing. With
    200 hard negatives a judge that agrees 97% of the time passes with probability 0.98; one at 85% never does."""
    min_positive_agreement: float = 0.8
    """The 95% Wilson lower bound of the share of verifier-accepted items the judge called CORRECT must reach this."""
    sees_image: bool = False
    """Whether the judge is shown the item's image with the question, the reference and the candidate (it still compares,
    never solves). Off, its requests are text only. Its verdicts are cached apart from the text-only judge's, and it is
    calibrated like it; `rs sample FAMILY --judge-modes` measures both on the same calibration cases, to choose on figures."""

    def __post_init__(self) -> None:
        if self.sees_image and not self.enabled:
            raise ConfigValueError(
                "sees_image",
                "the judge is off (judge.enabled: false), so nothing would see the image: "
                "remove sees_image, or set judge.enabled: true",
            )
        for name in ("min_negative_agreement", "min_positive_agreement"):
            within(name, getattr(self, name), 0.0, 1.0, what="a share of the calibration cases")
        at_least("max_tokens", self.max_tokens, 1, what="the tokens of the verdict")
        at_least("think_budget", self.think_budget, 1, what="the judge's reasoning tokens")
        at_least(
            "calibration_samples",
            self.calibration_samples,
            1,
            what="cases per check; to judge nothing, set judge.enabled: false",
        )
        at_least("min_calibration_cases", self.min_calibration_cases, 1)


@dataclass
class ShardConfig:
    max_bytes: ByteSize = "500MB"
    """Largest parquet shard."""
    row_group_bytes: ByteSize = "100MB"
    """Largest row group, uncompressed (`datasets.config.MAX_ROW_GROUP_SIZE`, the dataset viewer's limit); checked after writing.
    One item never fails the write: an image with questions over half the target is dropped in cleaning (`row_too_large`),
    an answer over its row's part of the rest is rejected (`answer_too_large`); in the samples repo a generation over its
    part keeps its record without its text (`too_large`), and a preference pair takes the first wrong answer that fits."""
    row_group_margin: float = 0.2
    """Row groups are filled to (1 - margin) x `row_group_bytes` of Arrow data: parquet's own encoding may add to it."""

    def __post_init__(self) -> None:
        for name in ("max_bytes", "row_group_bytes"):
            value = getattr(self, name)
            try:
                size = parse_bytes(value)
            except ValueError as err:
                raise ConfigValueError(name, str(err)) from None
            positive(name, size, what="a byte size such as 500MB")
        if not 0 <= self.row_group_margin < 1:
            raise ConfigValueError(
                "row_group_margin", f"must be at least 0 and below 1, got {self.row_group_margin!r}"
            )

    def row_group_target(self) -> int:
        """Bytes of Arrow data a row group is filled to."""
        return max(1, int(parse_bytes(self.row_group_bytes) * (1 - self.row_group_margin)))


@dataclass
class PublishConfig:
    namespace: str = "rs-datasets"
    """Hub user or organisation the repos are created under (the Hub's rules for a name, `rs.hub.names`); the local
    target lays them out under it too."""
    private: bool = False
    target: Literal["hub", "local"] = "hub"
    """Where `python -m rs.publish` puts the repos when `--out` is not given."""
    local_dir: str = "out"
    """The folder of the `local` target (relative to the working directory): `{local_dir}/{namespace}/{repo}`."""
    samples: bool = False
    """Publish `<FAMILY>_RS_samples` too: one row per question with every answer it got (the greedy one, each recovery
    or difficulty sample), each with what the reader, the judge and the routing made of it, to re-filter offline."""
    files_per_commit: int = DEFAULT_FILES_PER_COMMIT
    """Most files (added, changed or deleted) in one commit to the Hub (1-100, the Hub's guidance). A repo that
    changes by more gets them in commits of this size on a pull request, merged at the end: readers see the change at once."""

    def __post_init__(self) -> None:
        check_files_per_commit(self.files_per_commit)
        if (problem := namespace_problem(self.namespace)) is not None:  # it becomes a repo id and a folder
            raise ConfigValueError("namespace", problem)


@dataclass
class CardConfig:
    pretty_name: str
    description: str
    """A short description of the source benchmark, shown on every card."""
    license: str
    """Hub license identifier of the published data (follows the source's terms)."""
    citation: str
    """BibTeX of the source benchmark."""
    language: list[str] = field(default_factory=lambda: ["en"])
    task_categories: list[str] = field(default_factory=lambda: ["visual-question-answering"])
    tags: list[str] = field(default_factory=list)
    source_datasets: list[str] = field(default_factory=list)
    homepage: str | None = None

    def __post_init__(self) -> None:
        if (problem := license_problem(self.license)) is not None:  # the Hub would show it as unknown
            raise ConfigValueError("license", problem)


@dataclass
class VerifierConfig:
    name: str = field(metadata={"example": "alnum"})
    """One of the registered verifiers (`python -m rs.families verifiers` lists them)."""
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class AnswersConfig:
    """`answers:` in families.yaml: the family's closed set of answers (CLEVR's colours, shapes, materials, sizes),
    read as typed terms with their synonyms on both sides (`rs.answers`)."""

    categories: dict[str, list[str]] = field(default_factory=dict)
    """Category -> its terms (`color: [gray, red, ...]`): a reference that is one is read as a term, and a term of
    another category beside the answer ("the red cube" for a colour) is no other answer."""
    synonyms: dict[str, list[str]] = field(default_factory=dict)
    """Term -> its other spellings (`sphere: [ball, balls, spheres]`), the same answer on either side."""
    think_needs_agreeing_reasoning: bool = True
    """An accepted answer whose reasoning concludes another value of its kind (the last one it states) stays out of
    `FAMILY_RS_think` (it is still in `_RS_nothink`): only the final answer is verified, and a reasoning that
    argues for another answer is no reasoning to train on."""
    literal: bool = False
    """The answers are transcriptions (the OCR families): read as written, with no typed conversion ("3" is not the
    word "three", "B" no option), so only the same text is accepted without the judge."""
    closed_set: bool = False
    """Every distinct cleaned reference that is no number and no yes/no is a term too (at most
    `rs.store.MAX_ANSWER_SET` of them; a family with more has no closed set): for a family whose answers are few
    words without categories written here."""

    def vocabulary(self, references: list[str] | None = None) -> Vocabulary | None:
        """The closed set as `rs.answers.Vocabulary` (with the cleaned `references` when `closed_set`), or None."""
        derived = list(references or []) if self.closed_set else []
        if not self.categories and not self.synonyms and not derived:
            return None
        terms = [t for members in self.categories.values() for t in members] + derived
        return Vocabulary.build(terms, self.synonyms, self.categories)


@dataclass
class CleaningConfig:
    """`cleaning:` in families.yaml: every registered step's block by its key (`rs.registry.CLEANING`;
    one not written gets its defaults), and `dedup`."""

    steps: dict[str, Any] = field(default_factory=dict)
    """Step key -> that step's `Config` (provenance, purity, reference_form, multiple_choice, ...)."""
    dedup: bool = True
    """Drop a QA item repeated on the same image."""

    def step(self, key: str) -> Any:
        """The configuration of the step registered as `key`, its defaults when the family wrote none."""
        return self.steps[key] if key in self.steps else CLEANING.get(key).Config()

    def as_yaml(self) -> dict[str, Any]:
        """The block as families.yaml writes it (steps at the top level, beside `dedup`)."""
        return {**{key: asdict(config) for key, config in self.steps.items()}, "dedup": self.dedup}


@dataclass
class DecontaminationActions:
    """What happens to a training item found in an evaluation set, by what matched (`rs.pipeline.clean.decontam`)."""

    image: Literal["drop", "flag"] = "drop"
    """The same image (decoded pixels) or a near duplicate (perceptual hash): `drop` removes the whole row."""
    item: Literal["drop", "flag"] = "drop"
    """A near-duplicate image asked an overlapping question: the QA item."""
    question: Literal["drop", "flag"] = "flag"
    """The question alone (another image): templated benchmarks share questions across images, so it is flagged."""


@dataclass
class DecontaminationConfig:
    """`decontamination:` in a family: the evaluation sets (top-level `evaluation:`) its training data is checked against."""

    against: list[str] = field(metadata={"example": "[CLEVR-val]"})
    """Names of evaluation sets under the top-level `evaluation:` key."""
    action: DecontaminationActions | Literal["drop", "flag"] = field(default_factory=DecontaminationActions)
    """`drop` or `flag` for every kind of match, or per kind: `{image: drop, item: drop, question: flag}`."""

    def actions(self) -> DecontaminationActions:
        """The action per kind of match (a single word applies to all three)."""
        if isinstance(self.action, str):
            return DecontaminationActions(self.action, self.action, self.action)
        return self.action


@dataclass
class EvaluationSetConfig:
    """One benchmark evaluation split under the top-level `evaluation:` key: read like a family's training source."""

    source: Annotated[KindConfig, SOURCES]
    """Where its images and questions come from: `kind` is a registered source kind (hub, files, synthetic_eval, ...)."""
    benchmark: str | None = None
    """The benchmark's name as a card shows it (ChartQA, DocVQA ...)."""


@dataclass
class QuestionTypeRule:
    type: str = field(metadata={"example": "count"})
    """The type's name, as the cards show it."""
    pattern: str = field(metadata={"example": "^how many"})
    """A regular expression searched (case-insensitive) in the question as the source gave it."""

    def __post_init__(self) -> None:
        if not self.type.strip():
            raise ConfigValueError("type", "must name the type (count, exist, ...)")
        try:
            re.compile(self.pattern)
        except re.error as err:
            raise ConfigValueError("pattern", f"is no regular expression ({err}): {self.pattern!r}") from None


@dataclass
class QuestionTypesConfig:
    """`question_types:` how the family's questions are typed, for the cards' accept rates per type (`rs.pipeline.route.typer`):
    the type the source records (`source.columns.qtype`, the synthetic scenes' own), else the first rule whose pattern
    the question matches, else `default`."""

    rules: list[QuestionTypeRule] = field(default_factory=list)
    source: bool = True
    """Take the type the source records for a question when it has one (before the rules)."""
    default: str = "other"
    """The type of a question no rule matches."""


@dataclass
class FamilyConfig:
    """A family as written in YAML, with `defaults` already merged in."""

    source: Annotated[KindConfig, SOURCES]
    """Where the train QA comes from: `kind` is a registered source kind (hub, files, synthetic, ...)."""
    instruction: str = field(metadata={"example": '"\\nAnswer the question using a single word or phrase."'})
    """Appended verbatim to every question (but those with options, see `multiple_choice_instruction`); the stored
    question is exactly what the model receives."""
    verifier: VerifierConfig
    card: CardConfig
    model: ModelConfig
    multiple_choice_instruction: str | None = MULTIPLE_CHOICE_INSTRUCTION
    """Appended instead of `instruction` to a question with options (rendered as a lettered block by cleaning, or
    given by the source), which is answered with a letter; null: those get `instruction` too."""
    answers: AnswersConfig = field(default_factory=AnswersConfig)
    """The family's closed set of answers with its synonyms, when its answers form one."""
    cleaning: Annotated[CleaningConfig, CLEANING] = field(default_factory=CleaningConfig)
    """Cleaning steps by their key (registered steps; `enabled` switches one on), and `dedup`."""
    engine: Annotated[KindConfig, ENGINES] = field(default_factory=lambda: ENGINES.get(ENGINES.default).Config())
    """How the model is served: `kind` is a registered engine kind (vllm, openai, replay, ...)."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    recovery: RecoveryConfig | None = None
    """The recovery pass (off when absent): rejected items sampled again above temperature 0, their pass rates measured,
    an item with a verified sample accepted (`accepted_by: recovery`). README: "Recovering the hard questions"."""
    shard: ShardConfig = field(default_factory=ShardConfig)
    question_types: QuestionTypesConfig | None = None
    """How the questions are typed (off when absent): the cards then show accept rates per type."""
    blind: BlindConfig | None = None
    """The no-image pass (off when absent): every question asked with its image removed, the answer recorded per
    question in every split and marked when right (`rs.pipeline.sample.blind`)."""
    publish: PublishConfig = field(default_factory=PublishConfig)
    decontamination: DecontaminationConfig | None = None
    """Evaluation sets the training images and questions are checked against, and what a match does (off when absent).
    README: "Decontamination"."""

    def __post_init__(self) -> None:
        for name in ("instruction", "multiple_choice_instruction"):
            text = getattr(self, name)
            if text is not None and len(text) > MAX_INSTRUCTION_CHARS:
                raise ConfigValueError(
                    name,
                    f"{len(text):,} characters, over {MAX_INSTRUCTION_CHARS:,}: it is appended to every question, "
                    "stored with each and sent with each to the model; an instruction is a sentence or two",
                )
        if self.blind is not None and getattr(self.engine, "kind", None) == "replay":
            raise ConfigValueError(
                "blind",
                "the replay engine answers a request by its question's key (or its exact prompt), so it would answer the "
                "question asked without its image with the answer given with it; remove the blind block for this "
                "family, or serve its model with an engine that asks it",
            )
