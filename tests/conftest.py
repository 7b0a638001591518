"""Shared test fixtures: small images and Cauldron-shaped or flat sources written to disk."""

from __future__ import annotations

import io
import os

import pytest
from PIL import Image

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def png(color: tuple[int, int, int], size: int = 16) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (size, size), color).save(buf, format="PNG")
    return buf.getvalue()


def jpeg(color: tuple[int, int, int], size: int = 16) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (size, size), color).save(buf, format="JPEG", quality=73)
    return buf.getvalue()


@pytest.fixture
def images() -> dict[str, bytes]:
    return {"red": png((255, 0, 0)), "blue": png((0, 0, 255)), "green": jpeg((0, 200, 0)), "corrupt": png((9, 9, 9))[:40]}
