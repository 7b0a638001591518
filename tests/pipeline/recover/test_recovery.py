"""The recovery pass (`recovery:`) with the demo model through the real vLLM engine: samples, pass rates, pairs.

TinyCLEVR ships with `recovery: {samples: 4, temperature: 0.7, pairs: true}`; these tests build the first
images of it (`--limit`) and check what the stores, the splits, the cards and the cache say.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rs.audit import Replay, audit

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("vllm")

import datasets  # noqa: E402
from checkout import ROOT  # noqa: E402
from faults import cache_rows  # noqa: E402

from rs.context import BuildContext
from rs.engines.factory import engines_for
from rs.engines.generation_cache import GenerationCache  # noqa: E402
from rs.engines.vllm import VLLMStream  # noqa: E402
from rs.families import get_family, load_families  # noqa: E402
from rs.pipeline.clean.stage import CleanStage
from rs.pipeline.recover import RecoverStage
from rs.pipeline.route import decide  # noqa: E402
from rs.pipeline.sample.stage import SampleStage
from rs.pipeline.stage import ensure
from rs.store import read_records  # noqa: E402

LIMIT = 8


@pytest.fixture(scope="module")
def demo_engine():
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    sampler, _ = engines_for(get_family("TinyCLEVR"))
    yield sampler
    sampler.close()


def tiny_clevr(tmp_path: Path, recovery: str | None = None) -> Path:
    """The shipped families.yaml, with TinyCLEVR's recovery block replaced by `recovery` (None: as shipped)."""
    text = (ROOT / "families.yaml").read_text()
    shipped = "    recovery: {samples: 4, temperature: 0.7, pairs: true}\n"
    assert shipped in text
    path = tmp_path / "families.yaml"
    path.write_text(
        text if recovery is None else text.replace(shipped, f"    recovery: {recovery}\n" if recovery else "")
    )
    return path


def context(families: Path, root: Path, engine, *, cache: str = "cache.sqlite") -> BuildContext:
    family = load_families(families)["TinyCLEVR"]
    return BuildContext(
        family, root / "build", root / cache, limit=LIMIT, progress=False, engine_factory=lambda f: (engine, engine)
    )


def recording(monkeypatch) -> list[tuple[int, int, float]]:
    """What the vLLM streams are asked: (first sample, samples, temperature) per request."""
    asked: list[tuple[int, int, float]] = []
    submit = VLLMStream.submit

    def logged(stream, tag, request):
        asked.append((request.sample, request.samples, stream.settings.temperature))
        submit(stream, tag, request)

    monkeypatch.setattr(VLLMStream, "submit", logged)
    return asked


@pytest.fixture(scope="module")
def built(tinyclevr_built):
    """The first LIMIT images of TinyCLEVR as shipped, built once a session (tests/shared_builds.py)."""
    assert tinyclevr_built.ctx.limit == LIMIT
    return tinyclevr_built


def copied(built, tmp_path: Path) -> Path:
    """The shared build and its cache copied into `tmp_path`, with its families file: a publish from them only publishes."""
    built.copy(tmp_path)
    return tiny_clevr(tmp_path)


