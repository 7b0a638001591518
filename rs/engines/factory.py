"""Building a family's engines from its configuration: the sampler, its judge, and the sampling settings."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from rs.engines.base import Engine, EngineConfig, Generation, Request, SamplingSettings
from rs.engines.models import BuiltinModel, builtin_revision, resolve_model
from rs.families.schema import FamilyConfig, ModelConfig
from rs.registry import ENGINES

if TYPE_CHECKING:
    from rs.families import Family

logger = logging.getLogger(__name__)

__all__ = [
    "BuiltinModel",
    "builtin_revision",
    "Engine",
    "EngineConfig",
    "Generation",
    "Request",
    "SamplingSettings",
    "create_engine",
    "engines_for",
    "resolve_model",
    "sampling_settings",
]


def sampling_settings(config: FamilyConfig | Family) -> SamplingSettings:
    """The family's sampling settings (`sampling:` in families.yaml) as the engines take them."""
    config = _config_of(config)
    s = config.sampling
    return SamplingSettings(
        temperature=s.temperature,
        top_p=s.top_p,
        seed=s.seed,
        max_tokens=s.max_tokens,
        chat_template_kwargs=dict(s.chat_template_kwargs),
        repetition_detection=s.repetition_detection.as_tuple() if s.repetition_detection is not None else None,
        thinking_token_budget=s.thinking_token_budget,
    )


def create_engine(
    config: FamilyConfig | Family,
    *,
    judge: bool = False,
    base_dir: str | Path | None = None,
) -> Engine:
    """Build the family's sampling engine, or its judge's (`judge=True`).

    The judge uses `judge.model` when set, otherwise the sampling model, always on the family's
    engine kind (`rs.registry.ENGINES`). Pass a `Family` to get its file's folder as the base of a
    relative path in the engine block (`engine.replay_path`); with a bare `FamilyConfig`, give `base_dir`.
    """
    if not isinstance(config, FamilyConfig):
        family = config
        base_dir = base_dir if base_dir is not None else family.path.parent
        config = family.config
    model = _model_for(config, judge=judge)
    return ENGINES.get(config.engine.kind).from_config(config.engine, model, base_dir=base_dir)


def engines_for(config: FamilyConfig | Family, *, base_dir: str | Path | None = None) -> tuple[Engine, Engine]:
    """`(sampler, judge)`; the same object when the judge model is the sampling model.

    Sharing matters for the offline engine: a second `vllm.LLM` of the same model would hold a
    second copy of the weights and KV cache.
    """
    sampler = create_engine(config, base_dir=base_dir)
    cfg = _config_of(config)
    if _model_for(cfg, judge=True) == _model_for(cfg, judge=False):
        return sampler, sampler
    return sampler, create_engine(config, judge=True, base_dir=base_dir)


def _model_for(config: FamilyConfig, *, judge: bool) -> ModelConfig:
    if judge and config.judge.model is not None:
        return config.judge.model
    return config.model


def _config_of(config: FamilyConfig | Family) -> FamilyConfig:
    return config if isinstance(config, FamilyConfig) else config.config
