"""Whole renders with the real local engine, judged by ffmpeg, ffprobe and mutagen."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from mutagen.id3 import ID3

from audiobook.assemble.cache import SegmentCache
from audiobook.errors import AssemblyError
from audiobook.models import RenderResult
from audiobook.pipeline import plan_chapter, render_chapter
from audiobook.settings import Book, Paths, Settings
from audiobook.text.segment import is_scene_break
from tests.assemble.helpers import Tools, ebur128, ffprobe_json, parse_cues, silences
from tests.conftest import CHAPTERS

SHORT_CHAPTER = (
    "第1章 夜渡\n"
    "夜色渐深，江面上起了雾。\n"
    "“快上船！”何大清低声说道。\n"
    "………………\n"
    "天亮的时候，他们已经到了对岸。\n"
)


def _settings(root: Path, chapters: Path = CHAPTERS) -> Settings:
    return replace(
        Settings(), paths=Paths(chapters=chapters, output=root / "output", cache=root / "cache")
    )


def _cache_entries(settings: Settings) -> int:
    return SegmentCache(settings.paths.cache).stats().entries


@pytest.fixture
def short(tmp_path: Path, local_model: Path) -> tuple[Path, Settings]:
    """A three-paragraph chapter with a title, dialogue and a scene break, and its settings."""
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    path = chapters / "ch001.txt"
    path.write_text(SHORT_CHAPTER, encoding="utf-8")
    return path, _settings(tmp_path, chapters)


@pytest.fixture(scope="module")
def ch004(tmp_path_factory: pytest.TempPathFactory, local_model: Path) -> RenderResult:
    settings = _settings(tmp_path_factory.mktemp("ch004"))
    return render_chapter(CHAPTERS / "ch004.txt", settings)


def test_ch004_chapter_marks_start_where_each_scene_starts(ch004: RenderResult, tools: Tools):
    chapters = ffprobe_json(tools, ch004.mp3, "-show_chapters")["chapters"]
    assert [c["tags"]["title"] for c in chapters] == [m.title for m in ch004.marks]
    assert chapters[0]["tags"]["title"].startswith("12月12日下午")
    assert chapters[1]["tags"]["title"].startswith("何大清带领特战团")
    assert chapters[2]["tags"]["title"].startswith("在紧张的侦查过程中")
    assert all(len(c["tags"]["title"]) <= 31 for c in chapters)
    # A scene's first sample is where the long silence of its scene break ends.
    breaks = [(s, e) for s, e in silences(tools, ch004.mp3, min_s=1.5)]
    assert len(breaks) == 2
    starts = [float(c["start_time"]) for c in chapters]
    assert starts[0] == 0
    for (_, silence_end), start in zip(breaks, starts[1:], strict=True):
        assert abs(silence_end - start) <= 0.05
    duration = float(ffprobe_json(tools, ch004.mp3, "-show_format")["format"]["duration"])
    assert abs(float(chapters[-1]["end_time"]) - duration) <= 0.05


def test_ch004_scene_breaks_are_at_least_the_scene_pause(ch004: RenderResult, tools: Tools):
    pause_s = Settings().pauses.scene_ms / 1000
    long_silences = [e - s for s, e in silences(tools, ch004.mp3, min_s=1.0)]
    assert len([d for d in long_silences if d >= pause_s - 0.02]) == 2
    # Sentences and paragraphs get their shorter pauses: many silences, none missing.
    short = silences(tools, ch004.mp3, min_s=0.3)
    assert len(short) >= 60


def test_ch004_is_loudness_normalized(ch004: RenderResult, tools: Tools) -> None:
    integrated, true_peak = ebur128(tools, ch004.mp3)
    assert abs(integrated - Settings().loudness.target_lufs) <= 1.0
    assert true_peak <= Settings().loudness.true_peak_dbtp + 0.3


def test_ch004_has_id3v23_tags_with_a_top_level_ordered_toc(ch004: RenderResult) -> None:
    tags = ID3(ch004.mp3)
    assert tags.version[:2] == (2, 3)
    toc = tags.getall("CTOC")
    assert len(toc) == 1
    assert toc[0].flags & 0x03 == 0x03  # top-level and ordered
    chaps = sorted(tags.getall("CHAP"), key=lambda c: c.start_time)
    assert list(toc[0].child_element_ids) == [c.element_id for c in chaps]
    assert len(chaps) == 3
    assert str(tags["TCON"]) == "Audiobook"
    assert str(tags["TLAN"]) == "chi"


def test_ch004_transcript_holds_every_sentence_in_time_order(ch004: RenderResult) -> None:
    cues = parse_cues(ch004.vtt.read_text(encoding="utf-8"))
    assert cues == parse_cues(ch004.srt.read_text(encoding="utf-8"))
    starts = [start for start, _, _ in cues]
    assert starts == sorted(starts)
    assert all(start < end <= ch004.duration_s + 0.05 for start, end, _ in cues)
    lines = (CHAPTERS / "ch004.txt").read_text(encoding="utf-8").splitlines()
    text = "".join(line for line in lines if not is_scene_break(line.strip()))
    spoken = "".join(cue_text for _, _, cue_text in cues)
    assert "".join(spoken.split()) == "".join(text.split())  # no text lost
    chapters = json.loads(ch004.chapters_json.read_text(encoding="utf-8"))
    assert chapters["version"] == "1.2.0"
    assert [c["startTime"] for c in chapters["chapters"]] == [
        m.start_ms / 1000 for m in ch004.marks
    ]


def test_unchanged_chapter_renders_again_without_synthesizing(ch004: RenderResult) -> None:
    settings = _settings(ch004.mp3.parent.parent)
    before = ch004.mp3.read_bytes()
    again = render_chapter(CHAPTERS / "ch004.txt", settings)
    assert again.synthesized == 0
    assert again.cached == ch004.synthesized
    assert again.wall_s < 1.0
    assert ch004.mp3.read_bytes() == before


def test_editing_one_paragraph_resynthesizes_only_its_segments(short) -> None:
    path, settings = short
    first = render_chapter(path, settings)
    assert first.synthesized == len(plan_chapter(path, settings).segments)

    path.write_text(SHORT_CHAPTER.replace("天亮的时候", "第二天清早"), encoding="utf-8")
    edited = plan_chapter(path, settings)
    changed = [s for s in edited.segments if "第二天清早" in s.text]
    second = render_chapter(path, settings)
    assert second.synthesized == len(changed) == 1
    assert second.cached == len(edited.segments) - 1


def test_corrupt_cache_entry_is_replaced_not_joined(short) -> None:
    path, settings = short
    first = render_chapter(path, settings)
    entry = next((settings.paths.cache / "segments").rglob("*.pcm"))
    data = bytearray(entry.read_bytes())
    data[len(data) // 2 :] = bytes(len(data) - len(data) // 2)  # zero the second half
    entry.write_bytes(bytes(data))

    again = render_chapter(path, settings, use_cache=True, engine=None)
    assert again.synthesized == 0  # nothing changed: the file is simply kept
    for manifest in (settings.paths.output / ".renders").iterdir():
        manifest.unlink()  # forget the finished file; the segments must be joined again
    rebuilt = render_chapter(path, settings)
    assert rebuilt.synthesized == 1
    assert abs(rebuilt.duration_s - first.duration_s) < 0.05


def test_failed_render_leaves_the_previous_file_untouched(tmp_path: Path, short) -> None:
    path, settings = short
    first = render_chapter(path, settings)
    before = {p.name: p.read_bytes() for p in first.mp3.parent.iterdir() if p.is_file()}

    not_an_image = tmp_path / "cover.jpg"
    not_an_image.write_text("not a picture", encoding="utf-8")
    broken = replace(settings, book=Book(cover=not_an_image))
    with pytest.raises(AssemblyError, match="cover"):
        render_chapter(path, broken)
    after = {p.name: p.read_bytes() for p in first.mp3.parent.iterdir() if p.is_file()}
    assert after == before


def test_killed_render_resumes_where_it_stopped(tmp_path: Path, local_model: Path) -> None:
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    # A third of ch000: long enough to kill halfway, short enough for a quick test.
    lines = (CHAPTERS / "ch000.txt").read_text(encoding="utf-8").splitlines()[:16]
    (chapters / "ch000.txt").write_text("\n".join(lines), encoding="utf-8")
    config = tmp_path / "voices.toml"
    config.write_text(
        f'[paths]\nchapters = "{chapters}"\noutput = "{tmp_path / "output"}"\n'
        f'cache = "{tmp_path / "cache"}"\n',
        encoding="utf-8",
    )
    settings = _settings(tmp_path, chapters)
    total = len(plan_chapter(chapters / "ch000.txt", settings).segments)
    command = [sys.executable, "-m", "audiobook", "-q", "--config", str(config), "render", "ch000"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while _cache_entries(settings) < 8 and time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    done = _cache_entries(settings)
    assert 8 <= done < total
    assert not (tmp_path / "output" / "ch000.mp3").exists()

    result = render_chapter(chapters / "ch000.txt", settings)
    assert result.synthesized == total - done
    assert result.cached == done
    assert not [p for p in (tmp_path / "output").iterdir() if ".tmp" in p.name]
