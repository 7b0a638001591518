"""Counting a family's prompts with the model's own processor and chat template, no weights loaded.

The one part of `rs plan` that needs `transformers`, imported only when a count is asked for (`PromptTokens.load`):
a dry run of `rs publish` describes the run without it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from rs.engines.base import PROMPT_TAIL_CHARS
from rs.engines.models import resolve_model
from rs.engines.reasoning import ReasoningFormat
from rs.families.schema import FamilyConfig
from rs.plan.report import PlanReport, TemplateReport
from rs.util.text import first_line


@dataclass
class PromptTokens:
    """The model's processor (or its tokenizer alone) and the family's template and processor arguments."""

    processor: Any
    tokenizer: Any
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    mm_processor_kwargs: dict[str, Any] = field(default_factory=dict)
    """The engine's `mm_processor_kwargs` (a pixel limit): prompts are counted with them, as vLLM counts them."""

    @classmethod
    def load(cls, c: FamilyConfig, plan: PlanReport) -> PromptTokens | None:
        """The model's processor and tokenizer, or None with a note in `plan` saying why not."""
        from transformers import AutoProcessor, AutoTokenizer

        path = resolve_model(c.model.id)
        revision = c.model.revision if path == c.model.id else None
        kwargs = dict(c.sampling.chat_template_kwargs)
        try:
            processor = AutoProcessor.from_pretrained(path, revision=revision)
        except Exception as processor_error:
            try:
                tokenizer = AutoTokenizer.from_pretrained(path, revision=revision)
            except Exception:
                plan.notes.append(
                    f"cannot load the tokenizer and processor of {c.model.id} here ({first_line(processor_error)}): "
                    "no prompt tokens counted, no chat template read"
                )
                return None
            plan.notes.append(f"{c.model.id} has no processor here; prompt tokens count the text only")
            return cls(tokenizer, tokenizer, kwargs, plan.mm_processor_kwargs)
        return cls(processor, getattr(processor, "tokenizer", processor), kwargs, plan.mm_processor_kwargs)

    def image(self, data: bytes) -> Any:
        """A row's image decoded for the processor; None when it cannot be."""
        from PIL import Image

        try:
            image = Image.open(io.BytesIO(data))
            image.load()
            return image.convert("RGB")
        except Exception:
            return None

    def count(self, prompt: str, image: Any) -> tuple[int, int | None]:
        """The prompt's tokens with its image, and the image's share of them (None with a tokenizer only)."""
        return prompt_tokens(self.processor, prompt, image, self.chat_template_kwargs, self.mm_processor_kwargs)

    def token_side(self) -> int | None:
        """Pixels a side of one image token for a dynamic-resolution processor (patch x merge, 32 for Qwen3-VL), else None."""
        image_processor = getattr(self.processor, "image_processor", None)
        patch, merge = getattr(image_processor, "patch_size", None), getattr(image_processor, "merge_size", None)
        return patch * merge if isinstance(patch, int) and isinstance(merge, int) else None

    def template(self, c: FamilyConfig, plan: PlanReport) -> TemplateReport | None:
        """Where the chat template leaves the reasoning, with thinking on and off; what contradicts the family's settings
        goes to `plan`'s warnings (or notes)."""
        processor, kwargs = self.processor, self.chat_template_kwargs
        tokenizer = self.tokenizer
        fmt = ReasoningFormat(
            c.model.reasoning, tokenizer=lambda: tokenizer, chat_template_kwargs=c.sampling.chat_template_kwargs
        )
        try:
            thinking = _render(processor, "?", kwargs)
            without = _render(processor, "?", {**kwargs, "enable_thinking": False}, image=False)
            markers = fmt.markers
        except Exception as err:
            plan.notes.append(f"cannot render the chat template here ({first_line(err)})")
            return None
        t = TemplateReport(
            fmt.prompt_state(thinking[-PROMPT_TAIL_CHARS:]),
            fmt.prompt_state(without[-PROMPT_TAIL_CHARS:]),
            markers,
            thinking[-PROMPT_TAIL_CHARS:],
        )
        wants_thinking = kwargs.get("enable_thinking", True) is not False
        if markers is not None and wants_thinking and t.thinking == "closed":
            plan.warnings.append(
                "sampling asks for reasoning but the chat template closes the reasoning block in the prompt: "
                "the answers will have no reasoning (is this a non-thinking model?)"
            )
        template_text = getattr(processor, "chat_template", None) or getattr(
            getattr(processor, "tokenizer", None), "chat_template", ""
        )
        if (
            markers is not None
            and t.thinking == "none"
            and isinstance(template_text, str)
            and markers[0] not in template_text
        ):
            plan.warnings.append(
                f"the chat template never writes {markers[0]!r}: check model.reasoning (the model's markers may "
                "differ, e.g. ◁think▷ or <thinking>)"
            )
        if c.judge.enabled and c.judge.mode == "label_only" and t.without_thinking == "open":
            closes = (
                "the vllm engine closes it in the judge's prompt"
                if c.engine.kind == "vllm"
                else f"the {c.engine.kind} engine cannot close it: use judge.mode think_then_label with a server reasoning parser"
            )
            (plan.notes if c.engine.kind == "vllm" else plan.warnings).append(
                f"the chat template ignores enable_thinking false (the reasoning stays open); {closes}"
            )
        return t


def _render(processor: Any, prompt: str, kwargs: dict[str, Any], *, image: bool = True) -> str:
    content: Any = [{"type": "image"}, {"type": "text", "text": prompt}] if image else prompt
    return processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False, **kwargs
    )


def prompt_tokens(
    processor: Any, prompt: str, image: Any, kwargs: dict[str, Any], mm_kwargs: dict[str, Any]
) -> tuple[int, int | None]:
    """The prompt's tokens, and its image's (None with a tokenizer only), with the engine's processor arguments."""
    text = _render(processor, prompt, kwargs)
    if getattr(processor, "image_processor", None) is None:  # a tokenizer only
        return len(processor(text, add_special_tokens=False)["input_ids"]), None
    ids = processor(text=[text], images=[[image]], add_special_tokens=False, **mm_kwargs)["input_ids"][0]
    ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    image_token = getattr(processor, "image_token", None)
    image_id = processor.tokenizer.convert_tokens_to_ids(image_token) if isinstance(image_token, str) else None
    return len(ids), (ids.count(image_id) if image_id is not None else None)
