"""The edge engine against a local Edge-protocol server (tests/edge_server.py).

edge-tts's own client runs unmodified; only its connection is redirected through
the ``connector_factory`` the engine accepts.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from audiobook.engines.base import SynthesisRequest
from audiobook.engines.edge import (
    EDGE_VOICES,
    ConnectorFactory,
    EdgeEngine,
    list_voices,
    validate_voice,
)
from audiobook.errors import ConfigError, SynthesisError
from audiobook.models import Clip, Voice
from audiobook.settings import Character, EdgeOptions, Settings
from tests.edge_server import LEAD_SECONDS, EdgeServer, FaultKind, speech_seconds

NARRATOR = Voice(edge_voice="zh-CN-XiaoxiaoNeural", rate="+0%")
DIALOGUE = Voice(edge_voice="zh-CN-YunxiNeural", rate="+10%", pitch="-5Hz", volume="+5%")

CHAPTER = [
    ("南京沦陷三天后，整座城市陷入了无尽的黑暗与恐怖之中。", NARRATOR),
    ("……", NARRATOR),
    ("“快走！”", DIALOGUE),
    ("街道上，硝烟弥漫，废墟随处可见。", NARRATOR),
    ("他低声说：“我们还能回来吗？”", DIALOGUE),
    ("——", NARRATOR),
    ("1937年12月13日。", NARRATOR),
    ("曾经繁华的街市变得死寂。", NARRATOR),
]


def requests_for(items: list[tuple[str, Voice]]) -> list[SynthesisRequest]:
    return [SynthesisRequest(text, voice) for text, voice in items]


def spoken(items: list[tuple[str, Voice]]) -> list[str]:
    return [text for text, _ in items if any(ch.isalnum() for ch in text)]


@pytest.fixture(scope="module")
def edge_server() -> Iterator[EdgeServer]:
    with EdgeServer() as server:
        yield server


@pytest.fixture
def server(edge_server: EdgeServer) -> EdgeServer:
    edge_server.reset()
    return edge_server


def make_engine(server: EdgeServer, **options: Any) -> EdgeEngine:
    defaults = {"concurrency": 3, "backoff_base": 0.01, "connector_factory": server.connector}
    return EdgeEngine(**(defaults | options))


def render(engine: EdgeEngine, requests: list[SynthesisRequest]) -> dict[int, Clip]:
    clips: dict[int, Clip] = {}
    for index, clip in engine.synthesize(requests):
        assert index not in clips, f"segment {index} yielded twice"
        clips[index] = clip
    return clips


def rms(clip: Clip) -> float:
    samples = np.frombuffer(clip.pcm, dtype="<i2").astype(np.float64)
    return float(np.sqrt(np.mean(samples**2))) if samples.size else 0.0


def assert_complete(clips: dict[int, Clip], items: list[tuple[str, Voice]]) -> None:
    """Every segment present; spoken ones audible and as long as the server's speech."""
    assert sorted(clips) == list(range(len(items)))
    for index, (text, voice) in enumerate(items):
        clip = clips[index]
        assert clip.sample_rate == 24_000
        if any(ch.isalnum() for ch in text):
            expected = speech_seconds(text, voice.rate, 0.2) + 2 * LEAD_SECONDS
            assert clip.duration == pytest.approx(expected, abs=0.05), text
            assert rms(clip) > 1000, f"spoken segment is silent: {text}"
        else:
            assert 0 < clip.duration <= 1.0
            assert rms(clip) == 0


# -- rendering -------------------------------------------------------------------------


def test_chapter_renders_completely_with_per_role_voices(server: EdgeServer) -> None:
    clips = render(make_engine(server), requests_for(CHAPTER))

    assert_complete(clips, CHAPTER)
    received = {r.text: r for r in server.stats.requests}
    assert sorted(received) == sorted(spoken(CHAPTER))
    dialogue = received["“快走！”"]
    assert (dialogue.voice, dialogue.rate, dialogue.pitch, dialogue.volume) == (
        "zh-CN-YunxiNeural",
        "+10%",
        "-5Hz",
        "+5%",
    )
    assert received[CHAPTER[0][0]].voice == "zh-CN-XiaoxiaoNeural"


def test_sentence_boundaries_are_captured(server: EdgeServer) -> None:
    items = [("你好，世界。今天天气不错！", NARRATOR)]
    (clip,) = render(make_engine(server), requests_for(items)).values()

    assert clip.boundaries == (
        (pytest.approx(0.1), "你好，世界。"),
        (pytest.approx(0.9), "今天天气不错！"),
    )


