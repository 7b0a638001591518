"""The demo model's adjudication training (`rs_demo.adjudication_training`): its examples are the adjudicator's own
prompt about the exact prompt the model was asked, with the scene graph's answer's letter as the target."""

from __future__ import annotations

import hashlib
import random

from rs.families import get_family
from rs.pipeline.sample.adjudicate import LABELS, Adjudicator, Dispute
from rs.pipeline.sample.requests import sampling_request
from rs.prompt import Instructions
from rs.sources.synthetic import SyntheticSource
from rs_demo.adjudication_training import AdjudicationEncoder, dispute, make_mixed_batch
from rs_demo.demo_model import WEIGHTS_DIR
from rs_demo.train_demo import Settings


def _encoder() -> AdjudicationEncoder:
    from transformers import AutoProcessor

    return AdjudicationEncoder(AutoProcessor.from_pretrained(WEIGHTS_DIR), Settings())


def test_examples_are_the_adjudicators_prompt_in_both_orders() -> None:
    encoder = _encoder()
    family = get_family("TinyCLEVR")
    source = SyntheticSource(seed=5, num_images=2, questions_per_image=4, style="mixed")
    record = source.record(0)
    item = record.qa[0]
    sha = hashlib.sha256(record.images[0]).hexdigest()
    asked = sampling_request(item, Instructions.of(family.config), sha, record.images[0]).prompt
    sent = Adjudicator(None).requests(Dispute(0, 0, item.key, asked, item.answer, "7", sha))  # type: ignore[arg-type]
    assert [r.prompt for r in sent] == [
        encoder.adjudication_text(item.question, item.answer, "7"),
        encoder.adjudication_text(item.question, "7", item.answer),
    ]


def test_the_target_is_the_letter_of_the_scene_graphs_answer() -> None:
    rng = random.Random(0)
    letters = set()
    for answer in ("3", "yes", "no", "metal", "cube", "0"):
        for _ in range(20):
            first, second, letter = dispute(answer, rng)
            assert (first, second)[LABELS.index(letter)] == answer and first != second
            letters.add(letter)
    assert letters == set(LABELS)
    assert dispute("a sentence", rng) is None


def test_a_mixed_batch_holds_answering_and_adjudication_examples() -> None:
    encoder = _encoder()
    source = SyntheticSource(seed=1000, num_images=10, questions_per_image=4, style="mixed")
    _, examples = make_mixed_batch(source, [0, 1], encoder, random.Random(0), 0.5, 2)
    adjudicating = [e for e in examples if e.qtype == "adjudicate"]
    assert len(examples) - len(adjudicating) == 8 and len(adjudicating) == 4
    for e in adjudicating:
        assert encoder.tokenizer.decode(e.target) in {f"{x}<|im_end|>" for x in LABELS}
        assert "Reply with exactly one letter" in encoder.tokenizer.decode(e.prompt)


def test_the_ceiling_reads_the_models_own_answers() -> None:
    """`answer_log_probs` ranks first the value the model writes greedily; the ceiling's checks move as a margin must:
    at 0 every question answered right is sided for and every recovered one against its reference."""
    import torch
    from transformers import Idefics3ForConditionalGeneration

    from rs_demo.adjudication_training import answer_log_probs, kind_values, margin_ceiling
    from rs_demo.train_demo import _decode_png

    encoder = _encoder()
    model = Idefics3ForConditionalGeneration.from_pretrained(WEIGHTS_DIR).float().eval()
    record = SyntheticSource(seed=999, num_images=1, questions_per_image=4, style="mixed").record(0)
    pixels = encoder.pixels([_decode_png(record.images[0])])
    read = 0
    for item in record.qa:
        values = kind_values(item.answer)
        log_p = answer_log_probs(model, encoder, pixels, item.question, values)
        prompt = torch.tensor([encoder.prompt_ids(item.question, False)])
        with torch.no_grad():
            out = model.generate(input_ids=prompt, pixel_values=pixels.unsqueeze(0), max_new_tokens=8, do_sample=False)
        written = encoder.tokenizer.decode(out[0, prompt.shape[1] :], skip_special_tokens=True).strip()
        if written in values:
            read += 1
            assert max(log_p) - log_p[values.index(written)] < 1e-3  # the greedy value, or one tied with it
    assert read >= 2

    result = margin_ceiling(model, encoder, 3, margins=(0.0, 1.0, 100.0))
    first, _, last = result["margins"]
    assert result["questions"] == 12 and 0 <= result["greedy_accuracy"] <= 1
    assert first["wrong_reference"] == 1.0 and first["right_reference"] == 0.0
    assert last["wrong_reference"] == 0.0 and (last["right_reference"] == 1.0 or not result["right_reference_cases"])
    rates = [row["wrong_reference"] for row in result["margins"]]
    assert rates == sorted(rates, reverse=True)