def test_recovery_samples_the_rejections_and_publishes_what_it_recovered(built) -> None:
    ctx, report, asked = built.ctx, built.report, built.asked
    items = list(read_records(ctx.paths.items, "items"))
    draws = list(read_records(ctx.paths.recovery, "recovery"))
    promotes = ensure(SampleStage(), ctx).promotes

    # every rejection with a final answer was sampled 4 times, and nothing else
    retried = [
        i
        for i in items
        if not decide(i, promotes).accepted
        and i["final"] is not None
        and i["error"] is None
        and i["ending"] != "repetition"
    ]
    assert [(d["row"], d["key"]) for d in draws] == [(i["row"], i["key"]) for i in retried]
    assert all(
        d["k"] == 4
        and [s["sample"] for s in d["samples"]] == [0, 1, 2, 3]
        and [s["seed"] for s in d["samples"]] == [0, 1, 2, 3]
        for d in draws
    )
    # one request per item with n = 4 at temperature 0.7 (the prompt and image processed once)
    recovery_requests = [a for a in asked if a[2] == 0.7]
    assert recovery_requests == [(0, 4, 0.7)] * len(draws)
    # samples are read, verified and judged as greedy answers are: only the undecided go to the judge
    samples = [s for d in draws for s in d["samples"]]
    assert all(s["judge"] is None for s in samples if s["verified"] or s["contradicts"] or s["final"] is None)
    assert any(s["judge"] is not None for s in samples if not s["verified"] and not s["contradicts"] and s["final"])

    # the accepted splits carry the recovered samples with their provenance; the rejected split the rest
    recovered = {d["key"]: d for d in draws if any(decide(s, promotes).accepted for s in d["samples"])}
    assert recovered, "the demo model recovered none of its rejections at temperature 0.7"
    think = datasets.load_dataset("parquet", data_files=str(ctx.paths.split("think") / "*.parquet"), split="train")
    nothink = datasets.load_dataset("parquet", data_files=str(ctx.paths.split("nothink") / "*.parquet"), split="train")
    rejected = datasets.load_dataset(
        "parquet", data_files=str(ctx.paths.split("rejected") / "*.parquet"), split="train"
    )
    by_prompt = {i["prompt"]: i for i in items}
    key_of = {i["prompt"]: i["key"] for i in items}
    via_recovery = [qa for row in nothink for qa in row["qa"] if qa["accepted_by"] == "recovery"]
    assert sorted(key_of[qa["question"]] for qa in via_recovery) == sorted(recovered)
    for qa in via_recovery:
        d = recovered[key_of[qa["question"]]]
        chosen = d["samples"][qa["sample"]]
        assert decide(chosen, promotes).accepted and qa["answer"] == chosen["final"] and qa["seed"] == chosen["seed"]
        assert qa["temperature"] == 0.7 and qa["greedy_answer"] == by_prompt[qa["question"]]["final"]
        assert qa["k"] == 4 and qa["pass_rate"] == sum(decide(s, promotes).accepted for s in d["samples"]) / 4
    greedy = [qa for row in think for qa in row["qa"] if qa["accepted_by"] != "recovery"]
    assert greedy and all(
        qa["sample"] is None and qa["temperature"] == 0.0 and qa["pass_rate"] is None for qa in greedy
    )
    still = [qa for row in rejected for qa in row["qa"]]
    assert all(
        qa["pass_rate"] == 0.0 and qa["k"] == 4
        for qa in still
        if qa["reason"] not in ("no_final_answer", "engine_error", "degenerate_repetition")
    )

    # the report and the cards: greedy and recovered accept rates apart, the histogram of what was sampled
    r = report.recovery
    answered = report.totals.accepted + report.totals.rejected
    assert r.recovered == len(recovered) == report.totals.accepted_by["recovery"]
    assert r.greedy_accepted == report.totals.accepted - r.recovered
    assert r.greedy_accept_rate == r.greedy_accepted / answered and r.accept_rate == report.totals.accepted / answered
    assert sum(map(sum, r.pass_rates.values())) == len(draws) and r.pass_rates["rejected"][0] == r.still_rejected
    assert r.samples == 4 * len(draws)
    stats = json.loads(ctx.paths.stats.read_text())
    assert stats["recovery"]["pass_rates"] == r.pass_rates


