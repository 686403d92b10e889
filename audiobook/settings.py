"""voices.toml → validated, frozen :class:`Settings`.

Parsed once at the edge (the CLI); every stage receives the parts it needs.
An unknown key, a wrong type or a bad value raises :class:`ConfigError` naming
the key and what is allowed.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, get_args

import platformdirs

from audiobook.errors import ConfigError
from audiobook.models import Voice

EngineName = Literal["local", "edge"]
ChapterMarks = Literal["scene", "paragraph"]

RATE_RE = re.compile(r"^[+-]\d{1,3}%$")
PITCH_RE = re.compile(r"^[+-]\d{1,3}Hz$")


@dataclass(frozen=True)
class Character:
    name: str
    aliases: tuple[str, ...]
    voice: Voice


@dataclass(frozen=True)
class Pauses:
    sentence_ms: int = 350
    paragraph_ms: int = 800
    scene_ms: int = 2000
    clause_ms: int = 150  # where a long sentence was split at ，、：
    turn_ms: int = 200  # added where the voice changes (dialogue ↔ narration)


@dataclass(frozen=True)
class Loudness:
    target_lufs: float = -16.0
    true_peak_dbtp: float = -1.0


@dataclass(frozen=True)
class Mp3:
    sample_rate: int = 44100
    bitrate_kbps: int = 64
    channels: int = 1


@dataclass(frozen=True)
class Cleanup:
    default_rules: bool = True
    disable: tuple[str, ...] = ()  # names of default rules to switch off
    rules: tuple[tuple[str, str], ...] = ()  # extra (name, regex) rules


@dataclass(frozen=True)
class Book:
    title: str = "未命名有声书"
    author: str = ""
    description: str = ""
    cover: Path | None = None
    base_url: str = "http://localhost:8000/"
    language: str = "zh-cn"
    category: str = "Arts"
    explicit: bool = False


@dataclass(frozen=True)
class EdgeOptions:
    concurrency: int = 4
    max_retries: int = 5
    timeout_s: float = 30.0


@dataclass(frozen=True)
class Paths:
    chapters: Path = Path("chapters")
    output: Path = Path("output")
    cache: Path = field(default_factory=lambda: Path(platformdirs.user_cache_dir("audiobook")))


@dataclass(frozen=True)
class Settings:
    engine: EngineName = "local"
    chapter_marks: ChapterMarks = "scene"
    narrator: Voice = Voice(edge_voice="zh-CN-YunxiNeural")
    dialogue: Voice = Voice(edge_voice="zh-CN-XiaoxiaoNeural", pitch="+20Hz")
    characters: tuple[Character, ...] = ()
    pauses: Pauses = Pauses()
    loudness: Loudness = Loudness()
    mp3: Mp3 = Mp3()
    cleanup: Cleanup = Cleanup()
    book: Book = Book()
    edge: EdgeOptions = EdgeOptions()
    paths: Paths = field(default_factory=Paths)

    def voice_for(self, name: str) -> Voice:
        """The voice of a role ("narrator", "dialogue") or of a character."""
        if name == "narrator":
            return self.narrator
        if name == "dialogue":
            return self.dialogue
        for character in self.characters:
            if character.name == name:
                return character.voice
        raise KeyError(name)

    def with_engine(self, engine: str | None) -> Settings:
        if engine is None:
            return self
        if engine not in get_args(EngineName):
            raise ConfigError(f"--engine '{engine}' is not one of: local, edge")
        return replace(self, engine=engine)  # type: ignore[arg-type]


def load_settings(path: Path | None) -> Settings:
    """Read voices.toml; with no file, the defaults relative to the current folder."""
    if path is None:
        return _resolve_paths(Settings(), Path.cwd())
    name = path.name
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{name}: file not found ({path})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{name}: cannot read ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{name}: not valid TOML ({exc})") from None
    return _resolve_paths(parse_settings(raw, source=name), path.resolve().parent)


def parse_settings(raw: Mapping[str, Any], source: str = "voices.toml") -> Settings:
    reader = _Reader(source)
    top = reader.table(raw, "", _TOP_KEYS)
    defaults = Settings()
    dialogue = reader.voice(top.get("dialogue", {}), "dialogue", defaults.dialogue)
    return Settings(
        engine=reader.choice(top, "engine", defaults.engine, get_args(EngineName)),
        chapter_marks=reader.choice(
            top, "chapter_marks", defaults.chapter_marks, get_args(ChapterMarks)
        ),
        narrator=reader.voice(top.get("narrator", {}), "narrator", defaults.narrator),
        dialogue=dialogue,
        characters=reader.characters(top.get("characters", {}), dialogue),
        pauses=reader.simple(top.get("pauses", {}), "pauses", Pauses()),
        loudness=reader.simple(top.get("loudness", {}), "loudness", Loudness()),
        mp3=reader.simple(top.get("mp3", {}), "mp3", Mp3()),
        cleanup=reader.cleanup(top.get("cleanup", {})),
        book=reader.simple(top.get("book", {}), "book", Book()),
        edge=reader.simple(top.get("edge", {}), "edge", EdgeOptions()),
        paths=reader.simple(top.get("paths", {}), "paths", Paths()),
    )


_TOP_KEYS = (
    "engine",
    "chapter_marks",
    "narrator",
    "dialogue",
    "characters",
    "pauses",
    "loudness",
    "mp3",
    "cleanup",
    "book",
    "edge",
    "paths",
)

# Allowed ranges for numeric settings; anything outside is almost surely a typo.
_RANGES: dict[str, tuple[float, float]] = {
    "pauses.sentence_ms": (0, 10_000),
    "pauses.paragraph_ms": (0, 10_000),
    "pauses.scene_ms": (0, 30_000),
    "pauses.clause_ms": (0, 5_000),
    "pauses.turn_ms": (0, 5_000),
    "loudness.target_lufs": (-40, -5),
    "loudness.true_peak_dbtp": (-10, 0),
    "mp3.sample_rate": (8000, 48000),
    "mp3.bitrate_kbps": (16, 320),
    "mp3.channels": (1, 2),
    "edge.concurrency": (1, 32),
    "edge.max_retries": (0, 20),
    "edge.timeout_s": (1, 600),
}


class _Reader:
    """Validates one raw TOML document, naming the offending key in every error."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.source}: {key} {message}")

    def table(self, value: Any, key: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(key, "must be a table")
        for name in value:
            if name not in allowed:
                where = f"{key}.{name}" if key else name
                raise self.fail(where, f"is not a known setting (allowed: {', '.join(allowed)})")
        return value

    def choice(self, table: Mapping[str, Any], key: str, default: str, allowed: tuple) -> Any:
        value = table.get(key, default)
        if value not in allowed:
            raise self.fail(key, f"'{value}' must be one of: {', '.join(allowed)}")
        return value

    def voice(self, value: Any, key: str, default: Voice, extra: tuple[str, ...] = ()) -> Voice:
        table = self.table(value, key, ("edge_voice", "rate", "pitch", "volume", *extra))
        voice = Voice(
            edge_voice=self._str(table, key, "edge_voice", default.edge_voice),
            rate=self._str(table, key, "rate", default.rate),
            pitch=self._str(table, key, "pitch", default.pitch),
            volume=self._str(table, key, "volume", default.volume),
        )
        if not RATE_RE.match(voice.rate):
            raise self.fail(f"{key}.rate", f"'{voice.rate}' must look like '+10%' or '-5%'")
        if not RATE_RE.match(voice.volume):
            raise self.fail(f"{key}.volume", f"'{voice.volume}' must look like '+10%' or '-5%'")
        if not PITCH_RE.match(voice.pitch):
            raise self.fail(f"{key}.pitch", f"'{voice.pitch}' must look like '+5Hz' or '-10Hz'")
        if not voice.rate_percent > -100:
            raise self.fail(f"{key}.rate", f"'{voice.rate}' must be above -100%")
        if not re.match(r"^[a-z]{2,3}-[A-Za-z]{2,4}(-[a-z]+)?-\w+Neural$", voice.edge_voice):
            raise self.fail(
                f"{key}.edge_voice",
                f"'{voice.edge_voice}' must be an Edge voice name like 'zh-CN-XiaoxiaoNeural'",
            )
        return voice

    def characters(self, value: Any, default: Voice) -> tuple[Character, ...]:
        if not isinstance(value, Mapping):
            raise self.fail("characters", 'must be tables like [characters."何大清"]')
        result = []
        for name, table in value.items():
            key = f"characters.{name}"
            voice = self.voice(table, key, default, extra=("aliases",))
            aliases = table.get("aliases", [])
            if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
                raise self.fail(f"{key}.aliases", "must be a list of names")
            result.append(Character(name=name, aliases=tuple(aliases), voice=voice))
        return tuple(result)

    def cleanup(self, value: Any) -> Cleanup:
        table = self.table(value, "cleanup", ("default_rules", "disable", "rules"))
        default_rules = table.get("default_rules", True)
        if not isinstance(default_rules, bool):
            raise self.fail("cleanup.default_rules", "must be true or false")
        disable = table.get("disable", [])
        if not isinstance(disable, list) or not all(isinstance(d, str) for d in disable):
            raise self.fail("cleanup.disable", "must be a list of rule names")
        rules = table.get("rules", {})
        if not isinstance(rules, Mapping):
            raise self.fail("cleanup.rules", "must be a table of name = 'regex'")
        for name, pattern in rules.items():
            if not isinstance(pattern, str):
                raise self.fail(f"cleanup.rules.{name}", "must be a regex string")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise self.fail(f"cleanup.rules.{name}", f"is not a valid regex ({exc})") from None
        from audiobook.text.clean import DEFAULT_RULES  # the rule names live with the rules

        for name in disable:
            if name not in DEFAULT_RULES:
                raise self.fail(
                    "cleanup.disable",
                    f"'{name}' is not a default rule (known: {', '.join(DEFAULT_RULES)})",
                )
        return Cleanup(default_rules, tuple(disable), tuple(rules.items()))

    def simple(self, value: Any, key: str, default: Any) -> Any:
        """A table of scalars mapped onto a flat dataclass, types from the defaults."""
        types = {f.name: str(f.type) for f in fields(default)}
        table = self.table(value, key, tuple(types))
        changes: dict[str, Any] = {}
        for name, raw in table.items():
            current = getattr(default, name)
            full = f"{key}.{name}"
            changes[name] = self._scalar(full, raw, current, is_path="Path" in types[name])
        return replace(default, **changes)

    def _scalar(self, key: str, raw: Any, current: Any, is_path: bool) -> Any:
        if isinstance(current, bool):
            if not isinstance(raw, bool):
                raise self.fail(key, f"'{raw}' must be true or false")
            return raw
        if isinstance(current, (int, float)):
            if isinstance(raw, bool) or not isinstance(raw, (int, float)):
                raise self.fail(key, f"'{raw}' must be a number")
            if isinstance(current, int) and not isinstance(raw, int):
                raise self.fail(key, f"'{raw}' must be a whole number")
            low, high = _RANGES.get(key, (float("-inf"), float("inf")))
            if not low <= raw <= high:
                raise self.fail(key, f"'{raw}' must be between {low:g} and {high:g}")
            return type(current)(raw)
        if is_path:
            if not isinstance(raw, str):
                raise self.fail(key, f"'{raw}' must be a path string")
            return Path(raw).expanduser() if raw else None
        if not isinstance(raw, str):
            raise self.fail(key, f"'{raw}' must be a string")
        return raw

    def _str(self, table: Mapping[str, Any], key: str, name: str, default: str) -> str:
        value = table.get(name, default)
        if not isinstance(value, str):
            raise self.fail(f"{key}.{name}", f"'{value}' must be a string")
        return value


def _resolve_paths(settings: Settings, base: Path) -> Settings:
    """Relative paths in voices.toml are relative to the file's folder."""
    paths = settings.paths
    resolved = Paths(
        chapters=base / paths.chapters,
        output=base / paths.output,
        cache=base / paths.cache,
    )
    cover = settings.book.cover
    book = replace(settings.book, cover=base / cover) if cover else settings.book
    return replace(settings, paths=resolved, book=book)
