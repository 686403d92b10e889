from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from audiobook.assemble import loudness
from audiobook.assemble.mix import TAIL_MS, mix_chapter, resample, trim_bounds
from audiobook.errors import AssemblyError
from audiobook.models import Clip
from audiobook.settings import Loudness, Settings, Voice
from tests.assemble.helpers import (
    PAD_S,
    RATE,
    build_plan,
    make_clip,
    make_clips,
    syllables,
    to_clip,
)


def as_float(samples: np.ndarray) -> np.ndarray:
    return samples.astype(np.float32) / 32768


def voice_loudness(plan, mix, voice: str) -> float:
    parts = [
        as_float(mix.samples[start:end])
        for segment, (start, end) in zip(plan.segments, mix.spans, strict=True)
        if segment.voice == voice
    ]
    return loudness.integrated_loudness(np.concatenate(parts), mix.sample_rate)


def test_trim_removes_engine_padding_but_keeps_the_speech() -> None:
    rng = np.random.default_rng(0)
    speech = syllables(5, 150.0, 0.3, rng)
    pad = np.zeros(int(0.4 * RATE), dtype=np.float32)
    hiss = (rng.standard_normal(len(pad)) * 1e-4).astype(np.float32)  # −80 dB of room tone
    clip = np.concatenate([pad + hiss, speech, pad + hiss])
    start, end = trim_bounds(clip, RATE)
    kept = clip[start:end]
    assert len(pad) - 0.05 * RATE <= start <= len(pad)  # a few ms of lead-in, no more
    assert len(clip) - len(pad) <= end <= len(clip) - len(pad) + 0.05 * RATE
    assert np.sum(kept**2) >= 0.999 * np.sum(speech**2)


def test_trim_of_a_silent_clip_keeps_nothing() -> None:
    assert trim_bounds(np.zeros(RATE, dtype=np.int16), RATE) == (0, 0)


def test_resample_keeps_pitch_and_duration() -> None:
    t = np.arange(22050) / 22050
    tone = (0.5 * np.sin(2 * np.pi * 440 * t) * np.hanning(len(t))).astype(np.float32)
    out = resample(tone, 22050, 24000)
    assert len(out) == 24000
    spectrum = np.abs(np.fft.rfft(out))
    assert np.argmax(spectrum) * 24000 / len(out) == pytest.approx(440, abs=2)
    assert np.sqrt(np.mean(out**2)) == pytest.approx(np.sqrt(np.mean(tone**2)), rel=0.01)


def test_pauses_between_segments_are_the_planned_ones() -> None:
    plan = build_plan()
    mix = mix_chapter(plan, make_clips(plan), Settings())
    for segment, (_, end), (next_start, _) in zip(
        plan.segments, mix.spans, mix.spans[1:], strict=False
    ):
        gap_ms = (next_start - end) * 1000 / mix.sample_rate
        assert gap_ms == pytest.approx(segment.pause_ms, abs=1)
    assert len(mix.samples) - mix.spans[-1][1] == round(TAIL_MS * mix.sample_rate / 1000)
    # The padding is gone: each segment lasts about as long as its speech.
    for segment, (start, end) in zip(plan.segments, mix.spans, strict=True):
        speech_s = sum(ch.isalnum() for ch in segment.text) * 0.16
        assert speech_s <= (end - start) / mix.sample_rate <= speech_s + 0.06
    # And the pauses really are silent.
    for (_, end), (next_start, _) in zip(mix.spans, mix.spans[1:], strict=False):
        assert np.abs(mix.samples[end:next_start]).max() == 0


