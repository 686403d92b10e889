"""A book in a temporary folder, and a render function that writes real MP3s with ffmpeg.

``ffmpeg_render`` stands in for the pipeline's ``render_chapter`` where a test is
about scheduling, state and the feed rather than voices: it loads the chapter
with the real loader (so a broken chapter fails as it would in production) and
encodes a tone whose length follows the text, plus the three sidecar files.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import imageio_ffmpeg
import mutagen.mp3
import pytest

from audiobook.models import ChapterMark, RenderResult
from audiobook.settings import Book, Paths, Settings
from audiobook.text.load import load_chapter

FFMPEG = imageio_ffmpeg.get_ffmpeg_exe()

SHORT_CHAPTERS = {
    1: "第一章 进城\n\n他走进了城门。天色已晚。街上没有人。\n",
    2: "第二章 夜雨\n\n雨下了一整夜。屋檐在滴水。\n",
    3: "第三章 天明\n\n天终于亮了。鸡叫了三遍。他推开了窗。\n",
}


def ffmpeg_render(chapter_path: Path, settings: Settings) -> RenderResult:
    started = time.monotonic()
    chapter = load_chapter(chapter_path)
    text = "".join(chapter.lines)
    seconds = 0.5 + 0.05 * len(text)
    output = settings.paths.output
    output.mkdir(parents=True, exist_ok=True)
    mp3 = output / f"{chapter.id}.mp3"
    subprocess.run(
        [
            FFMPEG,
            "-v",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            f"sine=frequency=330:duration={seconds:.2f}",
            "-ac",
            "1",
            "-b:a",
            "32k",
            str(mp3),
        ],
        check=True,
    )
    duration = mutagen.mp3.MP3(mp3).info.length
    title = chapter.lines[0]
    marks = (ChapterMark(0, round(duration * 1000), title),)
    mp3.with_suffix(".chapters.json").write_text(
        json.dumps({"version": "1.2.0", "chapters": [{"startTime": 0, "title": title}]}),
        encoding="utf-8",
    )
    mp3.with_suffix(".vtt").write_text(
        f"WEBVTT\n\n00:00:00.000 --> 00:00:0{min(duration, 9):.3f}\n{text}\n", encoding="utf-8"
    )
    mp3.with_suffix(".srt").write_text(
        f"1\n00:00:00,000 --> 00:00:01,000\n{text}\n", encoding="utf-8"
    )
    return RenderResult(
        chapter_id=chapter.id,
        title=title,
        mp3=mp3,
        duration_s=duration,
        size_bytes=mp3.stat().st_size,
        marks=marks,
        synthesized=1,
        cached=0,
        wall_s=time.monotonic() - started,
    )


def write_chapters(folder: Path, chapters: dict[int, str]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number, text in chapters.items():
        path = folder / f"ch{number:03d}.txt"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


@pytest.fixture
def book(tmp_path: Path) -> Settings:
    """Settings for a small book: empty chapters folder, output and cache under tmp_path."""
    return replace(
        Settings(),
        paths=Paths(
            chapters=tmp_path / "chapters", output=tmp_path / "output", cache=tmp_path / "cache"
        ),
        book=Book(
            title="四合院：测试之书",
            author="测试作者",
            description="用来测试的有声书",
            base_url="http://192.168.1.20:8000/book/",
        ),
    )
