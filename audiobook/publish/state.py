"""What has been published: one record per rendered chapter, in ``output/state.json``.

The batch job reads it to decide what to render, the feed reads it for pubDate,
guid and duration. Written atomically after every chapter, so a crash or a kill
mid-batch loses at most the chapter being rendered.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from audiobook.errors import PublishError
from audiobook.files import write_atomic
from audiobook.models import RenderResult

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
STATE_VERSION = 1


@dataclass(frozen=True)
class ChapterRecord:
    """The last successful render of one chapter, and when it was first published."""

    chapter_id: str  # "ch004"
    number: int
    title: str
    guid: str  # fixed at first publication, never recomputed
    fingerprint: str  # of the inputs of the last successful render
    mp3: str  # file name inside the output folder
    duration_s: float
    size_bytes: int
    first_published: datetime  # UTC; never changes on re-render
    rendered_at: datetime  # UTC

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["first_published"] = self.first_published.isoformat()
        data["rendered_at"] = self.rendered_at.isoformat()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChapterRecord:
        return cls(
            chapter_id=str(data["chapter_id"]),
            number=int(data["number"]),
            title=str(data["title"]),
            guid=str(data["guid"]),
            fingerprint=str(data["fingerprint"]),
            mp3=str(data["mp3"]),
            duration_s=float(data["duration_s"]),
            size_bytes=int(data["size_bytes"]),
            first_published=_utc(data["first_published"]),
            rendered_at=_utc(data["rendered_at"]),
        )


@dataclass(frozen=True)
class BatchState:
    """All records, ordered by chapter number."""

    records: tuple[ChapterRecord, ...] = ()

    def get(self, chapter_id: str) -> ChapterRecord | None:
        return next((r for r in self.records if r.chapter_id == chapter_id), None)

    def with_render(
        self, result: RenderResult, number: int, fingerprint: str, guid: str, now: datetime
    ) -> BatchState:
        """Record a successful render; first publication time and guid stay as they were.

        A new chapter is published at least a second after the newest one, so
        chapters rendered in the same second still get distinct, ordered pubDates
        (RSS dates have one-second resolution; apps sort by them).
        """
        previous = self.get(result.chapter_id)
        if previous is None and self.records:
            latest = max(r.first_published for r in self.records)
            published = max(now, latest + timedelta(seconds=1))
        else:
            published = now
        record = ChapterRecord(
            chapter_id=result.chapter_id,
            number=number,
            title=result.title,
            guid=previous.guid if previous else guid,
            fingerprint=fingerprint,
            mp3=result.mp3.name,
            duration_s=result.duration_s,
            size_bytes=result.size_bytes,
            first_published=previous.first_published if previous else published,
            rendered_at=now,
        )
        return self.with_record(record)

    def with_record(self, record: ChapterRecord) -> BatchState:
        others = [r for r in self.records if r.chapter_id != record.chapter_id]
        records = sorted([*others, record], key=lambda r: (r.number, r.chapter_id))
        return replace(self, records=tuple(records))


def state_path(output_dir: Path) -> Path:
    return output_dir / STATE_FILE


def load_state(output_dir: Path) -> BatchState:
    """The saved state, or an empty one if nothing was published yet."""
    path = state_path(output_dir)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return BatchState()
    except OSError as exc:
        raise PublishError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        data = json.loads(raw)
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"unknown version {data.get('version')!r}")
        records = tuple(ChapterRecord.from_dict(r) for r in data["chapters"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        # Guessing here would re-date or re-guid published episodes; make a person look.
        raise PublishError(
            f"{path}: damaged ({exc}); restore it from a backup, or delete it to re-render "
            "and re-publish every chapter"
        ) from None
    return BatchState(records=tuple(sorted(records, key=lambda r: (r.number, r.chapter_id))))


def save_state(output_dir: Path, state: BatchState) -> Path:
    path = state_path(output_dir)
    data = {"version": STATE_VERSION, "chapters": [r.to_dict() for r in state.records]}
    text = json.dumps(data, ensure_ascii=False, indent=1) + "\n"
    write_atomic(path, text.encode("utf-8"), PublishError)
    return path


def _utc(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"time without a timezone: {value}")
    return parsed.astimezone(UTC)
