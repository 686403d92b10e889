"""ID3v2.3 tags with UTF-16 text, CHAP frames and a top-level ordered CTOC.

v2.3 rather than v2.4: ffmpeg (and Apple) silently drop v2.4 chapter frames
whose CJK titles are long, and v2.3 is what podcast apps read most reliably.
Without a CTOC flagged top-level and ordered, Overcast and Apple Podcasts show
no chapter navigation at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mutagen import MutagenError
from mutagen.id3 import (
    APIC,
    CHAP,
    COMM,
    CTOC,
    ID3,
    TALB,
    TCON,
    TIT2,
    TLAN,
    TLEN,
    TPE1,
    TPE2,
    TRCK,
    CTOCFlags,
    Encoding,
    PictureType,
)

from audiobook.errors import AssemblyError
from audiobook.models import ChapterMark

UNKNOWN_OFFSET = 0xFFFFFFFF  # "no byte offset": players seek by the millisecond times
TOC_ID = "toc"
LANGUAGE = "chi"  # ISO 639-2 (bibliographic) for Chinese


@dataclass(frozen=True)
class Cover:
    mime: str
    data: bytes


@dataclass(frozen=True)
class Tags:
    title: str
    album: str
    author: str
    track: int | None
    duration_ms: int
    comment: str  # names the generator
    cover: Cover | None = None


def read_cover(path: Path) -> Cover:
    """A JPEG or PNG for APIC; anything else is a configuration mistake."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise AssemblyError(f"cover image {path} not found (book.cover in voices.toml)") from None
    except OSError as exc:
        raise AssemblyError(f"cannot read cover image {path}: {exc.strerror}") from None
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return Cover("image/png", data)
    if data.startswith(b"\xff\xd8\xff"):
        return Cover("image/jpeg", data)
    raise AssemblyError(f"cover image {path} is not a JPEG or PNG file")


def chapter_id(index: int, count: int) -> str:
    """Zero-padded so ids sort in time order: chp000, chp001, …"""
    return f"chp{index:0{max(3, len(str(count - 1)))}d}"


def build_tags(tags: Tags, marks: Sequence[ChapterMark]) -> ID3:
    id3 = ID3()
    cover = tags.cover
    utf16 = Encoding.UTF16
    id3.add(TIT2(encoding=utf16, text=[tags.title]))
    id3.add(TALB(encoding=utf16, text=[tags.album]))
    if tags.author:
        id3.add(TPE1(encoding=utf16, text=[tags.author]))
        id3.add(TPE2(encoding=utf16, text=[tags.author]))
    if tags.track is not None:
        id3.add(TRCK(encoding=utf16, text=[str(tags.track)]))
    id3.add(TCON(encoding=utf16, text=["Audiobook"]))
    id3.add(TLAN(encoding=utf16, text=[LANGUAGE]))
    id3.add(TLEN(encoding=utf16, text=[str(tags.duration_ms)]))
    id3.add(COMM(encoding=utf16, lang=LANGUAGE, desc="", text=[tags.comment]))
    if cover is not None:
        id3.add(
            APIC(
                encoding=utf16,
                mime=cover.mime,
                type=PictureType.COVER_FRONT,
                desc="Cover",
                data=cover.data,
            )
        )
    ids = [chapter_id(i, len(marks)) for i in range(len(marks))]
    for element_id, mark in zip(ids, marks, strict=True):
        id3.add(
            CHAP(
                element_id=element_id,
                start_time=mark.start_ms,
                end_time=mark.end_ms,
                start_offset=UNKNOWN_OFFSET,
                end_offset=UNKNOWN_OFFSET,
                sub_frames=[TIT2(encoding=utf16, text=[mark.title])],
            )
        )
    if marks:
        id3.add(
            CTOC(
                element_id=TOC_ID,
                flags=CTOCFlags.TOP_LEVEL | CTOCFlags.ORDERED,
                child_element_ids=ids,
                sub_frames=[TIT2(encoding=utf16, text=[tags.title])],
            )
        )
    id3.update_to_v23()
    return id3


def write_tags(mp3: Path, tags: Tags, marks: Sequence[ChapterMark]) -> None:
    """Replace any tag in ``mp3`` with ours, saved as ID3v2.3."""
    id3 = build_tags(tags, marks)
    try:
        id3.save(mp3, v1=0, v2_version=3)
        _put_chapters_in_time_order(mp3)
    except (MutagenError, OSError) as exc:
        raise AssemblyError(f"cannot write ID3 tags to {mp3.name}: {exc}") from None


def _put_chapters_in_time_order(mp3: Path) -> None:
    """Rewrite the CHAP frames of a saved v2.3 tag in element-id (= time) order, in place.

    mutagen orders frames by size, so CHAPs with shorter titles come first; ffmpeg
    and players that ignore the CTOC then list chapters out of order. Only the
    order of equally sized byte runs changes, so the tag keeps its length.
    """
    with open(mp3, "r+b") as f:
        header = f.read(10)
        if len(header) < 10 or header[:3] != b"ID3" or header[3] != 3 or header[5] != 0:
            return  # not a plain v2.3 tag as mutagen writes it
        size = _syncsafe(header[6:10])
        body = f.read(size)
        frames: list[tuple[bytes, bytes]] = []  # (frame id, whole frame)
        pos = 0
        while pos + 10 <= len(body) and body[pos : pos + 4] != b"\0\0\0\0":
            frame_size = int.from_bytes(body[pos + 4 : pos + 8], "big")
            frames.append((body[pos : pos + 4], body[pos : pos + 10 + frame_size]))
            pos += 10 + frame_size
        chaps = [frame for fid, frame in frames if fid == b"CHAP"]
        in_order = sorted(chaps, key=_chap_element_id)
        if chaps == in_order:
            return
        replacement = iter(in_order)
        rebuilt = b"".join(next(replacement) if fid == b"CHAP" else frame for fid, frame in frames)
        f.seek(10)
        f.write(rebuilt)


def _chap_element_id(frame: bytes) -> bytes:
    return frame[10 : frame.index(b"\0", 10)]


def _syncsafe(data: bytes) -> int:
    return (data[0] << 21) | (data[1] << 14) | (data[2] << 7) | data[3]
