from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from mutagen.id3 import ID3, CTOCFlags, Encoding
from pydub import AudioSegment

from audiobook.assemble.ffmpeg import encode_mp3, ffmpeg_exe
from audiobook.assemble.id3 import Tags, chapter_id, read_cover, write_tags
from audiobook.errors import AssemblyError
from audiobook.models import ChapterMark
from audiobook.settings import Mp3
from tests.assemble.helpers import Tools, ffprobe_json

# Titles of different lengths, so a writer that orders frames by size would scramble them.
MARKS = (
    ChapterMark(0, 2500, "南京沦陷三天后，整座城市陷入了无尽的黑暗与恐怖之中"),
    ChapterMark(2500, 4000, "第二天"),
    ChapterMark(4000, 6100, "多年以后，他仍然记得那个寒冷的冬天"),
)


@pytest.fixture(scope="module")
def mp3_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("id3")
    t = np.arange(24000 * 6) / 24000
    pcm = (0.2 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2").tobytes()
    audio = AudioSegment(data=pcm, sample_width=2, frame_rate=24000, channels=1)
    encode_mp3(audio, folder / "source.mp3", Mp3())
    return folder / "source.mp3"


@pytest.fixture
def mp3(mp3_source: Path, tmp_path: Path) -> Path:
    path = tmp_path / "ch007.mp3"
    path.write_bytes(mp3_source.read_bytes())
    return path


@pytest.fixture(scope="module")
def cover(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cover") / "cover.png"
    source = ["-f", "lavfi", "-i", "color=c=red:s=32x32", "-frames:v", "1"]
    subprocess.run([ffmpeg_exe(), "-v", "error", *source, str(path)], check=True)
    return path


def tags(cover: Path | None = None) -> Tags:
    return Tags(
        title="第七章 雾",
        album="南京往事",
        author="佚名",
        track=7,
        duration_ms=6100,
        comment="audiobook 0.1.0",
        cover=read_cover(cover) if cover else None,
    )


def test_id3v23_utf16_with_every_field(mp3: Path, cover: Path) -> None:
    write_tags(mp3, tags(cover), MARKS)
    assert mp3.read_bytes()[:4] == b"ID3\x03"
    id3 = ID3(mp3)
    assert id3.version == (2, 3, 0)
    expected = {
        "TIT2": "第七章 雾",
        "TALB": "南京往事",
        "TPE1": "佚名",
        "TPE2": "佚名",
        "TRCK": "7",
        "TCON": "Audiobook",
        "TLAN": "chi",
    }
    for frame_id, value in expected.items():
        assert id3[frame_id].text == [value]
        assert id3[frame_id].encoding == Encoding.UTF16
    (comment,) = id3.getall("COMM")
    assert comment.text == ["audiobook 0.1.0"] and comment.lang == "chi"
    (picture,) = id3.getall("APIC")
    assert picture.mime == "image/png" and picture.data == cover.read_bytes()
    assert picture.type == 3  # front cover


def test_chapters_and_top_level_ordered_toc(mp3: Path) -> None:
    write_tags(mp3, tags(), MARKS)
    id3 = ID3(mp3)
    chaps = {c.element_id: c for c in id3.getall("CHAP")}
    assert sorted(chaps) == ["chp000", "chp001", "chp002"]
    for element_id, mark in zip(sorted(chaps), MARKS, strict=True):
        chap = chaps[element_id]
        assert (chap.start_time, chap.end_time) == (mark.start_ms, mark.end_ms)
        assert chap.start_offset == chap.end_offset == 0xFFFFFFFF
        assert chap.sub_frames["TIT2"].text == [mark.title]
    (toc,) = id3.getall("CTOC")
    assert toc.element_id == "toc"
    assert toc.flags & CTOCFlags.TOP_LEVEL and toc.flags & CTOCFlags.ORDERED
    assert toc.child_element_ids == ["chp000", "chp001", "chp002"]


def test_ffprobe_lists_the_chapters_in_time_order(mp3: Path, tools: Tools) -> None:
    write_tags(mp3, tags(), MARKS)
    chapters = ffprobe_json(tools, mp3, "-show_chapters")["chapters"]
    assert [c["tags"]["title"] for c in chapters] == [m.title for m in MARKS]
    assert [(c["start"], c["end"]) for c in chapters] == [(m.start_ms, m.end_ms) for m in MARKS]
    # The audio is untouched by tagging.
    stream = ffprobe_json(tools, mp3, "-show_streams")["streams"][0]
    assert stream["codec_name"] == "mp3"


def test_retagging_replaces_the_old_tag(mp3: Path) -> None:
    write_tags(mp3, tags(), MARKS)
    write_tags(mp3, tags(), MARKS[:2])
    id3 = ID3(mp3)
    assert len(id3.getall("CHAP")) == 2 and len(id3.getall("TIT2")) == 1
    assert id3.getall("CTOC")[0].child_element_ids == ["chp000", "chp001"]


def test_ids_stay_sortable_with_many_chapters() -> None:
    ids = [chapter_id(i, 1200) for i in range(1200)]
    assert ids[0] == "chp0000" and sorted(ids) == ids
    assert chapter_id(5, 12) == "chp005"


def test_bad_cover_is_reported(tmp_path: Path) -> None:
    (tmp_path / "cover.jpg").write_text("not an image")
    with pytest.raises(AssemblyError, match="not a JPEG or PNG"):
        read_cover(tmp_path / "cover.jpg")
    with pytest.raises(AssemblyError, match="not found"):
        read_cover(tmp_path / "missing.png")
