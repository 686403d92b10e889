"""A whole-novel text file → one ``chNNN.txt`` per chapter, numbered by its heading.

Web novels are often downloaded as a single file. Chapter headings look like
``第十二章 风起``, ``第12章``, ``第一百零三回``; the number in the heading (not the
position in the file) names the chapter file, so re-importing an updated novel
adds exactly the chapters that are new and leaves the others alone.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from audiobook.errors import ChapterError, PublishError
from audiobook.files import write_atomic
from audiobook.text.load import decode_text, normalize_line

log = logging.getLogger(__name__)

MAX_HEADING_CHARS = 40  # a longer line starting with 第…章 is prose, not a heading

_CN_DIGITS = {
    "〇": 0,
    "零": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_CN_UNITS = {"十": 10, "百": 100, "千": 1000}
_CN_CHARS = "".join(_CN_DIGITS) + "".join(_CN_UNITS) + "万"

_HEADING_RE = re.compile(
    rf"^第\s*(?P<number>[0-9０-９]+|[{_CN_CHARS}]+)\s*(?P<kind>[章回])(?P<rest>.*)$"
)
# "第一回合" (first round of a fight) and "第三章节" are words, not headings.
_NOT_A_TITLE_START = "合节"
# A heading is a title, not a sentence: it does not end like one.
_SENTENCE_END = "。，；、"
_TITLE_SEPARATORS = " :：、.．-—·"


@dataclass(frozen=True)
class Heading:
    number: int
    text: str  # the heading line as it appears, normalized
    line_no: int  # 1-based, in the novel file


@dataclass(frozen=True)
class ImportReport:
    """What an import did, chapter file by chapter file."""

    novel: Path
    encoding: str
    chapters_found: int
    added: tuple[Path, ...]
    unchanged: tuple[Path, ...]
    changed: tuple[Path, ...]  # differs from the novel; left as it was
    updated: tuple[Path, ...]  # differed and was overwritten (update_changed=True)
    duplicates: tuple[Heading, ...]  # a second heading with an already used number; skipped
    preface_lines: int  # non-blank lines before the first heading; not imported

    def summary(self) -> str:
        parts = [
            f"{self.chapters_found} chapters in {self.novel.name} ({self.encoding})",
            f"{len(self.added)} added",
            f"{len(self.unchanged)} unchanged",
        ]
        if self.changed:
            parts.append(f"{len(self.changed)} changed but kept (use --update-changed)")
        if self.updated:
            parts.append(f"{len(self.updated)} updated")
        if self.duplicates:
            parts.append(f"{len(self.duplicates)} duplicate headings skipped")
        if self.preface_lines:
            parts.append(f"{self.preface_lines} preface lines skipped")
        return ", ".join(parts)


def chinese_number(text: str) -> int:
    """``十二`` → 12, ``一百零三`` → 103, ``两千`` → 2000, ``一〇三`` → 103."""
    if not text or any(ch not in _CN_CHARS for ch in text):
        raise ValueError(f"not a Chinese numeral: {text!r}")
    if not any(ch in _CN_UNITS or ch == "万" for ch in text):
        # Digit-by-digit style, as in years: 一〇三.
        return int("".join(str(_CN_DIGITS[ch]) for ch in text))
    total = 0  # completed 万 groups
    section = 0  # value below 万 so far
    digit: int | None = None
    for ch in text:
        if ch in _CN_DIGITS:
            digit = _CN_DIGITS[ch]
        elif ch in _CN_UNITS:
            # A bare unit means one of it: 十二 is 12.
            section += (1 if digit is None else digit) * _CN_UNITS[ch]
            digit = None
        else:  # 万
            section += digit or 0
            total += (section or 1) * 10_000
            section, digit = 0, None
    return total + section + (digit or 0)


def parse_heading(line: str) -> tuple[int, str] | None:
    """(number, title) if ``line`` (already normalized) is a chapter heading, else None."""
    if not line or len(line) > MAX_HEADING_CHARS:
        return None
    match = _HEADING_RE.match(line)
    if match is None:
        return None
    rest = match["rest"]
    if rest and (rest[0] in _NOT_A_TITLE_START or rest[0] in _SENTENCE_END):
        return None
    if line[-1] in _SENTENCE_END:
        return None
    raw = match["number"]
    number = int(raw) if raw[0] not in _CN_CHARS else chinese_number(raw)
    return number, rest.strip(_TITLE_SEPARATORS)


def chapter_file_name(number: int) -> str:
    return f"ch{number:03d}.txt"


def split_novel(text: str) -> tuple[list[tuple[Heading, list[str]]], list[Heading], int]:
    """Chapters (heading, body lines), duplicate headings, and non-blank preface lines."""
    chapters: list[tuple[Heading, list[str]]] = []
    duplicates: list[Heading] = []
    seen: set[int] = set()
    preface = 0
    body: list[str] | None = None
    for line_no, raw in enumerate(text.split("\n"), start=1):
        line = normalize_line(raw)
        parsed = parse_heading(line)
        if parsed is not None:
            heading = Heading(number=parsed[0], text=line, line_no=line_no)
            if heading.number in seen:
                # The body of a duplicate goes nowhere, not into the previous chapter.
                duplicates.append(heading)
                body = []
                continue
            seen.add(heading.number)
            body = []
            chapters.append((heading, body))
        elif body is None:
            preface += bool(line)
        else:
            body.append(line)
    return chapters, duplicates, preface


def chapter_text(heading: Heading, body: list[str]) -> str:
    """The chapter file's content: heading first, body without blank edges."""
    lines = list(body)
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join([heading.text, "", *lines]) + "\n" if lines else heading.text + "\n"


