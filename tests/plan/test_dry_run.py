"""`--dry-run` spends nothing: on a family not built yet no engine is created, nothing is sampled or judged."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import ROOT
from family_yaml import DEMO, DROP, family_yaml

from rs.families import load_families
from rs.pipeline.publish.stage import publish

pytestmark = pytest.mark.slow

FAMILY = family_yaml(
    "Dry",
    DEMO,
    source={"seed": 5, "num_images": 3, "questions_per_image": 2, "style": DROP},
    engine={"batch_size": 8, "args": {"max_num_seqs": 8, "kv_cache_memory_bytes": 134217728}},
    sampling={"max_tokens": 48},
    card={"pretty_name": "Dry"},
)


@pytest.mark.vllm
def test_a_dry_run_of_a_family_not_built_creates_no_engine_and_says_what_a_run_would_do(
    tmp_path: Path, capsys
) -> None:
    pytest.importorskip("vllm")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from rs.cli.publish import dry_run_text
    from rs.engines.factory import engines_for

    (tmp_path / "families.yaml").write_text(FAMILY)
    family = load_families(tmp_path / "families.yaml")["Dry"]
    created = []

    def counted(f):  # the real engines, counted: a dry run must not ask for any
        created.append(engines_for(f))
        return created[-1]

    paths = {"out": tmp_path / "out", "build_root": tmp_path / "build", "cache_path": tmp_path / "cache.sqlite"}
    dry = publish(family, dry_run=True, progress=False, engine_factory=counted, **paths)
    assert created == [] and dry.report is None and dry.results == {}
    assert not paths["cache_path"].exists() and not paths["out"].exists()
    assert not list(paths["build_root"].rglob("*.parquet"))  # nothing cleaned into a store, nothing sampled
    text = dry_run_text(family, dry)
    assert text.startswith(
        "Dry: not built here with these settings, so this dry run built nothing: no model was loaded"
    )
    assert "read 3 source records and clean them: about 6 questions to answer" in text
    assert "send about 6 sampling requests to rs:demo-vlm" in text
    assert "write Dry_RS_think: one row per image" in text and "cannot know before sampling: the accept rate" in text
    assert "fewer than judge.min_calibration_cases (50)" in text  # 6 questions can never calibrate the judge

    try:  # the same publish for real does create the engine and send requests: the count above could have failed
        built = publish(family, progress=False, engine_factory=counted, **paths)
    finally:
        for sampler, judge in created:
            sampler.close()
    assert len(created) == 1 and built.report.run.sampling_engine_calls > 0

    again = publish(
        family, dry_run=True, progress=False, engine_factory=counted, **paths
    )  # built: the usual file-by-file changes
    assert len(created) == 1 and again.report is not None
    assert all(c.action == "unchanged" for r in again.results.values() for c in r.changes)


def test_a_dry_run_of_a_family_not_built_imports_neither_transformers_nor_vllm(tmp_path: Path) -> None:
    """The dry run asks `rs.plan` what a run would do without the model's processor: no `transformers`, no vLLM imported.
    `rs plan` of the same family, which counts the prompts' tokens, does import `transformers`: the check can fail."""
    (tmp_path / "families.yaml").write_text(FAMILY)
    paths = [
        "--config",
        str(tmp_path / "families.yaml"),
        "--build-dir",
        str(tmp_path / "build"),
        "--cache",
        str(tmp_path / "cache.sqlite"),
    ]
    loaded = "print('loaded:', sorted(m for m in ('transformers', 'vllm') if m in sys.modules))"
    commands = {
        "dry run": f"import sys\nfrom rs.cli.publish import main\nmain(sys.argv[1:])\n{loaded}",
        "plan": f"import sys\nfrom rs.cli.plan import main\nmain(sys.argv[1:])\n{loaded}",
    }
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RS_CACHE_DIR": str(tmp_path / "rs-cache")}
    said = {}
    for name, script in commands.items():
        extra = ["--dry-run", "--out", str(tmp_path / "out")] if name == "dry run" else ["--sample", "1"]
        run = subprocess.run(
            [sys.executable, "-c", script, "Dry", *paths, *extra],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        said[name] = run.stdout
    assert said["dry run"].startswith("Dry: not built here with these settings, so this dry run built nothing")
    assert said["dry run"].rstrip().endswith("loaded: []")
    assert said["plan"].rstrip().endswith("loaded: ['transformers']")
    assert not (tmp_path / "out").exists() and not list((tmp_path / "build").rglob("*.parquet"))


def test_an_offline_dry_run_of_a_built_family_describes_what_it_would_upload_and_what_it_could_not_check(
    tmp_path: Path,
) -> None:
    """Offline (HF_HUB_OFFLINE=1), a dry run to the Hub of a family built here refused (`Cannot publish ...: HF_HUB_OFFLINE
    is set`) instead of describing the run. It now says what it would upload (the assembled repos' files, as a dry run against
    an empty repo lists them) and what it could not check; the Hub double behind HF_ENDPOINT sees no request."""
    from faults import engine_kinds_installed, publish_command, write_families
    from hub_clients import TOKEN
    from hub_server import running_hub

    families = write_families(tmp_path, images=4, names=("Alpha",))
    families.write_text(families.read_text().replace("target: local", "target: hub"))
    with engine_kinds_installed():
        publish(
            load_families(families)["Alpha"],
            out=tmp_path / "built",
            build_root=tmp_path / "build",
            cache_path=tmp_path / "cache.sqlite",
            progress=False,
        )
    command = [a for a in publish_command(families, tmp_path) if a not in ("--out", str(tmp_path / "out"))] + [
        "--dry-run"
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_TOKEN=TOKEN, HF_HUB_DISABLE_XET="1", NO_PROXY="127.0.0.1,localhost")
    with running_hub() as hub:
        said = {}
        for mode in ("1", "0"):  # offline, then online against an empty Hub
            run = subprocess.run(
                command,
                env={**env, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": mode},
                capture_output=True,
                text=True,
                timeout=300,
                cwd=ROOT,
            )
            assert run.returncode == 0, run.stderr[-3000:]
            said[mode] = run.stdout
            if mode == "1":
                assert hub.requests == []  # offline: nothing asked of the Hub
        assert not hub.repos  # a dry run creates nothing
    offline, online = said["1"], said["0"]
    assert offline.startswith("Alpha: 8 source QA, 0 dropped by cleaning,")
    for split in ("RS_think", "RS_nothink", "rejected"):
        assert re.search(
            rf"  Alpha_{split}: \d+ rows, .* -> https://huggingface.co/datasets/tester/Alpha_{split} \(offline: "
            rf"\d+ files, [0-9.]+ [kM]?B, to upload at most; not compared with the Hub\)",
            offline,
        ), offline
    uploads = sorted(line.split()[2:] for line in offline.splitlines() if line.startswith("    ? upload"))
    adds = sorted(line.split()[2:] for line in online.splitlines() if line.startswith("    + add"))
    assert (
        uploads == adds and len(adds) >= 24
    )  # the files an online dry run would add to an empty repo, with their sizes
    assert (
        "  not checked (offline): what the Hub holds now (a file already there is not uploaded again, a file there and not "
        "here is deleted), a pull request an earlier run left, the commits it takes, and whether the token may write to "
        "tester"
    ) in offline
