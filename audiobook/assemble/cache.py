"""Synthesized segments on disk, keyed by everything that decides how they sound.

An entry is the clip's raw PCM behind a small header (magic, sample rate,
lengths, CRC-32 of the rest), so a cached segment is never decoded or encoded
again and a damaged one is recognised. Entries are written to a temporary file
and renamed into place: a render killed at any moment leaves either a complete
entry or none, and the next render resumes from what is there.

Layout: ``<root>/segments/ab/abcdef….pcm``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import struct
import unicodedata
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

from audiobook.models import Clip, Voice

log = logging.getLogger(__name__)

_MAGIC = b"ABSEG\x00"
_FORMAT = 1
# magic, format, sample rate, PCM bytes, boundaries bytes, CRC-32 of PCM + boundaries
_HEADER = struct.Struct("<6sHIQII")
_SUFFIX = ".pcm"
_TEMP_SUFFIX = ".part"


@dataclass(frozen=True)
class CacheStats:
    entries: int
    bytes: int


def normalize_text(text: str) -> str:
    """The text as an engine reads it: same characters, whitespace not significant."""
    return " ".join(unicodedata.normalize("NFC", text).split())


class SegmentCache:
    """Clips stored under ``root``; safe to share between concurrent renders."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.segments = self.root / "segments"

    @staticmethod
    def key(engine: str, engine_version: str, voice: Voice, text: str) -> str:
        """sha256 over a canonical JSON of what decides the audio."""
        identity = {
            "engine": engine,
            "engine_version": engine_version,
            "voice": asdict(voice),
            "text": normalize_text(text),
        }
        canonical = json.dumps(identity, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def path(self, key: str) -> Path:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"not a cache key: {key!r}")
        return self.segments / key[:2] / f"{key}{_SUFFIX}"

    def get(self, key: str) -> Clip | None:
        """The cached clip, or None if absent or damaged (a damaged entry is deleted)."""
        path = self.path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cache entry %s unreadable (%s); synthesizing again", key[:12], exc)
            return None
        clip, problem = _decode(data)
        if clip is None:
            log.warning("cache entry %s is damaged (%s); synthesizing again", key[:12], problem)
            _unlink(path)
        return clip

    def put(self, key: str, clip: Clip) -> None:
        """Store atomically: a crash mid-write leaves at most a stray temporary file."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f"{path.name}.{secrets.token_hex(4)}{_TEMP_SUFFIX}")
        try:
            with open(temp, "wb") as f:
                f.write(_encode(clip))
            os.replace(temp, path)
        except BaseException:
            _unlink(temp)
            raise

    def clear(self) -> int:
        """Delete every entry (and leftovers of interrupted writes); the number of entries."""
        removed = 0
        for path in self._files():
            if path.name.endswith(_SUFFIX):
                removed += 1
            _unlink(path)
        if self.segments.is_dir():
            for folder in self.segments.iterdir():
                # Not empty when another render just added an entry: leave it.
                if folder.is_dir():
                    with contextlib.suppress(OSError):
                        folder.rmdir()
        return removed

    def stats(self) -> CacheStats:
        entries = size = 0
        for path in self._files():
            if path.name.endswith(_SUFFIX):
                try:
                    size += path.stat().st_size
                except FileNotFoundError:
                    continue
                entries += 1
        return CacheStats(entries=entries, bytes=size)

    def _files(self) -> list[Path]:
        if not self.segments.is_dir():
            return []
        return [
            p for folder in self.segments.iterdir() if folder.is_dir() for p in folder.iterdir()
        ]


def _encode(clip: Clip) -> bytes:
    boundaries = (
        json.dumps(clip.boundaries, ensure_ascii=False).encode() if clip.boundaries else b""
    )
    crc = zlib.crc32(boundaries, zlib.crc32(clip.pcm))
    header = _HEADER.pack(_MAGIC, _FORMAT, clip.sample_rate, len(clip.pcm), len(boundaries), crc)
    return header + clip.pcm + boundaries


def _decode(data: bytes) -> tuple[Clip | None, str]:
    if len(data) < _HEADER.size:
        return None, f"{len(data)} bytes, shorter than its header"
    magic, version, rate, pcm_len, extra_len, crc = _HEADER.unpack_from(data)
    if magic != _MAGIC or version != _FORMAT:
        return None, "not a segment file of this version"
    if len(data) != _HEADER.size + pcm_len + extra_len:
        return (
            None,
            f"{len(data)} bytes where the header promises {_HEADER.size + pcm_len + extra_len}",
        )
    if rate <= 0 or pcm_len % 2:
        return None, "impossible sample rate or length"
    body = memoryview(data)[_HEADER.size :]
    pcm = bytes(body[:pcm_len])
    extra = bytes(body[pcm_len:])
    if zlib.crc32(extra, zlib.crc32(pcm)) != crc:
        return None, "checksum mismatch"
    try:
        boundaries = tuple((float(t), str(w)) for t, w in json.loads(extra)) if extra else ()
    except (ValueError, TypeError):
        return None, "unreadable word boundaries"
    return Clip(pcm=pcm, sample_rate=rate, boundaries=boundaries), ""


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot delete %s: %s", path, exc)
