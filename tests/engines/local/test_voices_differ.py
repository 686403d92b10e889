"""Narration and dialogue rendered by the local engine sound different: measured pitch."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from audiobook.engines.base import SynthesisRequest
from audiobook.errors import ModelError
from audiobook.models import Clip
from audiobook.settings import Settings
from audiobook.text.clean import clean_chapter
from audiobook.text.load import load_chapter
from audiobook.text.segment import build_plan
from audiobook.text.speakers import attribute_speakers
from tests.conftest import CHAPTERS

MIN_F0, MAX_F0 = 60.0, 500.0  # speaking voices


def median_f0(pcm: bytes, sample_rate: int) -> float:
    """Median pitch of the voiced frames, by normalized autocorrelation."""
    signal = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    frame, hop = int(0.04 * sample_rate), int(0.01 * sample_rate)
    low, high = int(sample_rate / MAX_F0), int(sample_rate / MIN_F0)
    loud = 0.3 * np.sqrt(np.mean(signal**2))
    f0s = []
    for start in range(0, len(signal) - frame, hop):
        x = signal[start : start + frame]
        x = x - x.mean()
        if np.sqrt(np.mean(x**2)) < loud:
            continue  # silence and quiet consonants
        ac = np.correlate(x, x, mode="full")[frame - 1 :]
        if ac[0] <= 0:
            continue
        ac = ac / ac[0]
        window = ac[low:high]
        best = float(window.max())
        if best < 0.5:
            continue  # not clearly periodic: unvoiced
        # The first peak nearly as high as the best: avoids reading half the pitch.
        peaks = [
            i
            for i in range(1, len(window) - 1)
            if window[i] >= 0.9 * best and window[i - 1] <= window[i] >= window[i + 1]
        ]
        lag = low + (peaks[0] if peaks else int(window.argmax()))
        f0s.append(sample_rate / lag)
    assert len(f0s) >= 10, "too few voiced frames to measure pitch"
    return float(np.median(f0s))


def test_f0_measure_finds_the_pitch_of_a_voice_like_signal() -> None:
    rate = 16000
    t = np.arange(rate) / rate
    for f0 in (110.0, 220.0):
        wave = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 6))
        pcm = (wave / np.abs(wave).max() * 20000).astype("<i2").tobytes()
        assert abs(median_f0(pcm, rate) - f0) < 0.03 * f0


@pytest.fixture(scope="module")
def engine():
    module = pytest.importorskip("audiobook.engines.local.engine")
    try:
        engine = module.LocalEngine.from_settings(Settings())
    except ModelError as exc:
        pytest.skip(f"local voice model not installed: {exc}")
    yield engine
    engine.close()


def _render(engine, texts_and_voices) -> list[Clip]:
    requests = [SynthesisRequest(text, voice) for text, voice in texts_and_voices]
    clips: dict[int, Clip] = dict(engine.synthesize(requests))
    return [clips[i] for i in range(len(requests))]


def test_dialogue_is_read_higher_than_narration(engine) -> None:
    settings = Settings()
    cleaned = clean_chapter(load_chapter(CHAPTERS / "ch004.txt"), settings.cleanup)
    plan = build_plan(cleaned, settings.pauses, engine.max_segment_chars)
    segments = {s.id: s for s in attribute_speakers(plan.segments, settings.characters)}
    quote, tag = segments["15.1"], segments["15.2"]  # “都小心点……” / 何大清低声叮嘱道。
    assert (quote.voice, tag.voice) == ("dialogue", "narrator")

    # The plan's own segments, and one sentence in both voices so that only the voice differs.
    same = "这里情况不明，随时可能遭遇敌人，大家都小心点。"
    narrator, dialogue = settings.voice_for("narrator"), settings.voice_for("dialogue")
    assert dialogue.pitch_hz > narrator.pitch_hz
    clips = _render(
        engine,
        [
            (tag.text, settings.voice_for(tag.voice)),
            (quote.text, settings.voice_for(quote.voice)),
            (same, narrator),
            (same, dialogue),
        ],
    )
    f0 = [median_f0(c.pcm, c.sample_rate) for c in clips]
    # A listener hears a few Hz at most as the same voice; demand a clear step up.
    assert f0[1] > f0[0] + 10, f"plan segments: narrator {f0[0]:.0f} Hz, dialogue {f0[1]:.0f} Hz"
    assert f0[3] > f0[2] + 10, f"same text: narrator {f0[2]:.0f} Hz, dialogue {f0[3]:.0f} Hz"


def test_a_character_voice_differs_from_the_dialogue_voice(engine) -> None:
    settings = Settings()
    lower = replace(settings.dialogue, pitch="-20Hz")
    text = "是，总长！我们马上出发。"
    clips = _render(engine, [(text, settings.dialogue), (text, lower)])
    f0 = [median_f0(c.pcm, c.sample_rate) for c in clips]
    assert f0[0] > f0[1] + 10, f"dialogue {f0[0]:.0f} Hz, character {f0[1]:.0f} Hz"
