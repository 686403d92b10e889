"""The ffmpeg binary from the imageio-ffmpeg wheel: decoding, and the one MP3 encode.

No system ffmpeg is needed. The wheel ships no ffprobe, so pydub's
``AudioSegment.from_file`` (which probes first) is not used: files are decoded
straight to raw PCM and wrapped in an ``AudioSegment``.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import subprocess
import tempfile
from pathlib import Path

from pydub import AudioSegment

from audiobook.errors import AssemblyError
from audiobook.models import Clip
from audiobook.settings import Mp3

log = logging.getLogger(__name__)

_OUTPUT_RATE_RE = re.compile(r"Audio: pcm_s16le[^,]*, (\d+) Hz")


@functools.cache
def ffmpeg_exe() -> str:
    """Path of the bundled ffmpeg binary."""
    import imageio_ffmpeg

    try:
        return imageio_ffmpeg.get_ffmpeg_exe()
    except RuntimeError as exc:
        raise AssemblyError(f"no ffmpeg binary: reinstall imageio-ffmpeg ({exc})") from None


def configure_pydub() -> None:
    """Point pydub at the bundled ffmpeg so it never looks for a system one."""
    exe = ffmpeg_exe()
    if AudioSegment.converter != exe:
        AudioSegment.converter = exe


def decode_audio(path: Path, sample_rate: int | None = None) -> Clip:
    """Decode any audio file ffmpeg reads to 16-bit mono PCM (at its own rate if not given)."""
    cmd = [ffmpeg_exe(), "-hide_banner", "-nostdin", "-i", str(path), "-map", "0:a:0"]
    cmd += ["-f", "s16le", "-acodec", "pcm_s16le", "-ac", "1"]
    if sample_rate is not None:
        cmd += ["-ar", str(sample_rate)]
    cmd.append("pipe:1")
    proc = subprocess.run(cmd, capture_output=True, check=False)
    stderr = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0:
        raise AssemblyError(f"cannot decode {path.name}: {_last_line(stderr)}")
    if sample_rate is None:
        found = _OUTPUT_RATE_RE.findall(stderr)
        if not found:
            raise AssemblyError(f"cannot decode {path.name}: ffmpeg did not report a sample rate")
        sample_rate = int(found[-1])
    return Clip(pcm=proc.stdout, sample_rate=sample_rate)


def decode_segment(path: Path, sample_rate: int | None = None) -> AudioSegment:
    """Like :func:`decode_audio`, as a pydub ``AudioSegment``."""
    clip = decode_audio(path, sample_rate)
    return AudioSegment(data=clip.pcm, sample_width=2, frame_rate=clip.sample_rate, channels=1)


def encode_mp3(audio: AudioSegment, path: Path, mp3: Mp3) -> None:
    """Encode once with libmp3lame into ``path``, a regular (seekable) file.

    ffmpeg rewrites the first frame into a Xing/Info header with the LAME tag
    (frame count, encoder delay and padding) only when it can seek back, which
    is what makes durations and seeking exact in players. pydub's own
    ``export`` is not used: it writes the PCM to an extra WAV file and leaves
    its temporary files behind when ffmpeg fails. Resampling to the MP3 rate
    happens inside this same ffmpeg run.
    """
    if audio.sample_width != 2:
        raise AssemblyError(f"internal: expected 16-bit audio, got {8 * audio.sample_width}-bit")
    configure_pydub()
    cmd = [audio.converter, "-hide_banner", "-v", "error", "-y"]
    cmd += ["-f", "s16le", "-ar", str(audio.frame_rate), "-ac", str(audio.channels)]
    cmd += ["-i", "pipe:0", "-map_metadata", "-1"]
    cmd += ["-ar", str(mp3.sample_rate), "-ac", str(mp3.channels)]
    cmd += ["-c:a", "libmp3lame", "-b:a", f"{mp3.bitrate_kbps}k"]
    # LAME's quality 7 halves the encode time (measured 4.5 s → 2.6 s for ch004); at
    # speech bitrates the spectrogram and loudness are indistinguishable from the default.
    cmd += ["-compression_level", "7"]
    # The ID3 tag is written afterwards by mutagen (v2.3); a Xing/Info frame is required.
    cmd += ["-id3v2_version", "0", "-write_xing", "1", "-f", "mp3", str(path)]
    log.debug("encoding %s: %s", path.name, " ".join(cmd))
    try:
        proc = subprocess.run(cmd, input=audio.raw_data, capture_output=True, check=False)
    except OSError as exc:
        raise AssemblyError(f"cannot run ffmpeg ({exc})") from None
    if proc.returncode != 0:
        message = _last_line(proc.stderr.decode("utf-8", "replace"))
        raise AssemblyError(f"MP3 encoding failed: {message}")


@functools.cache
def encoder_gain_db(source_rate: int, mp3: Mp3) -> float:
    """Level change of decode(encode(x)) for these settings, measured on a short tone.

    libmp3lame as built into ffmpeg returns audio ~0.45 dB quieter than it was
    given (measured on both the wheel's and Debian's ffmpeg, at every bitrate),
    so loudness normalized before encoding would land short of the target.
    Measuring instead of hard-coding keeps this right for other builds.
    """
    import numpy as np

    t = np.arange(source_rate) / source_rate
    tone = 0.1 * (np.sin(2 * np.pi * 440 * t) + np.sin(2 * np.pi * 1320 * t))
    pcm = (tone * 32767).astype("<i2").tobytes()
    with tempfile.TemporaryDirectory(prefix="audiobook-") as folder:
        probe = Path(folder) / "probe.mp3"
        audio = AudioSegment(data=pcm, sample_width=2, frame_rate=source_rate, channels=1)
        encode_mp3(audio, probe, mp3)
        decoded = decode_audio(probe, source_rate)
    out = np.frombuffer(decoded.pcm, dtype="<i2").astype(np.float64)
    middle = slice(source_rate // 4, 3 * source_rate // 4)
    reference = np.frombuffer(pcm, dtype="<i2").astype(np.float64)[middle]
    if len(out) < middle.stop:
        return 0.0
    gain = 10 * math.log10(np.mean(out[middle] ** 2) / np.mean(reference**2))
    if abs(gain) > 3:
        log.warning("the MP3 encoder changes the level by %+.1f dB; not compensating", gain)
        return 0.0
    return gain


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "ffmpeg gave no reason"
