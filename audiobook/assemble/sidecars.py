"""Chapter marks and transcript cues from the assembly offsets, and their sidecar files.

Podcast apps read chapters from the ID3 tag or from Podcasting 2.0 JSON, and
transcripts from WebVTT or SRT; all are derived from the same sample positions.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence

from audiobook.models import ChapterMark, ChapterPlan, Cue, Segment
from audiobook.settings import ChapterMarks

TITLE_LIMIT = 30
_SENTENCE_END = "。！？!?…"
_KEPT_END = "！？!?"
_CLAUSE = "，、；：,;:—"
_QUOTES = "“”‘’「」『』\"'"
_SENTENCE_RE = re.compile(rf"[^{_SENTENCE_END}]+[{_SENTENCE_END}]*|[{_SENTENCE_END}]+")


def short_title(text: str, limit: int = TITLE_LIMIT) -> str:
    """The first words of a passage, at most ``limit`` characters, cut at punctuation.

    Whole sentences are kept while they fit (a very short first sentence takes
    the next one along); a longer first sentence is cut at its last clause mark
    within the limit, and only a run without any punctuation is cut mid-phrase.
    """
    flat = "".join(ch for ch in " ".join(text.split()) if ch not in _QUOTES).strip()
    if not flat:
        return ""
    title = ""
    for sentence in _SENTENCE_RE.findall(flat):
        if len(title) + len(sentence) > limit:
            break
        title += sentence
        if len(title) >= limit // 3:
            break
    if not title:
        head = flat[:limit]
        cut = max((i for i, ch in enumerate(head) if ch in _CLAUSE), default=-1)
        if cut < limit // 3:
            return _cut_at_word(flat, limit - 1) + "…"
        title = head[:cut]
    title = title.strip().rstrip(_CLAUSE + " ")
    stripped = title.rstrip(_SENTENCE_END)
    # Keep one "！" or "？" (they carry meaning); drop "。" and "……".
    ending = title[len(stripped) : len(stripped) + 1]
    return stripped + (ending if ending in _KEPT_END else "")


def _cut_at_word(text: str, limit: int) -> str:
    """The longest run of whole words (jieba's segmentation) within ``limit`` characters."""
    import jieba  # only titles without punctuation need it; loading takes about a second

    logging.getLogger("jieba").setLevel(logging.WARNING)  # it logs dictionary loading
    result = ""
    for word in jieba.cut(text[: limit + 8]):
        if len(result) + len(word) > limit:
            break
        result += word
    return (result if len(result) >= limit // 2 else text[:limit]).rstrip()


def chapter_marks(
    plan: ChapterPlan,
    spans: Sequence[tuple[int, int]],
    sample_rate: int,
    duration_ms: int,
    mode: ChapterMarks = "scene",
) -> tuple[ChapterMark, ...]:
    """One mark per scene (or paragraph), from the first sample of its first segment.

    The first mark starts at 0, each ends where the next starts, the last ends
    at ``duration_ms``.
    """
    groups: list[list[Segment]] = []
    starts: list[int] = []
    last_key: int | None = None
    for segment, (start, _end) in zip(plan.segments, spans, strict=True):
        key = segment.scene if mode == "scene" else segment.paragraph
        if key != last_key:
            groups.append([])
            starts.append(round(start * 1000 / sample_rate))
            last_key = key
        groups[-1].append(segment)
    if starts:
        starts[0] = 0
    entries: list[tuple[int, str]] = []
    for number, (start_ms, members) in enumerate(zip(starts, groups, strict=True), start=1):
        if entries and start_ms <= entries[-1][0]:
            continue  # a group without audio: nothing to jump to
        entries.append((min(start_ms, duration_ms), _group_title(members) or str(number)))
    marks = []
    for i, (start_ms, title) in enumerate(entries):
        end_ms = entries[i + 1][0] if i + 1 < len(entries) else duration_ms
        marks.append(ChapterMark(start_ms=start_ms, end_ms=max(end_ms, start_ms), title=title))
    return tuple(marks)


def _group_title(segments: Sequence[Segment]) -> str:
    """The first words of the group's first paragraph (a heading line stays on its own)."""
    text = ""
    for segment in segments:
        if segment.paragraph != segments[0].paragraph:
            break
        text += segment.text
        if len(text) >= 3 * TITLE_LIMIT:
            break
    return short_title(text)


def transcript_cues(
    plan: ChapterPlan, spans: Sequence[tuple[int, int]], sample_rate: int
) -> tuple[Cue, ...]:
    """One cue per sentence: consecutive segments of the same paragraph and sentence."""
    cues: list[Cue] = []
    current: tuple[int, int] | None = None
    start = end = 0
    text = ""
    for segment, (seg_start, seg_end) in zip(plan.segments, spans, strict=True):
        key = (segment.paragraph, segment.sentence)
        if key != current:
            if current is not None and end > start and text.strip():
                cues.append(Cue(start / sample_rate, end / sample_rate, text.strip()))
            current, start, end, text = key, seg_start, seg_end, ""
        if seg_end > seg_start:
            if end <= start:
                start = seg_start
            end = seg_end
        text += " ".join(segment.text.split())
    if current is not None and end > start and text.strip():
        cues.append(Cue(start / sample_rate, end / sample_rate, text.strip()))
    return tuple(cues)


def chapters_json(marks: Sequence[ChapterMark]) -> str:
    """Podcasting 2.0 JSON chapters."""
    chapters = [
        {"startTime": m.start_ms / 1000, "endTime": m.end_ms / 1000, "title": m.title}
        for m in marks
    ]
    return json.dumps({"version": "1.2.0", "chapters": chapters}, ensure_ascii=False, indent=2)


def webvtt(cues: Sequence[Cue]) -> str:
    lines = ["WEBVTT", ""]
    for number, cue in enumerate(cues, start=1):
        text = cue.text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        lines += [str(number), f"{_timestamp(cue.start_s, '.')} --> {_timestamp(cue.end_s, '.')}"]
        lines += [text, ""]
    return "\n".join(lines)


def srt(cues: Sequence[Cue]) -> str:
    lines: list[str] = []
    for number, cue in enumerate(cues, start=1):
        lines += [str(number), f"{_timestamp(cue.start_s, ',')} --> {_timestamp(cue.end_s, ',')}"]
        lines += [cue.text, ""]
    return "\n".join(lines)


def _timestamp(seconds: float, separator: str) -> str:
    total_ms = max(0, round(seconds * 1000))
    hours, rest = divmod(total_ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"
