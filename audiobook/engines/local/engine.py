"""The offline ``local`` engine: our Chinese frontend feeding the Baker model.

Text becomes phone ids in this process; the ids become audio either here
(one worker) or in long-lived worker processes, each with its own LiteRT
interpreters.  A segment is always synthesized whole by one interpreter, so the
audio does not depend on how many workers there are or which one got it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import selectors
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from audiobook.engines.base import SynthesisRequest, is_speakable
from audiobook.engines.local.model import (
    ACOUSTIC,
    MAPPER,
    MODEL_FILES,
    SAMPLE_RATE,
    VOCODER,
    BakerModel,
    ModelGraphs,
    ensure_model,
)
from audiobook.errors import AudiobookError, ConfigError, ModelError, SynthesisError
from audiobook.models import Clip, Voice

if TYPE_CHECKING:
    from audiobook.engines.local.frontend import Frontend
    from audiobook.settings import Settings

logger = logging.getLogger(__name__)

# Part of the cache key: bump whenever the audio made from the same phone ids changes
# (graph rewrites, pitch shifting, gain, silences).
RUNTIME_VERSION = "2"

RATE_RANGE = (-50, 100)  # percent, as for edge-tts
PITCH_RANGE = (-100, 100)  # Hz
VOLUME_RANGE = (-100, 100)  # percent
# Median f0 of the Baker voice, measured over ch004; "+20Hz" means (250 + 20) / 250.
BASE_PITCH_HZ = 250.0


@dataclass(frozen=True)
class Prosody:
    """How one voice bends the model: duration, frequency and amplitude multipliers."""

    speed: float = 1.0  # >1 is slower: the model's speed input multiplies durations
    pitch: float = 1.0
    gain: float = 1.0

    @classmethod
    def from_voice(cls, voice: Voice) -> Prosody:
        """Read a voice's edge-tts style rate/pitch/volume; ConfigError if unusable."""
        try:
            rate, pitch, volume = voice.rate_percent, voice.pitch_hz, voice.volume_percent
        except (ValueError, IndexError):
            raise ConfigError(
                f"local voice: rate '{voice.rate}', pitch '{voice.pitch}', volume "
                f"'{voice.volume}' must look like +10%, -5Hz, +0%"
            ) from None
        for name, value, (low, high), unit in (
            ("rate", rate, RATE_RANGE, "%"),
            ("pitch", pitch, PITCH_RANGE, "Hz"),
            ("volume", volume, VOLUME_RANGE, "%"),
        ):
            if not low <= value <= high:
                raise ConfigError(
                    f"local voice: {name} {value:+d}{unit} is outside {low:+d}..{high:+d}{unit}"
                )
        return cls(
            speed=1.0 / (1.0 + rate / 100),
            pitch=(BASE_PITCH_HZ + pitch) / BASE_PITCH_HZ,
            gain=1.0 + volume / 100,
        )


def render(model: BakerModel, ids: Sequence[int], prosody: Prosody) -> bytes:
    """16-bit PCM at 24 kHz for phone ids spoken with ``prosody``.

    The model's own f0 input only widens or narrows the intonation around the
    voice's mean (its f0 is normalized), so pitch is shifted by synthesizing
    ``pitch`` times slower and resampling back to the intended duration.
    """
    audio = model.synthesize(ids, speed=prosody.speed * prosody.pitch)
    if prosody.pitch != 1.0:
        audio = resample(audio, round(len(audio) / prosody.pitch))
    return to_pcm16(audio * prosody.gain)


def resample(audio: np.ndarray, length: int) -> np.ndarray:
    """``audio`` stretched or squeezed to ``length`` samples, band-limited (via the FFT)."""
    if length <= 0 or len(audio) == 0:
        return np.zeros(max(length, 0), np.float32)
    spectrum = np.fft.rfft(audio.astype(np.float64))
    kept = np.zeros(length // 2 + 1, np.complex128)
    n = min(len(spectrum), len(kept))
    kept[:n] = spectrum[:n]
    return (np.fft.irfft(kept, length) * (length / len(audio))).astype(np.float32)


def to_pcm16(audio: np.ndarray) -> bytes:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes()


def silence(text: str) -> Clip:
    """A short pause standing in for text with nothing to say (e.g. '……')."""
    seconds = min(1.0, 0.15 * max(1, len(text.strip())))
    return Clip(pcm=bytes(2 * round(seconds * SAMPLE_RATE)), sample_rate=SAMPLE_RATE)


def default_workers() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(2, cpus))


