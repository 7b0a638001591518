"""A TinyCLEVR build end to end with the tiny model on the real engine: splits, schemas, hashes, accounting, warm cache."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
pytest.importorskip("vllm")

import datasets  # noqa: E402

from rs.context import BuildContext
from rs.engines.factory import engines_for
from rs.families import get_family  # noqa: E402
from rs.families.schema import MULTIPLE_CHOICE_INSTRUCTION  # noqa: E402
from rs.pipeline.build import build_family  # noqa: E402
from rs.pipeline.clean import CleaningReport  # noqa: E402
from rs.pipeline.clean.stage import CleanStage
from rs.pipeline.sample import SampleReport  # noqa: E402
from rs.pipeline.sample.stage import SampleStage
from rs.pipeline.stage import ensure, read_report
from rs.pipeline.write.report import FamilyReport, ReportError  # noqa: E402
from rs.splits import SPLITS  # noqa: E402
from rs.splits_schema import features  # noqa: E402


@pytest.fixture(scope="module")
def family_and_engines():
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    family = get_family("TinyCLEVR")
    sampler, judge = engines_for(family)
    yield family, (sampler, judge)
    sampler.close()


def test_tinyclevr_builds_three_loadable_splits_and_rebuilds_from_cache(
    tmp_path: Path, family_and_engines, tinyclevr_built
) -> None:
    family, engines = family_and_engines
    assert tinyclevr_built.ctx.limit == 8 and tinyclevr_built.ctx.family.config == family.config
    report = (
        tinyclevr_built.report
    )  # the first 8 images built once a session, fresh cache; copied here, as this test tears a report
    ctx = tinyclevr_built.copy(tmp_path)
    stats = report.to_dict()
    assert json.loads(ctx.paths.stats.read_text()) == stats and FamilyReport.from_dict(stats) == report
    older = {k: v for k, v in stats.items() if k != "totals"}  # a stats.json of another shape
    with pytest.raises(ReportError, match=r"stats\.json was not written by this version of rs .*rebuild TinyCLEVR"):
        FamilyReport.from_dict(older)

    t = stats["totals"]
    assert t["source_qa"] == t["dropped_by_cleaning"] + t["accepted"] + t["rejected"]
    assert t["accepted"] == sum(t["accepted_by"].values()) and t["rejected"] == sum(t["rejected_by_reason"].values())
    assert stats["cleaning"]["rows"] <= 8 and stats["run"]["sampling_engine_calls"] == t["answered"]
    # the answers' lengths, for the card's figure: every answered item, on its side of the routing
    lengths = stats["lengths"]
    recovered = t["accepted_by"].get("recovery", 0)  # their greedy answers were rejected: they count on that side
    assert lengths["accepted"]["total"] == t["accepted"] - recovered
    assert lengths["rejected"]["total"] == t["rejected"] + recovered - t["rejected_by_reason"].get("engine_error", 0)
    for side in lengths.values():
        assert (
            sum(side["counts"]) == side["total"]
            and side["edges"][-1] == side["max_tokens"] == stats["sampling"]["max_tokens"]
        )
        assert side["truncated"] <= side["total"] and (side["median"] is None) == (side["total"] == 0)
    for split in SPLITS:
        s = stats["splits"][split]
        if s["rows"] == 0:  # `datasets` refuses to load a split with no rows: check the declared schema instead
            import pyarrow.parquet as pq

            schema = pq.read_schema(next(ctx.paths.split(split).glob("*.parquet")))
            declared = features(split, recovery=True, blind=True)
            assert datasets.Features.from_arrow_schema(schema) == declared and s["qa"] == 0
            continue
        ds = datasets.load_dataset("parquet", data_files=str(ctx.paths.split(split) / "*.parquet"), split="train")
        assert (
            ds.features == features(split, recovery=True, blind=True) and ds.num_rows == s["rows"]
        )  # TinyCLEVR has a recovery pass and a no-image pass
        assert all(qa["blind"]["k"] >= 1 for qa_list in ds["qa"] for qa in qa_list)  # every question's no-image answer
        assert sum(len(qa) for qa in ds["qa"]) == s["qa"] == (t["rejected"] if split == "rejected" else t["accepted"])
        raw = ds.cast_column("image", datasets.Image(decode=False))
        for row in raw:
            assert hashlib.sha256(row["image"]["bytes"]).hexdigest() == row["image_sha256"]
        for row in raw:
            for qa in row["qa"]:  # a question with lettered options is asked for a letter, every other one for a word
                lettered = "\nA. " in qa["question"]
                assert qa["question"].endswith(MULTIPLE_CHOICE_INSTRUCTION if lettered else family.config.instruction)

    # the stages' reports read back typed, equal to what the build used; another shape means "run the stage again"
    clean, sampled = ensure(CleanStage(), ctx), ensure(SampleStage(), ctx)
    assert isinstance(clean, CleaningReport) and clean.to_dict() == json.loads(ctx.paths.clean_report.read_text())
    assert isinstance(sampled, SampleReport) and sampled.to_dict() == json.loads(ctx.paths.sample_report.read_text())
    assert (
        clean.kept_items == t["answered"] == sampled.items
        and sampled.promotes == stats["judge"]["calibration"]["promotes"]
    )
    assert read_report(ctx.paths.sample_report, "another configuration", SampleReport.from_dict) is None
    torn = {k: v for k, v in sampled.to_dict().items() if k != "verdicts"}
    ctx.paths.sample_report.write_text(json.dumps(torn))
    assert read_report(ctx.paths.sample_report, sampled.fingerprint, SampleReport.from_dict) is None

    fresh = BuildContext(
        family,
        tmp_path / "again",
        tmp_path / "cache.sqlite",
        limit=8,
        progress=False,
        engine_factory=lambda f: engines,
    )
    again = build_family(fresh).to_dict()
    assert again["run"]["sampling_engine_calls"] == 0 and again["run"]["judge_engine_calls"] == 0
    assert {k: v for k, v in again.items() if k != "run"} == {k: v for k, v in stats.items() if k != "run"}


def test_a_rebuild_keeps_the_splits_it_would_write_again_and_rewrites_missing_ones(
    tmp_path: Path, family_and_engines
) -> None:
    family, engines = family_and_engines
    ctx = BuildContext(
        family,
        tmp_path / "build",
        tmp_path / "cache.sqlite",
        limit=4,
        progress=False,
        engine_factory=lambda f: engines,
    )

    def written() -> dict[str, int]:
        return {
            str(p.relative_to(ctx.paths.root)): p.stat().st_mtime_ns
            for s in SPLITS
            for p in ctx.paths.split(s).iterdir()
        }

    first = build_family(ctx)
    files = written()
    assert files and not list((ctx.paths.root / "splits").glob("*.lock"))  # the datasets builder's locks are gone
    again = build_family(ctx)
    assert written() == files and again.to_dict()["splits"] == first.to_dict()["splits"]
    gone = next(f for f in files if f.endswith(".parquet"))
    (ctx.paths.root / gone).unlink()  # a split no longer as it was written: all three are written again
    third = build_family(ctx)
    assert (ctx.paths.root / gone).exists() and all(written()[f] > files[f] for f in files)
    assert third.to_dict()["splits"] == first.to_dict()["splits"]
