"""The one place the stages are chained: load → clean → plan → synthesize → assemble.

chapter file ─load_chapter→ Chapter ─clean_chapter→ CleanedChapter
  ─build_plan + attribute_speakers→ ChapterPlan ─engine (via SegmentCache)→ Clips
  ─assemble_chapter→ output/<id>.mp3 + sidecars → RenderResult
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Protocol

from audiobook import __version__
from audiobook.assemble import assemble_chapter
from audiobook.assemble.cache import SegmentCache
from audiobook.engines.base import Engine, SynthesisRequest
from audiobook.engines.registry import engine_class, load_engine
from audiobook.errors import SynthesisError
from audiobook.files import write_atomic
from audiobook.models import ChapterMark, ChapterPlan, Clip, RenderResult
from audiobook.settings import Settings
from audiobook.text.clean import clean_chapter
from audiobook.text.load import load_chapter
from audiobook.text.segment import assign_pauses, build_plan
from audiobook.text.speakers import attribute_speakers, load_overrides, overrides_path

log = logging.getLogger(__name__)


class Progress(Protocol):
    """What the CLI shows while segments are synthesized (a tqdm bar)."""

    def start(self, total: int, cached: int) -> None: ...

    def advance(self) -> None: ...


def plan_chapter(chapter_path: Path, settings: Settings) -> ChapterPlan:
    chapter = load_chapter(chapter_path)
    cleaned = clean_chapter(chapter, settings.cleanup)
    for line in cleaned.removed:
        log.info(
            "%s: removed line %d (rule %s): %s", chapter.id, line.line_no, line.rule, line.text
        )
    max_chars = engine_class(settings.engine).max_segment_chars
    plan = build_plan(cleaned, settings.pauses, max_chars)
    overrides = load_overrides(overrides_path(chapter_path))
    segments = attribute_speakers(plan.segments, settings.characters, overrides)
    return replace(plan, segments=assign_pauses(segments, settings.pauses))


def chapter_fingerprint(chapter_path: Path, settings: Settings) -> str:
    """Hash of everything that decides the rendered file: text, overrides, settings, version."""
    digest = hashlib.sha256()
    digest.update(chapter_path.read_bytes())
    overrides_file = overrides_path(chapter_path)
    if overrides_file.exists():
        digest.update(overrides_file.read_bytes())
    audio_settings = asdict(settings)
    # Where files go, how fast edge runs and the feed's metadata do not change the file.
    del audio_settings["paths"], audio_settings["edge"]
    book = settings.book
    cover = book.cover
    cover_id = (
        hashlib.sha256(cover.read_bytes()).hexdigest() if cover and cover.is_file() else cover
    )
    audio_settings["book"] = [book.title, book.author, cover_id]
    digest.update(json.dumps(audio_settings, sort_keys=True, default=str).encode())
    digest.update(__version__.encode())
    return digest.hexdigest()


def render_chapter(
    chapter_path: Path,
    settings: Settings,
    *,
    use_cache: bool = True,
    progress: Progress | None = None,
    engine: Engine | None = None,
) -> RenderResult:
    """Render one chapter to ``<output>/<id>.mp3`` with sidecars; skip it if nothing changed."""
    started = time.monotonic()
    output = settings.paths.output
    output.mkdir(parents=True, exist_ok=True)
    fingerprint = chapter_fingerprint(chapter_path, settings)
    mp3 = output / f"{chapter_path.stem}.mp3"
    if use_cache and (previous := _previous_render(mp3, fingerprint)) is not None:
        log.info("%s: unchanged since the last render, nothing to do", chapter_path.stem)
        total = previous.synthesized + previous.cached
        return replace(previous, synthesized=0, cached=total, wall_s=time.monotonic() - started)

    plan = plan_chapter(chapter_path, settings)
    clips, synthesized = _synthesize(plan, settings, use_cache, progress, engine)
    title = plan.title or plan.chapter_id
    track = _chapter_number(plan.chapter_id)
    duration, marks = assemble_chapter(plan, clips, settings, mp3, title=title, track=track)
    result = RenderResult(
        chapter_id=plan.chapter_id,
        title=title,
        mp3=mp3,
        duration_s=duration,
        size_bytes=mp3.stat().st_size,
        marks=marks,
        synthesized=synthesized,
        cached=len(clips) - synthesized,
        wall_s=time.monotonic() - started,
    )
    _record_render(result, fingerprint)
    return result


def synthesis_requests(plan: ChapterPlan, settings: Settings) -> list[SynthesisRequest]:
    """What the engine is asked for: each segment's text in its voice."""
    return [SynthesisRequest(s.text, settings.voice_for(s.voice)) for s in plan.segments]


def _synthesize(
    plan: ChapterPlan,
    settings: Settings,
    use_cache: bool,
    progress: Progress | None,
    engine: Engine | None,
) -> tuple[list[Clip], int]:
    """Clips for every segment: from the cache where possible, else from the engine.

    Each new clip is cached as soon as it arrives, so a killed render resumes.
    """
    name = settings.engine
    cls = engine_class(name)
    cache = SegmentCache(settings.paths.cache)
    requests = synthesis_requests(plan, settings)
    clips: list[Clip | None] = [None] * len(requests)
    keys = [cache.key(name, cls.version, r.voice, r.text) for r in requests]
    if use_cache:
        clips = [cache.get(key) for key in keys]
    missing = [i for i, clip in enumerate(clips) if clip is None]
    if progress:
        progress.start(len(clips), len(clips) - len(missing))
    if missing:
        own_engine = engine is None
        engine = engine or load_engine(settings)
        try:
            todo = [requests[i] for i in missing]
            for position, clip in engine.synthesize(todo):
                index = missing[position]
                clips[index] = clip
                if use_cache:
                    cache.put(keys[index], clip)
                if progress:
                    progress.advance()
        finally:
            if own_engine:
                engine.close()
    if any(clip is None for clip in clips):
        raise SynthesisError(
            f"{plan.chapter_id}: the {name} engine returned no audio for a segment"
        )
    return clips, len(missing)  # type: ignore[return-value]


def _chapter_number(chapter_id: str) -> int | None:
    digits = "".join(ch for ch in chapter_id if ch.isdigit())
    return int(digits) if digits else None


def _manifest_path(mp3: Path) -> Path:
    return mp3.parent / ".renders" / f"{mp3.stem}.json"


def _previous_render(mp3: Path, fingerprint: str) -> RenderResult | None:
    """The last render's result if its inputs are unchanged and its files are intact."""
    try:
        data = json.loads(_manifest_path(mp3).read_text(encoding="utf-8"))
        if data["fingerprint"] != fingerprint or mp3.stat().st_size != data["size_bytes"]:
            return None
        marks = tuple(ChapterMark(**m) for m in data["marks"])
        fields = {k: v for k, v in data.items() if k not in ("fingerprint", "marks", "mp3")}
        return RenderResult(mp3=mp3, marks=marks, **fields)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _record_render(result: RenderResult, fingerprint: str) -> None:
    path = _manifest_path(result.mp3)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = asdict(result) | {"fingerprint": fingerprint, "mp3": result.mp3.name}
    write_atomic(path, json.dumps(data, ensure_ascii=False, indent=1).encode())
