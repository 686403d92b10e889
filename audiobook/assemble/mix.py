"""Clips → one chapter of PCM: trim, resample, pause, match voices, normalize, limit.

Everything happens on float32 numpy arrays at the clips' own sample rate (all
clips of a render come from one engine); ffmpeg resamples to the MP3 rate in the
same run that encodes, so the audio is decoded, joined and encoded exactly once.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from audiobook.assemble import loudness
from audiobook.errors import AssemblyError
from audiobook.models import ChapterPlan, Clip
from audiobook.settings import Settings

log = logging.getLogger(__name__)

TRIM_FRAME_MS = 10
TRIM_THRESHOLD_DB = -45.0  # relative to the clip's loudest frame: engines pad with near-silence
TRIM_KEEP_MS = 20  # left on both sides so soft onsets and word endings are not clipped
TAIL_MS = 500  # after the last segment, so players do not cut the final syllable
# Headroom below the configured true-peak ceiling for what resampling to the MP3
# rate and MP3 coding add to peaks.
ENCODER_HEADROOM_DB = 1.0
LOUDNESS_TOLERANCE_LU = 0.1


@dataclass(frozen=True, eq=False)
class Mix:
    """A chapter's assembled audio and where each segment's speech sits in it."""

    samples: np.ndarray  # int16, mono
    sample_rate: int
    spans: tuple[tuple[int, int], ...]  # per segment: [first, last) sample of its speech
    loudness_lufs: float
    true_peak_dbtp: float
    voice_gains_db: dict[str, float]

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate

    def seconds(self, sample: int) -> float:
        return sample / self.sample_rate


def trim_bounds(samples: np.ndarray, sample_rate: int) -> tuple[int, int]:
    """[start, end) of the part of a clip louder than its padding, plus a few ms.

    Works on int16 or float samples; the threshold is relative to the clip's own peak.
    """
    frame = max(1, sample_rate * TRIM_FRAME_MS // 1000)
    whole = len(samples) // frame * frame
    if not whole:
        return 0, len(samples)
    body = samples[:whole].reshape(-1, frame)
    peaks = np.maximum(body.max(axis=1).astype(np.float32), -body.min(axis=1).astype(np.float32))
    loudest = float(peaks.max())
    full_scale = 32768.0 if samples.dtype == np.int16 else 1.0
    if loudest <= full_scale * 1e-4:  # below −80 dBFS: nothing but padding
        return 0, 0
    voiced = np.flatnonzero(peaks >= loudest * 10 ** (TRIM_THRESHOLD_DB / 20))
    keep = sample_rate * TRIM_KEEP_MS // 1000
    start = max(0, int(voiced[0]) * frame - keep)
    end = len(samples) if voiced[-1] == len(peaks) - 1 else (int(voiced[-1]) + 1) * frame + keep
    return start, min(len(samples), end)


def resample(samples: np.ndarray, source_rate: int, target_rate: int) -> np.ndarray:
    """Band-limited resampling by FFT; clean here because trimmed clips start and end quietly."""
    if source_rate == target_rate or not len(samples):
        return samples
    unit = source_rate // math.gcd(source_rate, target_rate)
    padded_len = -(-len(samples) // unit) * unit
    out_len = padded_len * target_rate // source_rate
    spectrum = np.fft.rfft(samples, padded_len)
    result = np.fft.irfft(spectrum, out_len) * (out_len / padded_len)
    return result[: round(len(samples) * target_rate / source_rate)].astype(np.float32)


def mix_chapter(
    plan: ChapterPlan, clips: Sequence[Clip], settings: Settings, encoder_gain_db: float = 0.0
) -> Mix:
    """Join a chapter's clips with their pauses, at matched and normalized loudness.

    ``encoder_gain_db`` is the level change the MP3 encoder will add; loudness
    and peak targets are offset by it so they hold for the encoded file.
    """
    segments = plan.segments
    if len(clips) != len(segments):
        raise AssemblyError(f"{plan.chapter_id}: {len(clips)} clips for {len(segments)} segments")
    if not segments:
        raise AssemblyError(f"{plan.chapter_id}: nothing to assemble (no segments)")
    rate = common_rate(clips)

    pieces: list[np.ndarray] = []
    for clip in clips:
        pcm = np.frombuffer(clip.pcm, dtype="<i2")
        start, end = trim_bounds(pcm, clip.sample_rate)
        piece = pcm[start:end].astype(np.float32) / 32768.0
        pieces.append(resample(piece, clip.sample_rate, rate))

    spans: list[tuple[int, int]] = []
    position = 0
    for i, (segment, piece) in enumerate(zip(segments, pieces, strict=True)):
        spans.append((position, position + len(piece)))
        pause_ms = segment.pause_ms if i < len(segments) - 1 else TAIL_MS
        position += len(piece) + round(max(0, pause_ms) * rate / 1000)
    samples = np.zeros(position, dtype=np.float32)
    for (start, end), piece in zip(spans, pieces, strict=True):
        samples[start:end] = piece
    del pieces

    voices = list(dict.fromkeys(s.voice for s in segments))
    owner = np.array([voices.index(s.voice) for s in segments], dtype=np.int64)
    span_array = np.array(spans, dtype=np.int64).reshape(-1, 2)
    energies = loudness.measure(samples, rate, span_array, owner, len(voices))

    target = settings.loudness.target_lufs - encoder_gain_db
    voice_gain_db: dict[str, float] = {}
    for v, name in enumerate(voices):
        measured = loudness.gated_loudness(energies.owners[v], rate)
        if math.isinf(measured):
            voice_gain_db[name] = 0.0
            continue
        # Voices are matched to each other, then a deliberate `volume` in voices.toml
        # is honoured as an offset from the matched level.
        voice_gain_db[name] = target - measured + _volume_offset_db(settings, name)
        log.debug("voice %s: %.1f LUFS, gain %+.1f dB", name, measured, voice_gain_db[name])

    gains = np.array([10 ** (voice_gain_db[name] / 20) for name in voices] + [1.0])
    chapter_energy = (gains[:, None] ** 2 * energies.timeline).sum(axis=0)
    measured = loudness.gated_loudness(chapter_energy, rate)
    if math.isinf(measured):
        raise AssemblyError(f"{plan.chapter_id}: every clip is silent; nothing to normalize")
    overall_db = target - measured
    for (start, end), v in zip(spans, owner, strict=True):
        samples[start:end] *= gains[v] * 10 ** (overall_db / 20)
    chapter_energy *= 10 ** (overall_db / 10)

    # Never above −0.1 dBFS: the PCM itself must not clip whatever the encoder does.
    ceiling = min(settings.loudness.true_peak_dbtp - ENCODER_HEADROOM_DB - encoder_gain_db, -0.1)
    result_lufs = target
    peak_dbtp: float | None = None
    for attempt in range(4):
        limited = loudness.limit(samples, rate, ceiling)
        peak_dbtp = limited.peak_dbtp
        if not len(limited.subblocks):
            break
        loudness.reweigh(samples, rate, limited.subblocks, chapter_energy)
        result_lufs = loudness.gated_loudness(chapter_energy, rate)
        log.debug("limited %.1f dB, loudness now %.2f LUFS", limited.reduction_db, result_lufs)
        shortfall = target - result_lufs
        if shortfall <= LOUDNESS_TOLERANCE_LU or attempt == 3:
            break
        # Peak limiting took some loudness away: make it up and limit again.
        samples *= 10 ** (shortfall / 20)
        chapter_energy *= 10 ** (shortfall / 10)

    if peak_dbtp is None:
        peak_dbtp = loudness.true_peak(samples, rate)
    np.multiply(samples, 32767.0, out=samples)
    np.clip(samples, -32768, 32767, out=samples)
    np.rint(samples, out=samples)
    pcm = samples.astype(np.int16)
    del samples
    return Mix(
        samples=pcm,
        sample_rate=rate,
        spans=tuple(spans),
        loudness_lufs=result_lufs,
        true_peak_dbtp=peak_dbtp,
        voice_gains_db={k: v + overall_db for k, v in voice_gain_db.items()},
    )


def common_rate(clips: Sequence[Clip]) -> int:
    """The rate most clips already have, so at most a few need resampling."""
    counts = Counter(c.sample_rate for c in clips)
    return max(counts, key=lambda rate: (counts[rate], rate))


def _volume_offset_db(settings: Settings, voice_name: str) -> float:
    try:
        percent = settings.voice_for(voice_name).volume_percent
    except KeyError:
        return 0.0
    return 20 * math.log10(max(1 + percent / 100, 0.01))
