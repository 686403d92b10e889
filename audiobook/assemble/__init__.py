"""Clips → a chapter MP3 with ID3 chapter marks, plus JSON chapters and VTT/SRT transcripts.

:func:`assemble_chapter` is the stage's one entry point. Every file is written
to a temporary name in the output folder and renamed into place only when all
of them are complete, so a failure leaves the previous render untouched.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from mutagen import MutagenError
from mutagen.mp3 import MP3
from pydub import AudioSegment

from audiobook import __version__
from audiobook.assemble.ffmpeg import configure_pydub, encode_mp3, encoder_gain_db
from audiobook.assemble.id3 import Tags, read_cover, write_tags
from audiobook.assemble.mix import Mix, common_rate, mix_chapter
from audiobook.assemble.sidecars import (
    chapter_marks,
    chapters_json,
    srt,
    transcript_cues,
    webvtt,
)
from audiobook.errors import AssemblyError
from audiobook.models import ChapterMark, ChapterPlan, Clip, sidecar_paths
from audiobook.settings import Settings

__all__ = ["assemble_chapter"]

log = logging.getLogger(__name__)


def assemble_chapter(
    plan: ChapterPlan,
    clips: Sequence[Clip],
    settings: Settings,
    mp3_path: Path,
    *,
    title: str,
    track: int | None,
) -> tuple[float, tuple[ChapterMark, ...]]:
    """Write ``mp3_path`` and its sidecars from one clip per segment of ``plan``.

    Returns the file's duration in seconds and its chapter marks. Raises
    :class:`AssemblyError` (previous files untouched) if anything fails.
    """
    mp3_path = Path(mp3_path)
    finals = [*sidecar_paths(mp3_path), mp3_path]  # the MP3 last: its presence means "done"
    # Fail before the expensive part on what would otherwise stop the final renames.
    cover = read_cover(settings.book.cover) if settings.book.cover else None
    for final in finals:
        if final.is_dir():
            raise AssemblyError(f"cannot write {final.name}: a folder of that name is in the way")
    gain_db = encoder_gain_db(common_rate(clips), settings.mp3) if clips else 0.0
    mix = mix_chapter(plan, clips, settings, gain_db)
    log.debug(
        "%s: %.1f s, %.1f LUFS, %.1f dBTP before encoding",
        plan.chapter_id,
        mix.duration_s,
        mix.loudness_lufs,
        mix.true_peak_dbtp,
    )
    folder = mp3_path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AssemblyError(f"cannot create output folder {folder}: {exc.strerror}") from None

    temps: list[Path] = []
    try:
        temp_mp3 = _new_temp(mp3_path, temps)
        configure_pydub()
        audio = AudioSegment(
            data=mix.samples.tobytes(), sample_width=2, frame_rate=mix.sample_rate, channels=1
        )
        encode_mp3(audio, temp_mp3, settings.mp3)
        del audio
        duration_s = _encoded_duration(temp_mp3, mix)
        duration_ms = round(duration_s * 1000)
        marks = chapter_marks(plan, mix.spans, mix.sample_rate, duration_ms, settings.chapter_marks)
        tags = Tags(
            title=title,
            album=settings.book.title,
            author=settings.book.author,
            track=track,
            duration_ms=duration_ms,
            comment=f"audiobook {__version__}",
            cover=cover,
        )
        write_tags(temp_mp3, tags, marks)
        cues = transcript_cues(plan, mix.spans, mix.sample_rate)
        texts = (chapters_json(marks), webvtt(cues), srt(cues))
        sidecar_temps = [_new_temp(path, temps) for path in finals[:3]]
        for temp, text in zip(sidecar_temps, texts, strict=True):
            temp.write_text(text + "\n", encoding="utf-8")
        for temp, final in zip([*sidecar_temps, temp_mp3], finals, strict=True):
            os.replace(temp, final)
            temps.remove(temp)
    except BaseException as exc:  # Ctrl-C included: never leave temporaries behind
        _remove(temps)
        if isinstance(exc, OSError):
            name = Path(exc.filename).name if exc.filename else mp3_path.name
            raise AssemblyError(f"cannot write {name} in {folder}: {exc.strerror or exc}") from None
        raise
    return duration_s, marks


def _new_temp(final: Path, temps: list[Path]) -> Path:
    """An empty file beside ``final``, created with the usual permissions (umask applies)."""
    temp = final.with_name(f".{final.name}.{secrets.token_hex(4)}.part")
    os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    temps.append(temp)
    return temp


def _remove(paths: list[Path]) -> None:
    for path in paths:
        try:
            path.unlink()
        except OSError:
            log.debug("could not remove temporary %s", path)


def _encoded_duration(mp3: Path, mix: Mix) -> float:
    """Duration from the Info header's frame count, as mutagen, ffprobe and most players see it.

    It includes the encoder's delay and padding (< 70 ms) because ffmpeg's LAME
    tag is not one mutagen trusts; gapless decoders play exactly ``mix.duration_s``.
    """
    try:
        duration = float(MP3(mp3).info.length)
    except (MutagenError, OSError) as exc:
        raise AssemblyError(f"the encoded MP3 is unreadable: {exc}") from None
    if not mix.duration_s - 0.01 < duration < mix.duration_s + 0.1:
        log.warning("encoded %.3f s of audio but assembled %.3f s", duration, mix.duration_s)
    return duration