class _EngineVersion:
    """``LocalEngine.version``, read on first use so worker processes never import the
    frontend (jieba and pypinyin's dictionaries: ~70 MB and half a second each)."""

    def __get__(self, instance: object, owner: type) -> str:
        from audiobook.engines.local.frontend import FRONTEND_VERSION

        model = "-".join(MODEL_FILES[name][:8] for name in (ACOUSTIC, VOCODER, MAPPER))
        return f"local baker {model} frontend {FRONTEND_VERSION} runtime {RUNTIME_VERSION}"


class LocalEngine:
    """Offline neural Mandarin speech (Baker voice, 24 kHz) on the CPU."""

    name: ClassVar[str] = "local"
    # Sentence pieces up to 60 characters keep the model's intonation natural and stay
    # well inside its 2048-frame (25 s) limit even at rate -50%.
    max_segment_chars: ClassVar[int] = 60
    version: ClassVar[str] = _EngineVersion()  # type: ignore[assignment]

    def __init__(self, frontend: Frontend, runner: _Runner) -> None:
        self._frontend = frontend
        self._runner = runner

    @classmethod
    def load(cls, model_dir: Path | None = None, workers: int | None = None) -> LocalEngine:
        """Install the model if needed and get ``workers`` synthesizers ready.

        One worker runs in this process with all CPU threads; more run as worker
        processes, one thread each, kept alive until :meth:`close`.
        """
        from audiobook.engines.local.frontend import Frontend  # jieba, pypinyin: slow imports

        workers = default_workers() if workers is None else workers
        if workers < 1:
            raise ConfigError(f"local engine: workers must be at least 1, not {workers}")
        model_dir = ensure_model(model_dir)
        runner: _Runner = _InProcess(model_dir) if workers == 1 else _WorkerPool(model_dir, workers)
        try:  # the workers load the model while jieba loads its dictionary here
            frontend = Frontend.load(model_dir / MAPPER)
            frontend.text_to_ids("预热")
            runner.wait_ready()
        except BaseException:
            runner.close()
            raise
        return cls(frontend, runner)

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalEngine:
        """An engine for voices.toml; every configured voice is checked first."""
        voices = (settings.narrator, settings.dialogue, *(c.voice for c in settings.characters))
        for voice in voices:
            Prosody.from_voice(voice)
        return cls.load()

    def __enter__(self) -> LocalEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._runner.close()

    def synthesize(self, requests: Sequence[SynthesisRequest]) -> Iterator[tuple[int, Clip]]:
        prosodies = {voice: Prosody.from_voice(voice) for voice in {r.voice for r in requests}}
        jobs = []
        for index, request in enumerate(requests):
            ids = self._frontend.text_to_ids(request.text) if is_speakable(request.text) else []
            if len(ids) <= 2:  # only sil, eos: nothing the frontend could read aloud
                yield index, silence(request.text)
            else:
                jobs.append(_Job(index, tuple(ids), prosodies[request.voice]))
        # Longest first, so no worker is left alone with a long segment at the end.
        jobs.sort(key=lambda job: len(job.ids), reverse=True)
        for index, pcm in self._runner.run(jobs):
            yield index, Clip(pcm=pcm, sample_rate=SAMPLE_RATE)


class _Runner(Protocol):
    def wait_ready(self) -> None: ...
    def run(self, jobs: Sequence[_Job]) -> Iterator[tuple[int, bytes]]: ...
    def close(self) -> None: ...


class _InProcess:
    """One model in this process, using every CPU thread."""

    def __init__(self, model_dir: Path) -> None:
        self._model = BakerModel(ModelGraphs.prepare(model_dir), threads=default_workers())

    def wait_ready(self) -> None:
        pass

    def run(self, jobs: Sequence[_Job]) -> Iterator[tuple[int, bytes]]:
        for job in jobs:
            yield job.index, render(self._model, job.ids, job.prosody)

    def close(self) -> None:
        pass


# -- worker processes ------------------------------------------------------------------
#
# Plain subprocesses speaking pickle over their stdin/stdout rather than
# multiprocessing: spawn re-imports the caller's __main__ (so any script without an
# ``if __name__ == "__main__"`` guard would break), fork is unsafe once LiteRT and
# OpenBLAS have started threads, and a pipe's EOF tells at once that a worker died.

_WORKER_MAIN = "from audiobook.engines.local.engine import serve; serve()"
_IN_FLIGHT = 2  # jobs queued per worker, so it never waits for the next one


