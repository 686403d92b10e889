"""assemble_chapter end to end, judged by real ffmpeg, ffprobe and mutagen."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from mutagen.id3 import ID3, CTOCFlags

from audiobook.assemble import assemble_chapter
from audiobook.assemble.ffmpeg import decode_audio
from audiobook.errors import AssemblyError
from audiobook.models import ChapterMark, ChapterPlan, Clip, sidecar_paths
from audiobook.settings import Book, Mp3, Settings
from tests.assemble.helpers import (
    RATE,
    Tools,
    build_plan,
    ebur128,
    ffprobe_json,
    make_clips,
    parse_cues,
    silences,
)

SETTINGS = Settings()


@dataclass(frozen=True)
class Rendered:
    plan: ChapterPlan
    clips: list[Clip]
    mp3: Path
    duration: float
    marks: tuple[ChapterMark, ...]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    plan = build_plan()
    clips = make_clips(plan)
    mp3 = tmp_path_factory.mktemp("output") / "ch007.mp3"
    duration, marks = assemble_chapter(plan, clips, SETTINGS, mp3, title="第七章 雾", track=7)
    return Rendered(plan, clips, mp3, duration, marks)


def outputs(mp3: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in (mp3, *sidecar_paths(mp3))}


def copy_outputs(rendered: Rendered, folder: Path) -> Path:
    for path in (rendered.mp3, *sidecar_paths(rendered.mp3)):
        shutil.copy(path, folder / path.name)
    return folder / rendered.mp3.name


def test_writes_the_mp3_and_its_sidecars_only(rendered: Rendered) -> None:
    assert sorted(p.name for p in rendered.mp3.parent.iterdir()) == [
        "ch007.chapters.json",
        "ch007.mp3",
        "ch007.srt",
        "ch007.vtt",
    ]


def test_ffprobe_lists_one_chapter_per_scene_at_the_scene_start(
    rendered: Rendered, tools: Tools
) -> None:
    info = ffprobe_json(tools, rendered.mp3, "-show_chapters", "-show_format")
    chapters = info["chapters"]
    assert len(chapters) == rendered.plan.scene_count == 3
    assert [c["tags"]["title"] for c in chapters] == [
        "南京沦陷三天后，整座城市陷入了无尽的黑暗",
        "第二天清晨，雾气笼罩着江面，远处传来零星的枪声",
        "多年以后，他仍然记得那个寒冷的冬天",
    ]
    starts = [float(c["start_time"]) for c in chapters]
    ends = [float(c["end_time"]) for c in chapters]
    assert starts[0] == 0 and starts[1:] == ends[:-1]
    assert ends[-1] == pytest.approx(float(info["format"]["duration"]), abs=0.001)
    assert rendered.duration == pytest.approx(ends[-1], abs=0.001)
    # Each scene's first sound, found independently in the decoded audio, is where its
    # chapter starts: the end of the silence before it.
    quiet = silences(tools, rendered.mp3, noise_db=-50, min_s=1.0)
    for start in starts[1:]:
        onset = min((end for _, end in quiet), key=lambda end: abs(end - start))
        assert abs(onset - start) <= 0.05


def test_scene_breaks_are_at_least_the_scene_pause(rendered: Rendered, tools: Tools) -> None:
    scene_s = SETTINGS.pauses.scene_ms / 1000
    quiet = silences(tools, rendered.mp3, noise_db=-50, min_s=scene_s * 0.5)
    for mark in rendered.marks[1:]:
        before = [(a, b) for a, b in quiet if b <= mark.start_ms / 1000 + 0.05]
        start, end = before[-1]
        assert end - start >= scene_s
    # Only scene breaks are that long; paragraph pauses are shorter.
    assert sum(1 for a, b in quiet if b - a >= scene_s) == len(rendered.marks) - 1


def test_id3v23_with_a_top_level_ordered_toc(rendered: Rendered) -> None:
    id3 = ID3(rendered.mp3)
    assert id3.version == (2, 3, 0)
    assert id3["TIT2"].text == ["第七章 雾"] and id3["TRCK"].text == ["7"]
    assert id3["TALB"].text == [SETTINGS.book.title] and id3["TCON"].text == ["Audiobook"]
    chaps = sorted(id3.getall("CHAP"), key=lambda c: c.element_id)
    (toc,) = id3.getall("CTOC")
    assert toc.flags & CTOCFlags.TOP_LEVEL and toc.flags & CTOCFlags.ORDERED
    assert toc.child_element_ids == [c.element_id for c in chaps] == ["chp000", "chp001", "chp002"]
    assert [(c.start_time, c.end_time) for c in chaps] == [
        (m.start_ms, m.end_ms) for m in rendered.marks
    ]


def test_loudness_on_target_and_true_peak_under_the_ceiling(
    rendered: Rendered, tools: Tools
) -> None:
    integrated, peak = ebur128(tools, rendered.mp3)
    assert abs(integrated - SETTINGS.loudness.target_lufs) <= 0.5  # the requirement is ±1 LU
    assert peak <= SETTINGS.loudness.true_peak_dbtp + 0.1  # ffmpeg prints one decimal


def test_dialogue_and_narration_come_out_equally_loud(rendered: Rendered, tools: Tools) -> None:
    audio = decode_audio(rendered.mp3, RATE)
    samples = np.frombuffer(audio.pcm, "<i2")
    cues = parse_cues(rendered.mp3.with_suffix(".srt").read_text(encoding="utf-8"))
    voice_of = {s.text: s.voice for s in rendered.plan.segments}
    parts: dict[str, list[np.ndarray]] = {"narrator": [], "dialogue": []}
    for start, end, text in cues:
        parts[voice_of[text]].append(samples[round(start * RATE) : round(end * RATE)])
    levels = {
        voice: ebur128(tools, pcm=np.concatenate(chunks).tobytes())[0]
        for voice, chunks in parts.items()
    }
    # They went in 12 dB apart.
    assert abs(levels["dialogue"] - levels["narrator"]) <= 1.0


def test_sidecars_parse_and_agree_with_the_audio(rendered: Rendered) -> None:
    json_path, vtt_path, srt_path = sidecar_paths(rendered.mp3)
    chapters = json.loads(json_path.read_text(encoding="utf-8"))
    assert chapters["version"] == "1.2.0"
    assert [(c["startTime"], c["title"]) for c in chapters["chapters"]] == [
        (m.start_ms / 1000, m.title) for m in rendered.marks
    ]
    vtt = vtt_path.read_text(encoding="utf-8")
    assert vtt.startswith("WEBVTT")
    for text in (vtt, srt_path.read_text(encoding="utf-8")):
        cues = parse_cues(text)
        assert [c[2] for c in cues] == [s.text for s in rendered.plan.segments]
        times = [t for start, end, _ in cues for t in (start, end)]
        assert times == sorted(times) and times[0] >= 0 and times[-1] <= rendered.duration
        assert all(end > start for start, end, _ in cues)
    # A cue starts where its speech starts: the first cue of each scene at its chapter mark.
    cues = parse_cues(vtt)
    scene_firsts = [next(s.index for s in rendered.plan.segments if s.scene == n) for n in (1, 2)]
    for mark, first in zip(rendered.marks[1:], scene_firsts, strict=True):
        assert cues[first][0] == pytest.approx(mark.start_ms / 1000, abs=0.002)


def test_paragraph_marks_and_custom_mp3_settings(tmp_path: Path, tools: Tools) -> None:
    plan = build_plan()
    settings = replace(
        SETTINGS, chapter_marks="paragraph", mp3=Mp3(sample_rate=22050, bitrate_kbps=48)
    )
    mp3 = tmp_path / "ch008.mp3"
    _, marks = assemble_chapter(plan, make_clips(plan), settings, mp3, title="八", track=None)
    assert len(marks) == plan.paragraph_count
    info = ffprobe_json(tools, mp3, "-show_chapters", "-show_streams")
    assert len(info["chapters"]) == plan.paragraph_count
    stream = info["streams"][0]
    assert (int(stream["sample_rate"]), int(stream["bit_rate"])) == (22050, 48000)
    assert "TRCK" not in ID3(mp3)


def test_bad_cover_leaves_the_previous_render_byte_identical(
    rendered: Rendered, tmp_path: Path
) -> None:
    mp3 = copy_outputs(rendered, tmp_path)
    before = outputs(mp3)
    (tmp_path / "cover.jpg").write_text("<html>not an image</html>")
    settings = replace(SETTINGS, book=Book(cover=tmp_path / "cover.jpg"))
    with pytest.raises(AssemblyError, match=r"cover image .* is not a JPEG or PNG"):
        assemble_chapter(rendered.plan, rendered.clips, settings, mp3, title="x", track=1)
    assert outputs(mp3) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [p.name for p in before] + ["cover.jpg"]
    )


def test_encoder_failure_leaves_the_previous_render_byte_identical(
    rendered: Rendered, tmp_path: Path
) -> None:
    mp3 = copy_outputs(rendered, tmp_path)
    before = outputs(mp3)
    settings = replace(SETTINGS, mp3=Mp3(sample_rate=12345))  # LAME refuses this rate
    with pytest.raises(AssemblyError, match="MP3 encoding failed"):
        assemble_chapter(rendered.plan, rendered.clips, settings, mp3, title="x", track=1)
    assert outputs(mp3) == before
    assert sorted(tmp_path.iterdir()) == sorted(before)


def test_failure_after_encoding_removes_its_temporaries(rendered: Rendered, tmp_path: Path) -> None:
    # A name so long that the MP3's temporary file fits but a sidecar's does not:
    # the chapter is fully encoded and tagged before writing fails.
    mp3 = tmp_path / ("长" * 76 + ".mp3")  # 228 + 4 bytes; the limit is 255
    for path in (mp3, *sidecar_paths(mp3)):
        path.write_bytes(b"previous " + path.suffix.encode())
    before = outputs(mp3)
    with pytest.raises(AssemblyError, match="cannot write"):
        assemble_chapter(rendered.plan, rendered.clips, SETTINGS, mp3, title="x", track=1)
    assert outputs(mp3) == before
    assert sorted(tmp_path.iterdir()) == sorted(before)


def test_a_folder_in_the_way_is_reported_before_any_work(
    rendered: Rendered, tmp_path: Path
) -> None:
    mp3 = copy_outputs(rendered, tmp_path)
    srt = mp3.with_suffix(".srt")
    srt.unlink()
    srt.mkdir()
    before = {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(AssemblyError, match="folder of that name"):
        assemble_chapter(rendered.plan, rendered.clips, SETTINGS, mp3, title="x", track=1)
    assert {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
