from __future__ import annotations

import numpy as np
import pytest

from audiobook.assemble import loudness
from tests.assemble.helpers import Tools, ebur128


def quantized(x: np.ndarray) -> np.ndarray:
    """What the samples will be once written as 16-bit PCM, so both meters read the same."""
    return (np.round(np.clip(x, -1, 1) * 32767) / 32767).astype(np.float32)


def pcm(x: np.ndarray) -> bytes:
    return (np.round(np.clip(x, -1, 1) * 32767)).astype("<i2").tobytes()


def speechlike(rate: int, seconds: float, seed: int = 0) -> np.ndarray:
    """Bursts of harmonics and noise with pauses: something the gates have to work on."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(rate * seconds)) / rate
    tone = sum(np.sin(2 * np.pi * 150 * k * t) / k for k in range(1, 15))
    syllables = np.sin(np.pi * 4 * t) ** 2 * (np.sin(2 * np.pi * 0.3 * t) > -0.3)
    return quantized(0.1 * (tone + 0.3 * rng.standard_normal(len(t))) * syllables)


@pytest.mark.parametrize("rate", [16000, 22050, 24000, 44100, 48000])
def test_integrated_loudness_matches_ffmpeg_ebur128(tools: Tools, rate: int) -> None:
    x = speechlike(rate, 12)
    ours = loudness.integrated_loudness(x, rate)
    theirs, _ = ebur128(tools, pcm=pcm(x), rate=rate)
    assert ours == pytest.approx(theirs, abs=0.15)  # ffmpeg prints one decimal


def test_reference_tone_reads_as_the_standard_says() -> None:
    # BS.1770: a 0 dBFS 997 Hz sine on one channel reads −3.01 LKFS.
    rate = 48000
    t = np.arange(rate * 5) / rate
    assert loudness.integrated_loudness(np.sin(2 * np.pi * 997 * t), rate) == pytest.approx(
        -3.01, abs=0.02
    )


def test_silence_and_gating() -> None:
    rate = 24000
    assert loudness.integrated_loudness(np.zeros(rate * 3, dtype=np.float32), rate) == float("-inf")
    tone = speechlike(rate, 6)
    padded = np.concatenate([tone, np.zeros(rate * 30, dtype=np.float32)])
    # Long silence is gated out instead of dragging the loudness down.
    assert loudness.integrated_loudness(padded, rate) == pytest.approx(
        loudness.integrated_loudness(tone, rate), abs=0.1
    )


def test_energies_split_by_owner_add_up_to_the_whole() -> None:
    rate = 24000
    x = speechlike(rate, 10)
    spans = np.array([[0, 3 * rate], [4 * rate, 6 * rate], [6 * rate + 50, 9 * rate]])
    owners = np.array([1, 0, 1])
    split = loudness.measure(x, rate, spans, owners, 2)
    whole = loudness.weighted_energies(x, rate)
    assert split.timeline.shape == (3, len(whole))
    np.testing.assert_allclose(split.timeline.sum(axis=0), whole, rtol=1e-4)
    step = loudness.subblock_length(rate)
    assert split.timeline[1, : 3 * rate // step].sum() > 0
    assert split.timeline[1, 3 * rate // step : 6 * rate // step].sum() == 0
    # Each owner's spans laid end to end: 2 s for owner 0, 3 s + 3 s − 50 samples for owner 1.
    assert [len(row) for row in split.owners] == [2 * rate // step, (6 * rate - 50) // step]
    packed = np.concatenate([x[: 3 * rate], x[6 * rate + 50 : 9 * rate]])
    assert loudness.gated_loudness(split.owners[1], rate) == pytest.approx(
        loudness.integrated_loudness(packed, rate), abs=0.05
    )


@pytest.mark.parametrize("rate", [22050, 44100])
def test_true_peak_matches_ffmpeg(tools: Tools, rate: int) -> None:
    t = np.arange(rate * 3) / rate
    # A high tone whose samples miss its crests: the true peak is above the sample peak.
    x = quantized(0.5 * np.sin(2 * np.pi * rate / 4.3 * t + 0.4))
    ours = loudness.true_peak(x, rate)
    _, theirs = ebur128(tools, pcm=pcm(x), rate=rate)
    assert 20 * np.log10(np.abs(x).max()) < ours
    assert ours == pytest.approx(theirs, abs=0.5)


def test_limiter_caps_true_peak_and_leaves_the_rest_alone() -> None:
    rate = 24000
    x = speechlike(rate, 8) * 0.5
    clicks = [rate, 3 * rate + 17, 6 * rate + 5]
    burst = np.random.default_rng(1).standard_normal(120) * np.exp(-np.arange(120) / 20)
    for at in clicks:
        x[at : at + 120] += burst.astype(np.float32)
    original = x.copy()
    result = loudness.limit(x, rate, -3.0)
    assert loudness.true_peak(x, rate) <= -3.0 + 0.01
    assert result.peak_dbtp is not None and result.peak_dbtp <= -3.0
    assert result.reduction_db > 3
    changed = np.flatnonzero(x != original)
    # Only around the clicks (gain ramps of a few tens of ms), nowhere else.
    assert all(min(abs(i - c) for c in clicks) < rate // 10 for i in changed)
    assert len(changed) < 0.1 * len(x)


def test_limiter_does_nothing_under_the_ceiling() -> None:
    rate = 24000
    x = speechlike(rate, 4) * 0.2
    original = x.copy()
    result = loudness.limit(x, rate, -1.0)
    assert np.array_equal(x, original) and len(result.subblocks) == 0


def test_reweigh_matches_a_full_remeasure() -> None:
    rate = 22050
    x = speechlike(rate, 10)
    energy = loudness.weighted_energies(x, rate)
    x[3 * rate : 3 * rate + 4000] *= 0.3
    x[7 * rate : 7 * rate + 100] *= 0.1
    step = loudness.subblock_length(rate)
    loudness.reweigh(
        x, rate, np.array([3 * rate // step, 3 * rate // step + 1, 7 * rate // step]), energy
    )
    np.testing.assert_allclose(energy, loudness.weighted_energies(x, rate), rtol=1e-3, atol=1e-9)
