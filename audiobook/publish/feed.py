"""Batch state → ``output/feed.xml``, an RSS 2.0 podcast feed listeners subscribe to.

Built with feedgen and its podcast (itunes) extension; the Podcasting 2.0 tags
(``podcast:chapters``, ``podcast:transcript``) and the ``true``/``false`` form
of ``itunes:explicit`` come from the small extension below, since feedgen knows
neither. Everything in the feed derives from the state and the files on disk,
so writing it twice gives the same bytes.
"""

from __future__ import annotations

import hashlib
import logging
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

from feedgen.ext.base import BaseEntryExtension, BaseExtension
from feedgen.feed import FeedGenerator
from feedgen.util import xml_elem

from audiobook import __version__
from audiobook.errors import PublishError
from audiobook.files import write_atomic
from audiobook.publish.state import BatchState, ChapterRecord
from audiobook.settings import Settings

log = logging.getLogger(__name__)

FEED_FILE = "feed.xml"
ITUNES_NS = "http://www.itunes.com/dtds/podcast-1.0.dtd"
PODCAST_NS = "https://podcastindex.org/namespace/1.0"

# Sidecar suffix → MIME type, as the Podcasting 2.0 namespace names them.
CHAPTERS_SUFFIX, CHAPTERS_TYPE = ".chapters.json", "application/json+chapters"
TRANSCRIPTS = ((".vtt", "text/vtt"), (".srt", "application/x-subrip"))
# Apple's top-level podcast categories; a feed with any other is refused by Apple Podcasts.
ITUNES_CATEGORIES = (
    "Arts",
    "Business",
    "Comedy",
    "Education",
    "Fiction",
    "Government",
    "Health & Fitness",
    "History",
    "Kids & Family",
    "Leisure",
    "Music",
    "News",
    "Religion & Spirituality",
    "Science",
    "Society & Culture",
    "Sports",
    "Technology",
    "True Crime",
    "TV & Film",
)
COVER_SUFFIXES = {".jpg": ".jpg", ".jpeg": ".jpg", ".png": ".png"}


class PodcastIndexExtension(BaseExtension):
    """Channel tags feedgen lacks: ``itunes:explicit`` as Apple now spells it."""

    def __init__(self) -> None:
        self.explicit: bool | None = None

    def extend_ns(self) -> dict[str, str]:
        return {"itunes": ITUNES_NS, "podcast": PODCAST_NS}

    def extend_rss(self, feed: Any) -> Any:
        if self.explicit is not None:
            channel = feed[0]
            xml_elem(f"{{{ITUNES_NS}}}explicit", channel).text = str(self.explicit).lower()
        return feed


class PodcastIndexEntryExtension(BaseEntryExtension):
    """Item tags: ``podcast:chapters`` and one ``podcast:transcript`` per format."""

    def __init__(self) -> None:
        self.chapters_url: str | None = None
        self.transcripts: list[tuple[str, str]] = []  # (url, MIME type)
        self.language: str | None = None

    def extend_rss(self, item: Any) -> Any:
        if self.chapters_url:
            chapters = xml_elem(f"{{{PODCAST_NS}}}chapters", item)
            chapters.attrib["url"] = self.chapters_url
            chapters.attrib["type"] = CHAPTERS_TYPE
        for url, mime in self.transcripts:
            transcript = xml_elem(f"{{{PODCAST_NS}}}transcript", item)
            transcript.attrib["url"] = url
            transcript.attrib["type"] = mime
            if self.language:
                transcript.attrib["language"] = self.language
            # Time-coded files: apps may show them as captions while playing.
            transcript.attrib["rel"] = "captions"
        return item


def episode_guid(book_title: str, chapter_id: str) -> str:
    """The guid given to a chapter at first publication; stored, never recomputed."""
    slug = re.sub(r"[^\w]+", "-", book_title.lower()).strip("-") or "book"
    return f"urn:audiobook:{slug}:{chapter_id}"


def feed_url(settings: Settings) -> str:
    return public_url(settings, FEED_FILE)


def public_url(settings: Settings, name: str) -> str:
    """Absolute URL of a file in the output folder, from ``book.base_url``."""
    base = settings.book.base_url
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise PublishError(
            f"book.base_url '{base}' must be an absolute http(s) URL, "
            "like 'http://192.168.1.10:8000/' or 'https://example.com/book/'"
        )
    return urljoin(base if base.endswith("/") else base + "/", quote(name))


