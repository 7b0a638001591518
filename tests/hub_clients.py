"""The real huggingface_hub and datasets clients pointed at the Hub emulator (tests/hub_server.py), the network
blocked for anything but 127.0.0.1: the fixtures `hub`, `blocked_hosts` and `sleeps`, registered for every test by tests/conftest.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import datasets.config as ds_config
import huggingface_hub.constants as hf_constants
import pytest
from hub_server import HubServer, running_hub

import rs.hub.retry

TOKEN = "hf_EmulatorSecretToken0123456789abcdef"


class NetworkBlocked(RuntimeError):
    """Not an OSError on purpose: the clients would retry a connection error with real sleeps (~23 s)."""


def point_clients_at(monkeypatch: pytest.MonkeyPatch, url: str, home: Path) -> None:
    """The clients read all of this at import time: env vars alone are not enough once they are imported."""
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setattr(hf_constants, "ENDPOINT", url)
    monkeypatch.setattr(hf_constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(ds_config, "HF_ENDPOINT", url)
    monkeypatch.setattr(ds_config, "HUB_DATASETS_URL", url + "/datasets/{repo_id}/resolve/{revision}/{path}")

    monkeypatch.setenv("HF_HOME", str(home))
    for name, value in {
        "HF_HOME": home,
        "HF_HUB_CACHE": home / "hub",
        "HF_ASSETS_CACHE": home / "assets",
        "HF_TOKEN_PATH": home / "token",
        "HF_STORED_TOKENS_PATH": home / "stored_tokens",
        "HF_XET_CACHE": home / "xet",
    }.items():
        monkeypatch.setattr(hf_constants, name, str(value))
    monkeypatch.setattr(ds_config, "HF_CACHE_HOME", str(home))
    monkeypatch.setattr(ds_config, "HF_DATASETS_CACHE", home / "datasets")
    monkeypatch.setattr(ds_config, "DOWNLOADED_DATASETS_PATH", home / "datasets" / "downloads")
    monkeypatch.setattr(ds_config, "EXTRACTED_DATASETS_PATH", home / "datasets" / "downloads" / "extracted")

    for name, value in {
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_OFFLINE": "0",
        "HF_DATASETS_OFFLINE": "0",
        "NO_PROXY": "127.0.0.1,localhost",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_XET", True)  # else LFS uploads ask for a Xet token
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)  # tests/conftest.py sets HF_HUB_OFFLINE=1
    monkeypatch.setattr(ds_config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(ds_config, "HF_DATASETS_OFFLINE", False)
    monkeypatch.setattr(ds_config, "USE_PARQUET_EXPORT", False)  # would ask datasets-server.<endpoint host>
    monkeypatch.setattr(ds_config, "HF_UPDATE_DOWNLOAD_COUNTS", False)  # would HEAD s3.amazonaws.com

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    for name in ("HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def blocked_hosts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Refuse to resolve anything but the loopback address; fail the test if anything tried."""
    real_getaddrinfo = socket.getaddrinfo
    tried: list[str] = []

    def loopback_only(host, *args, **kwargs):  # type: ignore[no-untyped-def]
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name not in ("127.0.0.1", "localhost", "::1"):
            tried.append(name)
            raise NetworkBlocked(f"test tried to reach {name!r}: tests must not leave 127.0.0.1")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", loopback_only)
    yield tried
    assert tried == [], f"a client tried to reach the network: {tried}"


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    calls: list[float] = []
    monkeypatch.setattr(rs.hub.retry, "_sleep", calls.append)
    return calls


@pytest.fixture
def hub(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, blocked_hosts: list[str], sleeps: list[float]
) -> Iterator[HubServer]:
    with running_hub() as server:
        point_clients_at(monkeypatch, server.url, tmp_path / "hf_home")
        yield server
        assert server.unhandled == [], f"the client called endpoints the emulator does not speak: {server.unhandled}"


def local_files(root: Path) -> dict[str, bytes]:
    """Every file under `root`, by its path in the repo."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