def test_pairs_repo_loads_and_its_card_is_measured_from_its_files(
    tmp_path: Path, built, demo_engine, monkeypatch
) -> None:
    from rs.pipeline.publish.stage import publish

    families = copied(built, tmp_path)  # the session's build: this publish writes the repos and cards only
    family = load_families(families)["TinyCLEVR"]
    out = tmp_path / "out"
    outcome = publish(
        family,
        build_root=tmp_path / "build",
        cache_path=tmp_path / "cache.sqlite",
        limit=LIMIT,
        progress=False,
        out=out,
        engine_factory=lambda f: (demo_engine, demo_engine),
    )
    repos = {split: Path(where) for split, where in outcome.where.items()}
    assert set(repos) == {"think", "nothink", "rejected", "pairs"}
    pairs = datasets.load_dataset(str(repos["pairs"]), split="train")
    assert pairs.num_rows > 0
    assert set(pairs.column_names) >= {"images", "prompt", "chosen", "rejected"}

    # the card's numbers, recomputed from the repo's own files
    card = (repos["pairs"] / "README.md").read_text()
    images = len(set(pairs["image_sha256"]))
    assert f"| rows | {pairs.num_rows:,} |" in card
    assert (
        f"{pairs.num_rows} pair{'s' if pairs.num_rows != 1 else ''} over {images} image{'s' if images != 1 else ''}"
        in card
    )
    chosen, wrong, reason = (
        Counter(pairs["chosen_from"]),
        Counter(pairs["rejected_from"]),
        Counter(pairs["rejected_reason"]),
    )
    assert (
        f"the chosen response is the greedy answer in {chosen['greedy']} and a recovery sample in {chosen['sample']}; "
        f"the rejected one is the greedy answer in {wrong['greedy']} and a sample in {wrong['sample']}, known wrong by the "
        f"verifier in {reason['certain']} and by the calibrated judge in {reason['judge']}"
    ) in card
    for row in pairs:
        assert row["prompt"] == [{"role": "user", "content": row["question"]}]
        assert row["chosen"][0]["content"].endswith(f"</think>\n\n{row['chosen_answer']}")
        assert row["rejected"][0]["content"].endswith(f"</think>\n\n{row['rejected_answer']}")
        assert row["chosen_answer"] != row["rejected_answer"] and len(row["images"]) == 1

    # the other cards state the greedy and the recovered accept rates apart
    stats = json.loads((repos["think"] / "rs" / "stats.json").read_text())
    think_card = (repos["think"] / "README.md").read_text()
    rec = stats["recovery"]
    assert f"| accept rate, greedy pass (temperature 0) | {100 * rec['greedy_accept_rate']:.1f}% |" in think_card
    assert f"| accept rate after recovery | **{100 * rec['accept_rate']:.1f}%** |" in think_card
    table = re.search(
        r"\| pass rate \| accepted by the greedy pass \| recovered \| still rejected \|\n\|---.*\n((?:\|.*\n)+)",
        think_card,
    )
    assert table, think_card
    rows = [
        [int(c.strip().replace(",", "")) for c in line.split("|")[2:5]] for line in table.group(1).strip().splitlines()
    ]
    assert [r[1] for r in rows] == rec["pass_rates"]["recovered"] and [r[2] for r in rows] == rec["pass_rates"][
        "rejected"
    ]

    # and `rs audit` finds every card true, against the files and the build's stores (a real engine's verdicts)
    for repo in repos.values():
        result = audit(repo, build=tmp_path / "build")
        assert result.ok, result.render()
    # 12 questions re-derived from the cache, byte for byte, then asked again of the engine; the agreement is measured and
    # printed, not pinned: whether a batch of another shape decodes the same tokens is the CPU's kernels' affair
    with GenerationCache(tmp_path / "cache.sqlite") as cache:
        held = len(cache)
    asked = recording(monkeypatch)
    replayed = audit(
        repos["think"],
        build=tmp_path / "build",
        replay=Replay(
            12,
            config=families,
            cache=tmp_path / "cache.sqlite",
            engine=True,
            engine_factory=lambda f: (demo_engine, demo_engine),
        ),
    )
    assert replayed.ok, replayed.render()
    # sent to the engine (the 12 greedy answers, the judge's requests, the recovery samples n = 4 at once), nothing cached
    assert len([a for a in asked if a == (0, 1, 0.0)]) >= 12 and (0, 4, 0.7) in asked, asked
    with GenerationCache(tmp_path / "cache.sqlite") as cache:
        assert len(cache) == held
    notes = "\n".join(replayed.notes)
    assert "12 of 12 published byte for byte as their cached answers make them" in notes, notes
    assert re.search(
        r"all  12: final answers \d+/12 identical, texts \d+/12 byte-identical, routing \d+/12 identical", notes
    ), notes
    assert (
        "recovered" in notes.split("the generation cache")[0] and "rejected" in notes.split("the generation cache")[0]
    ), notes

    # a preference-tuning library takes the rows as they are: TRL's vision preference collator
    trl = pytest.importorskip("trl")
    from transformers import AutoProcessor
    from trl.trainer.dpo_trainer import DataCollatorForVisionPreference

    from rs_demo.demo_model import demo_model_path

    processor = AutoProcessor.from_pretrained(demo_model_path())
    batch = DataCollatorForVisionPreference(processor)([dict(pairs[i]) for i in range(min(2, pairs.num_rows))])
    assert trl.__version__ and batch["input_ids"].shape[0] == 2 * min(2, pairs.num_rows)
    assert "pixel_values" in batch and batch["completion_mask"].sum() > 0


