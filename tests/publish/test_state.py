from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from audiobook.errors import PublishError
from audiobook.models import RenderResult
from audiobook.publish.state import BatchState, load_state, save_state

T0 = datetime(2024, 5, 1, 8, 0, tzinfo=UTC)


def result(tmp_path: Path, chapter_id: str, duration: float, size: int) -> RenderResult:
    return RenderResult(
        chapter_id=chapter_id,
        title=f"{chapter_id} 标题",
        mp3=tmp_path / f"{chapter_id}.mp3",
        duration_s=duration,
        size_bytes=size,
        marks=(),
        synthesized=3,
        cached=0,
        wall_s=1.0,
    )


def test_rerender_keeps_first_publication_and_guid(tmp_path: Path) -> None:
    state = BatchState().with_render(result(tmp_path, "ch002", 60.0, 1000), 2, "a", "guid-2", T0)
    later = T0 + timedelta(days=3)

    state = state.with_render(result(tmp_path, "ch002", 75.0, 1300), 2, "b", "other", later)

    record = state.get("ch002")
    assert record is not None
    assert (record.first_published, record.guid) == (T0, "guid-2")
    assert (record.rendered_at, record.fingerprint) == (later, "b")
    assert (record.duration_s, record.size_bytes) == (75.0, 1300)
    assert len(state.records) == 1


def test_saved_state_loads_back_equal_and_ordered(tmp_path: Path) -> None:
    state = BatchState()
    for number in (10, 2, 1):
        chapter_id = f"ch{number:03d}"
        state = state.with_render(
            result(tmp_path, chapter_id, 1.5 * number, 100 * number), number, "fp", chapter_id, T0
        )

    save_state(tmp_path, state)
    loaded = load_state(tmp_path)

    assert loaded == state
    assert [r.number for r in loaded.records] == [1, 2, 10]
    # Chinese titles stay readable for someone opening the file.
    assert "ch001 标题" in (tmp_path / "state.json").read_text(encoding="utf-8")


def test_missing_state_is_empty(tmp_path: Path) -> None:
    assert load_state(tmp_path) == BatchState()


@pytest.mark.parametrize(
    "content",
    [
        "{half a file",
        json.dumps({"version": 99, "chapters": []}),
        json.dumps({"version": 1, "chapters": [{"chapter_id": "ch001"}]}),
        json.dumps(
            {
                "version": 1,
                "chapters": [
                    {
                        "chapter_id": "ch001",
                        "number": 1,
                        "title": "t",
                        "guid": "g",
                        "fingerprint": "f",
                        "mp3": "ch001.mp3",
                        "duration_s": 1,
                        "size_bytes": 1,
                        "first_published": "2024-05-01T08:00:00",  # no timezone
                        "rendered_at": "2024-05-01T08:00:00+00:00",
                    }
                ],
            }
        ),
    ],
)
def test_damaged_state_is_refused_not_guessed(tmp_path: Path, content: str) -> None:
    (tmp_path / "state.json").write_text(content, encoding="utf-8")
    with pytest.raises(PublishError, match=r"state\.json: damaged .*delete it to re-render"):
        load_state(tmp_path)


def test_chapters_published_in_the_same_second_get_ordered_distinct_times(tmp_path: Path) -> None:
    state = BatchState()
    for number in (1, 2, 3):
        chapter_id = f"ch{number:03d}"
        state = state.with_render(
            result(tmp_path, chapter_id, 9.0, 900), number, "f", chapter_id, T0
        )

    assert [r.first_published for r in state.records] == [
        T0,
        T0 + timedelta(seconds=1),
        T0 + timedelta(seconds=2),
    ]
    # A later render of a new chapter keeps its own, later time.
    later = T0 + timedelta(hours=1)
    state = state.with_render(result(tmp_path, "ch004", 9.0, 900), 4, "f", "ch004", later)
    assert state.get("ch004").first_published == later