def build_feed(settings: Settings, state: BatchState) -> bytes:
    """The feed's XML for every recorded chapter whose MP3 is in the output folder."""
    book = settings.book
    output = settings.paths.output
    fg = FeedGenerator()
    fg.load_extension("podcast")
    fg.register_extension("podcastindex", PodcastIndexExtension, PodcastIndexEntryExtension)

    fg.title(book.title)
    fg.description(book.description or book.title)  # RSS requires one
    fg.language(book.language)
    fg.link(href=feed_url(settings), rel="self", type="application/rss+xml")
    fg.link(href=public_url(settings, ""), rel="alternate")  # last one is RSS <link>
    fg.generator("audiobook", __version__)
    fg.podcast.itunes_type("serial")
    fg.podcastindex.explicit = book.explicit
    if book.author:
        fg.podcast.itunes_author(book.author)
    fg.podcast.itunes_category(_category(book.category))
    if (cover := _publish_cover(settings)) is not None:
        url = public_url(settings, cover)
        fg.podcast.itunes_image(url)
        fg.image(url=url, title=book.title, link=public_url(settings, ""))

    published = [r for r in state.records if _mp3_size(output, r) is not None]
    for record in state.records:
        if record not in published:
            log.warning("%s: %s is missing; left out of the feed", record.chapter_id, record.mp3)
    # The same state must give the same bytes, so the build date is the last change.
    last = max((r.rendered_at for r in published), default=datetime(1970, 1, 1, tzinfo=UTC))
    fg.lastBuildDate(last)
    for record in published:  # feedgen prepends: newest ends up first
        _add_item(fg, settings, record)
    return fg.rss_str(pretty=True, encoding="UTF-8", xml_declaration=True)


def write_feed(settings: Settings, state: BatchState) -> Path:
    """Write ``output/feed.xml`` atomically; an unchanged feed keeps its file (and mtime)."""
    path = settings.paths.output / FEED_FILE
    data = build_feed(settings, state)
    try:
        if path.read_bytes() == data:
            return path
    except OSError:
        pass
    write_atomic(path, data, PublishError)
    log.info("feed: %s (%d episodes)", path, data.count(b"<item>"))
    return path


def _add_item(fg: FeedGenerator, settings: Settings, record: ChapterRecord) -> None:
    output = settings.paths.output
    entry = fg.add_entry()
    entry.guid(record.guid, permalink=False)
    entry.title(record.title)
    entry.pubDate(record.first_published)
    size = _mp3_size(output, record)
    entry.enclosure(public_url(settings, record.mp3), str(size), "audio/mpeg")
    entry.podcast.itunes_duration(round(record.duration_s))
    if record.number > 0:  # Apple allows only 1, 2, 3…; a ch000 prologue goes unnumbered
        entry.podcast.itunes_episode(record.number)
    entry.podcast.itunes_episode_type("full")
    stem = Path(record.mp3).stem
    ext = entry.podcastindex
    ext.language = settings.book.language
    if (output / f"{stem}{CHAPTERS_SUFFIX}").is_file():
        ext.chapters_url = public_url(settings, f"{stem}{CHAPTERS_SUFFIX}")
    for suffix, mime in TRANSCRIPTS:
        if (output / f"{stem}{suffix}").is_file():
            ext.transcripts.append((public_url(settings, f"{stem}{suffix}"), mime))


def _category(value: str) -> dict[str, str]:
    """``"Arts/Books"`` → itunes:category Arts with subcategory Books."""
    category, _, sub = (part.strip() for part in value.partition("/"))
    if category not in ITUNES_CATEGORIES:
        raise PublishError(
            f"book.category '{value}' is not an Apple Podcasts category; use one of "
            f"{', '.join(ITUNES_CATEGORIES)}, optionally with a subcategory like 'Arts/Books'"
        )
    return {"cat": category, "sub": sub} if sub else {"cat": category}


def _mp3_size(output: Path, record: ChapterRecord) -> int | None:
    """Exact size on disk now: a re-render may have changed it since the state was saved."""
    try:
        return (output / record.mp3).stat().st_size
    except OSError:
        return None


def _publish_cover(settings: Settings) -> str | None:
    """Copy the configured cover into the output folder; its file name there, or None.

    The name carries a content hash because podcast apps cache artwork by URL.
    """
    cover = settings.book.cover
    if cover is None:
        return None
    suffix = COVER_SUFFIXES.get(cover.suffix.lower())
    if suffix is None:
        log.warning("book.cover %s: podcast apps need a .jpg or .png; no cover in the feed", cover)
        return None
    try:
        data = cover.read_bytes()
    except OSError as exc:
        log.warning("book.cover %s: cannot read (%s); no cover in the feed", cover, exc.strerror)
        return None
    name = f"cover-{hashlib.sha256(data).hexdigest()[:10]}{suffix}"
    target = settings.paths.output / name
    if not target.is_file():
        write_atomic(target, data, PublishError)
    return name
