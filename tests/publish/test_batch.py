from __future__ import annotations

import functools
import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import feedparser
import mutagen.mp3
import podcastparser
import pytest

from audiobook.engines.edge import EdgeEngine
from audiobook.errors import BatchLockedError, ModelError, PublishError
from audiobook.models import RenderResult
from audiobook.pipeline import chapter_fingerprint, render_chapter
from audiobook.publish.batch import LOCK_FILE, find_chapters, run_batch
from audiobook.publish.state import load_state
from audiobook.settings import Settings
from tests.edge_server import EdgeServer
from tests.publish.conftest import SHORT_CHAPTERS, ffmpeg_render, write_chapters

ROOT = Path(__file__).resolve().parents[2]


def batch(settings: Settings, **kwargs):
    return run_batch(settings, render=ffmpeg_render, fingerprint=chapter_fingerprint, **kwargs)


def ids(outcomes) -> list[str]:
    return [o.chapter_id for o in outcomes]


def test_renders_new_chapters_then_skips_them_quickly(book: Settings) -> None:
    write_chapters(book.paths.chapters, {1: SHORT_CHAPTERS[1], 2: SHORT_CHAPTERS[2]})

    first = batch(book)

    assert ids(first.rendered) == ["ch001", "ch002"]
    assert first.exit_code == 0
    for chapter_id in ("ch001", "ch002"):
        assert (book.paths.output / f"{chapter_id}.mp3").stat().st_size > 1000
    assert first.audio_hours > 0
    assert first.summary().startswith("batch: 2 rendered, 0 skipped, 0 failed;")
    feed = book.paths.output / "feed.xml"
    feed_bytes, feed_mtime = feed.read_bytes(), feed.stat().st_mtime_ns

    started = time.monotonic()
    second = batch(book)
    elapsed = time.monotonic() - started

    assert ids(second.skipped) == ["ch001", "ch002"]
    assert second.rendered == () and second.failed == ()
    assert elapsed < 1.0
    assert second.summary().startswith("batch: 0 rendered, 2 skipped, 0 failed; 0.00 h")
    # Nothing changed, so podcast apps polling the feed see the very same file.
    assert feed.read_bytes() == feed_bytes
    assert feed.stat().st_mtime_ns == feed_mtime


def test_touching_one_chapter_rerenders_only_it_and_keeps_its_pubdate(book: Settings) -> None:
    paths = write_chapters(book.paths.chapters, {1: SHORT_CHAPTERS[1], 2: SHORT_CHAPTERS[2]})
    batch(book)
    before = load_state(book.paths.output).get("ch002")
    assert before is not None

    paths[1].write_text(SHORT_CHAPTERS[2] + "风停了。他睡着了。梦里有一条很长很长的河。\n", "utf-8")
    report = batch(book)

    assert ids(report.rendered) == ["ch002"]
    assert [o.reason for o in report.rendered] == ["changed"]
    assert ids(report.skipped) == ["ch001"]
    after = load_state(book.paths.output).get("ch002")
    assert after is not None
    assert after.first_published == before.first_published
    assert after.guid == before.guid
    assert after.duration_s > before.duration_s  # the longer text gave longer audio
    assert after.size_bytes == (book.paths.output / "ch002.mp3").stat().st_size


def test_changed_voice_settings_rerender_every_chapter(book: Settings) -> None:
    write_chapters(book.paths.chapters, {1: SHORT_CHAPTERS[1], 2: SHORT_CHAPTERS[2]})
    batch(book)

    faster = replace(book, narrator=replace(book.narrator, rate="+20%"))
    report = batch(faster)

    assert ids(report.rendered) == ["ch001", "ch002"]
    assert {o.reason for o in report.rendered} == {"changed"}


def test_deleted_mp3_is_rendered_again(book: Settings) -> None:
    write_chapters(book.paths.chapters, {1: SHORT_CHAPTERS[1]})
    batch(book)
    (book.paths.output / "ch001.mp3").unlink()

    report = batch(book)

    assert [(o.chapter_id, o.reason) for o in report.rendered] == [("ch001", "mp3 missing")]
    assert (book.paths.output / "ch001.mp3").is_file()


