"""Teach the demo model the adjudication prompt, as it was taught to answer: fine-tune from the shipped weights.

The suspect-reference adjudicator (`rs.pipeline.sample.adjudicate.Adjudicator`) shows the model an image, the exact
prompt it was asked and two values, and asks for one letter: the value the image supports. A model trained only to
answer never saw that prompt, so its letter is a positional guess and its calibration blocks it. Here each training
scene's clean questions also become adjudication examples: the prompt rendered by the adjudicator's own code, the
scene graph's answer against a wrong value of the same kind (the synthetic source's own `wrong_reference`: another
count near it, the other yes/no, another value of the attribute), in a random order, the target the letter of the
scene graph's answer. The answering examples stay in the mix (same targets as the base training), so that the model
keeps answering as well as before (`python -m rs_demo.demo_model evaluate` measures it).

Also measured here, in-process and without vLLM (`adjudication_accuracy`): on held-out scenes, the share of questions
whose letter picks the scene graph's answer in both orders, the adjudicator's own criterion.

`margin_ceiling` asks whether any such fine-tune could pass the adjudicator's calibration: it takes the best adjudicator
the model's own answers allow (the value it finds likelier, in both orders, when its log-probabilities differ by more
than a margin; a positional letter otherwise, which never sides against a reference in both orders) and measures both
calibration checks at each margin, on held-out scenes whose truth the scene graph gives.
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rs.pipeline.sample.adjudicate import LABELS, PROMPT_TEMPLATE
from rs.pipeline.sample.calibration import wilson
from rs.pipeline.sample.judge import prompt_template
from rs.prompt import build_prompt
from rs.sources.synthetic import ATTRIBUTES, SyntheticSource
from rs.sources.synthetic.noise import wrong_reference
from rs_demo.tiny_model import IMAGE_TOKEN
from rs_demo.train_demo import (
    EVAL_SOURCE_SEED,
    TRAIN_SOURCE_SEED_BASE,
    Encoder,
    Example,
    Settings,
    _decode_png,
    _lr_at,
    _ThreadChooser,
    batch_loss,
    library_versions,
    reasoning_for,
    save_model_folder,
    target_text,
)

logger = logging.getLogger(__name__)

FIRST_SCENE = 40_000
"""The fine-tune's first training scene (seed 1000 + seed): past every scene the base training drew (0..33455)."""


class AdjudicationEncoder(Encoder):
    """The base encoder, plus the adjudicator's prompt with the image and reasoning switched off, as the engine sends it."""

    def __init__(self, processor: Any, settings: Settings):
        super().__init__(processor, settings)
        self.template = prompt_template(PROMPT_TEMPLATE)

    def adjudication_text(self, question: str, first: str, second: str) -> str:
        """The adjudicator's prompt, rendered by its own template (`Adjudicator.prompt`), about the exact prompt the
        model was asked (the question and the family's instruction)."""
        return self.template.render(question=build_prompt(question, self.instruction), first=first, second=second)

    def adjudication_ids(self, question: str, first: str, second: str) -> list[int]:
        messages = [
            {
                "role": "user",
                "content": [
                    {"type": "image"},
                    {"type": "text", "text": self.adjudication_text(question, first, second)},
                ],
            }
        ]
        text = self.processor.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
        )
        return self.tokenizer(text.replace(IMAGE_TOKEN, self.image_string), add_special_tokens=False)["input_ids"]


def dispute(answer: str, rng: random.Random) -> tuple[str, str, str] | None:
    """(first, second, the right letter) for a clean answer against a wrong value of its kind, in a random order."""
    wrong = wrong_reference(answer, rng)
    if wrong is None:
        return None
    if rng.random() < 0.5:
        return answer, wrong, LABELS[0]
    return wrong, answer, LABELS[1]


def make_mixed_batch(
    source: SyntheticSource,
    indices: Sequence[int],
    encoder: AdjudicationEncoder,
    rng: random.Random,
    thinking_share: float,
    adjudications_per_image: int,
) -> tuple[Any, list[Example]]:
    """Pixels of the images `indices`, one answering example per clean question (as the base training) and
    `adjudications_per_image` adjudication examples per image, drawn from its questions."""
    images, examples = [], []
    for index in indices:
        record, scene = source.record(index), source.scene(index)
        images.append(_decode_png(record.images[0]))
        at = len(images) - 1
        for item in record.qa:
            thinking = rng.random() < thinking_share
            reasoning = reasoning_for(scene, item.question, item.answer, item.qtype) if thinking else None
            thinking = thinking and reasoning is not None
            target = target_text(item.answer, reasoning, thinking=thinking)
            examples.append(
                Example(
                    at, encoder.prompt_ids(item.question, thinking), encoder.target_ids(target), item.qtype, thinking
                )
            )
        for item in rng.sample(record.qa, min(adjudications_per_image, len(record.qa))):
            drawn = dispute(item.answer, rng)
            if drawn is None:
                continue
            first, second, letter = drawn
            examples.append(
                Example(
                    at,
                    encoder.adjudication_ids(item.question, first, second),
                    encoder.target_ids(letter),
                    "adjudicate",
                    False,
                )
            )
    return encoder.pixels(images), examples


