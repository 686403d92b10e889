from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from audiobook.errors import ChapterError
from audiobook.text.load import decode_text, load_chapter, normalize_line, resolve_chapter
from tests.conftest import CHAPTERS

SAMPLE = "　　第四章 金陵\r\n“都小心点，这里情况不明。”何大清低声叮嘱道。\r\n"


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        (SAMPLE.encode("utf-8"), "utf-8"),
        (codecs.BOM_UTF8 + SAMPLE.encode("utf-8"), "utf-8"),
        (SAMPLE.encode("utf-16"), "utf-16"),  # with BOM, native order
        (codecs.BOM_UTF16_BE + SAMPLE.encode("utf-16-be"), "utf-16"),
        (SAMPLE.encode("gbk"), "gb18030"),
        (SAMPLE.encode("gb18030"), "gb18030"),
    ],
    ids=["utf8", "utf8-bom", "utf16-le-bom", "utf16-be-bom", "gbk", "gb18030"],
)
def test_every_common_encoding_is_detected(tmp_path: Path, data: bytes, encoding: str) -> None:
    path = tmp_path / "ch001.txt"
    path.write_bytes(data)
    chapter = load_chapter(path)
    assert chapter.encoding == encoding
    assert chapter.lines[0] == "第四章 金陵"  # full-width indentation stripped
    assert chapter.lines[1] == "“都小心点，这里情况不明。”何大清低声叮嘱道。"
    assert all("\r" not in line for line in chapter.lines)


def test_old_mac_line_ends_and_invisible_characters_are_normalized() -> None:
    text, _ = decode_text("甲\u200b乙\u00a0丙\r丁\ufeff戊\r\n".encode(), "x.txt")
    assert text.split("\n")[:2] == ["甲\u200b乙\u00a0丙", "丁\ufeff戊"]
    lines = [line for line in text.split("\n") if line]
    assert [normalize_line(line) for line in lines] == ["甲乙 丙", "丁戊"]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "is empty"),
        (b"   \n\t\r\n", "only whitespace"),
        ("　　\n\u00a0\n".encode(), "only whitespace"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", "binary data"),
        (bytes(range(1, 32)) * 20, "binary data"),
        (b"caf\xe9 au lait, na\xefve r\xe9sum\xe9 \xff\xfe\xfd", "cannot decode"),
    ],
    ids=["empty", "whitespace", "cjk-whitespace", "png", "control-bytes", "latin1"],
)
def test_bad_files_get_one_line_errors_naming_file_and_reason(
    tmp_path: Path, data: bytes, reason: str
) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(data)
    with pytest.raises(ChapterError) as excinfo:
        load_chapter(path)
    message = str(excinfo.value)
    assert str(path) in message
    assert reason in message
    assert "\n" not in message


def test_chapter_ids_resolve_to_files_in_the_chapters_folder(tmp_path: Path) -> None:
    assert resolve_chapter("ch004", CHAPTERS) == CHAPTERS / "ch004.txt"
    assert resolve_chapter("4", CHAPTERS) == CHAPTERS / "ch004.txt"
    own = tmp_path / "mine.txt"
    own.write_text("一句话。", encoding="utf-8")
    assert resolve_chapter(str(own), CHAPTERS) == own


@pytest.mark.parametrize("ref", ["ch999", "99", "nowhere/ch001.txt"])
def test_missing_chapters_are_reported(ref: str) -> None:
    with pytest.raises(ChapterError, match="not found"):
        resolve_chapter(ref, CHAPTERS)


def test_sample_chapters_load() -> None:
    for name in ("ch000", "ch004"):
        chapter = load_chapter(CHAPTERS / f"{name}.txt")
        assert chapter.id == name
        assert chapter.encoding == "utf-8"
        assert len([line for line in chapter.lines if line]) > 40