def test_raising_k_sends_exactly_the_missing_samples(tmp_path: Path, demo_engine, monkeypatch) -> None:
    first = context(tiny_clevr(tmp_path, "{samples: 2, temperature: 0.7}"), tmp_path, demo_engine)
    sampled = ensure(SampleStage(), first)
    two = ensure(RecoverStage(sampled), first)
    items = sum(two.items.values())
    assert items and two.sampling_engine_calls == 2 * items
    before = {d["key"]: d["samples"] for d in read_records(first.paths.recovery, "recovery")}

    asked = recording(monkeypatch)
    (tmp_path / "more").mkdir()
    raised = context(tiny_clevr(tmp_path / "more", "{samples: 5, temperature: 0.7}"), tmp_path, demo_engine)
    five = ensure(RecoverStage(ensure(SampleStage(), raised)), raised)
    assert sum(five.items.values()) == items
    assert (
        five.sampling_engine_calls == 3 * items and five.sampling_requests == 5 * items
    )  # samples 2, 3, 4 of each item
    assert [a for a in asked if a[2] == 0.7] == [
        (2, 3, 0.7)
    ] * items  # one request each, n = 3 from sample 2's seed on
    draws = list(read_records(raised.paths.recovery, "recovery"))
    assert all(
        [s["sample"] for s in d["samples"]] == list(range(5)) and d["samples"][:2] == before[d["key"]] for d in draws
    )

    # and the same samples again: a re-run sends nothing
    raised.paths.recovery_report.unlink()
    again = ensure(RecoverStage(ensure(SampleStage(), raised)), raised)
    assert again.sampling_engine_calls == 0 and list(read_records(raised.paths.recovery, "recovery")) == draws


def test_the_requests_a_stage_declares_are_the_ones_its_run_asks(tmp_path: Path, demo_engine) -> None:
    """`Stage.requests`, what the Ray driver sends: the sample and recover stages' runs fill a fresh cache with exactly
    those keys (answers, verdicts, calibration cases, samples, their verdicts); the judge's are known once the answers are."""
    ctx = context(tiny_clevr(tmp_path, "{samples: 2, temperature: 0.7}"), tmp_path, demo_engine)
    clean = ensure(CleanStage(), ctx)
    assert list(CleanStage().requests(ctx)) == []
    asked = list(SampleStage().requests(ctx))
    questions = [(key, r) for key, r in asked if r.image_sha256]
    assert len(questions) == clean.kept_items and all(r.samples == 1 for _, r in questions)
    # TinyCLEVR's no-image pass (`blind:`): every question asked again, no image, under keys of their own
    blind = [(key, r) for key, r in asked if not r.image_sha256]
    assert blind and all(r.image is None for _, r in blind) and not {k for k, _ in blind} & {k for k, _ in questions}
    assert {r.item_key for _, r in blind} == {r.item_key for _, r in questions}

    sampled = ensure(SampleStage(), ctx)
    ensure(RecoverStage(sampled), ctx)
    declared = list(SampleStage().requests(ctx)) + list(RecoverStage(sampled).requests(ctx))
    with GenerationCache(ctx.cache_path) as cache:
        cached = cache.present(key for key, _ in declared)
    keys = {key for key, _ in declared}
    assert keys == cached and len(keys) == cache_rows(ctx.cache_path) > len(questions) + sampled.judged
    assert {key for key, _ in questions} < keys


def recovery_files(build: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((build / "recovery").glob("*.parquet"))}


