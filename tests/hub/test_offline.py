"""A command that can work offline switches to offline mode at once when the Hub's name does not resolve."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import ROOT
from family_yaml import MINIMAL, family_yaml

pytestmark = pytest.mark.slow


PROBE = """
import json, os, logging
logging.basicConfig(level=logging.WARNING, format="%(message)s")
import datasets.config
from huggingface_hub import constants
from rs.hub.offline import offline_unless_the_hub_resolves
switched = offline_unless_the_hub_resolves()
print(json.dumps([switched, constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE, os.environ.get("HF_HUB_OFFLINE")]))
"""


REMOTE = family_yaml(
    "Remote",
    MINIMAL,
    source={"num_images": 2},
    model={"id": "rs:tiny-vlm"},
    publish={"namespace": "someone", "target": "hub"},
    card={"pretty_name": "R"},
)


def probe(endpoint: str, **env: str) -> tuple[list, str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "HF_HUB_OFFLINE",
            "HF_DATASETS_OFFLINE",
            "HTTPS_PROXY",
            "https_proxy",
            "ALL_PROXY",
            "all_proxy",
            "HTTP_PROXY",
            "http_proxy",
        )
    }
    run = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**clean, "HF_ENDPOINT": endpoint, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(run.stdout.strip().splitlines()[-1]), run.stderr


def test_a_hub_whose_name_does_not_resolve_turns_every_hub_library_offline_and_says_so() -> None:
    state, said = probe("https://hub.example.invalid")  # .invalid never resolves (RFC 2606)
    assert state == [True, True, True, "1"]
    assert (
        "the Hub (hub.example.invalid) is out of reach: its name does not resolve" in said
        and "HF_HUB_OFFLINE=1" in said
    )


def test_a_hub_that_resolves_or_a_proxy_leaves_the_libraries_online() -> None:
    assert probe("http://localhost:1")[0] == [False, False, False, None]
    assert probe("https://hub.example.invalid", HTTPS_PROXY="http://proxy.example:3128")[0] == [
        False,
        False,
        False,
        None,
    ]


def test_publishing_to_an_unreachable_hub_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    families = tmp_path / "families.yaml"
    families.write_text(REMOTE)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "rs.publish",
            "Remote",
            "--config",
            str(families),
            "--build-dir",
            str(tmp_path / "build"),
        ],
        env={**clean, "HF_ENDPOINT": "https://hub.example.invalid"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert (
        "error: the Hub is out of reach from here (its name does not resolve): Remote cannot be published to it (someone/Remote_RS_think"
        in run.stderr
    )
    assert "--out DIR" in run.stderr and not list((tmp_path / "build").rglob("*.json"))  # nothing built


def test_a_dry_run_to_an_unreachable_hub_describes_the_run(tmp_path: Path) -> None:
    """It refused, like a real publish, although a dry run sends nothing."""
    clean = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    families = tmp_path / "families.yaml"
    families.write_text(REMOTE)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "rs.publish",
            "Remote",
            "--config",
            str(families),
            "--build-dir",
            str(tmp_path / "build"),
            "--dry-run",
        ],
        env={**clean, "HF_ENDPOINT": "https://hub.example.invalid"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("Remote: not built here with these settings, so this dry run built nothing")
    assert "write someone/Remote_RS_think" in run.stdout
    assert (
        "warning: the Hub is out of reach from here (its name does not resolve): this dry run describes the run, not the "
        "commits a publish to someone would make"
    ) in run.stderr


def test_offline_is_said_once_and_only_for_a_family_that_needs_the_hub(tmp_path: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env = {**clean, "HF_ENDPOINT": "https://hub.example.invalid", "RS_BUILD_DIR": str(tmp_path)}
    rs = [sys.executable, "-c", "from rs.cli.main import console; console()"]
    local = subprocess.run(
        [*rs, "families", "preview", "TinyCLEVR", "--limit", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert local.returncode == 0, local.stderr
    assert (
        "out of reach" not in local.stderr + local.stdout
    )  # synthetic scenes and the shipped model: nothing from the Hub
    hub = subprocess.run(
        [*rs, "plan", "CLEVR", "--sample", "1"], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    said = [line for line in (hub.stderr + hub.stdout).splitlines() if "out of reach" in line]
    assert len(said) == 1 and said[0].startswith("warning: the Hub (hub.example.invalid) is out of reach"), hub.stderr
    assert (
        "its source HuggingFaceM4/the_cauldron and its model Qwen/Qwen3-VL-8B-Thinking must be in the local Hugging Face cache"
        in said[0]
    )
