"""Narration and dialogue rendered by the local engine sound different: measured pitch."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from audiobook.engines.base import SynthesisRequest
from audiobook.engines.local.engine import LocalEngine
from audiobook.models import Clip
from audiobook.settings import Settings
from audiobook.text.clean import clean_chapter
from audiobook.text.load import load_chapter
from audiobook.text.segment import build_plan
from audiobook.text.speakers import attribute_speakers
from tests.conftest import CHAPTERS

MIN_F0, MAX_F0 = 60.0, 500.0  # speaking voices


def voiced_f0(pcm: bytes, sample_rate: int) -> list[float]:
    """Pitch of every clearly voiced 40 ms frame, by normalized autocorrelation."""
    signal = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    frame, hop = int(0.04 * sample_rate), int(0.01 * sample_rate)
    low, high = int(sample_rate / MAX_F0), int(sample_rate / MIN_F0)
    if len(signal) <= frame:
        return []
    frames = np.lib.stride_tricks.sliding_window_view(signal, frame)[::hop]
    frames = frames - frames.mean(axis=1, keepdims=True)
    # Silence and quiet consonants carry no pitch.
    frames = frames[np.sqrt(np.mean(frames**2, axis=1)) >= 0.3 * np.sqrt(np.mean(signal**2))]
    spectrum = np.fft.rfft(frames, n=2 * frame, axis=1)
    ac = np.fft.irfft(np.abs(spectrum) ** 2, axis=1)[:, :frame]
    f0s = []
    for row in ac:
        window = row[low:high] / row[0]
        best = float(window.max())
        if best < 0.5:
            continue  # not clearly periodic: unvoiced
        # The first peak nearly as high as the best: avoids reading half the pitch.
        peaks = np.flatnonzero(
            (window[1:-1] >= 0.9 * best)
            & (window[1:-1] >= window[:-2])
            & (window[1:-1] >= window[2:])
        )
        lag = low + (int(peaks[0]) + 1 if len(peaks) else int(window.argmax()))
        f0s.append(sample_rate / lag)
    return f0s


def median_f0(clips: list[Clip]) -> float:
    f0s = [f for clip in clips for f in voiced_f0(clip.pcm, clip.sample_rate)]
    assert len(f0s) >= 10, "too few voiced frames to measure pitch"
    return float(np.median(f0s))


def test_f0_measure_finds_the_pitch_of_a_voice_like_signal() -> None:
    rate = 16000
    t = np.arange(rate) / rate
    for f0 in (110.0, 220.0):
        wave = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 6))
        pcm = (wave / np.abs(wave).max() * 20000).astype("<i2").tobytes()
        assert abs(median_f0([Clip(pcm, rate)]) - f0) < 0.03 * f0


@pytest.fixture(scope="module")
def engine(local_model):
    engine = LocalEngine.from_settings(Settings())
    yield engine
    engine.close()


def _render(engine, texts_and_voices) -> list[Clip]:
    requests = [SynthesisRequest(text, voice) for text, voice in texts_and_voices]
    clips: dict[int, Clip] = dict(engine.synthesize(requests))
    return [clips[i] for i in range(len(requests))]


def test_dialogue_is_read_higher_than_narration(engine) -> None:
    settings = Settings()
    narrator, dialogue = settings.voice_for("narrator"), settings.voice_for("dialogue")
    assert dialogue.pitch_hz - narrator.pitch_hz >= 15  # the defaults the listener gets

    # One sentence in both voices, so that only the voice differs.
    same = "这里情况不明，随时可能遭遇敌人，大家都小心点。"
    clips = _render(engine, [(same, narrator), (same, dialogue)])
    low, high = median_f0(clips[:1]), median_f0(clips[1:])
    # About one semitone (6 %) is where listeners reliably hear a different voice.
    assert high > 1.05 * low, f"same text: narrator {low:.0f} Hz, dialogue {high:.0f} Hz"

    # The plan of ch004's second scene as it will be read: narration vs quotes.
    cleaned = clean_chapter(load_chapter(CHAPTERS / "ch004.txt"), settings.cleanup)
    plan = build_plan(cleaned, settings.pauses, engine.max_segment_chars)
    scene = [s for s in attribute_speakers(plan.segments, ()) if 14 <= s.paragraph <= 24]
    assert {s.voice for s in scene} == {"narrator", "dialogue"}
    clips = _render(engine, [(s.text, settings.voice_for(s.voice)) for s in scene])
    told = median_f0([c for s, c in zip(scene, clips, strict=True) if s.voice == "narrator"])
    said = median_f0([c for s, c in zip(scene, clips, strict=True) if s.voice == "dialogue"])
    assert said > 1.04 * told, f"ch004 scene 2: narration {told:.0f} Hz, dialogue {said:.0f} Hz"


def test_a_character_voice_differs_from_the_dialogue_voice(engine) -> None:
    settings = Settings()
    character = replace(settings.dialogue, pitch="-20Hz")  # as 何大清 in voices.toml
    text = "一组，从侧翼悄悄接近，二组在远处找位置，准备提供火力支援。"
    clips = _render(engine, [(text, settings.dialogue), (text, character)])
    dialogue, his = median_f0(clips[:1]), median_f0(clips[1:])
    assert dialogue > 1.08 * his, f"dialogue {dialogue:.0f} Hz, character {his:.0f} Hz"