def test_sigkill_mid_recovery_then_rerun_is_byte_identical(tmp_path: Path, built) -> None:
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}
    families = tiny_clevr(tmp_path)

    def command(build: str, cache: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "rs.sample",
            "TinyCLEVR",
            "--config",
            str(families),
            "--limit",
            str(LIMIT),
            "--build-dir",
            str(tmp_path / build),
            "--cache",
            str(tmp_path / cache),
        ]

    # an uninterrupted run (the session's build of the same images, on a fresh cache) says how many answers the greedy pass
    # commits before the recovery starts
    greedy = json.loads(built.ctx.paths.sample_report.read_text())
    greedy_rows = greedy["sampling_engine_calls"] + greedy["judge_engine_calls"]
    greedy_rows += greedy["blind"]["engine_calls"] if greedy.get("blind") else 0  # the no-image pass, before recovery

    victim = subprocess.Popen(
        command("build", "cache.sqlite"),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    while (
        cache_rows(tmp_path / "cache.sqlite") < greedy_rows + 8
        and victim.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert victim.poll() is None, (
        "the recovery finished before it could be killed: " + victim.stdout.read().decode()[-2000:]
    )
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    build, ref = tmp_path / "build" / "TinyCLEVR" / f"limit-{LIMIT}", built.ctx.paths.root
    assert (build / "sample.json").exists() and not (build / "recovery.json").exists()  # killed mid-recovery
    killed_at = cache_rows(tmp_path / "cache.sqlite")

    rerun = subprocess.run(
        command("build", "cache.sqlite"), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    resumed = json.loads(rerun.stdout.strip().splitlines()[-1])["recovery"]

    assert recovery_files(build) == recovery_files(ref) and recovery_files(build)  # the same bytes
    assert list(read_records(build / "recovery", "recovery")) == list(read_records(ref / "recovery", "recovery"))
    # the re-run sent exactly what the killed run had not committed: every request is answered once over both runs
    total = cache_rows(built.ctx.cache_path)
    assert cache_rows(tmp_path / "cache.sqlite") == total
    sent = resumed["sampling_engine_calls"] + resumed["judge_engine_calls"] + resumed["adjudication"]["engine_calls"]
    assert sent == total - killed_at  # the samples, their verdicts, the adjudications (`recovery.suspects`)


def test_demo_samples_variant_publishes_every_answer_and_an_rl_repo_trl_reads(tmp_path: Path, demo_engine) -> None:
    """`make demo-samples` (scripts/demo_samples.py) on the first images: the samples repo and the RL repo load with
    `datasets`, every question has a pass rate, the RL rows go through what TRL's GRPO trainer does to a vision row,
    and the cards' numbers are those of the repos' files."""
    import importlib.util

    from rs.pipeline.publish.stage import publish
    from rs.pipeline.write.samples import rl_numbers, samples_numbers

    spec = importlib.util.spec_from_file_location("demo_samples", ROOT / "scripts" / "demo_samples.py")
    demo_samples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo_samples)
    families = tmp_path / "families.yaml"
    families.write_text(demo_samples.variant((ROOT / "families.yaml").read_text()))
    family = load_families(families)["TinyCLEVR"]
    outcome = publish(
        family,
        build_root=tmp_path / "build",
        cache_path=tmp_path / "cache.sqlite",
        limit=LIMIT,
        progress=False,
        out=tmp_path / "out",
        engine_factory=lambda f: (demo_engine, demo_engine),
    )
    repos = {split: Path(where) for split, where in outcome.where.items()}
    assert set(repos) == {"think", "nothink", "rejected", "pairs", "samples", "rl"}
    report = outcome.report

    fresh = str(
        tmp_path / "hf-datasets"
    )  # not ~/.cache: `datasets` may find an earlier run's table there under the same hash
    samples = datasets.load_dataset(str(repos["samples"]), split="train", cache_dir=fresh)
    assert samples.num_rows == report.totals.accepted + report.totals.rejected  # one row per question answered
    answered = [row for row in samples if row["generations"][0]["final"] is not None]
    assert answered and all(row["k"] == 4 and len(row["generations"]) == 5 for row in answered)  # greedy + 4 samples
    assert all(row["pass_rate_low"] <= row["pass_rate"] <= row["pass_rate_high"] for row in answered)
    assert json.loads((repos["samples"] / "rs" / "numbers.json").read_text()) == samples_numbers(
        repos["samples"] / "data"
    )
    assert (
        f"{samples.num_rows} questions over {len(set(samples['image_sha256']))} images"
        in (repos["samples"] / "README.md").read_text()
    )

    rl = datasets.load_dataset(str(repos["rl"]), split="train", cache_dir=fresh)
    sometimes = [row for row in samples if row["pass_rate"] is not None and 0 < row["pass_rate"] < 1]
    assert rl.num_rows == len(sometimes) == report.splits["rl"].qa
    assert json.loads((repos["rl"] / "rs" / "numbers.json").read_text()) == rl_numbers(repos["rl"] / "data")
    # typed accept rates on the cards (the synthetic scenes' own types)
    types = report.question_types["types"]
    assert sum(t["answered"] for t in types.values()) == samples.num_rows
    assert "## By question type" in (repos["think"] / "README.md").read_text()
    if not rl.num_rows:
        pytest.skip("the demo model answered no question of these images right only sometimes")
    # what GRPOTrainer does with a vision row: the conversational prompt, the image put before the text, the processor
    from transformers import AutoProcessor
    from trl.data_utils import is_conversational, prepare_multimodal_messages

    from rs_demo.demo_model import demo_model_path

    processor = AutoProcessor.from_pretrained(demo_model_path())
    rows = [rl[i] for i in range(min(2, rl.num_rows))]
    assert all(is_conversational(row) for row in rows)
    prompts = [prepare_multimodal_messages(row["prompt"], images=row["images"]) for row in rows]
    texts = [processor.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    batch = processor(images=[row["images"] for row in rows], text=texts, padding=True, return_tensors="pt")
    assert batch["input_ids"].shape[0] == len(rows) and "pixel_values" in batch
