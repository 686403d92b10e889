from __future__ import annotations

import pytest

from tests.assemble.helpers import Tools, find_tools


@pytest.fixture(scope="session")
def tools() -> Tools:
    """The system ffmpeg/ffprobe, used as independent judges of our output."""
    return find_tools()
