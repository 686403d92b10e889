"""A local stand-in for Microsoft's Edge read-aloud service, for tests and benchmarks.

It speaks the protocol edge-tts 7 uses: the client opens a websocket on
``/consumer/speech/synthesize/readaloud/edge/v1``, sends a ``speech.config`` and an
``ssml`` text message, and the server answers ``turn.start``, ``audio.metadata``
boundary events, binary ``Path:audio`` frames of real MP3 (24 kHz, 48 kb/s mono,
like the service's ``audio-24khz-48kbitrate-mono-mp3``) about 0.2 s per spoken
character scaled by the requested rate, and ``turn.end``. ``GET .../voices/list``
returns a voice list in the service's JSON format.

How edge-tts is pointed at it
-----------------------------
edge-tts runs unmodified. ``Communicate`` always opens
``wss://speech.platform.bing.com/...`` and passes its own certifi ``SSLContext`` with
every request; aiohttp lets that per-request context win over anything a connector
carries. A local TLS server would therefore need a certificate chained to a public
root, or a test CA added to certifi's bundle or to edge-tts's module-level context —
each of which changes edge-tts or its dependencies. So the server listens on a
Unix-domain socket in a private temporary directory, and the client is handed
aiohttp's public ``UnixConnector(path)`` through ``Communicate(connector=...)`` — the
injection point edge-tts offers. Everything edge-tts does (URL with
``TrustedClientToken``/``Sec-MS-GEC``, headers, the two messages, frame parsing, its
``NoAudioReceived`` logic) is exercised as in production; only the byte pipe is
swapped, and TLS is not part of what these tests cover. The socket is reachable
only by this machine's user, like a server bound to 127.0.0.1.

Faults are injected per test with :meth:`EdgeServer.add_fault`; the server counts
handshakes, synthesis requests and the most connections it saw open at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from xml.sax.saxutils import unescape

import aiohttp
import imageio_ffmpeg
import numpy as np
from aiohttp import web

BASE_PATH = "/consumer/speech/synthesize/readaloud"
SAMPLE_RATE = 24_000
FRAME_BYTES = 144  # MPEG-2 layer III, 48 kb/s at 24 kHz, never padded
FRAME_SECONDS = 576 / SAMPLE_RATE
FRAMES_PER_CHUNK = 8  # the service streams audio in small pieces
TICKS = 10_000_000  # boundary offsets are in 100 ns ticks
LEAD_SECONDS = 0.1  # silence before and after speech, as the service adds

FaultKind = Literal[
    "throttle", "unavailable", "forbidden", "drop", "no_audio", "truncate", "stall", "slow"
]
HANDSHAKE_STATUS = {"throttle": 429, "unavailable": 503, "forbidden": 403}

# (short name, gender); the service's list includes one voice newer than the
# engine's built-in catalog so tests can tell an online listing from the catalog.
SERVICE_VOICES: tuple[tuple[str, str], ...] = (
    ("zh-CN-XiaoxiaoNeural", "Female"),
    ("zh-CN-XiaoyiNeural", "Female"),
    ("zh-CN-YunjianNeural", "Male"),
    ("zh-CN-YunxiNeural", "Male"),
    ("zh-CN-YunxiaNeural", "Male"),
    ("zh-CN-YunyangNeural", "Male"),
    ("zh-CN-liaoning-XiaobeiNeural", "Female"),
    ("zh-CN-shaanxi-XiaoniNeural", "Female"),
    ("zh-HK-HiuGaaiNeural", "Female"),
    ("zh-HK-HiuMaanNeural", "Female"),
    ("zh-HK-WanLungNeural", "Male"),
    ("zh-TW-HsiaoChenNeural", "Female"),
    ("zh-TW-HsiaoYuNeural", "Female"),
    ("zh-TW-YunJheNeural", "Male"),
    ("zh-CN-XiaochenNeural", "Female"),
    ("en-US-EmmaMultilingualNeural", "Female"),
)

_SSML = re.compile(
    r"<voice name='(?P<voice>[^']*)'>"
    r"<prosody pitch='(?P<pitch>[^']*)' rate='(?P<rate>[^']*)' volume='(?P<volume>[^']*)'>"
    r"(?P<text>.*)</prosody></voice></speak>$",
    re.S,
)
_LONG_NAME = re.compile(r"^Microsoft Server Speech Text to Speech Voice \((.+), (.+)\)$")
_SENTENCE = re.compile(r"[^。！？!?；;]+[。！？!?；;]*")
# a Chinese character, or a run of other letters/digits
_WORD = re.compile(r"[\u3400-\u9fff]|[^\W_\u3400-\u9fff]+")


@dataclass
class Fault:
    kind: FaultKind
    remaining: int | None  # None: every matching request
    match: str | None = None  # only requests whose text contains this
    delay: float = 0.0  # "slow": pause between audio chunks


@dataclass(frozen=True)
class SsmlRequest:
    """One synthesis request as the server received it."""

    text: str
    voice: str
    rate: str
    pitch: str
    volume: str
    word_boundaries: bool


@dataclass
class Stats:
    handshakes: int = 0
    requests: list[SsmlRequest] = field(default_factory=list)
    active: int = 0
    max_concurrent: int = 0
    busy_seconds: float = 0.0  # summed time connections were open


def short_voice_name(ssml_name: str) -> str:
    """'Microsoft Server Speech Text to Speech Voice (zh-CN-liaoning, XiaobeiNeural)' →
    'zh-CN-liaoning-XiaobeiNeural'."""
    match = _LONG_NAME.match(ssml_name)
    return f"{match.group(1)}-{match.group(2)}" if match else ssml_name


def spoken_chars(text: str) -> int:
    return sum(ch.isalnum() for ch in text)


def speech_seconds(text: str, rate: str, seconds_per_char: float) -> float:
    """How long the fake voice takes to say ``text`` at an edge-tts rate like '+10%'."""
    speed = 1 + int(rate[:-1]) / 100
    return spoken_chars(text) * seconds_per_char / max(speed, 0.1)


def synthetic_voice_mp3(seconds: float = 30.0, seed: int = 7) -> bytes:
    """Voice-like MP3: harmonic 'syllables' with moving pitch, 0.2 s each.

    Encoded without the bit reservoir, Xing or ID3 headers so any run of whole
    frames is itself a valid MP3 stream.
    """
    rng = np.random.default_rng(seed)
    syllable = int(0.2 * SAMPLE_RATE)
    t = np.arange(syllable) / SAMPLE_RATE
    envelope = np.sin(np.pi * np.minimum(t / 0.17, 1.0)) ** 2
    pieces = []
    for _ in range(math.ceil(seconds / 0.2)):
        f0 = rng.uniform(170, 260) * (1 + 0.15 * (t / t[-1] - 0.5) * rng.choice([-1, 1]))
        phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
        weights = rng.uniform(0.2, 1.0, 8) / np.arange(1, 9)
        wave = sum(w * np.sin((k + 1) * phase) for k, w in enumerate(weights))
        pieces.append(wave * envelope)
    signal = np.concatenate(pieces)
    pcm = (0.5 * signal / np.max(np.abs(signal)) * 32767).astype("<i2").tobytes()
    result = subprocess.run(
        [
            *(imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-nostdin", "-v", "error"),
            *("-f", "s16le", "-ar", str(SAMPLE_RATE), "-ac", "1", "-i", "pipe:0"),
            *("-c:a", "libmp3lame", "-b:a", "48k", "-reservoir", "0"),
            *("-write_xing", "0", "-id3v2_version", "0", "-f", "mp3", "pipe:1"),
        ],
        input=pcm,
        capture_output=True,
        check=True,
    )
    data = result.stdout
    if len(data) % FRAME_BYTES or any(
        data[i : i + 2] != b"\xff\xf3" for i in range(0, len(data), FRAME_BYTES)
    ):
        raise RuntimeError("ffmpeg's MP3 frames are not the fixed 144-byte frames expected")
    return data


def _text_message(request_id: str, path: str, body: str) -> str:
    return (
        f"X-RequestId:{request_id}\r\n"
        "Content-Type:application/json; charset=utf-8\r\n"
        f"Path:{path}\r\n\r\n{body}"
    )


def _audio_message(request_id: str, audio: bytes) -> bytes:
    # 2-byte header length, headers, then the audio; the last message of a turn
    # carries no Content-Type and no data, as the service sends it.
    content_type = "Content-Type:audio/mpeg\r\n" if audio else ""
    headers = f"X-RequestId:{request_id}\r\n{content_type}Path:audio\r\n".encode()
    return len(headers).to_bytes(2, "big") + headers + audio


def _header(message: str, name: str) -> str | None:
    head = message.split("\r\n\r\n", 1)[0]
    for line in head.split("\r\n"):
        key, _, value = line.partition(":")
        if key == name:
            return value
    return None


def _boundaries(
    text: str, word_level: bool, seconds_per_char: float
) -> list[tuple[float, float, str]]:
    """(start s, duration s, text) of each sentence or word, timed like the audio."""
    pattern = _WORD if word_level else _SENTENCE
    events, clock = [], LEAD_SECONDS
    for match in pattern.finditer(text):
        piece = match.group().strip()
        if not spoken_chars(piece):
            continue
        duration = spoken_chars(piece) * seconds_per_char
        events.append((clock, duration, piece))
        clock += duration
    return events


class EdgeServer:
    """The fake service, running in a background thread with its own event loop.

    Use as a context manager; :meth:`connector` is the ``connector_factory`` to give
    the engine (call it inside the client's event loop).
    """

    def __init__(self, *, latency: float = 0.0, seconds_per_char: float = 0.2) -> None:
        self.latency = latency  # seconds before the service starts answering a request
        self.seconds_per_char = seconds_per_char
        self._defaults = (latency, seconds_per_char)
        self._dir = Path(tempfile.mkdtemp(prefix="edge-server-"))
        self.socket_path = str(self._dir / "edge.sock")
        self._mp3 = synthetic_voice_mp3()
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._stats = Stats()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._sockets: set[web.WebSocketResponse] = set()

    # -- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> EdgeServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get(f"{BASE_PATH}/edge/v1", self._speak)
        app.router.add_get(f"{BASE_PATH}/voices/list", self._voices)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        await web.UnixSite(self._runner, self.socket_path).start()

    async def _stop(self) -> None:
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def connector(self) -> aiohttp.BaseConnector:
        return aiohttp.UnixConnector(self.socket_path)

    # -- configuration and counters (called from the test's thread) ------------------

    def add_fault(
        self,
        kind: FaultKind,
        times: int | None = 1,
        *,
        match: str | None = None,
        delay: float = 0.5,
    ) -> None:
        """Make the next ``times`` matching requests (all of them if None) fail this way.

        throttle/unavailable/forbidden: handshake answered 429/503/403 (the text is
        not known yet, so ``match`` is ignored); drop: connection cut after half the
        audio; no_audio: turn ends without audio; truncate: 40 % of the audio, then a
        normal turn.end; stall: 30 % of the audio, then silence with the connection
        open; slow: ``delay`` seconds between audio chunks.
        """
        with self._lock:
            self._faults.append(Fault(kind, times, match, delay))

    def reset(self) -> None:
        """Forget faults and counters; restore the constructor's timing."""
        with self._lock:
            self._faults.clear()
            self._stats = Stats()
        self.latency, self.seconds_per_char = self._defaults

    @property
    def stats(self) -> Stats:
        with self._lock:
            return Stats(
                handshakes=self._stats.handshakes,
                requests=list(self._stats.requests),
                active=self._stats.active,
                max_concurrent=self._stats.max_concurrent,
                busy_seconds=self._stats.busy_seconds,
            )

    def _take_fault(self, handshake: bool, text: str | None) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if (fault.kind in HANDSHAKE_STATUS) != handshake or fault.remaining == 0:
                    continue
                if text is not None and fault.match is not None and fault.match not in text:
                    continue
                if fault.remaining is not None:
                    fault.remaining -= 1
                return fault
        return None

    @contextmanager
    def _connection(self) -> Iterator[Stats]:
        started = self._loop.time()
        with self._lock:
            stats = self._stats  # a request outliving reset() must not touch the new counters
            stats.handshakes += 1
            stats.active += 1
            stats.max_concurrent = max(stats.max_concurrent, stats.active)
        try:
            yield stats
        finally:
            with self._lock:
                stats.active -= 1
                stats.busy_seconds += self._loop.time() - started

    # -- handlers ------------------------------------------------------------------------

    async def _voices(self, request: web.Request) -> web.Response:
        if "trustedclienttoken" not in request.query:
            return web.Response(status=401)
        voices = []
        for short, gender in SERVICE_VOICES:
            locale = "-".join(short.split("-")[:2])
            region = "-".join(short.split("-")[:-1])
            name = short.split("-")[-1]
            voices.append(
                {
                    "Name": f"Microsoft Server Speech Text to Speech Voice ({region}, {name})",
                    "ShortName": short,
                    "Gender": gender,
                    "Locale": locale,
                    "SuggestedCodec": "audio-24khz-48kbitrate-mono-mp3",
                    "FriendlyName": f"Microsoft {name} Online (Natural) - {locale}",
                    "Status": "GA",
                    "VoiceTag": {"ContentCategories": ["General"], "VoicePersonalities": []},
                }
            )
        return web.json_response(voices)

    async def _speak(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(compress=False)
        # A request counts as in flight from its handshake until its answer is sent;
        # the closing handshake afterwards overlaps the client's next request.
        with self._connection() as stats:
            if not {"TrustedClientToken", "Sec-MS-GEC", "ConnectionId"} <= request.query.keys():
                return web.Response(status=400, text="missing token")
            fault = self._take_fault(handshake=True, text=None)
            if fault is not None:
                return web.Response(status=HANDSHAKE_STATUS[fault.kind])
            # the client may give up on a request at any point (timeout or cancel)
            with contextlib.suppress(ConnectionError, aiohttp.WSMessageTypeError):
                await ws.prepare(request)
                self._sockets.add(ws)
                await self._converse(ws, request, stats)
        self._sockets.discard(ws)
        if not ws.prepared:  # the client left during the handshake
            return web.Response(status=499)
        with contextlib.suppress(ConnectionError):
            await ws.close()
        return ws

    async def _converse(
        self, ws: web.WebSocketResponse, request: web.Request, stats: Stats
    ) -> None:
        config = await ws.receive_str(timeout=10)
        if _header(config, "Path") != "speech.config":
            raise ValueError("expected speech.config first")
        options = json.loads(config.split("\r\n\r\n", 1)[1])
        synthesis = options["context"]["synthesis"]
        if synthesis["audio"]["outputFormat"] != "audio-24khz-48kbitrate-mono-mp3":
            raise ValueError("unexpected output format")
        word_level = synthesis["audio"]["metadataoptions"]["wordBoundaryEnabled"] == "true"

        message = await ws.receive_str(timeout=10)
        request_id = _header(message, "X-RequestId") or uuid.uuid4().hex
        match = _SSML.search(message)
        if _header(message, "Path") != "ssml" or match is None:
            raise ValueError("expected an ssml message")
        ssml_text = match.group("text")
        text = unescape(ssml_text)
        received = SsmlRequest(
            text=text,
            voice=short_voice_name(match.group("voice")),
            rate=match.group("rate"),
            pitch=match.group("pitch"),
            volume=match.group("volume"),
            word_boundaries=word_level,
        )
        with self._lock:
            stats.requests.append(received)
        fault = self._take_fault(handshake=False, text=text)
        kind = fault.kind if fault else None

        await asyncio.sleep(self.latency)
        await ws.send_str(_text_message(request_id, "turn.start", '{"context":{}}'))
        known = received.voice in {name for name, _ in SERVICE_VOICES}
        if known and spoken_chars(text) and kind != "no_audio":
            await self._stream_audio(ws, request, request_id, received, fault)
            if kind in ("drop", "stall"):
                return
        await ws.send_str(_text_message(request_id, "turn.end", "{}"))

    async def _stream_audio(
        self,
        ws: web.WebSocketResponse,
        request: web.Request,
        request_id: str,
        received: SsmlRequest,
        fault: Fault | None,
    ) -> None:
        speed = 1 + int(received.rate[:-1]) / 100
        per_char = self.seconds_per_char / max(speed, 0.1)
        seconds = 2 * LEAD_SECONDS + speech_seconds(
            received.text, received.rate, self.seconds_per_char
        )
        frames = math.ceil(seconds / FRAME_SECONDS)
        kind = fault.kind if fault else None
        send = {"truncate": 0.4, "drop": 0.5, "stall": 0.3}.get(kind or "", 1.0)
        sent_frames = max(1, int(frames * send))
        events = _boundaries(received.text, received.word_boundaries, per_char)
        boundary_type = "WordBoundary" if received.word_boundaries else "SentenceBoundary"
        pending = list(events)
        for first in range(0, sent_frames, FRAMES_PER_CHUNK):
            last = min(first + FRAMES_PER_CHUNK, sent_frames)
            while pending and pending[0][0] < last * FRAME_SECONDS:
                start, duration, piece = pending.pop(0)
                await ws.send_str(
                    _text_message(
                        request_id,
                        "audio.metadata",
                        json.dumps(
                            {
                                "Metadata": [
                                    {
                                        "Type": boundary_type,
                                        "Data": {
                                            "Offset": round(start * TICKS),
                                            "Duration": round(duration * TICKS),
                                            "text": {
                                                "Text": piece,
                                                "Length": len(piece),
                                                "BoundaryType": boundary_type,
                                            },
                                        },
                                    }
                                ]
                            },
                            ensure_ascii=False,
                        ),
                    )
                )
            await ws.send_bytes(_audio_message(request_id, self._frames(first, last)))
            if kind == "slow" and fault is not None:
                await asyncio.sleep(fault.delay)
        if kind == "drop":
            # cut the connection without a close frame, as a network failure would
            if request.transport is not None:
                request.transport.abort()
            return
        if kind == "stall":
            while not ws.closed:
                message = await ws.receive()
                if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                    break
            return
        await ws.send_bytes(_audio_message(request_id, b""))

    def _frames(self, first: int, last: int) -> bytes:
        total = len(self._mp3) // FRAME_BYTES
        return b"".join(
            self._mp3[(i % total) * FRAME_BYTES : (i % total + 1) * FRAME_BYTES]
            for i in range(first, last)
        )
