"""A small HTTP server for ``output/``, to try the feed in a real podcast app on the LAN.

Podcast apps seek with Range requests, so those are answered with 206 and the
exact bytes. Only regular files inside the served folder are reachable: no
``..`` (plain or percent-encoded), no symlinks pointing out, no hidden files
(the lock, temporary files, the render manifests).
"""

from __future__ import annotations

import email.utils
import logging
import os
import re
from functools import partial
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlsplit

from audiobook.errors import PublishError
from audiobook.publish.feed import FEED_FILE

log = logging.getLogger(__name__)

CHUNK = 64 * 1024
# Longest suffix first: "ch001.chapters.json" is a chapters file, not any JSON.
MIME_TYPES = (
    (".chapters.json", "application/json+chapters"),
    (".mp3", "audio/mpeg"),
    (".xml", "application/rss+xml; charset=utf-8"),
    (".json", "application/json"),
    (".vtt", "text/vtt; charset=utf-8"),
    (".srt", "application/x-subrip; charset=utf-8"),
    (".jpg", "image/jpeg"),
    (".jpeg", "image/jpeg"),
    (".png", "image/png"),
    (".txt", "text/plain; charset=utf-8"),
)
_RANGE_RE = re.compile(r"^bytes=(\d*)-(\d*)$")


def content_type(name: str) -> str:
    lower = name.lower()
    for suffix, mime in MIME_TYPES:
        if lower.endswith(suffix):
            return mime
    return "application/octet-stream"


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """Inclusive (first, last) byte of one range; None means serve the whole file.

    Raises ValueError when the range cannot be satisfied (→ 416).
    Several ranges at once are answered with the whole file, which RFC 9110 allows.
    """
    match = _RANGE_RE.match(header.strip().replace(" ", ""))
    if match is None:
        return None  # not a single byte range we understand: ignore it, as RFC 9110 allows
    first_raw, last_raw = match.groups()
    if not first_raw and not last_raw:
        return None
    if not first_raw:  # suffix range: the last N bytes
        length = int(last_raw)
        if length == 0 or size == 0:
            raise ValueError("empty suffix range")
        return max(size - length, 0), size - 1
    first = int(first_raw)
    last = int(last_raw) if last_raw else size - 1
    if last_raw and last < first:
        return None  # syntactically invalid: ignored
    if first >= size:
        raise ValueError("range starts after the end of the file")
    return first, min(last, size - 1)


class OutputHandler(BaseHTTPRequestHandler):
    """GET and HEAD for files in one folder."""

    server_version = "audiobook"
    protocol_version = "HTTP/1.1"  # keep-alive: apps fetch many ranges of one file

    def __init__(self, *args: Any, root: Path, **kwargs: Any) -> None:
        self.root = root
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:
        self._serve(send_body=True)

    def do_HEAD(self) -> None:
        self._serve(send_body=False)

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), format % args)

    def _serve(self, send_body: bool) -> None:
        raw_path = urlsplit(self.path).path
        if raw_path == "/":
            self._redirect("/" + FEED_FILE)
            return
        target = self._resolve(raw_path)
        if target is None:
            self._error(HTTPStatus.NOT_FOUND)
            return
        try:
            handle = target.open("rb")
        except OSError:
            self._error(HTTPStatus.NOT_FOUND)
            return
        with handle:
            stat = os.fstat(handle.fileno())
            size = stat.st_size
            etag = f'"{stat.st_mtime_ns:x}-{size:x}"'
            last_modified = email.utils.formatdate(stat.st_mtime, usegmt=True)
            wanted: tuple[int, int] | None = None
            header = self.headers.get("Range")
            if header and self._if_range_matches(etag, last_modified):
                try:
                    wanted = parse_range(header, size)
                except ValueError:
                    self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
            first, last = wanted if wanted else (0, size - 1)
            length = last - first + 1 if size else 0
            self.send_response(HTTPStatus.PARTIAL_CONTENT if wanted else HTTPStatus.OK)
            self.send_header("Content-Type", content_type(target.name))
            self.send_header("Content-Length", str(length))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", etag)
            self.send_header("Last-Modified", last_modified)
            if wanted:
                self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
            self.end_headers()
            if send_body and length:
                self._copy(handle, first, length)

    def _resolve(self, raw_path: str) -> Path | None:
        """The file a URL path names, or None if it is not a visible file inside the root."""
        # Decoded before checking, so %2e%2e is refused like "..".
        parts = [p for p in unquote(raw_path).split("/") if p]
        if not parts or any(
            p in (".", "..") or p.startswith(".") or "\\" in p or "\x00" in p for p in parts
        ):
            return None
        candidate = self.root.joinpath(*parts)
        try:
            resolved = candidate.resolve(strict=True)
        except (OSError, RuntimeError):
            return None
        # A symlink inside the folder may point anywhere; only its target counts.
        if not resolved.is_relative_to(self.root) or not resolved.is_file():
            return None
        return resolved

    def _if_range_matches(self, etag: str, last_modified: str) -> bool:
        """An If-Range naming an older version means: send the whole new file."""
        validator = self.headers.get("If-Range")
        return validator is None or validator.strip() in (etag, last_modified)

    def _copy(self, handle: BinaryIO, first: int, length: int) -> None:
        handle.seek(first)
        remaining = length
        try:
            while remaining:
                chunk = handle.read(min(CHUNK, remaining))
                if not chunk:
                    break
                self.wfile.write(chunk)
                remaining -= len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            # Podcast apps drop connections when they seek elsewhere; not an error.
            self.close_connection = True

    def _redirect(self, location: str) -> None:
        self.send_response(HTTPStatus.FOUND)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _error(self, status: HTTPStatus) -> None:
        body = f"{status.value} {status.phrase}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def make_server(directory: Path, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    """A server bound to ``host:port`` (port 0: any free port) serving ``directory``.

    Call ``serve_forever()`` on it (in a thread, for tests) and ``server_close()`` after.
    """
    if not directory.is_dir():
        raise PublishError(f"{directory}: output folder not found; run 'audiobook batch' first")
    root = directory.resolve()
    handler = partial(OutputHandler, root=root)
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        raise PublishError(f"cannot listen on {host}:{port} ({exc.strerror})") from None
    server.daemon_threads = True
    return server


def serve(directory: Path, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve ``directory`` until interrupted (Ctrl-C raises KeyboardInterrupt to the caller)."""
    server = make_server(directory, host, port)
    bound_host, bound_port = server.server_address[:2]
    log.info("serving %s at http://%s:%d/%s", directory, bound_host, bound_port, FEED_FILE)
    try:
        server.serve_forever()
    finally:
        server.server_close()
