from __future__ import annotations

from pathlib import Path

import pytest

from audiobook.errors import PublishError
from audiobook.files import write_atomic


def test_write_atomic_replaces_whole_file_and_leaves_no_temporaries(tmp_path: Path) -> None:
    target = tmp_path / "feed.xml"
    target.write_bytes(b"old")

    write_atomic(target, b"new content")

    assert target.read_bytes() == b"new content"
    assert [p.name for p in tmp_path.iterdir()] == ["feed.xml"]


def test_failed_write_names_the_file_and_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "missing-folder" / "state.json"
    with pytest.raises(PublishError, match="cannot write"):
        write_atomic(target, b"x", PublishError)
    assert not target.parent.exists()
