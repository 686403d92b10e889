"""audiobook: Chinese web-novel chapters → podcast-ready audiobook MP3s."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("audiobook")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"
