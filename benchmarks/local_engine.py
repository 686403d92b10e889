"""Local engine speed: load time and real-time factor (synthesis s / audio s) on ch004.

The chapter is planned as the renderer plans it (segments of at most
``LocalEngine.max_segment_chars``), narrator and dialogue voices as in the default
voices.toml, and synthesized with 1 and 2 workers.  Target: RTF ≤ 0.04 on 2 cores.

    python benchmarks/local_engine.py [--workers 1 2] [--model-dir DIR] [--wav OUT.wav]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import wave
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from audiobook.engines.base import SynthesisRequest  # noqa: E402
from audiobook.engines.local.engine import LocalEngine  # noqa: E402
from audiobook.pipeline import plan_chapter, synthesis_requests  # noqa: E402
from audiobook.settings import load_settings  # noqa: E402


def chapter_requests(path: Path) -> list[SynthesisRequest]:
    """The chapter as the renderer sends it, with the default voices.toml's voices."""
    settings = load_settings(ROOT / "voices.toml").with_engine("local")
    return synthesis_requests(plan_chapter(path, settings), settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", type=Path, default=ROOT / "chapters" / "ch004.txt")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--wav", type=Path, help="also write the chapter's audio here")
    args = parser.parse_args()

    requests = chapter_requests(args.chapter)
    chars = sum(len(r.text) for r in requests)
    print(f"{args.chapter.name}: {len(requests)} segments, {chars} characters")
    reference: list[bytes] | None = None
    for workers in args.workers:
        started = time.perf_counter()
        engine = LocalEngine.load(args.model_dir, workers=workers)
        loaded = time.perf_counter()
        cpu_before = cpu_seconds()
        try:
            clips = dict(engine.synthesize(requests))
            finished = time.perf_counter()
        finally:
            engine.close()  # reaps the workers, so their CPU time is counted below
        # On a busy machine wall time says little; CPU time shows the work itself
        # (for worker processes it includes their model loading, about a second each).
        cpu_s = cpu_seconds() - cpu_before
        audio_s = sum(clip.duration for clip in clips.values())
        synth_s = finished - loaded
        pcm = [clips[i].pcm for i in range(len(requests))]
        same = "" if reference is None else f"  identical to first run: {pcm == reference}"
        reference = reference or pcm
        print(
            f"workers={workers}: load {loaded - started:.2f} s, audio {audio_s:.1f} s, "
            f"synthesis {synth_s:.1f} s, RTF {synth_s / audio_s:.4f} "
            f"(CPU {cpu_s:.1f} s: {cpu_s / audio_s:.4f} core-s per audio s){same}"
        )
        if args.wav:
            with wave.open(str(args.wav), "wb") as out:
                out.setnchannels(1)
                out.setsampwidth(2)
                out.setframerate(clips[0].sample_rate)
                out.writeframes(b"".join(pcm))


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the engine's workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


if __name__ == "__main__":
    main()
