from __future__ import annotations

from pathlib import Path

import pytest

from audiobook.errors import ConfigError
from audiobook.settings import Settings, load_settings, parse_settings
from tests.conftest import ROOT


def test_shipped_voices_toml_is_valid_and_resolves_paths() -> None:
    settings = load_settings(ROOT / "voices.toml")
    assert settings.engine == "local"
    assert settings.paths.chapters == ROOT / "chapters"
    assert settings.paths.output == ROOT / "output"
    assert settings.pauses.scene_ms > settings.pauses.paragraph_ms > settings.pauses.sentence_ms
    he = settings.voice_for("何大清")
    assert he.pitch == "-20Hz"
    assert settings.characters[0].aliases == ("总长",)
    # Unset character keys inherit from the dialogue voice.
    assert settings.voice_for("石头").volume == settings.dialogue.volume


def test_empty_file_gives_the_defaults() -> None:
    assert parse_settings({}) == Settings()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"narrator": {"rate": "+10"}}, "voices.toml: narrator.rate '+10' must look like '+10%'"),
        ({"dialogue": {"pitch": "+5%"}}, "dialogue.pitch '+5%' must look like '+5Hz'"),
        ({"narrator": {"volume": 3}}, "narrator.volume '3' must be a string"),
        ({"narrator": {"edge_voice": "Xiaoxiao"}}, "narrator.edge_voice 'Xiaoxiao'"),
        ({"narator": {}}, "narator is not a known setting"),
        ({"pauses": {"scene": 2000}}, "pauses.scene is not a known setting"),
        ({"pauses": {"scene_ms": "long"}}, "pauses.scene_ms 'long' must be a number"),
        ({"pauses": {"scene_ms": 1.5}}, "pauses.scene_ms '1.5' must be a whole number"),
        ({"pauses": {"scene_ms": -5}}, "pauses.scene_ms '-5' must be between 0 and 30000"),
        ({"engine": "google"}, "engine 'google' must be one of: local, edge"),
        ({"chapter_marks": "page"}, "chapter_marks 'page' must be one of: scene, paragraph"),
        ({"loudness": {"target_lufs": 3}}, "loudness.target_lufs '3' must be between -40 and -5"),
        ({"book": {"explicit": "no"}}, "book.explicit 'no' must be true or false"),
        ({"cleanup": {"rules": {"bad": "(["}}}, "cleanup.rules.bad is not a valid regex"),
        ({"cleanup": {"disable": ["nope"]}}, "cleanup.disable 'nope' is not a default rule"),
        (
            {"characters": {"何大清": {"aliases": "总长"}}},
            "characters.何大清.aliases must be a list",
        ),
        ({"characters": {"何大清": {"rate": "fast"}}}, "characters.何大清.rate 'fast'"),
    ],
)
def test_bad_values_name_the_key_and_what_is_allowed(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        parse_settings(raw)
    assert message in str(excinfo.value)


def test_unreadable_or_invalid_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_settings(tmp_path / "voices.toml")
    broken = tmp_path / "voices.toml"
    broken.write_text("engine = \n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(broken)


def test_engine_override_is_validated() -> None:
    assert Settings().with_engine("edge").engine == "edge"
    with pytest.raises(ConfigError, match="--engine 'gpt'"):
        Settings().with_engine("gpt")
