"""The command line as a user meets it: exit codes, one-line errors, plan output."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from audiobook import __version__
from audiobook.cli import app
from tests.conftest import ROOT

runner = CliRunner()
CONFIG = str(ROOT / "voices.toml")


def run(*args: str):
    return runner.invoke(app, ["--config", CONFIG, *args])


def test_version_and_help_on_every_command() -> None:
    assert runner.invoke(app, ["--version"]).stdout.strip() == f"audiobook {__version__}"
    for command in (
        [],
        ["plan"],
        ["render"],
        ["voices"],
        ["voices", "list"],
        ["voices", "install"],
        ["cache"],
        ["cache", "stats"],
        ["cache", "clear"],
    ):
        result = runner.invoke(app, [*command, "--help"])
        assert result.exit_code == 0, command
        assert "Usage" in result.stdout


def test_plan_ch004_shows_three_scenes_and_every_segment() -> None:
    result = run("plan", "ch004")
    assert result.exit_code == 0, result.stderr
    header = result.stdout.splitlines()[0]
    assert "3 scenes" in header
    assert "0 removed lines" in header
    assert "“都小心点，这里情况不明，随时可能遭遇敌人。”" in result.stdout
    assert result.stderr == ""


def test_plan_ch000_reports_the_removed_advertisement() -> None:
    result = run("plan", "ch000")
    assert result.exit_code == 0
    assert "1 removed lines" in result.stdout.splitlines()[0]
    assert "removed line 50 (url): 喜欢诸天从长津湖开始请大家收藏" in result.stdout


def test_plan_json_is_machine_readable() -> None:
    result = run("plan", "ch004", "--json")
    data = json.loads(result.stdout)
    assert data["scenes"] == 3
    assert {s["role"] for s in data["segments"]} == {"narrator", "dialogue"}
    first = data["segments"][0]
    assert {"id", "text", "role", "voice", "scene", "paragraph", "sentence", "pause_ms"} <= set(
        first
    )


@pytest.mark.parametrize("command", ["plan", "render"])
@pytest.mark.parametrize(
    ("content", "code", "reason"),
    [
        (None, 3, "chapter not found"),
        (b"", 3, "is empty"),
        (b" \n\n  ", 3, "only whitespace"),
        (b"\x00\x01\x02binary\x00" * 10, 3, "binary data"),
        (b"\xfa\xfb\xfc\x80\x81 not text \xff", 3, "cannot decode"),
    ],
    ids=["missing", "empty", "whitespace", "binary", "undecodable"],
)
def test_bad_chapters_get_one_line_and_an_exit_code(
    tmp_path: Path, command: str, content: bytes | None, code: int, reason: str
) -> None:
    path = tmp_path / "chx.txt"
    if content is not None:
        path.write_bytes(content)
    ref = str(path) if content is not None else "ch999"
    result = run(command, ref)
    assert result.exit_code == code
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: ")
    assert reason in lines[0]
    assert "Traceback" not in result.stderr


def test_bad_voices_toml_names_the_key(tmp_path: Path) -> None:
    config = tmp_path / "voices.toml"
    config.write_text('[narrator]\nrate = "+10"\n', encoding="utf-8")
    result = runner.invoke(app, ["--config", str(config), "plan", str(ROOT / "chapters/ch004.txt")])
    assert result.exit_code == 2
    assert (
        result.stderr.strip()
        == "error: voices.toml: narrator.rate '+10' must look like '+10%' or '-5%'"
    )


def test_unknown_engine_is_rejected() -> None:
    result = run("plan", "ch004", "--engine", "gpt")
    assert result.exit_code == 2
    assert "--engine 'gpt' is not one of: local, edge" in result.stderr


def test_render_writes_the_mp3_and_prints_one_summary_line(tmp_path: Path, local_model) -> None:
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    (chapters / "ch001.txt").write_text("第1章 夜渡\n夜色渐深，江面上起了雾。\n", encoding="utf-8")
    config = tmp_path / "voices.toml"
    config.write_text(
        f'[paths]\nchapters = "{chapters}"\noutput = "{tmp_path / "out"}"\n'
        f'cache = "{tmp_path / "cache"}"\n',
        encoding="utf-8",
    )
    result = runner.invoke(app, ["--config", str(config), "render", "ch001"])
    assert result.exit_code == 0, result.stderr
    mp3 = tmp_path / "out" / "ch001.mp3"
    assert mp3.stat().st_size > 1000
    summary = result.stdout.strip().splitlines()
    assert len(summary) == 1
    assert summary[0].startswith(f"{mp3}: 0:0")
    assert "2 segments synthesized, 0 cached" in summary[0]

    # Offline, the edge engine fails fast with one line and keeps the earlier file.
    before = mp3.read_bytes()
    started = time.monotonic()
    offline = CliRunner(
        env={"WSS_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}
    )
    failed = offline.invoke(app, ["--config", str(config), "render", "ch001", "--engine", "edge"])
    assert failed.exit_code == 5
    lines = failed.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "offline" in lines[-1]
    assert "Traceback" not in failed.stderr
    assert time.monotonic() - started < 20
    assert mp3.read_bytes() == before
