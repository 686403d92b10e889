"""audiobook: Chinese web-novel chapters → podcast-ready audiobook MP3s.

The public API, in data-flow order::

    settings = load_settings(Path("voices.toml"))
    plan = plan_chapter(Path("chapters/ch004.txt"), settings)     # how it will be read
    result = render_chapter(Path("chapters/ch004.txt"), settings)  # output/ch004.mp3
    report = run_batch(settings)                                   # new chapters + feed
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("audiobook")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"

# Imported on first use so that `audiobook --help` does not load audio and model code.
_EXPORTS = {
    "AudiobookError": "audiobook.errors",
    "ChapterPlan": "audiobook.models",
    "RenderResult": "audiobook.models",
    "Segment": "audiobook.models",
    "Settings": "audiobook.settings",
    "load_settings": "audiobook.settings",
    "plan_chapter": "audiobook.pipeline",
    "render_chapter": "audiobook.pipeline",
    "run_batch": "audiobook.publish",
    "write_feed": "audiobook.publish",
    "import_novel": "audiobook.text.novel",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'audiobook' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