def test_voices_are_matched_and_the_chapter_normalized() -> None:
    plan = build_plan()
    clips = make_clips(plan)
    narrator_in = voice_loudness(plan, mix_chapter(plan, clips, Settings()), "narrator")
    raw = [np.frombuffer(c.pcm, "<i2") for c in clips]
    raw_gap = loudness.integrated_loudness(
        as_float(
            np.concatenate(
                [r for r, s in zip(raw, plan.segments, strict=True) if s.voice == "dialogue"]
            )
        ),
        RATE,
    ) - loudness.integrated_loudness(
        as_float(
            np.concatenate(
                [r for r, s in zip(raw, plan.segments, strict=True) if s.voice == "narrator"]
            )
        ),
        RATE,
    )
    assert raw_gap > 10  # the dialogue voice comes in much louder

    mix = mix_chapter(plan, clips, Settings())
    assert abs(voice_loudness(plan, mix, "dialogue") - voice_loudness(plan, mix, "narrator")) < 0.5
    assert narrator_in == pytest.approx(voice_loudness(plan, mix, "narrator"), abs=0.01)
    measured = loudness.integrated_loudness(as_float(mix.samples), mix.sample_rate)
    assert measured == pytest.approx(-16.0, abs=0.1)
    assert mix.loudness_lufs == pytest.approx(measured, abs=0.1)
    assert loudness.true_peak(as_float(mix.samples), mix.sample_rate) <= -2.0 + 0.05


def test_configured_volume_survives_matching() -> None:
    plan = build_plan()
    settings = replace(Settings(), dialogue=Voice(edge_voice="zh-CN-XiaoxiaoNeural", volume="-50%"))
    mix = mix_chapter(plan, make_clips(plan), settings)
    difference = voice_loudness(plan, mix, "narrator") - voice_loudness(plan, mix, "dialogue")
    assert difference == pytest.approx(-20 * np.log10(0.5), abs=0.5)


def test_target_and_encoder_gain_are_honoured() -> None:
    plan = build_plan()
    settings = replace(Settings(), loudness=Loudness(target_lufs=-20.0, true_peak_dbtp=-3.0))
    mix = mix_chapter(plan, make_clips(plan), settings, encoder_gain_db=-0.5)
    samples = as_float(mix.samples)
    # Louder by what the encoder will take away.
    assert loudness.integrated_loudness(samples, mix.sample_rate) == pytest.approx(-19.5, abs=0.1)
    assert loudness.true_peak(samples, mix.sample_rate) <= -3.0 - 1.0 + 0.5 + 0.05


def test_loud_clicks_are_limited_without_losing_loudness() -> None:
    plan = build_plan()
    rng = np.random.default_rng(5)
    clips = []
    for clip in make_clips(plan):
        x = np.frombuffer(clip.pcm, "<i2").astype(np.float32) / 32768
        start = int(PAD_S * RATE)
        for at in rng.integers(start, len(x) - start - 240, 4):
            x[at : at + 240] += rng.standard_normal(240) * np.exp(-np.arange(240) / 40) * 0.9
        clips.append(to_clip(x))
    mix = mix_chapter(plan, clips, Settings())
    samples = as_float(mix.samples)
    assert loudness.true_peak(samples, mix.sample_rate) <= -2.0 + 0.05
    assert loudness.integrated_loudness(samples, mix.sample_rate) == pytest.approx(-16.0, abs=0.2)


def test_mixed_sample_rates_are_resampled_to_the_common_one() -> None:
    plan = build_plan()
    rng = np.random.default_rng(2)
    clips = [
        make_clip(s.text, s.voice, rng, rate=22050 if i % 3 == 0 else RATE)
        for i, s in enumerate(plan.segments)
    ]
    mix = mix_chapter(plan, clips, Settings())
    assert mix.sample_rate == RATE
    for segment, (start, end) in zip(plan.segments, mix.spans, strict=True):
        speech_s = sum(ch.isalnum() for ch in segment.text) * 0.16
        assert speech_s - 0.01 <= (end - start) / RATE <= speech_s + 0.06


def test_refuses_inputs_it_cannot_join() -> None:
    plan = build_plan()
    clips = make_clips(plan)
    with pytest.raises(AssemblyError, match="clips for"):
        mix_chapter(plan, clips[:-1], Settings())
    with pytest.raises(AssemblyError, match="no segments"):
        mix_chapter(replace(plan, segments=()), [], Settings())
    silent = [Clip(b"\x00\x00" * RATE, RATE) for _ in clips]
    with pytest.raises(AssemblyError, match="silent"):
        mix_chapter(plan, silent, Settings())
