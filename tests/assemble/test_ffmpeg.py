from __future__ import annotations

import wave
from pathlib import Path

import imageio_ffmpeg
import numpy as np
import pytest
from mutagen.mp3 import MP3
from pydub import AudioSegment

from audiobook.assemble.ffmpeg import (
    configure_pydub,
    decode_audio,
    decode_segment,
    encode_mp3,
    encoder_gain_db,
    ffmpeg_exe,
)
from audiobook.errors import AssemblyError
from audiobook.settings import Mp3
from tests.assemble.helpers import Tools, ffprobe_json


def tone(rate: int, seconds: float) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.3 * np.sin(2 * np.pi * 330 * t) * 32767).astype("<i2")


def write_wav(path: Path, samples: np.ndarray, rate: int) -> None:
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(samples.tobytes())


def test_uses_the_bundled_ffmpeg_for_pydub() -> None:
    configure_pydub()
    assert AudioSegment.converter == ffmpeg_exe() == imageio_ffmpeg.get_ffmpeg_exe()


def test_decode_keeps_the_file_rate_and_samples(tmp_path: Path) -> None:
    samples = tone(22050, 1.5)
    write_wav(tmp_path / "a.wav", samples, 22050)
    clip = decode_audio(tmp_path / "a.wav")
    assert clip.sample_rate == 22050
    assert np.array_equal(np.frombuffer(clip.pcm, "<i2"), samples)

    resampled = decode_audio(tmp_path / "a.wav", sample_rate=16000)
    assert resampled.sample_rate == 16000
    assert abs(resampled.duration - 1.5) < 0.01

    segment = decode_segment(tmp_path / "a.wav")
    assert (segment.frame_rate, segment.channels, segment.sample_width) == (22050, 1, 2)
    assert len(segment) == 1500  # ms


def test_decode_of_a_non_audio_file_names_it(tmp_path: Path) -> None:
    (tmp_path / "notes.mp3").write_text("not audio")
    with pytest.raises(AssemblyError, match=r"cannot decode notes\.mp3"):
        decode_audio(tmp_path / "notes.mp3")


def test_encode_writes_cbr_with_an_info_header_and_exact_duration(
    tmp_path: Path, tools: Tools
) -> None:
    samples = tone(24000, 7.3)
    audio = AudioSegment(data=samples.tobytes(), sample_width=2, frame_rate=24000, channels=1)
    out = tmp_path / "out.mp3"
    encode_mp3(audio, out, Mp3())
    stream = ffprobe_json(tools, out, "-show_streams")["streams"][0]
    assert stream["codec_name"] == "mp3"
    assert (int(stream["sample_rate"]), stream["channels"]) == (44100, 1)
    assert int(stream["bit_rate"]) == 64000
    head = out.read_bytes()[:2000]
    assert b"Info" in head  # CBR's Xing-style header (frame count, encoder delay)
    assert not head.startswith(b"ID3")  # tags are mutagen's job, as v2.3
    # Decoders that read the header's delay/padding play exactly what went in; the frame
    # count (what mutagen and ffprobe report) adds the encoder's delay and padding.
    assert decode_audio(out).duration == pytest.approx(7.3, abs=0.001)
    assert 7.3 < MP3(out).info.length < 7.3 + 0.07


def test_encode_honours_other_settings(tmp_path: Path, tools: Tools) -> None:
    audio = AudioSegment(
        data=tone(24000, 2).tobytes(), sample_width=2, frame_rate=24000, channels=1
    )
    out = tmp_path / "out.mp3"
    encode_mp3(audio, out, Mp3(sample_rate=22050, bitrate_kbps=32))
    stream = ffprobe_json(tools, out, "-show_streams")["streams"][0]
    assert (int(stream["sample_rate"]), int(stream["bit_rate"])) == (22050, 32000)


def test_encoder_failure_is_one_line(tmp_path: Path) -> None:
    audio = AudioSegment(
        data=tone(24000, 1).tobytes(), sample_width=2, frame_rate=24000, channels=1
    )
    with pytest.raises(AssemblyError) as info:
        encode_mp3(audio, tmp_path / "out.mp3", Mp3(sample_rate=12345))
    message = str(info.value)
    assert message.startswith("MP3 encoding failed: ") and "\n" not in message


def test_encoder_gain_is_measured_small_and_cached() -> None:
    gain = encoder_gain_db(24000, Mp3())
    assert -1.0 < gain < 0.2
    assert encoder_gain_db(24000, Mp3()) == gain
