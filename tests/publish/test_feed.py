from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import feedparser
import mutagen.mp3
import podcastparser
import pytest
from lxml import etree

from audiobook.errors import PublishError
from audiobook.pipeline import chapter_fingerprint
from audiobook.publish.batch import run_batch
from audiobook.publish.feed import ITUNES_NS, PODCAST_NS, build_feed, write_feed
from audiobook.publish.state import load_state
from audiobook.settings import Settings
from tests.publish.conftest import SHORT_CHAPTERS, ffmpeg_render, write_chapters

NS = {"itunes": ITUNES_NS, "podcast": PODCAST_NS, "atom": "http://www.w3.org/2005/Atom"}


@pytest.fixture
def published(book: Settings) -> Settings:
    """Three chapters rendered by a batch run; the feed is in output/feed.xml."""
    write_chapters(book.paths.chapters, SHORT_CHAPTERS)
    run_batch(book, render=ffmpeg_render, fingerprint=chapter_fingerprint)
    return book


def feed_bytes(settings: Settings) -> bytes:
    return (settings.paths.output / "feed.xml").read_bytes()


def test_feed_parses_with_feedparser(published: Settings) -> None:
    output = published.paths.output
    parsed = feedparser.parse(feed_bytes(published))

    assert not parsed.bozo, parsed.get("bozo_exception")
    assert parsed.version == "rss20"
    assert PODCAST_NS in parsed.namespaces.values()
    assert ITUNES_NS in parsed.namespaces.values()
    channel = parsed.feed
    assert channel.title == "四合院：测试之书"
    assert channel.author == "测试作者"
    assert channel.subtitle == "用来测试的有声书"
    assert channel.language == "zh-cn"
    assert len(parsed.entries) == 3
    for entry in parsed.entries:
        number = int(entry.itunes_episode)
        mp3 = output / f"ch{number:03d}.mp3"
        (enclosure,) = entry.enclosures
        assert enclosure.href == f"http://192.168.1.20:8000/book/ch{number:03d}.mp3"
        assert enclosure.type == "audio/mpeg"
        assert int(enclosure.length) == mp3.stat().st_size
        assert entry.title == SHORT_CHAPTERS[number].splitlines()[0]
        assert entry.id == f"urn:audiobook:四合院-测试之书:ch{number:03d}"
        assert entry.guidislink is False
        assert int(entry.itunes_duration) == round(mutagen.mp3.MP3(mp3).info.length)
    assert sorted(int(e.itunes_episode) for e in parsed.entries) == [1, 2, 3]


def test_feed_parses_with_podcastparser(published: Settings) -> None:
    output = published.paths.output
    url = "http://192.168.1.20:8000/book/feed.xml"
    parsed = podcastparser.parse(url, io.BytesIO(feed_bytes(published)))

    assert parsed["title"] == "四合院：测试之书"
    assert parsed["type"] == "serial"
    assert parsed["explicit"] is False
    assert len(parsed["episodes"]) == 3
    for episode in parsed["episodes"]:
        number = episode["number"]
        mp3 = output / f"ch{number:03d}.mp3"
        (enclosure,) = episode["enclosures"]
        assert enclosure["file_size"] == mp3.stat().st_size
        assert enclosure["mime_type"] == "audio/mpeg"
        assert enclosure["url"].endswith(f"/ch{number:03d}.mp3")
        assert episode["guid"] == f"urn:audiobook:四合院-测试之书:ch{number:03d}"
        assert episode["type"] == "full"
        assert episode["total_time"] == round(mutagen.mp3.MP3(mp3).info.length)
        assert episode["published"] > 0
    assert sorted(e["number"] for e in parsed["episodes"]) == [1, 2, 3]