def test_word_boundaries_are_captured_when_asked(server: EdgeServer) -> None:
    items = [("他说OK。", NARRATOR)]
    (clip,) = render(make_engine(server, boundary="WordBoundary"), requests_for(items)).values()

    assert [word for _, word in clip.boundaries] == ["他", "说", "OK"]
    offsets = [offset for offset, _ in clip.boundaries]
    assert offsets == sorted(offsets) and offsets[-1] < clip.duration


def test_faster_rate_gives_shorter_audio_that_still_passes_the_check(server: EdgeServer) -> None:
    text = "曾经繁华的街市变得死寂，店铺被洗劫一空。"
    fast = Voice(rate="+50%")
    clips = render(make_engine(server), requests_for([(text, NARRATOR), (text, fast)]))

    assert clips[1].duration < clips[0].duration * 0.75
    assert server.stats.handshakes == 2  # neither was mistaken for a cut-short clip


def test_punctuation_only_segments_become_silence_and_are_never_sent(server: EdgeServer) -> None:
    items = [("……", NARRATOR), ("——", DIALOGUE), ("“！？”", NARRATOR), ("  ", NARRATOR)]
    clips = render(make_engine(server), requests_for(items))

    assert_complete(clips, items)
    assert server.stats.handshakes == 0


def test_concurrency_limit_is_never_exceeded(server: EdgeServer) -> None:
    server.latency = 0.1
    items = [(f"第{n}句，天色渐渐暗了下来。", NARRATOR) for n in range(12)]
    clips = render(make_engine(server, concurrency=3), requests_for(items))

    assert_complete(clips, items)
    assert server.stats.max_concurrent == 3


def test_concurrency_limit_holds_while_retrying(server: EdgeServer) -> None:
    server.add_fault("throttle", 6)
    server.add_fault("drop", 3)
    items = [(f"第{n}句，风停了。", NARRATOR) for n in range(10)]
    clips = render(make_engine(server, concurrency=2), requests_for(items))

    assert_complete(clips, items)
    assert server.stats.max_concurrent <= 2


# -- transient and persistent faults ----------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "times"),
    [
        ("throttle", 3),
        ("unavailable", 3),
        ("drop", 2),
        ("no_audio", 2),
        ("truncate", 2),
        ("stall", 1),
        ("slow", 1),
    ],
)
def test_transient_fault_is_retried_and_chapter_completes(
    server: EdgeServer, kind: FaultKind, times: int
) -> None:
    server.add_fault(kind, times, delay=1.0)
    engine = make_engine(server, timeout=0.8)
    clips = render(engine, requests_for(CHAPTER))

    assert_complete(clips, CHAPTER)
    assert server.stats.handshakes == len(spoken(CHAPTER)) + times


def test_slow_stream_within_the_timeout_is_not_cut(server: EdgeServer) -> None:
    server.add_fault("slow", None, delay=0.05)
    items = CHAPTER[:4]
    clips = render(make_engine(server, timeout=10.0), requests_for(items))

    assert_complete(clips, items)
    assert server.stats.handshakes == len(spoken(items))


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("throttle", "HTTP 429 Too Many Requests"),
        ("unavailable", "HTTP 503 Service Unavailable"),
        ("drop", "audio too short|audio stops at"),
        ("no_audio", "no audio received"),
        ("stall", "timed out"),
    ],
)
def test_persistent_fault_fails_clearly(server: EdgeServer, kind: FaultKind, reason: str) -> None:
    server.add_fault(kind, None)
    engine = make_engine(server, timeout=0.5, max_retries=2)

    started = time.monotonic()
    yielded: list[int] = []
    with pytest.raises(SynthesisError) as failure:
        for index, _ in engine.synthesize(requests_for(CHAPTER)):
            yielded.append(index)

    message = str(failure.value)
    assert "\n" not in message
    assert re.search(reason, message)
    assert "failed segment" in message or "consecutive failed requests" in message
    assert time.monotonic() - started < 10
    # only the silent segments came back; nothing of the faulty audio was passed on
    assert all(not any(ch.isalnum() for ch in CHAPTER[i][0]) for i in yielded)