class _Worker:
    def __init__(self, model_dir: Path, name: str) -> None:
        self.name = name
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[3])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _WORKER_MAIN],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,  # messages are read by exact length from the raw pipe
                env=env,
            )
        except OSError as exc:
            raise ModelError(f"cannot start a local engine worker ({exc})") from exc
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin: IO[bytes] = self.process.stdin
        self.stdout: IO[bytes] = self.process.stdout
        self.ready = False
        self.jobs: list[int] = []  # indexes sent and not yet answered
        self.send(str(model_dir))

    def send(self, message: object) -> None:
        try:
            _write_message(self.stdin, message)
        except OSError:
            raise self.died() from None

    def receive(self) -> tuple[Any, ...]:
        try:
            return _read_message(self.stdout.fileno())
        except (EOFError, OSError, pickle.UnpicklingError):
            raise self.died() from None

    def died(self) -> SynthesisError:
        try:
            code = self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        return SynthesisError(
            f"local engine worker {self.name} stopped unexpectedly (exit code {code}); "
            "see the messages above"
        )

    def stop(self) -> None:
        if self.jobs:  # its answers are no longer wanted: don't wait for them
            self.process.kill()
        with contextlib.suppress(OSError):
            self.stdin.close()  # end of input: the worker exits
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.stdout.close()


class _WorkerPool:
    """Worker processes that each hold a BakerModel; jobs go to whichever is free."""

    def __init__(self, model_dir: Path, workers: int) -> None:
        self._model_dir = model_dir
        self._size = workers
        self._workers: list[_Worker] = []
        self._start()

    def _start(self) -> None:
        try:
            for k in range(self._size):
                self._workers.append(_Worker(self._model_dir, f"{k + 1}/{self._size}"))
        except BaseException:
            self.close()
            raise
        logger.debug("started %d local engine workers", self._size)

    def wait_ready(self) -> None:
        if not self._workers:
            self._start()
        for worker in self._workers:
            while not worker.ready:
                message = worker.receive()
                if message[0] == "fatal":
                    raise ModelError(f"local engine worker cannot load the model: {message[1]}")
                worker.ready = message[0] == "ready"

    def run(self, jobs: Sequence[_Job]) -> Iterator[tuple[int, bytes]]:
        self.wait_ready()
        todo = list(reversed(jobs))  # pop() from the end takes the longest first
        done = 0
        with selectors.DefaultSelector() as selector:
            for worker in self._workers:
                selector.register(worker.stdout, selectors.EVENT_READ, worker)
            try:
                while done < len(jobs):
                    for worker in self._workers:
                        while todo and len(worker.jobs) < _IN_FLIGHT:
                            job = todo.pop()
                            worker.jobs.append(job.index)
                            worker.send(job)
                    for key, _ in selector.select():
                        worker = key.data
                        kind, index, payload = worker.receive()
                        worker.jobs.remove(index)
                        if kind == "failed":
                            raise SynthesisError(payload)
                        done += 1
                        yield index, payload
            finally:
                if done < len(jobs):  # abandoned or failed: answers still on their way
                    self.close()

    def close(self) -> None:
        for worker in self._workers:
            worker.stop()
        self._workers = []


@dataclass(frozen=True)
class _Job:
    index: int
    ids: tuple[int, ...]
    prosody: Prosody


def serve() -> None:
    """A worker process's main loop: load the model once, then render jobs until EOF."""
    stdin, stdout = sys.stdin.fileno(), sys.stdout.buffer
    sys.stdout = sys.stderr  # anything printed must not corrupt the message stream
    # Ctrl-C reaches the whole process group; the parent decides, closing our stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        model_dir = Path(_read_message(stdin))
        model = BakerModel(ModelGraphs.prepare(model_dir), threads=1)
    except EOFError:
        return
    except AudiobookError as exc:
        _write_message(stdout, ("fatal", str(exc)))
        return
    _write_message(stdout, ("ready",))
    while True:
        try:
            job: _Job = _read_message(stdin)
        except EOFError:
            return
        try:
            reply = ("clip", job.index, render(model, job.ids, job.prosody))
        except AudiobookError as exc:
            reply = ("failed", job.index, str(exc))
        except Exception as exc:  # report it: the parent would otherwise see only a dead pipe
            reply = ("failed", job.index, f"{type(exc).__name__}: {exc}")
        _write_message(stdout, reply)


# Messages are pickles with a length prefix, read by exact size straight from the pipe
# (a buffered reader could swallow the next message where the selector cannot see it).


def _write_message(stream: IO[bytes], message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(len(data).to_bytes(8, "little") + data)
    while view:  # a raw pipe may take only part of a large write
        view = view[stream.write(view) or 0 :]
    stream.flush()


def _read_message(fd: int) -> Any:
    size = int.from_bytes(_read_exactly(fd, 8), "little")
    return pickle.loads(_read_exactly(fd, size))


def _read_exactly(fd: int, size: int) -> bytes:
    chunks = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
