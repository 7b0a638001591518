"""`rs plan FAMILY`: what a family's run will do, checked before the GPU-hours are spent.

Without any weights, from the family's configuration, a sample of its real questions and the
model's own processor and chat template: how each kind of question is asked (instruction) and
checked (verifier), how many tokens its prompts take with their images against `max_model_len`,
where the chat template leaves the reasoning (pre-filled open, closed, or up to the model) with
thinking on and off, and the mismatches between them. With `limit` images, their questions are
also answered for real, through the family's engine and the shared generation cache (so the full
run reuses the answers), and the whole family is projected from them: output tokens, truncation,
accept rate and GPU-hours; with a `recovery:` block, the recovery pass runs on them too, and its
GPU-hours are projected from the share of questions it sampled and its samples' measured tokens.
What cannot be checked here (a source or a model out of reach) is said, and the rest is still checked.

One module per job: the report (`report`, written for a person by `render`), what is checked without the model's
processor (`static`), the prompts' token counts (`tokens`, the one user of `transformers`) and the live projection
(`projection`). `probe`, `source_check` and `preview` are `rs families validate` / `preview`'s checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from rs.engines.base import Engine
from rs.families import Family
from rs.plan import static
from rs.plan.projection import project
from rs.plan.report import KindReport, PlanReport, Projection, RecoveryProjection, TemplateReport
from rs.plan.tokens import PromptTokens

__all__ = ["KindReport", "PlanReport", "Projection", "RecoveryProjection", "TemplateReport", "plan_family"]


def plan_family(
    family: Family,
    *,
    sample_images: int = 8,
    limit: int | None = None,
    build_root: Path | None = None,
    cache_path: Path | None = None,
    tokens_per_second: float | None = None,
    engine_factory: Callable[[Family], tuple[Engine, Engine | None]] | None = None,
    progress: bool = False,
    count_tokens: bool = True,
) -> PlanReport:
    """Check a family's run before it starts; with `limit`, answer its first `limit` images and project the whole family.

    `count_tokens=False`: no processor is loaded (nor `transformers` imported), so no prompt is counted and the chat
    template is not read: what `rs publish --dry-run` says of a family it has not built.
    """
    c = family.config
    plan = PlanReport(
        family.name, c.model.id, c.sampling.max_tokens, static.max_model_len(c), static.mm_processor_kwargs(c)
    )
    static.check_configuration(c, plan)
    static.check_defaults(family, plan)
    rows = static.sample_rows(family, sample_images, plan)
    static.check_calibration(c, plan)
    tokens = PromptTokens.load(c, plan) if count_tokens else None
    if tokens is not None:
        plan.template = tokens.template(c, plan)
        plan.side = tokens.token_side()
    plan.kinds = static.kinds(rows, c, tokens)
    static.check_kinds(c, plan)
    static.suggest_closed_set(c, rows, plan)
    if limit is not None:
        plan.projection = project(
            family, limit, build_root, cache_path, tokens_per_second, engine_factory, progress, plan
        )
    return plan
