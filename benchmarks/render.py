"""Whole-chapter render with the local engine: cold, warm, and peak memory.

Cold: empty segment cache and output folder (the model is already installed).
Warm: the same chapter again, unchanged — should skip all work.
Targets (issue 4): cold RTF ≤ 0.04, warm ≤ 1 s, peak RSS ≤ 400 MB.

    python benchmarks/render.py [--chapter chapters/ch004.txt]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from audiobook.pipeline import render_chapter
from audiobook.settings import Paths, load_settings

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", type=Path, default=ROOT / "chapters" / "ch004.txt")
    args = parser.parse_args()

    settings = load_settings(ROOT / "voices.toml")
    with tempfile.TemporaryDirectory() as tmp:
        paths = Paths(chapters=args.chapter.parent, output=Path(tmp) / "out", cache=Path(tmp) / "c")
        settings = replace(settings, paths=paths)

        started = time.perf_counter()
        cold = render_chapter(args.chapter, settings)
        cold_s = time.perf_counter() - started

        started = time.perf_counter()
        warm = render_chapter(args.chapter, settings)
        warm_s = time.perf_counter() - started

    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"chapter            {args.chapter.name}: {cold.duration_s:.1f} s of audio")
    print(
        f"cold render        {cold_s:.2f} s wall, RTF {cold_s / cold.duration_s:.4f} (target ≤ 0.04)"
    )
    print(f"  segments         {cold.synthesized} synthesized, {cold.cached} cached")
    print(f"warm render        {warm_s:.3f} s (target ≤ 1 s), {warm.synthesized} synthesized")
    print(
        f"peak RSS           {own:.0f} MB main process, {children:.0f} MB largest child (target ≤ 400)"
    )


if __name__ == "__main__":
    main()
