"""Frozen dataclasses handed from one stage of the pipeline to the next.

text loading → :class:`Chapter`; cleanup → :class:`CleanedChapter`;
segmentation → :class:`ChapterPlan` of :class:`Segment`; engines → :class:`Clip`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Role = Literal["narrator", "dialogue"]
ROLES: tuple[Role, ...] = ("narrator", "dialogue")


@dataclass(frozen=True)
class Chapter:
    """A chapter's text as decoded and normalized from its file."""

    id: str  # e.g. "ch004"
    path: Path
    encoding: str
    lines: tuple[str, ...]  # normalized, without line breaks; blank lines kept


@dataclass(frozen=True)
class RemovedLine:
    """A line the cleanup rules took out, reported so nothing vanishes silently."""

    line_no: int  # 1-based, in the source file
    text: str
    rule: str


@dataclass(frozen=True)
class CleanedChapter:
    chapter: Chapter
    lines: tuple[tuple[int, str], ...]  # (1-based line number, text) of kept, non-blank lines
    removed: tuple[RemovedLine, ...]


@dataclass(frozen=True)
class Segment:
    """One piece of text sent to an engine in one request, and the pause after it."""

    index: int  # position in the chapter, 0-based
    text: str
    role: Role
    scene: int  # 0-based
    paragraph: int  # 0-based, counted over the whole chapter
    sentence: int  # 0-based, within the paragraph
    piece: int  # 0-based, within the paragraph
    pause_ms: int  # silence after this segment
    quote: int | None = None  # index of the quotation this text belongs to, if dialogue
    speaker: str | None = None  # attributed character, if any
    speaker_rule: str | None = None  # why: which attribution rule matched
    voice: str = "narrator"  # key into Settings.voices: a role or a character name

    @property
    def id(self) -> str:
        """Stable id for overrides: paragraph.piece, 1-based as a user counts."""
        return f"{self.paragraph + 1}.{self.piece + 1}"


@dataclass(frozen=True)
class ChapterPlan:
    """Exactly how a chapter will be read aloud."""

    chapter_id: str
    title: str | None
    segments: tuple[Segment, ...]
    removed: tuple[RemovedLine, ...] = ()
    source: str = ""

    @property
    def scene_count(self) -> int:
        return len({s.scene for s in self.segments})

    @property
    def paragraph_count(self) -> int:
        return len({s.paragraph for s in self.segments})

    def to_dict(self) -> dict[str, Any]:
        return {
            "chapter_id": self.chapter_id,
            "title": self.title,
            "source": self.source,
            "scenes": self.scene_count,
            "paragraphs": self.paragraph_count,
            "segments": [asdict(s) | {"id": s.id} for s in self.segments],
            "removed": [asdict(r) for r in self.removed],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChapterPlan:
        fields = Segment.__dataclass_fields__
        return cls(
            chapter_id=data["chapter_id"],
            title=data.get("title"),
            source=data.get("source", ""),
            segments=tuple(
                Segment(**{k: v for k, v in s.items() if k in fields}) for s in data["segments"]
            ),
            removed=tuple(RemovedLine(**r) for r in data.get("removed", [])),
        )


@dataclass(frozen=True)
class Clip:
    """Synthesized audio for one segment: 16-bit signed little-endian mono PCM."""

    pcm: bytes
    sample_rate: int
    boundaries: tuple[tuple[float, str], ...] = field(default=())  # (offset s, word) if known

    @property
    def duration(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate


@dataclass(frozen=True)
class Voice:
    """How one role or character sounds, in edge-tts's formats for both engines.

    The local engine maps the same values onto its model's speed, f0 and energy
    inputs, so one voices.toml works with either engine.
    """

    edge_voice: str = "zh-CN-XiaoxiaoNeural"
    rate: str = "+0%"  # speaking rate change, e.g. "+10%"
    pitch: str = "+0Hz"  # pitch shift, e.g. "-5Hz"
    volume: str = "+0%"  # loudness change, e.g. "-10%"

    @property
    def rate_percent(self) -> int:
        return int(self.rate[:-1])

    @property
    def pitch_hz(self) -> int:
        return int(self.pitch[:-2])

    @property
    def volume_percent(self) -> int:
        return int(self.volume[:-1])


@dataclass(frozen=True)
class ChapterMark:
    """One entry of the chapter list podcast apps show (ID3 CHAP, JSON chapters)."""

    start_ms: int
    end_ms: int
    title: str


@dataclass(frozen=True)
class Cue:
    """One timed line of the transcript (VTT/SRT)."""

    start_s: float
    end_s: float
    text: str


@dataclass(frozen=True)
class RenderResult:
    """What a finished render produced, for the summary line, batch state and the feed."""

    chapter_id: str
    title: str
    mp3: Path
    duration_s: float
    size_bytes: int
    marks: tuple[ChapterMark, ...]
    synthesized: int  # segments sent to the engine
    cached: int  # segments taken from the cache
    wall_s: float

    @property
    def rtf(self) -> float:
        return self.wall_s / self.duration_s if self.duration_s else 0.0

    @property
    def chapters_json(self) -> Path:
        return sidecar_paths(self.mp3)[0]

    @property
    def vtt(self) -> Path:
        return sidecar_paths(self.mp3)[1]

    @property
    def srt(self) -> Path:
        return sidecar_paths(self.mp3)[2]


def sidecar_paths(mp3: Path) -> tuple[Path, Path, Path]:
    """``<stem>.chapters.json``, ``<stem>.vtt``, ``<stem>.srt`` next to the MP3."""
    return mp3.with_suffix(".chapters.json"), mp3.with_suffix(".vtt"), mp3.with_suffix(".srt")
