from __future__ import annotations

import logging
from pathlib import Path

import pytest

from audiobook.errors import PublishError
from audiobook.text.load import load_chapter, normalize_line
from audiobook.text.novel import chinese_number, import_novel, parse_heading

PREFACE = ["《京城夜雨》", "作者：某某", "本书纯属虚构，如有雷同，纯属巧合。"]
# (heading line as written in the novel, expected chapter number, body lines)
CHAPTERS = [
    (
        "第一章 初到京城",
        1,
        ["　　他走进城门的时候，天已经黑了。", "第一回合，他就输给了守门的老兵。"],
    ),
    ("第2章：风起", 2, ["风从北边吹来。", "第三章的事情，以后再说。"]),
    ("第十二章　夜雨", 12, ["雨下了一整夜，屋檐一直在滴水。"]),
    ("第１３章 十三", 13, ["全角数字的章节号。"]),
    ("第一百零三回 归来", 103, ["他终于回来了。"]),
    ("第两百章 远行", 200, ["最后一章。"]),
]


def novel_text(chapters: list[tuple[str, int, list[str]]]) -> str:
    lines = [*PREFACE, ""]
    for heading, _, body in chapters:
        lines += [heading, "", *body, ""]
    return "\r\n".join(lines)  # as downloaded from a Windows site


def write_gbk(path: Path, chapters: list[tuple[str, int, list[str]]]) -> Path:
    path.write_bytes(novel_text(chapters).encode("gbk"))
    return path


def test_gbk_novel_is_split_at_headings_and_numbered_by_them(tmp_path: Path) -> None:
    novel = write_gbk(tmp_path / "novel.txt", CHAPTERS)
    chapters_dir = tmp_path / "chapters"

    report = import_novel(novel, chapters_dir)

    names = sorted(p.name for p in chapters_dir.iterdir())
    assert names == ["ch001.txt", "ch002.txt", "ch012.txt", "ch013.txt", "ch103.txt", "ch200.txt"]
    assert report.encoding == "gb18030"
    assert report.chapters_found == 6
    assert sorted(p.name for p in report.added) == names
    assert report.preface_lines == len(PREFACE)
    for heading, number, body in CHAPTERS:
        path = chapters_dir / f"ch{number:03d}.txt"
        text = path.read_bytes().decode("utf-8")  # written as UTF-8, whatever the source was
        assert text.splitlines()[0] == normalize_line(heading)
        assert "\r" not in text
        for line in body:
            assert line.strip("　") in text
        assert not any(p in text for p in PREFACE)
        # The real chapter loader reads it and sees the heading first.
        assert load_chapter(path).lines[0].startswith("第")
    # Lines that only start like a heading stayed inside their chapters.
    assert "第一回合" in (chapters_dir / "ch001.txt").read_text(encoding="utf-8")
    assert "第三章的事情" in (chapters_dir / "ch002.txt").read_text(encoding="utf-8")
    assert report.summary().startswith("6 chapters in novel.txt (gb18030), 6 added, 0 unchanged")


def test_reimport_adds_only_new_chapters_and_keeps_changed_ones(tmp_path: Path) -> None:
    chapters_dir = tmp_path / "chapters"
    import_novel(write_gbk(tmp_path / "novel.txt", CHAPTERS[:4]), chapters_dir)
    untouched = chapters_dir / "ch001.txt"
    mtime = untouched.stat().st_mtime_ns
    old_ch002 = (chapters_dir / "ch002.txt").read_bytes()
    revised = list(CHAPTERS)
    revised[1] = ("第2章：风起", 2, ["风从南边吹来。", "作者修改了这一章。"])

    report = import_novel(write_gbk(tmp_path / "novel.txt", revised), chapters_dir)

    assert [p.name for p in report.added] == ["ch103.txt", "ch200.txt"]
    assert [p.name for p in report.changed] == ["ch002.txt"]
    assert [p.name for p in report.unchanged] == ["ch001.txt", "ch012.txt", "ch013.txt"]
    assert report.updated == ()
    assert (chapters_dir / "ch002.txt").read_bytes() == old_ch002
    assert untouched.stat().st_mtime_ns == mtime  # not rewritten: the batch sees no change
    assert "1 changed but kept (use --update-changed)" in report.summary()

    forced = import_novel(tmp_path / "novel.txt", chapters_dir, update_changed=True)

    assert [p.name for p in forced.updated] == ["ch002.txt"]
    assert forced.added == () and forced.changed == ()
    assert "作者修改了这一章。" in (chapters_dir / "ch002.txt").read_text(encoding="utf-8")


