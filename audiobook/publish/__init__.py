"""Publishing: the scheduled batch job, its state, the podcast feed and a local server."""

from audiobook.publish.batch import BatchLock, BatchReport, ChapterOutcome, run_batch
from audiobook.publish.feed import build_feed, write_feed
from audiobook.publish.serve import make_server, serve
from audiobook.publish.state import BatchState, ChapterRecord, load_state, save_state

__all__ = [
    "BatchLock",
    "BatchReport",
    "BatchState",
    "ChapterOutcome",
    "ChapterRecord",
    "build_feed",
    "load_state",
    "make_server",
    "run_batch",
    "save_state",
    "serve",
    "write_feed",
]
