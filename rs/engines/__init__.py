"""Sampling engines: one contract (`base`), the kinds that implement it, and building a family's (`factory`).

    >>> from rs.families import get_family
    >>> from rs.engines.factory import engines_for, sampling_settings
    >>> family = get_family("TinyCLEVR")
    >>> sampler, judge = engines_for(family)        # one engine object when the judge model is the sampler
    >>> settings = sampling_settings(family.config)

The kinds: `vllm` (vLLM offline, `vllm_core` behind it), `openai` (a server), `replay` (answers recorded in a
file), `cached_engine` (the generation cache, `generation_cache`, in front of any of them). Nothing is imported here: `import
rs.engines.base` must stay cheap (no vLLM, no openai, no families.yaml) so that the CLI, the stages below
sampling and the tests that need neither start fast.
"""