def test_hand_converted_chapter_in_another_encoding_counts_as_unchanged(tmp_path: Path) -> None:
    chapters_dir = tmp_path / "chapters"
    novel = write_gbk(tmp_path / "novel.txt", CHAPTERS[:1])
    import_novel(novel, chapters_dir)
    path = chapters_dir / "ch001.txt"
    path.write_bytes(path.read_text(encoding="utf-8").replace("\n", "\r\n").encode("utf-16"))

    report = import_novel(novel, chapters_dir)

    assert [p.name for p in report.unchanged] == ["ch001.txt"]


def test_duplicate_chapter_numbers_are_reported_and_first_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    chapters = [*CHAPTERS[:2], ("第二章 重复", 2, ["重复的第二章。"]), CHAPTERS[2]]
    novel = write_gbk(tmp_path / "novel.txt", chapters)

    with caplog.at_level(logging.WARNING):
        report = import_novel(novel, tmp_path / "chapters")

    assert [(d.number, d.text) for d in report.duplicates] == [(2, "第二章 重复")]
    text = (tmp_path / "chapters" / "ch002.txt").read_text(encoding="utf-8")
    assert "风从北边吹来。" in text and "重复的第二章" not in text
    # The duplicate's body went nowhere, not into the chapter before or after.
    assert "重复的第二章" not in (tmp_path / "chapters" / "ch012.txt").read_text(encoding="utf-8")
    assert any("chapter 2 appears again" in r.getMessage() for r in caplog.records)


def test_novel_without_headings_is_refused(tmp_path: Path) -> None:
    novel = tmp_path / "notes.txt"
    novel.write_text("只是一段文字。\n没有章节。\n", encoding="utf-8")
    with pytest.raises(PublishError, match="no chapter headings found"):
        import_novel(novel, tmp_path / "chapters")
    assert not (tmp_path / "chapters").exists() or not any((tmp_path / "chapters").iterdir())


def test_missing_novel_is_reported(tmp_path: Path) -> None:
    with pytest.raises(PublishError, match="novel file not found"):
        import_novel(tmp_path / "absent.txt", tmp_path / "chapters")


def test_large_chapter_numbers_get_wider_names(tmp_path: Path) -> None:
    novel = tmp_path / "novel.txt"
    novel.write_text("第一千零一章 长篇\n正文。\n第1002章\n正文。\n", encoding="utf-8")
    import_novel(novel, tmp_path / "chapters")
    assert sorted(p.name for p in (tmp_path / "chapters").iterdir()) == [
        "ch1001.txt",
        "ch1002.txt",
    ]


@pytest.mark.parametrize(
    ("numeral", "value"),
    [
        ("一", 1),
        ("十", 10),
        ("十二", 12),
        ("二十", 20),
        ("二十五", 25),
        ("一百", 100),
        ("一百零三", 103),
        ("一百一十", 110),
        ("两百", 200),
        ("一千零五十", 1050),
        ("三千二百", 3200),
        ("一万零一", 10001),
        ("一〇三", 103),
        ("〇", 0),
    ],
)
def test_chinese_numerals(numeral: str, value: int) -> None:
    assert chinese_number(numeral) == value


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("第十二章 风起", (12, "风起")),
        ("第12章", (12, "")),
        ("第一百零三回 归来", (103, "归来")),
        ("第 7 章 - 夜", (7, "夜")),
        ("第五章风雨", (5, "风雨")),
        ("第一回合，他就败了。", None),  # a fight, not a heading
        ("第三章节的内容", None),
        ("第三章写得很好。", None),  # a sentence
        ("他读到第一章的时候睡着了", None),  # not at the start of the line
        ("第十二章 " + "很长" * 30, None),  # too long for a heading
        ("第几章", None),
    ],
)
def test_heading_detection(line: str, expected: tuple[int, str] | None) -> None:
    assert parse_heading(line) == expected
