"""Helpers for the assembly tests. Synthetic chapters: speech-like clips, no TTS engine needed.

Each segment becomes a harmonic "voice" (a different pitch and level per voice)
shaped into syllables, one per character, with silent padding on both sides the
way TTS engines pad their output.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from audiobook.models import ChapterPlan, Clip, Segment
from audiobook.settings import Pauses

RATE = 24000
SYLLABLE_S = 0.16
PAD_S = 0.15
# (fundamental Hz, peak amplitude): the dialogue voice is 12 dB louder than the narrator.
VOICES = {"narrator": (110.0, 0.12), "dialogue": (230.0, 0.48)}
DEFAULT_PAUSES = Pauses()

Scenes = tuple[tuple[tuple[tuple[str, str], ...], ...], ...]  # scenes → paragraphs → (voice, text)

SCENES: Scenes = (
    (
        (
            ("narrator", "南京沦陷三天后，整座城市陷入了无尽的黑暗。"),
            ("narrator", "街道上硝烟弥漫。"),
        ),
        (("dialogue", "“快走！”"), ("narrator", "他低声说。")),
    ),
    (
        (("narrator", "第二天清晨，雾气笼罩着江面，远处传来零星的枪声。"),),
        (("dialogue", "“我们还能回去吗？”"), ("narrator", "她问道，声音很轻。")),
    ),
    (
        (
            ("narrator", "多年以后，他仍然记得那个寒冷的冬天。"),
            ("narrator", "一切都结束了。"),
        ),
    ),
)


def syllables(n_chars: int, f0: float, amplitude: float, rng: np.random.Generator) -> np.ndarray:
    """Voiced syllables: harmonics of f0 under a smooth envelope, with a little breath noise."""
    n = int(n_chars * SYLLABLE_S * RATE)
    t = np.arange(n) / RATE
    wobble = 1 + 0.03 * np.sin(2 * np.pi * 3 * t)
    phase = 2 * np.pi * f0 * np.cumsum(wobble) / RATE
    tone = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = np.sin(np.pi * (t % SYLLABLE_S) / SYLLABLE_S) ** 2
    signal = tone * envelope + 0.05 * rng.standard_normal(n) * envelope
    return (amplitude * signal / np.abs(signal).max()).astype(np.float32)


def to_clip(samples: np.ndarray, rate: int = RATE) -> Clip:
    return Clip(pcm=(np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes(), sample_rate=rate)


def make_clip(text: str, voice: str, rng: np.random.Generator, rate: int = RATE) -> Clip:
    f0, amplitude = VOICES[voice]
    speech = syllables(sum(ch.isalnum() for ch in text), f0, amplitude, rng)
    pad = np.zeros(int(PAD_S * RATE), dtype=np.float32)
    samples = np.concatenate([pad, speech, pad])
    if rate != RATE:  # synthesized at RATE; linear interpolation is good enough here
        positions = np.arange(round(len(samples) * rate / RATE)) * RATE / rate
        samples = np.interp(positions, np.arange(len(samples)), samples).astype(np.float32)
    return to_clip(samples, rate)


def build_plan(
    scenes: Scenes = SCENES, pauses: Pauses = DEFAULT_PAUSES, chapter_id: str = "ch007"
) -> ChapterPlan:
    """Segments with the pauses the planner would assign: sentence, paragraph, scene, turn."""
    flat = []
    paragraph = 0
    for scene_no, scene in enumerate(scenes):
        for para in scene:
            for sentence_no, (voice, text) in enumerate(para):
                flat.append((scene_no, paragraph, sentence_no, voice, text))
            paragraph += 1
    segments = []
    for i, (scene_no, para, sentence_no, voice, text) in enumerate(flat):
        pause = 0
        if i + 1 < len(flat):
            nxt = flat[i + 1]
            if nxt[0] != scene_no:
                pause = pauses.scene_ms
            elif nxt[1] != para:
                pause = pauses.paragraph_ms
            else:
                pause = pauses.sentence_ms
            if nxt[3] != voice:
                pause += pauses.turn_ms
        segments.append(
            Segment(
                index=i,
                text=text,
                role="dialogue" if voice == "dialogue" else "narrator",
                scene=scene_no,
                paragraph=para,
                sentence=sentence_no,
                piece=sentence_no,
                pause_ms=pause,
                voice=voice,
            )
        )
    return ChapterPlan(chapter_id=chapter_id, title="第七章 雾", segments=tuple(segments))


def make_clips(plan: ChapterPlan, seed: int = 7, rate: int = RATE) -> list[Clip]:
    rng = np.random.default_rng(seed)
    return [make_clip(s.text, s.voice, rng, rate) for s in plan.segments]


def long_plan(minutes: float) -> ChapterPlan:
    """A chapter of about ``minutes`` of speech: 12 scenes, every 4th sentence dialogue."""
    sentence = "雾气笼罩着江面，远处传来零星的枪声。"
    n = int(minutes * 60 / (len(sentence) * SYLLABLE_S + 0.6))
    per_scene = max(1, n // 12)
    scenes = []
    for s in range(0, n, per_scene):
        end = min(n, s + per_scene)
        paras = tuple(
            tuple(
                ("dialogue" if k % 4 == 3 else "narrator", sentence)
                for k in range(p, min(end, p + 3))
            )
            for p in range(s, end, 3)
        )
        scenes.append(paras)
    return build_plan(tuple(scenes))


@dataclass(frozen=True)
class Tools:
    ffmpeg: str
    ffprobe: str


def find_tools() -> Tools:
    ffmpeg, ffprobe = shutil.which("ffmpeg"), shutil.which("ffprobe")
    if not ffmpeg or not ffprobe:
        pytest.skip("system ffmpeg/ffprobe not installed (apt-get install ffmpeg)")
    return Tools(ffmpeg, ffprobe)


def ebur128(
    tools: Tools, path: Path | None = None, pcm: bytes = b"", rate: int = RATE
) -> tuple[float, float]:
    """(integrated loudness LUFS, true peak dBTP) as ffmpeg's EBU R128 scanner measures them.

    Reads ``path``, or raw s16le mono ``pcm`` at ``rate``.
    """
    if path is not None:
        source = ["-i", str(path)]
    else:
        source = ["-f", "s16le", "-ar", str(rate), "-ac", "1", "-i", "-"]
    command = [tools.ffmpeg, "-hide_banner", "-nostats", *source, "-af", "ebur128=peak=true"]
    proc = subprocess.run([*command, "-f", "null", "-"], input=pcm, capture_output=True, check=True)
    stderr = proc.stderr.decode()
    summary = stderr[stderr.rindex("Summary:") :]
    integrated = float(re.search(r"I:\s+(-?[\d.]+) LUFS", summary).group(1))
    peak = float(re.search(r"Peak:\s+(-?[\d.]+|-inf) dBFS", summary).group(1))
    return integrated, peak


def silences(tools: Tools, path: Path, noise_db: float = -50, min_s: float = 0.3):
    """[(start s, end s)] of the silent stretches ffmpeg's silencedetect finds."""
    detect = f"silencedetect=noise={noise_db}dB:d={min_s}"
    command = [tools.ffmpeg, "-hide_banner", "-nostats", "-i", str(path), "-af", detect]
    proc = subprocess.run([*command, "-f", "null", "-"], capture_output=True, text=True, check=True)
    starts = [float(x) for x in re.findall(r"silence_start: (-?[\d.]+)", proc.stderr)]
    ends = [float(x) for x in re.findall(r"silence_end: ([\d.]+)", proc.stderr)]
    return list(zip(starts, ends, strict=False))


def ffprobe_json(tools: Tools, path: Path, *args: str) -> dict:
    proc = subprocess.run(
        [tools.ffprobe, "-v", "error", "-of", "json", *args, str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout)


_CUE_RE = re.compile(
    r"^(\d\d):(\d\d):(\d\d)[.,](\d{3}) --> (\d\d):(\d\d):(\d\d)[.,](\d{3})$", re.MULTILINE
)


def parse_cues(text: str) -> list[tuple[float, float, str]]:
    """A small WebVTT/SRT reader: (start s, end s, text) per cue."""
    cues = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            match = _CUE_RE.match(line)
            if match:
                h1, m1, s1, f1, h2, m2, s2, f2 = (int(g) for g in match.groups())
                start = h1 * 3600 + m1 * 60 + s1 + f1 / 1000
                end = h2 * 3600 + m2 * 60 + s2 + f2 / 1000
                cues.append((start, end, "\n".join(lines[i + 1 :])))
                break
    return cues
