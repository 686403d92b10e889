"""Edge engine throughput: render ch004 against the local Edge-protocol server.

Every request waits ``--latency`` seconds at the server before it is answered, as
the real service does. With ``concurrency`` requests in flight the best possible
wall time is the total time the server spent on requests divided by the
concurrency; the engine's overhead (connecting, decoding, checking, scheduling)
shows as the ratio of the measured wall time to that bound. Target: ≤ 1.25.

    python benchmarks/edge_engine.py [--concurrency 4] [--latency 0.3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.edge_server when run as a script

from audiobook.engines.base import SynthesisRequest  # noqa: E402
from audiobook.engines.edge import EdgeEngine  # noqa: E402
from audiobook.pipeline import plan_chapter, synthesis_requests  # noqa: E402
from audiobook.settings import load_settings  # noqa: E402
from tests.edge_server import EdgeServer  # noqa: E402


def chapter_requests(path: Path) -> list[SynthesisRequest]:
    """The chapter as the renderer sends it, with the default voices.toml's voices."""
    settings = load_settings(ROOT / "voices.toml").with_engine("edge")
    return synthesis_requests(plan_chapter(path, settings), settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", type=Path, default=ROOT / "chapters" / "ch004.txt")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.3)
    args = parser.parse_args()

    requests = chapter_requests(args.chapter)
    with EdgeServer(latency=args.latency) as server:
        engine = EdgeEngine(concurrency=args.concurrency, connector_factory=server.connector)
        started = time.perf_counter()
        clips = dict(engine.synthesize(requests))
        wall = time.perf_counter() - started
        stats = server.stats

    assert len(clips) == len(requests), "not every segment came back"
    sent = len(stats.requests)
    ideal = stats.busy_seconds / args.concurrency
    latency_only = sent * args.latency / args.concurrency
    audio = sum(c.duration for c in clips.values())
    print(f"chapter       {args.chapter.name}: {len(requests)} segments, {sent} sent")
    print(f"audio         {audio:.1f} s")
    print(f"server        {stats.busy_seconds:.2f} s busy in total, max {stats.max_concurrent}")
    print(f"              concurrent (limit {args.concurrency}), {args.latency:.2f} s latency each")
    print(f"ideal bound   {ideal:.2f} s  (busy / concurrency; latency alone: {latency_only:.2f} s)")
    print(f"wall time     {wall:.2f} s")
    print(f"ratio         {wall / ideal:.3f}x  (target ≤ 1.25x)")


if __name__ == "__main__":
    main()
