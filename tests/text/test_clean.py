from __future__ import annotations

from pathlib import Path

from audiobook.settings import Cleanup
from audiobook.text.clean import clean_chapter
from audiobook.text.load import load_chapter
from tests.conftest import CHAPTERS


def _chapter(tmp_path: Path, text: str):
    path = tmp_path / "ch001.txt"
    path.write_text(text, encoding="utf-8")
    return load_chapter(path)


def test_ch000_site_advertisement_is_removed_and_reported() -> None:
    cleaned = clean_chapter(load_chapter(CHAPTERS / "ch000.txt"), Cleanup())
    assert len(cleaned.removed) == 1
    removed = cleaned.removed[0]
    assert "www.dibaquxiaoshuo.com" in removed.text
    assert removed.line_no == 50
    assert all("dibaquxiaoshuo" not in text for _, text in cleaned.lines)


def test_ch004_story_text_is_kept_whole() -> None:
    chapter = load_chapter(CHAPTERS / "ch004.txt")
    cleaned = clean_chapter(chapter, Cleanup())
    assert cleaned.removed == ()
    assert len(cleaned.lines) == sum(1 for line in chapter.lines if line)


def test_boilerplate_lines_are_removed_but_story_mentions_are_not(tmp_path: Path) -> None:
    junk = [
        "本章未完，请点击下一页继续阅读",
        "求推荐票，求月票！",
        "最新章节请到笔趣阁阅读",
        "手机用户请浏览m.biquge.la阅读",
        "请大家收藏本书",
        "http://example.org/book/123",
    ]
    story = ["他把这幅画收藏了很多年。", "团长推荐他去读军校。", "这是手机，不是收音机。"]
    cleaned = clean_chapter(_chapter(tmp_path, "\n".join(story + junk)), Cleanup())
    assert [text for _, text in cleaned.lines] == story
    assert [r.text for r in cleaned.removed] == junk
    assert all(r.rule for r in cleaned.removed)


def test_rules_can_be_disabled_and_added(tmp_path: Path) -> None:
    chapter = _chapter(tmp_path, "请大家收藏本书\n某某小说网独家连载\n正文。")
    settings = Cleanup(disable=("bookmark",), rules=(("mysite", "某某小说网"),))
    cleaned = clean_chapter(chapter, settings)
    assert [text for _, text in cleaned.lines] == ["请大家收藏本书", "正文。"]
    assert [(r.text, r.rule) for r in cleaned.removed] == [("某某小说网独家连载", "mysite")]
    off = clean_chapter(chapter, Cleanup(default_rules=False))
    assert off.removed == ()