def split_loss(model: Any, pixels: Any, examples: Sequence[Example]) -> Any:
    """`batch_loss` over the whole batch (mean per example), computed as two passes so that the short answering
    prompts are not padded to the long adjudication ones."""
    parts = [[e for e in examples if (e.qtype == "adjudicate") == adjudicating] for adjudicating in (False, True)]
    total = 0
    for part in parts:
        if part:
            loss, _ = batch_loss(model, pixels, part)
            total = total + loss * len(part)
    return total / len(examples)


def held_out(encoder: Encoder, n_images: int, seed: int) -> Iterator[tuple[Any, Any, str | None]]:
    """Each clean question of `n_images` held-out scenes, with its image's pixels and the wrong value of its kind the
    measurements show against its answer (`noise.wrong_reference`, seeded by the question; None for no such kind)."""
    source = SyntheticSource(seed=seed, num_images=n_images, questions_per_image=4, style="mixed")
    for index in range(n_images):
        record = source.record(index)
        pixels = encoder.pixels([_decode_png(record.images[0])])
        for item in record.qa:
            yield pixels, item, wrong_reference(item.answer, random.Random(f"{seed}:{index}:{item.turn}:adjudicate"))


def adjudication_accuracy(
    model: Any, encoder: AdjudicationEncoder, n_images: int, seed: int = EVAL_SOURCE_SEED
) -> dict:
    """On `n_images` held-out scenes: per question with a wrong value of its kind, whether the letter (A against B, the
    engine's constrained choice) picks the scene graph's answer in each order and in both."""
    import torch

    a, b = (encoder.tokenizer.convert_tokens_to_ids(x) for x in LABELS)
    tally: Counter[str] = Counter()
    by_type: dict[str, Counter[str]] = {}
    model.eval()
    with torch.no_grad():
        for pixels, item, wrong in held_out(encoder, n_images, seed):
            if wrong is None:
                continue
            right = []
            for first, second, letter in ((item.answer, wrong, 0), (wrong, item.answer, 1)):
                ids = torch.tensor([encoder.adjudication_ids(item.question, first, second)])
                logits = model(input_ids=ids, pixel_values=pixels.unsqueeze(0)).logits[0, -1]
                right.append(int(logits[b] > logits[a]) == letter)
            t = by_type.setdefault(item.qtype, Counter())
            for c in (tally, t):
                c["n"] += 1
                c["reference_first"] += right[0]
                c["reference_second"] += right[1]
                c["both"] += all(right)
    out = {k: round(v / tally["n"], 4) for k, v in tally.items() if k != "n"}
    out["n"] = tally["n"]
    out["per_type_both"] = {t: round(c["both"] / c["n"], 4) for t, c in sorted(by_type.items())}
    return out


def kind_values(answer: str) -> list[str] | None:
    """Every value of a clean answer's kind that the scenes' questions can have: counts 0 to 12 (more for a larger
    answer), yes and no, an attribute's values; None for an answer of no such kind."""
    if answer.isdigit():
        return [str(n) for n in range(max(13, int(answer) + 4))]
    if answer in ("yes", "no"):
        return ["yes", "no"]
    return next((list(values) for values in ATTRIBUTES.values() if answer in values), None)