def test_failing_chapter_does_not_stop_the_others(
    book: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    paths = write_chapters(book.paths.chapters, SHORT_CHAPTERS)
    paths[1].write_bytes(b"\x00\x01\x02binary junk\xff\xfe" * 20)  # not a text file

    with caplog.at_level(logging.INFO, logger="audiobook.publish"):
        report = batch(book)

    assert ids(report.rendered) == ["ch001", "ch003"]
    assert ids(report.failed) == ["ch002"]
    assert "not a text file" in report.failed[0].reason
    assert report.exit_code == 1
    assert "1 failed" in report.summary() and "failed: ch002" in report.summary()
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert errors[0].getMessage().startswith("ch002: failed:")
    assert "\n" not in errors[0].getMessage()
    parsed = feedparser.parse((book.paths.output / "feed.xml").read_bytes())
    assert sorted(e.itunes_episode for e in parsed.entries) == ["1", "3"]

    # Fixed chapter: the next run renders exactly that one.
    paths[1].write_text(SHORT_CHAPTERS[2], encoding="utf-8")
    retry = batch(book)
    assert ids(retry.rendered) == ["ch002"]
    assert retry.exit_code == 0


def test_render_crash_of_any_kind_is_contained(book: Settings) -> None:
    write_chapters(book.paths.chapters, {1: SHORT_CHAPTERS[1], 2: SHORT_CHAPTERS[2]})

    def flaky(chapter_path: Path, settings: Settings) -> RenderResult:
        if chapter_path.stem == "ch001":
            raise MemoryError("engine ran out of memory")
        return ffmpeg_render(chapter_path, settings)

    report = run_batch(book, render=flaky, fingerprint=chapter_fingerprint)

    assert ids(report.failed) == ["ch001"]
    assert report.failed[0].reason == "MemoryError: engine ran out of memory"
    assert ids(report.rendered) == ["ch002"]
    assert load_state(book.paths.output).get("ch001") is None  # retried next run


def test_dry_run_lists_work_and_changes_nothing(book: Settings) -> None:
    paths = write_chapters(book.paths.chapters, {1: SHORT_CHAPTERS[1], 2: SHORT_CHAPTERS[2]})
    batch(book)
    paths[0].write_text(SHORT_CHAPTERS[1] + "又一句。\n", encoding="utf-8")
    write_chapters(book.paths.chapters, {3: SHORT_CHAPTERS[3]})
    state_before = (book.paths.output / "state.json").read_bytes()

    report = batch(book, dry_run=True)

    assert [(o.chapter_id, o.reason) for o in report.pending] == [
        ("ch001", "changed"),
        ("ch003", "new"),
    ]
    assert ids(report.skipped) == ["ch002"]
    assert report.summary() == "dry run: would render 2: ch001 (changed), ch003 (new); 1 up to date"
    assert not (book.paths.output / "ch003.mp3").exists()
    assert (book.paths.output / "state.json").read_bytes() == state_before


def test_chapters_are_found_in_number_order(tmp_path: Path) -> None:
    folder = tmp_path / "chapters"
    write_chapters(folder, {10: "x", 2: "x", 1000: "x"})
    (folder / "notes.txt").write_text("not a chapter", encoding="utf-8")
    (folder / "ch004.txt.bak").write_text("not a chapter", encoding="utf-8")

    assert [(n, p.name) for n, p in find_chapters(folder)] == [
        (2, "ch002.txt"),
        (10, "ch010.txt"),
        (1000, "ch1000.txt"),
    ]


def test_second_run_while_first_is_rendering_is_refused(book: Settings) -> None:
    write_chapters(book.paths.chapters, {1: SHORT_CHAPTERS[1], 2: SHORT_CHAPTERS[2]})
    rendering = threading.Event()
    may_finish = threading.Event()

    def slow(chapter_path: Path, settings: Settings) -> RenderResult:
        rendering.set()
        assert may_finish.wait(30)
        return ffmpeg_render(chapter_path, settings)

    results = {}
    first = threading.Thread(
        target=lambda: results.setdefault(
            "report", run_batch(book, render=slow, fingerprint=chapter_fingerprint)
        )
    )
    first.start()
    try:
        assert rendering.wait(30)
        started = time.monotonic()
        with pytest.raises(BatchLockedError) as refused:
            batch(book)
        assert time.monotonic() - started < 0.5  # refused at once, not after waiting
    finally:
        may_finish.set()
        first.join(30)

    assert refused.value.exit_code == 75
    assert f"pid {os.getpid()}" in str(refused.value)
    report = results["report"]
    assert ids(report.rendered) == ["ch001", "ch002"]
    state = load_state(book.paths.output)
    assert [r.chapter_id for r in state.records] == ["ch001", "ch002"]
    parsed = feedparser.parse((book.paths.output / "feed.xml").read_bytes())
    assert not parsed.bozo and len(parsed.entries) == 2
    assert not (book.paths.output / LOCK_FILE).exists()


HOLD_LOCK = """
import sys
from pathlib import Path
from audiobook.publish.batch import BatchLock
with BatchLock(Path(sys.argv[1])):
    print("locked", flush=True)
    sys.stdin.read()
"""


def test_lock_held_by_another_process_then_recovered_after_it_is_killed(
    book: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    write_chapters(book.paths.chapters, {1: SHORT_CHAPTERS[1]})
    book.paths.output.mkdir(parents=True)
    lock = book.paths.output / LOCK_FILE
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(BatchLockedError, match=f"pid {holder.pid} "):
            batch(book)
        assert not (book.paths.output / "ch001.mp3").exists()
        holder.send_signal(signal.SIGKILL)  # a crashed run: its lock file stays behind
        holder.wait(10)
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(10)
    assert json.loads(lock.read_text())["pid"] == holder.pid

    with caplog.at_level(logging.WARNING, logger="audiobook.publish"):
        report = batch(book)

    assert ids(report.rendered) == ["ch001"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("stale batch lock" in w and f"pid {holder.pid}" in w for w in warnings)
    assert not lock.exists()


def test_lock_released_when_a_run_aborts(book: Settings) -> None:
    write_chapters(book.paths.chapters, {1: SHORT_CHAPTERS[1]})
    book.paths.output.mkdir(parents=True)
    state = book.paths.output / "state.json"
    state.write_text("{not json", encoding="utf-8")

    with pytest.raises(PublishError, match=r"state\.json: damaged"):
        batch(book)

    assert not (book.paths.output / LOCK_FILE).exists()
    state.unlink()
    assert ids(batch(book).rendered) == ["ch001"]


def test_missing_voice_model_stops_the_run_but_publishes_what_finished(book: Settings) -> None:
    write_chapters(book.paths.chapters, SHORT_CHAPTERS)
    calls = []

    def model_goes_missing(chapter_path: Path, settings: Settings) -> RenderResult:
        calls.append(chapter_path.stem)
        if chapter_path.stem == "ch002":
            raise ModelError("voice model file is missing; run 'audiobook voices install'")
        return ffmpeg_render(chapter_path, settings)

    with pytest.raises(ModelError):
        run_batch(book, render=model_goes_missing, fingerprint=chapter_fingerprint)

    assert calls == ["ch001", "ch002"]  # not the same error once per remaining chapter
    parsed = feedparser.parse((book.paths.output / "feed.xml").read_bytes())
    assert [e.itunes_episode for e in parsed.entries] == ["1"]
    assert not (book.paths.output / LOCK_FILE).exists()


def test_batch_with_the_real_pipeline(book: Settings) -> None:
    """render_chapter end to end (plan, engine, cache, mix, tags, sidecars), with the Edge
    engine talking to the local Edge-protocol server instead of Microsoft's."""
    settings = replace(book, engine="edge")
    paths = write_chapters(settings.paths.chapters, {1: SHORT_CHAPTERS[1], 2: SHORT_CHAPTERS[2]})
    with EdgeServer() as server:
        engine = EdgeEngine(concurrency=2, backoff_base=0.01, connector_factory=server.connector)
        render = functools.partial(render_chapter, engine=engine)
        try:
            first = run_batch(settings, render=render)  # the pipeline's own fingerprint
            requests_after_first = len(server.stats.requests)

            started = time.monotonic()
            second = run_batch(settings, render=render)
            second_wall = time.monotonic() - started

            paths[1].write_text(SHORT_CHAPTERS[2] + "天亮以前，雨停了。\n", encoding="utf-8")
            third = run_batch(settings, render=render)
        finally:
            engine.close()

    assert ids(first.rendered) == ["ch001", "ch002"]
    assert ids(second.rendered) == [] and ids(second.skipped) == ["ch001", "ch002"]
    assert second_wall < 1.0
    assert ids(third.rendered) == ["ch002"]
    # Only the new sentence was sent to the engine; the rest came from the segment cache.
    new_requests = server.stats.requests[requests_after_first:]
    assert [r.text for r in new_requests] == ["天亮以前，雨停了。"]
    output = settings.paths.output
    parsed = podcastparser.parse(
        settings.book.base_url + "feed.xml", io.BytesIO((output / "feed.xml").read_bytes())
    )
    for episode in parsed["episodes"]:
        mp3 = output / f"ch{episode['number']:03d}.mp3"
        assert episode["enclosures"][0]["file_size"] == mp3.stat().st_size
        assert episode["total_time"] == round(mutagen.mp3.MP3(mp3).info.length)
        assert episode["title"] == SHORT_CHAPTERS[episode["number"]].splitlines()[0]


def test_default_batch_renders_with_the_local_engine(book: Settings, local_model) -> None:
    """run_batch's defaults: the pipeline's render_chapter, one local engine for the run."""
    write_chapters(book.paths.chapters, {1: "第一章\n\n天亮了。\n", 2: "第二章\n\n下雨了。\n"})

    first = run_batch(book)
    started = time.monotonic()
    second = run_batch(book)
    second_wall = time.monotonic() - started

    assert ids(first.rendered) == ["ch001", "ch002"]
    assert first.audio_hours > 0
    assert ids(second.skipped) == ["ch001", "ch002"] and second.rendered == ()
    assert second_wall < 1.0
    for record in load_state(book.paths.output).records:
        mp3 = book.paths.output / record.mp3
        assert abs(mutagen.mp3.MP3(mp3).info.length - record.duration_s) < 0.1
