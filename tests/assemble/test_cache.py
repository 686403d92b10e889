from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from audiobook.assemble.cache import SegmentCache
from audiobook.models import Clip, Voice

VOICE = Voice(edge_voice="zh-CN-YunxiNeural", rate="+10%")


def clip(seconds: float = 0.5, rate: int = 24000, seed: int = 0) -> Clip:
    noise = np.random.default_rng(seed).integers(-8000, 8000, int(seconds * rate))
    return Clip(pcm=noise.astype("<i2").tobytes(), sample_rate=rate)


def entry_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "segments").rglob("*") if p.is_file())


def test_round_trip_keeps_audio_rate_and_word_boundaries(tmp_path: Path) -> None:
    cache = SegmentCache(tmp_path)
    key = cache.key("local", "v1", VOICE, "雾气笼罩着江面。")
    original = Clip(clip().pcm, 22050, boundaries=((0.0, "雾气"), (0.31, "笼罩")))
    assert cache.get(key) is None
    cache.put(key, original)
    assert cache.get(key) == original
    # Raw PCM behind a small header: nothing is encoded, so nothing is encoded twice.
    (path,) = entry_files(tmp_path)
    assert path.name == f"{key}.pcm" and path.parent.name == key[:2]
    assert original.pcm in path.read_bytes()


def test_key_changes_with_everything_that_changes_the_sound() -> None:
    key = SegmentCache.key
    base = key("local", "v1", VOICE, "他低声说。")
    assert base == key(
        "local", "v1", Voice(edge_voice="zh-CN-YunxiNeural", rate="+10%"), "他低声说。"
    )
    assert base == key("local", "v1", VOICE, "  他低声说。\n")  # whitespace is not spoken
    variants = {
        key("edge", "v1", VOICE, "他低声说。"),
        key("local", "v2", VOICE, "他低声说。"),
        key("local", "v1", Voice(edge_voice="zh-CN-YunxiNeural", rate="+20%"), "他低声说。"),
        key(
            "local",
            "v1",
            Voice(edge_voice="zh-CN-YunxiNeural", rate="+10%", pitch="+5Hz"),
            "他低声说。",
        ),
        key("local", "v1", Voice(edge_voice="zh-CN-XiaoxiaoNeural", rate="+10%"), "他低声说。"),
        key("local", "v1", VOICE, "她低声说。"),
    }
    assert base not in variants and len(variants) == 6
    assert len(base) == 64 and int(base, 16) >= 0


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage"])
def test_damaged_entry_is_a_miss_deleted_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    cache = SegmentCache(tmp_path)
    key = cache.key("local", "v1", VOICE, "一切都结束了。")
    cache.put(key, clip())
    (path,) = entry_files(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) - 100]
    elif damage == "empty":
        data = bytearray()
    else:
        data = bytearray(b"<html>proxy error</html>" * 10)
    path.write_bytes(bytes(data))

    with caplog.at_level(logging.WARNING):
        assert cache.get(key) is None
    assert "damaged" in caplog.text and key[:12] in caplog.text
    assert not path.exists()  # the next render re-synthesizes and replaces it
    cache.put(key, clip())
    assert cache.get(key) == clip()


def test_interrupted_write_leaves_no_entry_and_is_cleaned_up(tmp_path: Path) -> None:
    cache = SegmentCache(tmp_path)
    key = cache.key("local", "v1", VOICE, "街道上硝烟弥漫。")
    # What a kill -9 during put() leaves behind: a partial temporary file, never the entry.
    partial = cache.path(key).with_name(f"{key}.pcm.1234abcd.part")
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"ABSEG\x00" + b"\x00" * 20)
    assert cache.get(key) is None
    assert cache.stats().entries == 0
    cache.put(key, clip())
    assert cache.get(key) == clip()
    assert cache.clear() == 1
    assert entry_files(tmp_path) == []


def test_put_leaves_only_the_entry(tmp_path: Path) -> None:
    cache = SegmentCache(tmp_path)
    for n in range(3):
        cache.put(cache.key("local", "v1", VOICE, f"第{n}句。"), clip(seed=n))
    assert all(p.suffix == ".pcm" for p in entry_files(tmp_path))
    assert len(entry_files(tmp_path)) == 3


def test_stats_and_clear(tmp_path: Path) -> None:
    cache = SegmentCache(tmp_path / "cache")
    assert cache.stats().entries == 0 and cache.clear() == 0  # no folder yet: not an error
    clips = [clip(seconds=0.1 * (n + 1), seed=n) for n in range(4)]
    keys = [cache.key("local", "v1", VOICE, f"第{n}句。") for n in range(4)]
    for key, c in zip(keys, clips, strict=True):
        cache.put(key, c)
    stats = cache.stats()
    assert stats.entries == 4
    assert stats.bytes >= sum(len(c.pcm) for c in clips)
    assert stats.bytes < sum(len(c.pcm) for c in clips) + 4 * 1024
    assert cache.clear() == 4
    assert cache.stats().entries == 0
    assert all(cache.get(key) is None for key in keys)


def test_rejects_a_key_that_is_not_a_hash(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        SegmentCache(tmp_path).get("../../etc/passwd")