def test_refused_request_is_not_retried(server: EdgeServer) -> None:
    # 403 is how the service rejects an outdated client token. (edge-tts retries a
    # 403 once after correcting its clock, but only with its default connector: with
    # an injected one that retry finds the connector closed, so the server sees one.)
    server.add_fault("forbidden", None)
    engine = make_engine(server, concurrency=1)

    with pytest.raises(SynthesisError, match=r"refused .*HTTP 403 Forbidden.*upgrade"):
        render(engine, requests_for([("你好。", NARRATOR)]))
    assert server.stats.handshakes == 1


def test_persistently_truncated_segment_is_detected_and_named(server: EdgeServer) -> None:
    server.add_fault("truncate", None, match="硝烟")
    engine = make_engine(server, max_retries=2)

    yielded: list[int] = []
    with pytest.raises(SynthesisError, match="街道上，硝烟弥漫") as failure:
        for index, _ in engine.synthesize(requests_for(CHAPTER)):
            yielded.append(index)

    assert "too short" in str(failure.value)
    assert 3 not in yielded
    truncated = [r for r in server.stats.requests if "硝烟" in r.text]
    assert len(truncated) == 3  # first try and two retries


def test_stream_cut_late_is_caught_by_the_sentence_boundary(edge_server: EdgeServer) -> None:
    # A slow voice keeps half the audio above the per-character minimum; only the
    # service's sentence event, which carries the whole sentence's duration, shows
    # that the stream stopped early.
    edge_server.reset()
    edge_server.seconds_per_char = 0.4
    try:
        edge_server.add_fault("drop", None)
        engine = make_engine(edge_server, max_retries=1)
        with pytest.raises(SynthesisError, match="speech runs to"):
            render(engine, requests_for([("曾经繁华的街市变得死寂。", NARRATOR)]))
    finally:
        edge_server.seconds_per_char = 0.2


def test_circuit_breaker_stops_new_requests_then_recovers(server: EdgeServer) -> None:
    server.add_fault("unavailable", None)
    items = [(f"第{n}句。", NARRATOR) for n in range(30)]
    engine = make_engine(
        server, concurrency=2, max_retries=20, breaker_threshold=4, breaker_cooldown=0.5
    )

    with pytest.raises(SynthesisError, match=r"stopped after 4 consecutive .*HTTP 503"):
        render(engine, requests_for(items))
    assert server.stats.handshakes <= 4 + 2  # the threshold plus what was in flight

    # while open, a new chapter fails at once without touching the service
    seen = server.stats.handshakes
    with pytest.raises(SynthesisError, match="consecutive failed requests"):
        render(engine, requests_for(items[:2]))
    assert server.stats.handshakes == seen

    server.reset()
    time.sleep(0.5)
    clips = render(engine, requests_for(items[:2]))
    assert_complete(clips, items[:2])


def test_closing_early_cancels_requests_in_flight(server: EdgeServer) -> None:
    server.latency = 0.2
    items = [(f"第{n}句，天色渐渐暗了下来。", NARRATOR) for n in range(9)]
    engine = make_engine(server, concurrency=3)

    started = time.monotonic()
    results = engine.synthesize(requests_for(items))
    next(results)
    results.close()

    assert time.monotonic() - started < 1.5
    time.sleep(0.3)
    assert server.stats.active == 0
    assert len(server.stats.requests) < len(items)


# -- offline --------------------------------------------------------------------------


