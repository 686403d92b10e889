"""The local engine as the renderer uses it: text and voices in, 24 kHz PCM clips out."""

from __future__ import annotations

import numpy as np
import pytest

from audiobook.engines.base import SynthesisRequest
from audiobook.engines.local.engine import LocalEngine, Prosody
from audiobook.errors import ConfigError, SynthesisError
from audiobook.models import Clip, Voice
from audiobook.settings import Settings
from tests.engines.local.test_model import shared_model_dir

SENTENCE = "南京沦陷三天后，整座城市陷入了无尽的黑暗与恐怖之中。"
NARRATOR = Voice()


@pytest.fixture(scope="module")
def engine() -> LocalEngine:
    with LocalEngine.load(shared_model_dir(), workers=1) as engine:
        yield engine


@pytest.fixture(scope="module")
def pool() -> LocalEngine:
    with LocalEngine.load(shared_model_dir(), workers=2) as pool:
        yield pool


def say(engine: LocalEngine, *texts: str, voice: Voice = NARRATOR) -> list[Clip]:
    clips = dict(engine.synthesize([SynthesisRequest(t, voice) for t in texts]))
    assert sorted(clips) == list(range(len(texts)))
    return [clips[i] for i in range(len(texts))]


def samples(clip: Clip) -> np.ndarray:
    return np.frombuffer(clip.pcm, dtype="<i2").astype(np.float64) / 32768


def median_pitch(clip: Clip) -> float:
    """Median f0 (Hz) of the voiced 40 ms frames, by autocorrelation."""
    audio, rate = samples(clip), clip.sample_rate
    size, hop = int(0.04 * rate), int(0.01 * rate)
    shortest, longest = rate // 500, rate // 70  # 70–500 Hz
    f0 = []
    for start in range(0, len(audio) - size, hop):
        frame = audio[start : start + size] - audio[start : start + size].mean()
        if np.sqrt(np.mean(frame**2)) < 0.02:
            continue
        corr = np.fft.irfft(np.abs(np.fft.rfft(frame, 2 * size)) ** 2)[:size]
        lag = shortest + int(np.argmax(corr[shortest:longest]))
        if corr[lag] > 0.4 * corr[0]:  # clearly periodic: voiced
            f0.append(rate / lag)
    assert len(f0) > 20, "too little voiced speech to measure pitch"
    return float(np.median(f0))


def test_clips_are_16_bit_mono_pcm_at_24_khz(engine: LocalEngine) -> None:
    (clip,) = say(engine, SENTENCE)
    assert clip.sample_rate == 24_000
    assert len(clip.pcm) % 2 == 0
    assert 3 < clip.duration < 8
    assert np.sqrt(np.mean(samples(clip) ** 2)) > 0.02  # audible speech


def test_same_text_and_voice_give_identical_pcm(engine: LocalEngine) -> None:
    first = say(engine, SENTENCE, "街道上，硝烟弥漫。")
    assert [c.pcm for c in say(engine, SENTENCE, "街道上，硝烟弥漫。")] == [c.pcm for c in first]


def test_worker_processes_give_identical_pcm(engine: LocalEngine, pool: LocalEngine) -> None:
    texts = (SENTENCE, "街道上，硝烟弥漫，废墟随处可见。", "他说：“走吧。”")
    voice = Voice(rate="+10%", pitch="+20Hz")
    expected = [c.pcm for c in say(engine, *texts, voice=voice)]
    assert [c.pcm for c in say(pool, *texts, voice=voice)] == expected


def test_duration_grows_with_the_text(engine: LocalEngine) -> None:
    clause = "城市陷入了黑暗，"  # 7 characters read aloud
    clips = say(engine, clause, clause * 2, clause * 4)
    seconds_per_char = [c.duration / (7 * n) for c, n in zip(clips, (1, 2, 4), strict=True)]
    assert all(0.12 < s < 0.4 for s in seconds_per_char), seconds_per_char
    assert clips[2].duration > 1.7 * clips[1].duration > 2.9 * clips[0].duration / 1.7


@pytest.mark.parametrize("text", ["……", "！？", "   ", "——", ""])
def test_text_with_nothing_to_say_is_a_short_silence(engine: LocalEngine, text: str) -> None:
    (clip,) = say(engine, text)
    assert 0 < clip.duration <= 1.0
    assert not any(clip.pcm)


@pytest.mark.parametrize(
    "text", ["Hello, GPS!", "AK47", "αβγ", "😀😀", "ｱｲｳｴｵ", "١٢٣", "\x00\ufffd"]
)
def test_non_chinese_text_does_not_crash(engine: LocalEngine, text: str) -> None:
    (clip,) = say(engine, text)
    assert clip.sample_rate == 24_000 and clip.duration > 0


def test_rate_changes_the_duration(engine: LocalEngine) -> None:
    (normal,) = say(engine, SENTENCE)
    (fast,) = say(engine, SENTENCE, voice=Voice(rate="+50%"))
    (slow,) = say(engine, SENTENCE, voice=Voice(rate="-30%"))
    assert fast.duration / normal.duration == pytest.approx(1 / 1.5, rel=0.1)
    assert slow.duration / normal.duration == pytest.approx(1 / 0.7, rel=0.1)


def test_pitch_moves_the_measured_f0(engine: LocalEngine) -> None:
    (normal,) = say(engine, SENTENCE)
    (higher,) = say(engine, SENTENCE, voice=Voice(pitch="+40Hz"))
    (lower,) = say(engine, SENTENCE, voice=Voice(pitch="-40Hz"))
    base = median_pitch(normal)
    assert median_pitch(higher) - base == pytest.approx(40, abs=15)
    assert median_pitch(lower) - base == pytest.approx(-40, abs=15)
    # the speaking rate stays put while the pitch moves
    assert higher.duration == pytest.approx(normal.duration, rel=0.05)
    assert lower.duration == pytest.approx(normal.duration, rel=0.05)


def test_volume_scales_the_amplitude(engine: LocalEngine) -> None:
    (normal,) = say(engine, SENTENCE)
    (quiet,) = say(engine, SENTENCE, voice=Voice(volume="-50%"))
    ratio = np.sqrt(np.mean(samples(quiet) ** 2) / np.mean(samples(normal) ** 2))
    assert ratio == pytest.approx(0.5, rel=0.05)


def test_voices_outside_the_supported_range_are_config_errors() -> None:
    for voice in (Voice(rate="+300%"), Voice(pitch="-150Hz"), Voice(volume="x")):
        with pytest.raises(ConfigError, match="local voice"):
            Prosody.from_voice(voice)
    with pytest.raises(ConfigError, match="rate"):
        LocalEngine.from_settings(Settings(narrator=Voice(rate="-90%")))


def test_version_names_the_model_and_the_frontend() -> None:
    from audiobook.engines.local.frontend import FRONTEND_VERSION
    from audiobook.engines.local.model import MODEL_FILES

    version = LocalEngine.version
    assert all(digest[:8] in version for digest in MODEL_FILES.values())
    assert f"frontend {FRONTEND_VERSION}" in version


def test_a_dead_worker_is_reported_not_waited_for(pool: LocalEngine) -> None:
    for worker in pool._runner._workers:  # type: ignore[attr-defined]
        worker.process.kill()
    with pytest.raises(SynthesisError, match="stopped unexpectedly"):
        say(pool, SENTENCE)
    (clip,) = say(pool, SENTENCE)  # the next call starts fresh workers
    assert clip.duration > 3