def test_feed_has_channel_and_podcasting20_tags(published: Settings) -> None:
    root = etree.fromstring(feed_bytes(published))
    channel = root.find("channel")
    assert channel is not None

    assert channel.findtext("itunes:type", namespaces=NS) == "serial"
    assert channel.findtext("itunes:explicit", namespaces=NS) == "false"
    assert channel.find("itunes:category", NS).get("text") == "Arts"
    self_link = channel.find("atom:link[@rel='self']", NS)
    assert self_link.get("href") == "http://192.168.1.20:8000/book/feed.xml"
    assert self_link.get("type") == "application/rss+xml"
    for item in channel.iter("item"):
        stem = Path(item.find("enclosure").get("url")).stem
        assert item.findtext("itunes:episodeType", namespaces=NS) == "full"
        chapters = item.find("podcast:chapters", NS)
        assert chapters.get("type") == "application/json+chapters"
        assert chapters.get("url") == f"http://192.168.1.20:8000/book/{stem}.chapters.json"
        transcripts = {t.get("type"): t.get("url") for t in item.findall("podcast:transcript", NS)}
        assert transcripts == {
            "text/vtt": f"http://192.168.1.20:8000/book/{stem}.vtt",
            "application/x-subrip": f"http://192.168.1.20:8000/book/{stem}.srt",
        }
        # Every URL in the feed names a file that is really in the output folder.
        for url in [item.find("enclosure").get("url"), chapters.get("url"), *transcripts.values()]:
            assert (published.paths.output / Path(url).name).is_file()


def test_guids_and_pubdates_stay_when_chapter_or_book_title_changes(published: Settings) -> None:
    before = {e.id: e.published for e in feedparser.parse(feed_bytes(published)).entries}
    (published.paths.chapters / "ch002.txt").write_text(
        SHORT_CHAPTERS[2] + "后来又下了三天的雨。\n", encoding="utf-8"
    )
    renamed = replace(published, book=replace(published.book, title="新书名"))

    report = run_batch(renamed, render=ffmpeg_render, fingerprint=chapter_fingerprint)

    # The title is in every MP3's tags, so every chapter is rendered again...
    assert [o.chapter_id for o in report.rendered] == ["ch001", "ch002", "ch003"]
    parsed = feedparser.parse(feed_bytes(published))
    assert parsed.feed.title == "新书名"
    # ...yet listeners' apps see the same episodes, not three new ones.
    assert {e.id: e.published for e in parsed.entries} == before
    for entry in parsed.entries:
        mp3 = published.paths.output / Path(entry.enclosures[0].href).name
        assert int(entry.enclosures[0].length) == mp3.stat().st_size


def test_items_without_mp3_are_left_out(published: Settings) -> None:
    (published.paths.output / "ch001.mp3").unlink()

    parsed = feedparser.parse(build_feed(published, load_state(published.paths.output)))

    assert sorted(e.itunes_episode for e in parsed.entries) == ["2", "3"]


def test_cover_is_published_with_the_feed(published: Settings, tmp_path: Path) -> None:
    cover = tmp_path / "my cover.JPG"
    cover.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg, but bytes are bytes")
    with_cover = replace(
        published,
        book=replace(published.book, cover=cover, explicit=True, category="Arts/Books"),
    )

    path = write_feed(with_cover, load_state(published.paths.output))

    channel = etree.fromstring(path.read_bytes()).find("channel")
    href = channel.find("itunes:image", NS).get("href")
    assert href.startswith("http://192.168.1.20:8000/book/cover-") and href.endswith(".jpg")
    assert (published.paths.output / Path(href).name).read_bytes() == cover.read_bytes()
    assert channel.findtext("itunes:explicit", namespaces=NS) == "true"
    category = channel.find("itunes:category", NS)
    assert [category.get("text"), category.find("itunes:category", NS).get("text")] == [
        "Arts",
        "Books",
    ]


def test_bad_settings_are_reported(published: Settings) -> None:
    state = load_state(published.paths.output)
    with pytest.raises(PublishError, match="base_url 'localhost:8000'"):
        build_feed(
            replace(published, book=replace(published.book, base_url="localhost:8000")), state
        )
    with pytest.raises(PublishError, match=r"book\.category 'Novels'"):
        build_feed(replace(published, book=replace(published.book, category="Novels")), state)


def test_feed_of_an_empty_state_is_valid(book: Settings) -> None:
    book.paths.output.mkdir(parents=True)
    parsed = feedparser.parse(build_feed(book, load_state(book.paths.output)))
    assert not parsed.bozo
    assert parsed.entries == []


def test_prologue_chapter_zero_is_published_without_episode_number(book: Settings) -> None:
    write_chapters(book.paths.chapters, {0: "楔子\n\n很久以前。\n", 1: SHORT_CHAPTERS[1]})
    run_batch(book, render=ffmpeg_render, fingerprint=chapter_fingerprint)

    url = "http://192.168.1.20:8000/book/feed.xml"
    parsed = podcastparser.parse(url, io.BytesIO(feed_bytes(book)))

    numbers = {e["title"]: e.get("number") for e in parsed["episodes"]}
    assert numbers == {"楔子": None, "第一章 进城": 1}
