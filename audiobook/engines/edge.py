"""Microsoft Edge neural voices through edge-tts, hardened for whole-chapter renders.

edge-tts itself retries nothing but a clock-skew 403, raises ``NoAudioReceived`` for
text that is only punctuation, and returns normally when a stream is cut short. This
engine puts around it:

* one global limit on requests in flight (the service throttles bursts);
* retries with exponential backoff and jitter on timeouts, connection errors,
  429/5xx handshakes, missing audio and incomplete audio;
* a circuit breaker that stops sending after repeated consecutive failures;
* a fast, clear failure when the service was never reachable (offline use);
* a completeness check on every clip: decoded duration against the text's length,
  and against the end of the service's own boundary events.

Segments with nothing speakable become short silences and are never sent.

edge-tts is async; :meth:`EdgeEngine.synthesize` runs an event loop in a worker
thread and hands clips back as they complete. ``connector_factory`` is the one
place where the connection can be redirected (tests use a local server).
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import logging
import math
import queue
import random
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, ClassVar, Literal, Self

import aiohttp
import edge_tts
import imageio_ffmpeg
from edge_tts.exceptions import EdgeTTSException, NoAudioReceived

from audiobook.engines.base import SynthesisRequest, is_speakable
from audiobook.errors import ConfigError, SynthesisError
from audiobook.models import Clip, Voice

if TYPE_CHECKING:
    from audiobook.settings import Settings

log = logging.getLogger(__name__)

ConnectorFactory = Callable[[], aiohttp.BaseConnector]
BoundaryKind = Literal["SentenceBoundary", "WordBoundary"]
Gender = Literal["Female", "Male"]

SERVICE_HOST = "speech.platform.bing.com"
SAMPLE_RATE = 24_000  # the service's audio-24khz-48kbitrate-mono-mp3
TICKS_PER_SECOND = 10_000_000  # boundary offsets come in 100 ns ticks

RATE_RANGE = (-50, 100)  # percent; the service's prosody rate spans 0.5x to 2x
PITCH_RANGE = (-100, 100)  # Hz
VOLUME_RANGE = (-100, 100)  # percent

# Lower bounds for real speech: Chinese voices read about 4-5 characters a second at
# +0%, so 0.12 s per character is well under any complete clip and well over a cut one.
MIN_SECONDS_PER_HANZI = 0.12
MIN_SECONDS_PER_OTHER = 0.03  # letters and digits: Latin words are quick, digits vary
BOUNDARY_SLACK = 0.15  # seconds the audio may end before the last boundary event


@dataclass(frozen=True)
class EdgeVoiceInfo:
    name: str  # short name as edge-tts takes it, e.g. "zh-CN-XiaoxiaoNeural"
    gender: Gender
    locale: str  # e.g. "zh-CN"


EDGE_VOICES: tuple[EdgeVoiceInfo, ...] = (
    EdgeVoiceInfo("zh-CN-XiaoxiaoNeural", "Female", "zh-CN"),
    EdgeVoiceInfo("zh-CN-XiaoyiNeural", "Female", "zh-CN"),
    EdgeVoiceInfo("zh-CN-YunjianNeural", "Male", "zh-CN"),
    EdgeVoiceInfo("zh-CN-YunxiNeural", "Male", "zh-CN"),
    EdgeVoiceInfo("zh-CN-YunxiaNeural", "Male", "zh-CN"),
    EdgeVoiceInfo("zh-CN-YunyangNeural", "Male", "zh-CN"),
    EdgeVoiceInfo("zh-CN-liaoning-XiaobeiNeural", "Female", "zh-CN"),
    EdgeVoiceInfo("zh-CN-shaanxi-XiaoniNeural", "Female", "zh-CN"),
    EdgeVoiceInfo("zh-HK-HiuGaaiNeural", "Female", "zh-HK"),
    EdgeVoiceInfo("zh-HK-HiuMaanNeural", "Female", "zh-HK"),
    EdgeVoiceInfo("zh-HK-WanLungNeural", "Male", "zh-HK"),
    EdgeVoiceInfo("zh-TW-HsiaoChenNeural", "Female", "zh-TW"),
    EdgeVoiceInfo("zh-TW-HsiaoYuNeural", "Female", "zh-TW"),
    EdgeVoiceInfo("zh-TW-YunJheNeural", "Male", "zh-TW"),
)
_CATALOG = {v.name: v for v in EDGE_VOICES}

_VOICE_NAME = re.compile(r"^[a-z]{2,3}-[A-Z]{2,}(-[a-z]+)?-[A-Za-z]+Neural$")
_PERCENT = re.compile(r"^[+-]\d+%$")
_HERTZ = re.compile(r"^[+-]\d+Hz$")


# -- validation and catalog ----------------------------------------------------------


def validate_voice(voice: Voice) -> None:
    """Raise :class:`ConfigError` unless edge-tts and the service will accept ``voice``.

    Chinese voices must be in the built-in catalog (it lists them all, so a typo is
    caught offline); voices of other locales only need the right form.
    """
    name = voice.edge_voice
    if not _VOICE_NAME.match(name):
        raise ConfigError(
            f"invalid Edge voice name '{name}': expected a short name like zh-CN-XiaoxiaoNeural"
        )
    if name.startswith("zh-") and name not in _CATALOG:
        close = difflib.get_close_matches(name, _CATALOG, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(
            f"unknown Edge voice '{name}'{hint}; `audiobook voices list` shows the Chinese voices"
        )
    _check_prosody("rate", voice.rate, _PERCENT, "%", RATE_RANGE, name)
    _check_prosody("pitch", voice.pitch, _HERTZ, "Hz", PITCH_RANGE, name)
    _check_prosody("volume", voice.volume, _PERCENT, "%", VOLUME_RANGE, name)


def _check_prosody(
    what: str, value: str, pattern: re.Pattern[str], unit: str, bounds: tuple[int, int], name: str
) -> None:
    low, high = bounds
    if (
        not isinstance(value, str)
        or not pattern.match(value)
        or not low <= int(value[: -len(unit)]) <= high
    ):
        raise ConfigError(
            f"invalid {what} '{value}' for {name}: use a signed value like "
            f"'+10{unit}' or '-5{unit}' between {low:+d}{unit} and {high:+d}{unit}"
        )


def list_voices(
    online: bool = False,
    *,
    connector_factory: ConnectorFactory | None = None,
    locale_prefix: str | None = "zh",
    timeout: float = 15.0,
) -> list[EdgeVoiceInfo]:
    """The Edge voices for ``locale_prefix`` (all locales if None), sorted by name.

    Offline this is the built-in catalog; ``online=True`` asks the service for its
    current list and raises :class:`SynthesisError` if it cannot be reached.
    """
    voices = asyncio.run(_fetch_voices(connector_factory, timeout)) if online else [*EDGE_VOICES]
    if locale_prefix is not None:
        voices = [v for v in voices if v.locale.startswith(locale_prefix)]
    return sorted(voices, key=lambda v: v.name)


async def _fetch_voices(
    connector_factory: ConnectorFactory | None, timeout: float
) -> list[EdgeVoiceInfo]:
    connector = connector_factory() if connector_factory else None
    try:
        async with asyncio.timeout(timeout):
            raw = await edge_tts.list_voices(connector=connector)
    except (aiohttp.ClientError, EdgeTTSException, OSError, TimeoutError, ValueError) as exc:
        raise SynthesisError(
            f"could not fetch the Edge voice list from {SERVICE_HOST}: {_describe(exc)}; "
            "`audiobook voices list` without --online shows the built-in list"
        ) from exc
    return [
        EdgeVoiceInfo(v["ShortName"], v["Gender"], v["Locale"])
        for v in raw
        if v.get("Gender") in ("Female", "Male")
    ]


# -- audio checks ----------------------------------------------------------------------


def mp3_to_pcm(data: bytes, sample_rate: int = SAMPLE_RATE) -> bytes:
    """Decode MP3 to 16-bit mono PCM with the ffmpeg bundled by imageio-ffmpeg.

    Raises ValueError if ffmpeg finds no audio in ``data``.
    """
    result = subprocess.run(
        [
            *(imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-nostdin", "-v", "error"),
            *("-f", "mp3", "-i", "pipe:0"),
            *("-f", "s16le", "-acodec", "pcm_s16le", "-ac", "1", "-ar", str(sample_rate)),
            "pipe:1",
        ],
        input=data,
        capture_output=True,
        check=False,
    )
    if result.returncode != 0 or not result.stdout:
        lines = result.stderr.decode(errors="replace").strip().splitlines()
        raise ValueError(f"undecodable MP3 ({lines[-1] if lines else 'no audio'})")
    return result.stdout


def min_plausible_seconds(text: str, rate: str = "+0%") -> float:
    """The shortest duration complete speech of ``text`` can have at an edge-tts rate."""
    hanzi = sum(1 for ch in text if "\u3400" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff")
    other = sum(1 for ch in text if ch.isalnum()) - hanzi
    speed = 1 + int(rate[:-1]) / 100
    return (hanzi * MIN_SECONDS_PER_HANZI + other * MIN_SECONDS_PER_OTHER) / speed


def incomplete_reason(
    text: str, rate: str, duration: float, boundary_end: float | None
) -> str | None:
    """Why a clip of ``duration`` seconds cannot be all of ``text``, or None if plausible.

    ``boundary_end`` is where the service's last sentence/word event says speech ends.
    """
    minimum = min_plausible_seconds(text, rate)
    if duration < minimum:
        return (
            f"audio too short: {duration:.2f} s for {sum(c.isalnum() for c in text)} "
            f"characters (complete speech takes at least {minimum:.2f} s)"
        )
    if boundary_end is not None and duration + BOUNDARY_SLACK < boundary_end:
        return f"audio stops at {duration:.2f} s but the speech runs to {boundary_end:.2f} s"
    return None


def silence_for(text: str, sample_rate: int = SAMPLE_RATE) -> Clip:
    """A short pause standing in for text with nothing to say (e.g. '……')."""
    seconds = min(1.0, 0.15 * max(1, len(text.strip())))
    return Clip(pcm=bytes(2 * round(seconds * sample_rate)), sample_rate=sample_rate)


# -- failures and the circuit breaker -------------------------------------------------


class _Incomplete(Exception):
    """The service answered, but not with complete audio for the text."""


class _NoAnswer(Exception):
    """Nothing came back in time: no DNS, no route, or a connection that hangs."""


@dataclass(frozen=True)
class _Failure:
    reason: str
    retryable: bool
    unreachable: bool = False  # no connection to the service at all
    service_failed: bool = True  # counts towards the circuit breaker


_RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def _describe(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientResponseError):
        try:
            phrase = HTTPStatus(exc.status).phrase
        except ValueError:
            phrase = exc.message
        return f"HTTP {exc.status} {phrase}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"connection failed ({exc.os_error.strerror or exc.os_error})"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, NoAudioReceived):
        return "no audio received"
    if isinstance(exc, _Incomplete | _NoAnswer):
        return str(exc)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _classify(exc: BaseException) -> _Failure:
    reason = _describe(exc)
    if isinstance(exc, aiohttp.ClientResponseError):
        return _Failure(reason, exc.status in _RETRYABLE_STATUS)
    if isinstance(exc, _Incomplete):
        # the service answered; whether this text comes back whole is the segment's
        # problem, not a sign the service is failing
        return _Failure(reason, retryable=True, service_failed=False)
    unreachable = isinstance(
        exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError | _NoAnswer
    )
    return _Failure(reason, retryable=True, unreachable=unreachable)


class _Breaker:
    """Opens after ``threshold`` consecutive failed requests; closes after ``cooldown``.

    Owned by one engine and touched only from the worker thread of the current
    :meth:`EdgeEngine.synthesize` call (calls never overlap).
    """

    def __init__(self, threshold: int, cooldown: float) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self.failures = 0
        self.last_reason = ""
        self.opened_at: float | None = None

    def raise_if_open(self) -> None:
        if self.opened_at is None:
            return
        if time.monotonic() - self.opened_at >= self.cooldown:
            self.opened_at, self.failures = None, 0
            return
        raise SynthesisError(
            f"Edge TTS stopped after {self.failures} consecutive failed requests "
            f"(last: {self.last_reason}); the service is throttling or down — try again "
            "later, lower edge.concurrency, or use --engine local"
        )

    def record_success(self) -> None:
        self.failures = 0

    def record_failure(self, reason: str) -> None:
        self.failures += 1
        self.last_reason = reason
        if self.failures >= self.threshold and self.opened_at is None:
            self.opened_at = time.monotonic()
            log.warning("edge: circuit breaker open after %d failures", self.failures)


# -- the engine -----------------------------------------------------------------------


class EdgeEngine:
    """Speech from Microsoft Edge's online neural voices.

    ``concurrency`` caps requests in flight; each request is tried up to
    ``1 + max_retries`` times, waiting about ``backoff_base * 2**n`` seconds (with
    jitter, at most ``backoff_max``) before retry n+1. The service must answer within
    ``connect_timeout`` seconds and finish within ``timeout`` seconds of answering.
    After ``breaker_threshold`` consecutive failed requests no new ones are sent
    for ``breaker_cooldown`` seconds. ``connector_factory`` makes the aiohttp
    connector for each request (None: edge-tts's default connection to the service).
    """

    name: ClassVar[str] = "edge"
    # Sentence-sized requests: far below the service's 4096-byte limit, and a failed
    # request costs little to repeat.
    max_segment_chars: ClassVar[int] = 200
    version: ClassVar[str] = f"edge-tts {edge_tts.__version__}"  # the voice is keyed separately

    def __init__(
        self,
        concurrency: int = 4,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        timeout: float = 30.0,
        breaker_threshold: int = 10,
        connector_factory: ConnectorFactory | None = None,
        *,
        connect_timeout: float = 5.0,
        backoff_max: float = 30.0,
        breaker_cooldown: float = 60.0,
        boundary: BoundaryKind = "SentenceBoundary",
    ) -> None:
        if concurrency < 1 or max_retries < 0 or breaker_threshold < 1:
            raise ConfigError(
                "edge engine: concurrency and breaker threshold must be ≥ 1, retries ≥ 0"
            )
        if timeout <= 0 or connect_timeout <= 0 or backoff_base < 0:
            raise ConfigError("edge engine: timeouts must be > 0 and backoff ≥ 0")
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        # Sentence events arrive as each sentence starts and carry its full duration,
        # so they reveal a stream cut short; word events only cover what was sent.
        self.boundary: BoundaryKind = boundary
        self._connector_factory = connector_factory
        self._breaker = _Breaker(breaker_threshold, breaker_cooldown)
        self._reached_service = False
        self._rng = random.Random()

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        """An engine configured from voices.toml; every configured voice is checked now."""
        for voice in (
            settings.narrator,
            settings.dialogue,
            *(c.voice for c in settings.characters),
        ):
            validate_voice(voice)
        return cls(
            concurrency=settings.edge.concurrency,
            max_retries=settings.edge.max_retries,
            timeout=settings.edge.timeout_s,
        )

    def close(self) -> None:
        """Nothing to release: every request opens and closes its own session."""

    def synthesize(self, requests: Sequence[SynthesisRequest]) -> Iterator[tuple[int, Clip]]:
        """Yield ``(index, clip)`` as requests complete; see :class:`Engine`.

        Every voice is validated before anything is sent; text with nothing to say
        comes back as silence without a request.
        """
        for request in requests:
            validate_voice(request.voice)
        self._breaker.raise_if_open()
        spoken = [(i, r) for i, r in enumerate(requests) if is_speakable(r.text)]
        for i, request in enumerate(requests):
            if not is_speakable(request.text):
                yield i, silence_for(request.text)
        if not spoken:
            return
        run = _Run(self, spoken)
        run.start()
        try:
            for _ in spoken:
                item = run.results.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            run.stop()

    # -- one request, retried (runs in the worker's event loop) --

    async def _render(
        self, index: int, request: SynthesisRequest, limit: asyncio.Semaphore
    ) -> tuple[int, Clip]:
        attempt = 0
        while True:
            self._breaker.raise_if_open()
            try:
                async with limit:
                    # the breaker may have opened while this request waited its turn
                    self._breaker.raise_if_open()
                    audio, marks = await self._fetch(request)
                clip = await asyncio.to_thread(self._to_clip, request, audio, marks)
            except (
                aiohttp.ClientError,
                EdgeTTSException,
                OSError,
                TimeoutError,
                _Incomplete,
                _NoAnswer,
            ) as exc:
                failure = _classify(exc)
            else:
                self._breaker.record_success()
                self._reached_service = True
                return index, clip
            if failure.service_failed:
                self._breaker.record_failure(failure.reason)
            self._raise_if_final(request, failure, attempt)
            delay = self._backoff(attempt)
            log.info(
                "edge: %s for %r, retry %d in %.2f s",
                failure.reason,
                _excerpt(request.text),
                attempt + 1,
                delay,
            )
            await asyncio.sleep(delay)
            attempt += 1

    def _raise_if_final(self, request: SynthesisRequest, failure: _Failure, attempt: int) -> None:
        # Before any request has worked, a connection failure most likely means no
        # network: say so within seconds instead of retrying for minutes.
        never_connected = failure.unreachable and not self._reached_service
        if never_connected and (attempt >= 1 or self._breaker.opened_at is not None):
            raise SynthesisError(
                f"cannot reach the Edge TTS service ({SERVICE_HOST}): {failure.reason}; "
                "check the internet connection, or use --engine local, which works offline"
            )
        if not failure.retryable:
            raise SynthesisError(
                f'the Edge TTS service refused segment "{_excerpt(request.text)}" '
                f"({failure.reason}); edge-tts {edge_tts.__version__} may be outdated — "
                "upgrade it or use --engine local"
            )
        self._breaker.raise_if_open()
        if attempt >= self.max_retries:
            raise SynthesisError(
                f'Edge TTS failed segment "{_excerpt(request.text)}" '
                f"({request.voice.edge_voice}) after {attempt + 1} attempts: {failure.reason}"
            )

    def _backoff(self, attempt: int) -> float:
        ceiling = min(self.backoff_max, self.backoff_base * 2**attempt)
        # "equal jitter": never zero, and concurrent retries spread out
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)

    async def _fetch(
        self, request: SynthesisRequest
    ) -> tuple[bytes, list[tuple[float, float, str]]]:
        voice = request.voice
        communicate = edge_tts.Communicate(
            request.text,
            voice.edge_voice,
            rate=voice.rate,
            volume=voice.volume,
            pitch=voice.pitch,
            boundary=self.boundary,
            connector=self._connector_factory() if self._connector_factory else None,
            connect_timeout=max(1, math.ceil(self.connect_timeout)),
            receive_timeout=max(1, math.ceil(self.timeout)),
        )
        audio = bytearray()
        marks: list[tuple[float, float, str]] = []
        loop = asyncio.get_running_loop()
        answered = False
        try:
            # DNS lookups are outside aiohttp's connect timeout and can hang for long
            # when offline, so the first answer has its own, shorter deadline.
            async with asyncio.timeout(self.connect_timeout) as deadline:
                async for chunk in communicate.stream():
                    if not answered:
                        answered = True
                        deadline.reschedule(loop.time() + self.timeout)
                    if chunk["type"] == "audio":
                        audio += chunk.get("data", b"")
                    else:
                        marks.append(
                            (
                                chunk.get("offset", 0) / TICKS_PER_SECOND,
                                chunk.get("duration", 0) / TICKS_PER_SECOND,
                                chunk.get("text", ""),
                            )
                        )
        except TimeoutError as exc:
            if not answered:
                raise _NoAnswer(f"no answer within {self.connect_timeout:g} s") from exc
            raise
        except RuntimeError as exc:
            # edge-tts answers a 403 by retrying with the same connector, which the
            # failed attempt's session has already closed: report the 403 itself.
            if isinstance(exc.__context__, aiohttp.ClientResponseError):
                raise exc.__context__ from None
            raise
        return bytes(audio), marks

    @staticmethod
    def _to_clip(
        request: SynthesisRequest, audio: bytes, marks: list[tuple[float, float, str]]
    ) -> Clip:
        try:
            pcm = mp3_to_pcm(audio)
        except ValueError as exc:
            raise _Incomplete(str(exc)) from exc
        clip = Clip(
            pcm=pcm,
            sample_rate=SAMPLE_RATE,
            boundaries=tuple((offset, text) for offset, _, text in marks),
        )
        end = max((offset + length for offset, length, _ in marks), default=None)
        reason = incomplete_reason(request.text, request.voice.rate, clip.duration, end)
        if reason is not None:
            raise _Incomplete(reason)
        return clip


def _excerpt(text: str, limit: int = 24) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Run:
    """One :meth:`EdgeEngine.synthesize` call: an event loop in a worker thread.

    Finished clips (or the first fatal error) go to ``results`` so the caller can
    cache each clip while later requests are still in flight.
    """

    def __init__(self, engine: EdgeEngine, jobs: list[tuple[int, SynthesisRequest]]) -> None:
        self.engine = engine
        self.jobs = jobs
        self.results: queue.SimpleQueue[tuple[int, Clip] | BaseException] = queue.SimpleQueue()
        self._loop = asyncio.new_event_loop()
        self._main: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._work, name="edge-tts", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Cancel whatever is still in flight and wait for the worker to finish."""
        with contextlib.suppress(RuntimeError):  # the loop already finished and closed
            self._loop.call_soon_threadsafe(self._cancel)
        self._thread.join()

    def _cancel(self) -> None:
        if self._main is not None:
            self._main.cancel()

    def _work(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            self._main = loop.create_task(self._gather())
            loop.run_until_complete(self._main)
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # a bug: hand it to the caller rather than hang it
            self.results.put(exc)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    async def _gather(self) -> None:
        limit = asyncio.Semaphore(self.engine.concurrency)
        tasks = [
            asyncio.create_task(self.engine._render(index, request, limit))
            for index, request in self.jobs
        ]
        try:
            for finished in asyncio.as_completed(tasks):
                try:
                    self.results.put(await finished)
                except SynthesisError as exc:
                    self.results.put(exc)
                    return
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
