from __future__ import annotations

import http.client
import io
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import podcastparser
import pytest

from audiobook.errors import PublishError
from audiobook.pipeline import chapter_fingerprint
from audiobook.publish.batch import run_batch
from audiobook.publish.serve import make_server, parse_range
from audiobook.settings import Settings
from tests.publish.conftest import SHORT_CHAPTERS, ffmpeg_render, write_chapters

AUDIO = bytes(range(256)) * 40  # 10240 bytes, every offset distinguishable
SECRET = b"outside the output folder"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    output = tmp_path / "output"
    (output / "sub").mkdir(parents=True)
    (output / "ch001.mp3").write_bytes(AUDIO)
    (output / "feed.xml").write_bytes(b"<rss/>")
    (output / "ch001.vtt").write_text("WEBVTT\n", encoding="utf-8")
    (output / "ch001.srt").write_text("1\n", encoding="utf-8")
    (output / "ch001.chapters.json").write_text("{}", encoding="utf-8")
    (output / "章节 一.mp3").write_bytes(b"abc")
    (output / ".batch.lock").write_text('{"pid": 1}', encoding="utf-8")
    (output / "sub" / "inner.txt").write_text("inner", encoding="utf-8")
    (tmp_path / "secret.txt").write_bytes(SECRET)
    (output / "link-out").symlink_to(tmp_path / "secret.txt")
    (output / "link-in.mp3").symlink_to(output / "ch001.mp3")
    return output


def start(folder: Path) -> tuple[str, int, threading.Thread, object]:
    server = make_server(folder, "127.0.0.1", 0)
    # A short poll interval lets shutdown() return at once.
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    return host, port, thread, server


@pytest.fixture
def conn(site: Path) -> Iterator[http.client.HTTPConnection]:
    host, port, thread, server = start(site)
    connection = http.client.HTTPConnection(host, port, timeout=10)
    yield connection
    connection.close()
    server.shutdown()
    server.server_close()
    thread.join(5)


def get(conn: http.client.HTTPConnection, path: str, method: str = "GET", **headers: str):
    conn.request(method, path, headers=headers)
    response = conn.getresponse()
    return response, response.read()


def test_range_request_returns_exact_bytes(conn: http.client.HTTPConnection) -> None:
    response, body = get(conn, "/ch001.mp3", Range="bytes=100-199")

    assert response.status == 206
    assert body == AUDIO[100:200]
    assert response.getheader("Content-Range") == f"bytes 100-199/{len(AUDIO)}"
    assert response.getheader("Content-Length") == "100"
    assert response.getheader("Accept-Ranges") == "bytes"
    assert response.getheader("Content-Type") == "audio/mpeg"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("bytes=-500", slice(len(AUDIO) - 500, None)),  # last 500 bytes
        ("bytes=10000-", slice(10000, None)),  # to the end
        ("bytes=10000-999999", slice(10000, None)),  # end clamped to the file
        ("bytes=0-0", slice(0, 1)),
        ("bytes=-999999", slice(0, None)),  # suffix longer than the file
    ],
)
def test_range_forms_podcast_apps_send(
    conn: http.client.HTTPConnection, header: str, expected: slice
) -> None:
    response, body = get(conn, "/ch001.mp3", Range=header)

    assert response.status == 206
    assert body == AUDIO[expected]
    first = expected.start
    assert response.getheader("Content-Range") == (
        f"bytes {first}-{first + len(body) - 1}/{len(AUDIO)}"
    )


@pytest.mark.parametrize("header", ["bytes=10240-", "bytes=20000-20100", "bytes=-0"])
def test_unsatisfiable_range_is_416(conn: http.client.HTTPConnection, header: str) -> None:
    response, body = get(conn, "/ch001.mp3", Range=header)

    assert response.status == 416
    assert response.getheader("Content-Range") == f"bytes */{len(AUDIO)}"
    assert body == b""


def test_whole_file_and_keep_alive(conn: http.client.HTTPConnection) -> None:
    for _ in range(2):  # the second request reuses the connection
        response, body = get(conn, "/ch001.mp3")
        assert response.status == 200
        assert body == AUDIO
        assert response.getheader("Accept-Ranges") == "bytes"