class _NoDns(AbstractResolver):
    """A resolver for a machine without network: every lookup fails."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        raise OSError(socket.EAI_NONAME, "Name or service not known")

    async def close(self) -> None:
        pass


@pytest.mark.parametrize(
    "connector_factory",
    [
        lambda: aiohttp.TCPConnector(resolver=_NoDns()),
        lambda: aiohttp.UnixConnector("/nonexistent/edge.sock"),
    ],
    ids=["dns-fails", "refused"],
)
def test_unreachable_service_fails_within_seconds_with_one_line(
    connector_factory: ConnectorFactory,
) -> None:
    engine = EdgeEngine(concurrency=4, connector_factory=connector_factory)

    started = time.monotonic()
    with pytest.raises(SynthesisError) as failure:
        render(engine, requests_for(CHAPTER))

    assert time.monotonic() - started < 5
    message = str(failure.value)
    assert "\n" not in message
    assert "cannot reach the Edge TTS service" in message
    assert "--engine local" in message and "offline" in message


def test_service_that_never_answers_fails_within_seconds(server: EdgeServer) -> None:
    # like a DNS lookup that hangs offline: nothing comes back at all
    server.latency = 5.0
    engine = make_engine(server, connect_timeout=0.3)

    started = time.monotonic()
    with pytest.raises(SynthesisError, match=r"cannot reach .*no answer within 0.3 s.*offline"):
        render(engine, requests_for(CHAPTER))
    assert time.monotonic() - started < 3


# -- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("voice", "complaint"),
    [
        (Voice(edge_voice="zh-CN-XiaoxaoNeural"), "did you mean zh-CN-XiaoxiaoNeural"),
        (Voice(edge_voice="Xiaoxiao"), "invalid Edge voice name"),
        (Voice(rate="10%"), "invalid rate '10%'"),
        (Voice(rate="+300%"), "invalid rate"),
        (Voice(rate="-80%"), "invalid rate"),
        (Voice(pitch="+5%"), "invalid pitch"),
        (Voice(volume="+5Hz"), "invalid volume"),
    ],
)
def test_invalid_voice_settings_are_rejected_before_any_request(
    server: EdgeServer, voice: Voice, complaint: str
) -> None:
    requests = [SynthesisRequest("你好。", NARRATOR), SynthesisRequest("再见。", voice)]

    with pytest.raises(ConfigError, match=complaint):
        render(make_engine(server), requests)

    assert server.stats.handshakes == 0


def test_every_catalog_voice_and_other_locales_validate() -> None:
    for info in EDGE_VOICES:
        validate_voice(Voice(edge_voice=info.name, rate="-50%", pitch="+100Hz", volume="-100%"))
    validate_voice(Voice(edge_voice="en-US-EmmaMultilingualNeural"))


def test_engine_settings_are_checked() -> None:
    with pytest.raises(ConfigError):
        EdgeEngine(concurrency=0)
    with pytest.raises(ConfigError):
        EdgeEngine(timeout=0)


def test_engine_from_settings_checks_every_configured_voice() -> None:
    settings = Settings(engine="edge", edge=EdgeOptions(concurrency=2, max_retries=1, timeout_s=9))
    engine = EdgeEngine.from_settings(settings)
    assert (engine.concurrency, engine.max_retries, engine.timeout) == (2, 1, 9)

    hero = Character(
        name="林动", aliases=(), voice=Voice(edge_voice="zh-CN-YunxiNeural", rate="fast")
    )
    with pytest.raises(ConfigError, match="invalid rate 'fast'"):
        EdgeEngine.from_settings(replace(settings, characters=(hero,)))


def test_engine_identity() -> None:
    import edge_tts

    engine = EdgeEngine()
    assert engine.name == "edge"
    assert engine.version == f"edge-tts {edge_tts.__version__}"
    assert 50 <= engine.max_segment_chars <= 300


# -- voice lists -----------------------------------------------------------------------


def test_builtin_voice_list_covers_the_chinese_voices() -> None:
    voices = {v.name: v for v in list_voices()}

    for name in (
        "zh-CN-XiaoxiaoNeural",
        "zh-CN-YunxiNeural",
        "zh-CN-YunjianNeural",
        "zh-CN-XiaoyiNeural",
        "zh-CN-YunyangNeural",
        "zh-CN-YunxiaNeural",
        "zh-CN-liaoning-XiaobeiNeural",
        "zh-CN-shaanxi-XiaoniNeural",
    ):
        assert voices[name].locale == "zh-CN"
    assert voices["zh-CN-YunjianNeural"].gender == "Male"
    assert voices["zh-CN-XiaoxiaoNeural"].gender == "Female"
    assert {v.locale for v in voices.values()} == {"zh-CN", "zh-TW", "zh-HK"}


def test_online_voice_list_comes_from_the_service(server: EdgeServer) -> None:
    online = {v.name: v for v in list_voices(online=True, connector_factory=server.connector)}

    assert "zh-CN-XiaochenNeural" in online  # newer than the built-in catalog
    assert "zh-CN-XiaochenNeural" not in {v.name for v in list_voices()}
    assert all(name.startswith("zh-") for name in online)
    everything = list_voices(online=True, connector_factory=server.connector, locale_prefix=None)
    assert "en-US-EmmaMultilingualNeural" in {v.name for v in everything}


def test_online_voice_list_unreachable_fails_clearly() -> None:
    with pytest.raises(SynthesisError, match="could not fetch the Edge voice list"):
        list_voices(
            online=True,
            connector_factory=lambda: aiohttp.UnixConnector("/nonexistent/edge.sock"),
        )
