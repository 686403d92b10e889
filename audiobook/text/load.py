"""Chapter files → :class:`Chapter`: find the file, guess its encoding, normalize.

Chinese novel files come as UTF-8 (with or without BOM), UTF-16 with BOM, or
GB18030/GBK; users should never have to say which.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from pathlib import Path

from audiobook.errors import ChapterError
from audiobook.models import Chapter

_BOMS = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))
_SPACES = dict.fromkeys(map(ord, "\u00a0\u3000\u2002\u2003\u2009\u202f\t"), " ")


def resolve_chapter(ref: str, chapters_dir: Path) -> Path:
    """``ch004`` → ``chapters/ch004.txt``; ``4`` → ``chapters/ch004.txt``; a path stays a path."""
    candidate = Path(ref).expanduser()
    if candidate.suffix or candidate.exists() or "/" in ref:
        if not candidate.is_file():
            raise ChapterError(f"{ref}: chapter file not found")
        return candidate
    name = f"ch{int(ref):03d}" if ref.isdigit() else ref
    path = chapters_dir / f"{name}.txt"
    if not path.is_file():
        raise ChapterError(f"{ref}: chapter not found (looked for {path})")
    return path


def load_chapter(path: Path) -> Chapter:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ChapterError(f"{path}: chapter file not found") from None
    except IsADirectoryError:
        raise ChapterError(f"{path}: is a folder, not a chapter file") from None
    except OSError as exc:
        raise ChapterError(f"{path}: cannot read ({exc.strerror})") from None
    text, encoding = decode_text(data, str(path))
    lines = tuple(normalize_line(line) for line in text.split("\n"))
    if not any(lines):
        raise ChapterError(f"{path}: has no text (only whitespace)")
    return Chapter(id=path.stem, path=path, encoding=encoding, lines=lines)


def decode_text(data: bytes, name: str) -> tuple[str, str]:
    """Decode a text file's bytes without being told the encoding; newlines become ``\\n``."""
    if not data:
        raise ChapterError(f"{name}: is empty")
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                text = data.decode(encoding)
            except UnicodeDecodeError as exc:
                raise ChapterError(f"{name}: {_bad_bytes(exc, encoding)}") from None
            return _check_text(text, name), encoding.removesuffix("-sig")
    if b"\x00" in data:
        raise ChapterError(f"{name}: not a text file (binary data)")
    try:
        return _check_text(data.decode("utf-8"), name), "utf-8"
    except UnicodeDecodeError as utf8_error:
        try:
            text = data.decode("gb18030")
        except UnicodeDecodeError:
            raise ChapterError(
                f"{name}: cannot decode: not UTF-8, UTF-16 or GB18030 "
                f"({_bad_bytes(utf8_error, 'UTF-8')})"
            ) from None
        if not _looks_chinese(text):
            raise ChapterError(
                f"{name}: cannot decode: not UTF-8, UTF-16 or GB18030 "
                f"({_bad_bytes(utf8_error, 'UTF-8')})"
            ) from None
        return _check_text(text, name), "gb18030"


def normalize_line(line: str) -> str:
    """Drop invisible characters, unify spaces, strip indentation (``　　``)."""
    line = line.translate(_ZERO_WIDTH).translate(_SPACES)
    return re.sub(r" {2,}", " ", line).strip()


def _check_text(text: str, name: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    controls = sum(1 for ch in text if unicodedata.category(ch) == "Cc" and ch not in "\n\t\f")
    if controls > max(2, len(text) // 1000):
        raise ChapterError(f"{name}: not a text file (binary data)")
    if not text.strip(" \t\n\f\u3000\u00a0\u200b\ufeff"):
        raise ChapterError(f"{name}: has no text (only whitespace)")
    return text


def _looks_chinese(text: str) -> bool:
    """GB18030 decodes many non-Chinese byte strings; accept only plausible text."""
    letters = [ch for ch in text if not ch.isspace()]
    if not letters:
        return True
    plausible = sum(
        1
        for ch in letters
        if ch.isascii() or "\u4e00" <= ch <= "\u9fff" or unicodedata.category(ch).startswith("P")
    )
    return plausible / len(letters) >= 0.9


def _bad_bytes(exc: UnicodeDecodeError, encoding: str) -> str:
    bad = exc.object[exc.start : exc.start + 1].hex()
    return f"invalid {encoding} byte 0x{bad} at offset {exc.start}"