def import_novel(novel: Path, chapters_dir: Path, *, update_changed: bool = False) -> ImportReport:
    """Split ``novel`` into ``chapters_dir/chNNN.txt`` files (UTF-8), one per heading.

    Existing chapter files that match are left untouched; ones that differ are
    reported as changed and only overwritten with ``update_changed``.
    """
    try:
        data = novel.read_bytes()
    except FileNotFoundError:
        raise PublishError(f"{novel}: novel file not found") from None
    except OSError as exc:
        raise PublishError(f"{novel}: cannot read ({exc.strerror})") from None
    text, encoding = decode_text(data, str(novel))
    chapters, duplicates, preface = split_novel(text)
    if not chapters:
        raise PublishError(
            f"{novel}: no chapter headings found (expected lines like 第一章 or 第12章)"
        )
    for dup in duplicates:
        log.warning(
            "%s line %d: chapter %d appears again (%s); kept the first one",
            novel.name,
            dup.line_no,
            dup.number,
            dup.text,
        )
    if preface:
        log.info("%s: skipped %d preface lines before the first heading", novel.name, preface)

    try:
        chapters_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PublishError(f"{chapters_dir}: cannot create folder ({exc.strerror})") from None
    added: list[Path] = []
    unchanged: list[Path] = []
    changed: list[Path] = []
    updated: list[Path] = []
    for heading, body in chapters:
        path = chapters_dir / chapter_file_name(heading.number)
        content = chapter_text(heading, body)
        if path.exists():
            if _same_text(path, content):
                unchanged.append(path)
                continue
            if not update_changed:
                log.warning("%s differs from %s; kept (use --update-changed)", path, novel.name)
                changed.append(path)
                continue
            updated.append(path)
        else:
            added.append(path)
        write_atomic(path, content.encode("utf-8"), PublishError)
    return ImportReport(
        novel=novel,
        encoding=encoding,
        chapters_found=len(chapters),
        added=tuple(added),
        unchanged=tuple(unchanged),
        changed=tuple(changed),
        updated=tuple(updated),
        duplicates=tuple(duplicates),
        preface_lines=preface,
    )


def _same_text(path: Path, content: str) -> bool:
    """Compare as text, so an existing file in another encoding or with CRLF still matches."""
    try:
        existing, _ = decode_text(path.read_bytes(), str(path))
    except (OSError, ChapterError):
        return False
    normalized = [normalize_line(line) for line in existing.split("\n")]
    return "\n".join(normalized).strip("\n") == content.strip("\n")
