"""The unattended job: render the chapters that are new or changed, then write the feed.

Run from cron or a systemd timer. A chapter is rendered when it has no record
in the state, when its fingerprint (text + audio settings) differs from the
one of its last successful render, or when its MP3 has gone missing. A failing
chapter is logged and counted; the others still run, unless the failure is
one every chapter would share (bad settings, a missing voice model). One run
at a time: a second run finds the lock held and raises :class:`BatchLockedError`.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Literal

from audiobook.engines.base import Engine
from audiobook.errors import (
    AudiobookError,
    BatchLockedError,
    ConfigError,
    ModelError,
    PublishError,
)
from audiobook.models import RenderResult
from audiobook.publish.feed import episode_guid, write_feed
from audiobook.publish.state import BatchState, ChapterRecord, load_state, save_state
from audiobook.settings import Settings

log = logging.getLogger(__name__)

LOCK_FILE = ".batch.lock"
CHAPTER_FILE_RE = re.compile(r"^ch(\d+)\.txt$")

RenderFn = Callable[[Path, Settings], RenderResult]
FingerprintFn = Callable[[Path, Settings], str]
# Every chapter would fail the same way: stop rather than log the same error N times.
RUN_WIDE_ERRORS = (ConfigError, ModelError)
Status = Literal["rendered", "skipped", "failed", "pending"]  # pending: a dry run would render


@dataclass(frozen=True)
class ChapterOutcome:
    chapter_id: str
    status: Status
    reason: str  # why rendered ("new", "changed", "mp3 missing"), "unchanged", or the error
    duration_s: float = 0.0  # of the rendered audio
    wall_s: float = 0.0


@dataclass(frozen=True)
class BatchReport:
    outcomes: tuple[ChapterOutcome, ...]
    wall_s: float
    dry_run: bool = False
    feed: Path | None = None

    def _with(self, status: Status) -> tuple[ChapterOutcome, ...]:
        return tuple(o for o in self.outcomes if o.status == status)

    @property
    def rendered(self) -> tuple[ChapterOutcome, ...]:
        return self._with("rendered")

    @property
    def skipped(self) -> tuple[ChapterOutcome, ...]:
        return self._with("skipped")

    @property
    def failed(self) -> tuple[ChapterOutcome, ...]:
        return self._with("failed")

    @property
    def pending(self) -> tuple[ChapterOutcome, ...]:
        return self._with("pending")

    @property
    def audio_hours(self) -> float:
        return sum(o.duration_s for o in self.rendered) / 3600

    @property
    def exit_code(self) -> int:
        """0 when every chapter is up to date, 1 when any failed (cron mails the log)."""
        return 1 if self.failed else 0

    def summary(self) -> str:
        if self.dry_run:
            todo = ", ".join(f"{o.chapter_id} ({o.reason})" for o in self.pending) or "nothing"
            return (
                f"dry run: would render {len(self.pending)}: {todo}; {len(self.skipped)} up to date"
            )
        line = (
            f"batch: {len(self.rendered)} rendered, {len(self.skipped)} skipped, "
            f"{len(self.failed)} failed; {self.audio_hours:.2f} h of audio; "
            f"wall {_clock(self.wall_s)}"
        )
        if self.failed:
            line += f" (failed: {', '.join(o.chapter_id for o in self.failed)})"
        return line


def find_chapters(chapters_dir: Path) -> list[tuple[int, Path]]:
    """``chNNN.txt`` files as (number, path), in chapter order."""
    if not chapters_dir.is_dir():
        raise PublishError(f"{chapters_dir}: chapters folder not found")
    found = []
    for path in chapters_dir.iterdir():
        match = CHAPTER_FILE_RE.match(path.name)
        if match and path.is_file():
            found.append((int(match[1]), path))
    return sorted(found, key=lambda item: (item[0], item[1].name))


def run_batch(
    settings: Settings,
    *,
    dry_run: bool = False,
    render: RenderFn | None = None,
    fingerprint: FingerprintFn | None = None,
) -> BatchReport:
    """Render what is new or changed in ``settings.paths.chapters``, then write the feed.

    ``render`` and ``fingerprint`` default to the pipeline's ``render_chapter``
    (sharing one engine across chapters) and ``chapter_fingerprint``; they are
    imported only here, so the feed, import and server commands stay light.
    """
    if fingerprint is None:
        from audiobook.pipeline import chapter_fingerprint as fingerprint
    if render is None:
        with _SharedEngineRender() as shared:
            return run_batch(settings, dry_run=dry_run, render=shared, fingerprint=fingerprint)
    started = time.monotonic()
    output = settings.paths.output
    chapters = find_chapters(settings.paths.chapters)
    if not chapters:
        log.warning("no chapter files (chNNN.txt) in %s", settings.paths.chapters)
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PublishError(f"{output}: cannot create output folder ({exc.strerror})") from None

    if dry_run:
        state = load_state(output)
        outcomes = [
            _plan(state, number, path, settings, fingerprint)[0] for number, path in chapters
        ]
        return BatchReport(tuple(outcomes), time.monotonic() - started, dry_run=True)

    with BatchLock(output / LOCK_FILE):
        state = load_state(output)
        outcomes = []
        aborted: AudiobookError | None = None
        for number, path in chapters:
            outcome, fp = _plan(state, number, path, settings, fingerprint)
            if outcome.status == "pending" and fp is not None:
                try:
                    outcome, state = _render(
                        state, number, path, settings, render, fp, outcome.reason
                    )
                except RUN_WIDE_ERRORS as exc:
                    aborted = exc
                    break
            outcomes.append(outcome)
        # Chapters finished before an abort are published all the same.
        feed = write_feed(settings, state)
    if aborted is not None:
        raise aborted
    return BatchReport(tuple(outcomes), time.monotonic() - started, feed=feed)


class _SharedEngineRender:
    """The pipeline's ``render_chapter`` with one engine for the whole run.

    Loading a voice model per chapter would cost seconds each; the engine is
    loaded when the first chapter actually needs rendering, so an up-to-date
    run never loads it.
    """

    def __init__(self) -> None:
        self._engine: Engine | None = None

    def __call__(self, chapter_path: Path, settings: Settings) -> RenderResult:
        from audiobook.engines.registry import load_engine
        from audiobook.pipeline import render_chapter

        if self._engine is None:
            self._engine = load_engine(settings)
        return render_chapter(chapter_path, settings, engine=self._engine)

    def __enter__(self) -> _SharedEngineRender:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._engine is not None:
            self._engine.close()


def _plan(
    state: BatchState, number: int, path: Path, settings: Settings, fingerprint: FingerprintFn
) -> tuple[ChapterOutcome, str | None]:
    """Whether a chapter needs rendering, and its current fingerprint."""
    chapter_id = path.stem
    try:
        fp = fingerprint(path, settings)
    except Exception as exc:  # one unreadable chapter must not stop the run
        return _failure(chapter_id, exc, 0.0), None
    reason = _render_reason(state.get(chapter_id), fp, settings.paths.output)
    if reason is None:
        return ChapterOutcome(chapter_id, "skipped", "unchanged"), fp
    return ChapterOutcome(chapter_id, "pending", reason), fp


def _render_reason(record: ChapterRecord | None, fp: str, output: Path) -> str | None:
    if record is None:
        return "new"
    if record.fingerprint != fp:
        return "changed"
    if not (output / record.mp3).is_file():
        return "mp3 missing"
    return None


def _render(
    state: BatchState,
    number: int,
    path: Path,
    settings: Settings,
    render: RenderFn,
    fp: str,
    reason: str,
) -> tuple[ChapterOutcome, BatchState]:
    chapter_id = path.stem
    started = time.monotonic()
    log.info("%s: rendering (%s)", chapter_id, reason)
    try:
        result = render(path, settings)
    except RUN_WIDE_ERRORS:
        raise
    except Exception as exc:  # continue past a failing chapter; it is retried next run
        return _failure(chapter_id, exc, time.monotonic() - started), state
    now = datetime.now(UTC).replace(microsecond=0)
    guid = episode_guid(settings.book.title, chapter_id)
    state = state.with_render(result, number, fp, guid, now)
    # Saved after every chapter: a killed run keeps what it finished.
    save_state(settings.paths.output, state)
    wall = time.monotonic() - started
    log.info(
        "%s: rendered %s of audio in %s (%s)",
        chapter_id,
        _clock(result.duration_s),
        _clock(wall),
        result.mp3.name,
    )
    return ChapterOutcome(chapter_id, "rendered", reason, result.duration_s, wall), state


def _failure(chapter_id: str, exc: Exception, wall_s: float) -> ChapterOutcome:
    message = str(exc) if isinstance(exc, AudiobookError) else f"{type(exc).__name__}: {exc}"
    log.error("%s: failed: %s", chapter_id, message)
    if not isinstance(exc, AudiobookError):
        log.debug("%s: traceback", chapter_id, exc_info=exc)
    return ChapterOutcome(chapter_id, "failed", message, wall_s=wall_s)


class BatchLock:
    """``output/.batch.lock``: an flock held for the whole run, plus who holds it.

    The kernel drops an flock when its process dies, so a crashed run never
    blocks the next one; the pid/host/start it left in the file is only
    reported, as a recovered stale lock.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> BatchLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def acquire(self) -> None:
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise PublishError(f"{self.path}: cannot create lock ({exc.strerror})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _describe_holder(_read_lock(fd))
                os.close(fd)
                raise BatchLockedError(
                    f"another batch run is still working ({holder}); "
                    f"try again when it finishes (lock: {self.path})"
                ) from None
            # The previous holder unlinks the file on release; if that happened between
            # our open and flock, we hold a lock on a file nobody else will see.
            try:
                current = os.stat(self.path).st_ino
            except FileNotFoundError:
                current = None
            if current == os.fstat(fd).st_ino:
                break
            os.close(fd)
        previous = _read_lock(fd)
        if previous:
            log.warning(
                "recovered a stale batch lock (%s, no longer running)", _describe_holder(previous)
            )
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.now(UTC).replace(microsecond=0).isoformat(),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        # Unlink while still holding the lock, so nobody can lock the old file after us.
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None


def _read_lock(fd: int) -> dict[str, object] | None:
    try:
        raw = os.pread(fd, 4096, 0)
    except OSError:
        return None
    if not raw.strip():
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return {"raw": raw.decode("utf-8", "replace")[:80]}
    return data if isinstance(data, dict) else {"raw": str(data)[:80]}


def _describe_holder(info: dict[str, object] | None) -> str:
    if not info:
        return "holder unknown"
    if "pid" in info:
        return (
            f"pid {info.get('pid')} on {info.get('host', '?')}, started {info.get('started', '?')}"
        )
    return f"lock file says {info.get('raw', '?')!r}"


def _clock(seconds: float) -> str:
    """4.2 → '4.2s', 83 → '1m23s', 4000 → '1h06m40s'."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
