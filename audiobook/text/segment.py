"""Cleaned chapter → :class:`ChapterPlan`: title, scenes, paragraphs, sentences, roles, pauses.

Invariant (tested as a property): apart from removed junk lines and scene-break
lines, every non-space character of the chapter is in exactly one segment, in order.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

from audiobook.models import ChapterPlan, CleanedChapter, Role, Segment
from audiobook.settings import Pauses

TITLE_RE = re.compile(
    r"^(第[0-9０-９零〇一二两三四五六七八九十百千]+[章回节卷集篇]|chapter\s*\d+)", re.IGNORECASE
)
# A line made only of these characters (at least three of them) separates scenes.
SCENE_BREAK_RE = re.compile(r"^[…\.。·\*＊\-—=~～◆◇#＃\s]*$")
SCENE_BREAK_CHARS = frozenset("….。·*＊-—=~～◆◇#＃")

SENTENCE_END = frozenset("。！？!?；;")
CLOSERS = frozenset("”’」』\"'）)】》〉")
CLAUSE_BREAKS = frozenset("，、：,:")
QUOTE_PAIRS = {"“": "”", "「": "」", "『": "』", '"': '"'}
# Inside a short quote, any of these marks it as speech rather than a quoted term.
SPEECH_MARKS = frozenset("，。！？!?；;,…：:—")


def is_scene_break(line: str) -> bool:
    marks = sum(1 for ch in line if ch in SCENE_BREAK_CHARS)
    return marks >= 3 and bool(SCENE_BREAK_RE.match(line))


def is_title(line: str) -> bool:
    return len(line) <= 40 and bool(TITLE_RE.match(line))


@dataclass(frozen=True)
class Piece:
    """Part of a paragraph spoken by one role; may end a sentence."""

    text: str
    role: Role
    ends_sentence: bool
    quote: int | None


def build_plan(cleaned: CleanedChapter, pauses: Pauses, max_chars: int) -> ChapterPlan:
    """Split a cleaned chapter into segments of at most ``max_chars`` characters."""
    title: str | None = None
    lines = list(cleaned.lines)
    if lines and is_title(lines[0][1]):
        title = lines[0][1]

    segments: list[Segment] = []
    scene = paragraph = 0
    quotes = itertools.count()
    for _, line in lines:
        if is_scene_break(line):
            if segments and segments[-1].scene == scene:
                scene += 1
            continue
        pieces = split_paragraph(line, quotes)
        sentence = 0
        piece_no = 0
        for piece in pieces:
            for part in split_long(piece.text, max_chars):
                segments.append(
                    Segment(
                        index=len(segments),
                        text=part,
                        role=piece.role,
                        scene=scene,
                        paragraph=paragraph,
                        sentence=sentence,
                        piece=piece_no,
                        pause_ms=0,
                        quote=piece.quote,
                        voice=piece.role,
                    )
                )
                piece_no += 1
            if piece.ends_sentence:
                sentence += 1
        paragraph += 1

    return ChapterPlan(
        chapter_id=cleaned.chapter.id,
        title=title,
        segments=assign_pauses(tuple(segments), pauses),
        removed=cleaned.removed,
        source=str(cleaned.chapter.path),
    )


def assign_pauses(segments: tuple[Segment, ...], pauses: Pauses) -> tuple[Segment, ...]:
    """The silence after each segment, from what comes next (run again after voices change)."""
    result = []
    for current, following in zip(segments, (*segments[1:], None), strict=True):
        if following is None:
            pause = 0
        elif following.scene != current.scene:
            pause = pauses.scene_ms
        elif following.paragraph != current.paragraph:
            pause = pauses.paragraph_ms
        elif following.sentence != current.sentence:
            pause = pauses.sentence_ms
        else:
            pause = pauses.clause_ms
        if following is not None and following.voice != current.voice:
            pause += pauses.turn_ms
        result.append(replace(current, pause_ms=pause))
    return tuple(result)


def split_paragraph(text: str, quotes: Iterator[int] | None = None) -> list[Piece]:
    """Split one paragraph into sentence pieces with their roles.

    Quotation marks stay with the quoted text; a sentence that ends inside a
    quotation ends after its closing mark. Short quoted terms in the middle of
    narration (``曾组织“杀人比赛”。``) are read as narration, not dialogue.
    """
    quotes = quotes or itertools.count()
    pieces: list[Piece] = []
    buf: list[str] = []
    role: Role = "narrator"
    quote: int | None = None
    closer = ""
    i = 0

    def flush(ends_sentence: bool) -> None:
        chunk = "".join(buf).strip()
        buf.clear()
        if chunk:
            pieces.append(Piece(chunk, role, ends_sentence, quote))

    while i < len(text):
        ch = text[i]
        if role == "narrator" and ch in QUOTE_PAIRS:
            if _is_speech(text, i):
                flush(False)
                role, quote, closer = "dialogue", next(quotes), QUOTE_PAIRS[ch]
                buf.append(ch)
                i += 1
            else:  # a quoted term: keep it whole inside the narration
                end = text.index(QUOTE_PAIRS[ch], i + 1) + 1
                buf.append(text[i:end])
                i = end
            continue
        if role == "dialogue" and ch == closer:
            buf.append(ch)
            i += 1
            # Terminal punctuation right after the closing mark belongs to it.
            while i < len(text) and text[i] in SENTENCE_END:
                buf.append(text[i])
                i += 1
            inner = "".join(buf).rstrip()
            ends = len(inner) >= 2 and (inner[-1] in SENTENCE_END or inner[-2] in SENTENCE_END)
            flush(ends)
            role, quote = "narrator", None
            continue
        buf.append(ch)
        i += 1
        if ch in SENTENCE_END:
            while i < len(text) and text[i] in SENTENCE_END:
                buf.append(text[i])
                i += 1
            if role == "dialogue" and i < len(text) and text[i] == closer:
                continue  # the closing mark ends this sentence with the quote
            while i < len(text) and text[i] in CLOSERS and role != "dialogue":
                buf.append(text[i])
                i += 1
            flush(True)
    flush(True)
    return pieces


def _is_speech(text: str, start: int) -> bool:
    """Whether the quotation opening at ``start`` is speech rather than a quoted term."""
    closer = QUOTE_PAIRS[text[start]]
    end = text.find(closer, start + 1)
    if end == -1:
        return True  # web novels often leave a quote open to the paragraph's end
    inner = text[start + 1 : end]
    if start == 0 or text[start - 1] in "：:":
        return True
    return len(inner) > 10 or any(ch in SPEECH_MARKS for ch in inner)


def split_long(text: str, max_chars: int) -> list[str]:
    """Split text longer than ``max_chars`` into even parts, after clause marks (，、：) if any."""
    parts: list[str] = []
    rest = text
    while len(rest) > max_chars:
        target = -(-len(rest) // -(-len(rest) // max_chars))  # even share of what is left
        breaks = [i for i in range(min(max_chars, len(rest) - 1)) if _is_clause_break(rest, i)]
        near = [i for i in breaks if i >= target // 2]
        cut = min(near, key=lambda i: abs(i + 1 - target)) if near else target - 1
        # Never leave a closing mark or punctuation alone at the start of the next part.
        while cut + 1 < max_chars and (rest[cut + 1] in CLOSERS or rest[cut + 1] in CLAUSE_BREAKS):
            cut += 1
        parts.append(rest[: cut + 1])
        rest = rest[cut + 1 :]
    parts.append(rest)
    return [p for p in (part.strip() for part in parts) if p]


def _is_clause_break(text: str, i: int) -> bool:
    """A clause mark, but not the colon or comma inside a number (106:105, 8:30, 1,000)."""
    if text[i] not in CLAUSE_BREAKS:
        return False
    between_digits = 0 < i < len(text) - 1 and text[i - 1].isdigit() and text[i + 1].isdigit()
    return not between_digits