def test_stale_if_range_gets_the_whole_file(conn: http.client.HTTPConnection) -> None:
    response, _ = get(conn, "/ch001.mp3", method="HEAD")
    etag = response.getheader("ETag")

    current, body = get(conn, "/ch001.mp3", Range="bytes=0-9", **{"If-Range": etag})
    assert (current.status, body) == (206, AUDIO[:10])
    stale, body = get(conn, "/ch001.mp3", Range="bytes=0-9", **{"If-Range": '"old"'})
    assert (stale.status, body) == (200, AUDIO)


def test_head_has_headers_and_no_body(conn: http.client.HTTPConnection) -> None:
    response, body = get(conn, "/ch001.mp3", method="HEAD")

    assert response.status == 200
    assert body == b""
    assert response.getheader("Content-Length") == str(len(AUDIO))


@pytest.mark.parametrize(
    ("path", "mime"),
    [
        ("/feed.xml", "application/rss+xml; charset=utf-8"),
        ("/ch001.vtt", "text/vtt; charset=utf-8"),
        ("/ch001.srt", "application/x-subrip; charset=utf-8"),
        ("/ch001.chapters.json", "application/json+chapters"),
        ("/%E7%AB%A0%E8%8A%82%20%E4%B8%80.mp3", "audio/mpeg"),  # 章节 一.mp3
        ("/link-in.mp3", "audio/mpeg"),  # a symlink that stays inside is fine
        ("/sub/inner.txt", "text/plain; charset=utf-8"),
    ],
)
def test_mime_types(conn: http.client.HTTPConnection, path: str, mime: str) -> None:
    response, _ = get(conn, path)
    assert response.status == 200
    assert response.getheader("Content-Type") == mime


@pytest.mark.parametrize(
    "path",
    [
        "/../secret.txt",
        "/sub/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E%2Fsecret.txt",
        "/sub/%2e%2e/%2e%2e/secret.txt",
        "/..%2f..%2fsecret.txt",
        "/link-out",  # symlink pointing outside
        "/.batch.lock",  # hidden: the lock, temporary files, manifests
        "/sub",  # folders are not listed
        "/nothing.mp3",
        "//etc/passwd",
    ],
)
def test_nothing_outside_output_is_reachable(conn: http.client.HTTPConnection, path: str) -> None:
    response, body = get(conn, path)

    assert response.status == 404
    assert SECRET not in body


def test_root_redirects_to_the_feed(conn: http.client.HTTPConnection) -> None:
    response, _ = get(conn, "/")
    assert response.status == 302
    assert response.getheader("Location") == "/feed.xml"


def test_podcast_app_flow_over_http(book: Settings) -> None:
    """Subscribe to the served feed, then seek inside an episode with a Range request."""
    write_chapters(book.paths.chapters, {1: SHORT_CHAPTERS[1], 2: SHORT_CHAPTERS[2]})
    book.paths.output.mkdir(parents=True)
    host, port, thread, server = start(book.paths.output)
    try:
        served = replace(book, book=replace(book.book, base_url=f"http://{host}:{port}/"))
        run_batch(served, render=ffmpeg_render, fingerprint=chapter_fingerprint)
        connection = http.client.HTTPConnection(host, port, timeout=10)
        response, feed = get(connection, "/feed.xml")
        assert response.status == 200
        podcast = podcastparser.parse(f"http://{host}:{port}/feed.xml", io.BytesIO(feed))
        assert len(podcast["episodes"]) == 2
        for episode in podcast["episodes"]:
            enclosure = episode["enclosures"][0]
            path = enclosure["url"].removeprefix(f"http://{host}:{port}")
            head, _ = get(connection, path, method="HEAD")
            assert int(head.getheader("Content-Length")) == enclosure["file_size"]
            on_disk = (book.paths.output / Path(path).name).read_bytes()
            middle = len(on_disk) // 2
            response, body = get(connection, path, Range=f"bytes={middle}-")
            assert response.status == 206
            assert body == on_disk[middle:]
        connection.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_parse_range_ignores_what_it_does_not_understand() -> None:
    assert parse_range("bytes=0-1,5-6", 100) is None  # multiple ranges: whole file
    assert parse_range("items=0-1", 100) is None
    assert parse_range("bytes=9-3", 100) is None
    assert parse_range("bytes = 5 - 9", 100) == (5, 9)


def test_missing_folder_is_reported(tmp_path: Path) -> None:
    with pytest.raises(PublishError, match="output folder not found"):
        make_server(tmp_path / "nope", "127.0.0.1", 0)