def answer_log_probs(model: Any, encoder: Encoder, pixels: Any, question: str, values: Sequence[str]) -> list[float]:
    """The model's log-probability of answering `question` with each of `values` (then the end of its turn), thinking
    off: the adjudicator's mode."""
    import torch

    prompt = encoder.prompt_ids(question, False)
    sequences = [prompt + encoder.target_ids(value) for value in values]
    width = max(map(len, sequences))
    ids = torch.zeros(len(sequences), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, sequence in enumerate(sequences):
        ids[i, : len(sequence)], mask[i, : len(sequence)] = torch.tensor(sequence), 1
    pixel_values = pixels.unsqueeze(0).expand(len(sequences), *pixels.shape)
    logits = model(input_ids=ids, attention_mask=mask, pixel_values=pixel_values).logits.log_softmax(-1)
    return [
        sum(logits[i, at - 1, sequence[at]].item() for at in range(len(prompt), len(sequence)))
        for i, sequence in enumerate(sequences)
    ]


MARGINS = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def margin_ceiling(
    model: Any,
    encoder: Encoder,
    n_images: int,
    *,
    seed: int = EVAL_SOURCE_SEED,
    samples: int = 4,
    temperature: float = 0.7,
    margins: Sequence[float] = MARGINS,
    cases: int = 50,
) -> dict[str, Any]:
    """Both calibration checks of the best adjudicator the model's own answers allow, at each margin.

    On `n_images` held-out scenes, per clean question: the model's log-probability of each value of its kind
    (`answer_log_probs`), its greedy value the likeliest. The adjudicator at margin m sides with the likelier of two
    values, in both orders, when their log-probabilities differ by more than m; else it answers by position, which is
    never against the reference in both orders.

    - wrong references (the calibration's: a question answered right, its reference replaced by
      `noise.wrong_reference`): sided against when log p(right) - log p(wrong) > m;
    - right references (a question answered wrong that a sample recovers): not sided against when
      log p(greedy) - log p(reference) <= m, each question weighted by the chance that one of `samples` answers at
      `temperature` (over the kind's values) is the reference, as the recovery pass draws them.

    Each margin's agreements, and the 95% Wilson lower bounds they would get on `cases` calibration cases (the gate's
    default count)."""
    import torch

    wrong_gaps: list[float] = []
    right_gaps: list[tuple[float, float]] = []
    questions = answered = 0
    model.eval()
    with torch.no_grad():
        for pixels, item, wrong in held_out(encoder, n_images, seed):
            values = kind_values(item.answer)
            if values is None:
                continue
            log_p = dict(zip(values, answer_log_probs(model, encoder, pixels, item.question, values)))
            greedy = max(values, key=log_p.__getitem__)
            questions += 1
            if greedy == item.answer:
                answered += 1
                if wrong is not None:
                    wrong_gaps.append(log_p[item.answer] - log_p[wrong])
                continue
            top = max(log_p.values())
            weights = {v: math.exp((lp - top) / temperature) for v, lp in log_p.items()}
            p_reference = weights[item.answer] / sum(weights.values())
            recovered = 1 - (1 - p_reference) ** samples
            right_gaps.append((log_p[greedy] - log_p[item.answer], recovered))
    recovered_total = sum(weight for _, weight in right_gaps)
    rows = []
    for margin in margins:
        wrong_rate = sum(gap > margin for gap in wrong_gaps) / max(1, len(wrong_gaps))
        right_rate = sum(w for gap, w in right_gaps if gap <= margin) / recovered_total if recovered_total else 0.0
        rows.append(
            {
                "margin": margin,
                "wrong_reference": round(wrong_rate, 4),
                "right_reference": round(right_rate, 4),
                "wrong_reference_low": round(wilson(round(wrong_rate * cases), cases).low, 4),
                "right_reference_low": round(wilson(round(right_rate * cases), cases).low, 4),
            }
        )
    return {
        "images": n_images,
        "seed": seed,
        "questions": questions,
        "greedy_accuracy": round(answered / max(1, questions), 4),
        "wrong_reference_cases": len(wrong_gaps),
        "right_reference_cases": round(recovered_total, 1),
        "recovery": {"samples": samples, "temperature": temperature},
        "cases": cases,
        "margins": rows,
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def finetune(
    init: Path,
    out: Path,
    *,
    minutes: float,
    seed: int = 0,
    lr: float = 1e-3,
    warmup_s: float = 20.0,
    adjudications_per_image: int = 2,
    scenes_per_step: int = 8,
    eval_images: int = 100,
    max_steps: int | None = None,
    log_every: int = 25,
    threads: int = 0,
) -> dict[str, Any]:
    """Fine-tune the model in `init` for `minutes` of wall-clock (or `max_steps`) on the mix, write it to `out`;
    returns the fine-tune's record (held-out adjudication accuracy before and after included)."""
    import torch
    from transformers import AutoProcessor, Idefics3ForConditionalGeneration

    started = time.time()
    chooser = _ThreadChooser(threads)
    settings = Settings(lr=lr, warmup_s=warmup_s, aux_weight=0.0, scenes_per_step=scenes_per_step, threads=threads)
    processor = AutoProcessor.from_pretrained(init)
    encoder = AdjudicationEncoder(processor, settings)
    model = Idefics3ForConditionalGeneration.from_pretrained(init).float()
    init_sha = _sha256(init / "model.safetensors")
    before = adjudication_accuracy(model, encoder, eval_images) if eval_images else None
    logger.info("before: %s", before)
    model.train()
    named = list(model.named_parameters())
    decay = [p for n, p in named if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in named if not (p.ndim >= 2 and "embed" not in n)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=settings.betas,
    )
    source_seed = TRAIN_SOURCE_SEED_BASE + seed
    source = SyntheticSource(seed=source_seed, num_images=10**9, questions_per_image=4, style="mixed", image_size=160)
    rng = random.Random(f"demo-adjudicate:{seed}")
    budget = minutes * 60.0
    t0 = time.perf_counter()
    step, scene, history, losses = 0, FIRST_SCENE, [], {"answer": [], "adjudicate": []}
    seen: Counter[str] = Counter()
    while True:
        elapsed = time.perf_counter() - t0
        if (max_steps is not None and step >= max_steps) or (max_steps is None and elapsed >= budget):
            break
        indices = list(range(scene, scene + scenes_per_step))
        scene += scenes_per_step
        pixels, examples = make_mixed_batch(
            source, indices, encoder, rng, settings.thinking_share, adjudications_per_image
        )
        rate = _lr_at(settings, elapsed, budget) if max_steps is None else lr
        for group in optimizer.param_groups:
            group["lr"] = rate
        tick = time.perf_counter()
        loss = split_loss(model, pixels, examples)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in named], settings.clip)
        optimizer.step()
        chooser.record(time.perf_counter() - tick)
        step += 1
        seen.update("adjudicate" if e.qtype == "adjudicate" else "answer" for e in examples)
        losses["answer"].append(loss.item())
        if step % log_every == 0:
            mean = sum(losses["answer"][-log_every:]) / log_every
            history.append(
                {
                    "step": step,
                    "elapsed_s": round(time.perf_counter() - t0, 1),
                    "loss": round(mean, 4),
                    "lr": round(rate, 6),
                }
            )
            logger.info("step %d  %.0f s  loss %.4f  lr %.2e", step, time.perf_counter() - t0, mean, rate)
    train_s = time.perf_counter() - t0
    model.eval()
    save_model_folder(model, processor, out)  # before the measurement: a slow one on a busy machine loses nothing
    chooser.torch.set_num_threads(threads or 1)  # two threads on a shared core measured several times slower
    after = adjudication_accuracy(model, encoder, eval_images) if eval_images else None
    logger.info("after: %s", after)
    return {
        "command": f"python -m rs_demo.demo_model adjudicate --minutes {minutes:g} --seed {seed} "
        f"--per-image {adjudications_per_image} --lr {lr:g} --threads {threads}"
        + (f" --max-steps {max_steps}" if max_steps is not None else ""),
        "init": {"model.safetensors_sha256": init_sha},
        "seed": seed,
        "data": {
            "train_source": {
                "kind": "synthetic",
                "seed": source_seed,
                "style": "mixed",
                "image_size": 160,
                "questions_per_image": 4,
                "image_indices": [FIRST_SCENE, scene - 1],
            },
            "answering": "every clean question of each scene, targets as the base training (thinking share "
            f"{settings.thinking_share})",
            "adjudication": f"{adjudications_per_image} questions per scene: the prompt rendered by "
            "rs.pipeline.sample.adjudicate's template (question = the exact prompt asked, with the family's instruction), "
            "the scene graph's answer against rs.sources.synthetic.noise.wrong_reference's value in a random order "
            "(random.Random('demo-adjudicate:<seed>')), image shown, thinking off; target: the letter of the scene "
            "graph's answer, then <|im_end|>",
            "examples": dict(sorted(seen.items())),
        },
        "settings": {
            "lr": lr,
            "min_lr_ratio": settings.min_lr_ratio,
            "warmup_s": warmup_s,
            "scenes_per_step": scenes_per_step,
            "weight_decay": settings.weight_decay,
            "betas": list(settings.betas),
            "clip": settings.clip,
            "perception_loss": None,
            "schedule": "AdamW from the base weights, linear warm-up then cosine decay scheduled on wall-clock time",
        },
        "training": {
            "steps": step,
            "train_wall_clock_s": round(train_s, 1),
            "total_wall_clock_s": round(time.time() - started, 1),
            "history": history,
            "threads": chooser.summary(),
        },
        "held_out_adjudication": {
            "images": eval_images,
            "seed": EVAL_SOURCE_SEED,
            "criterion": "the letter (A against B logits) picks the scene graph's answer; wrong value from "
            "random.Random('999:<index>:<turn>:adjudicate')",
            "before": before,
            "after": after,
        },
        "libraries": library_versions(),
    }


__all__ = [
    "AdjudicationEncoder",
    "adjudication_accuracy",
    "answer_log_probs",
    "dispute",
    "finetune",
    "kind_values",
    "make_mixed_batch",
    "margin_ceiling",
]
