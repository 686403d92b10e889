"""One exception root for everything the tool reports to a user.

Every message is a single line a user can act on; the CLI prints it as
``error: <message>`` and exits with the class's ``exit_code``.
"""

from __future__ import annotations


class AudiobookError(Exception):
    """Root of all errors the tool reports to a user."""

    exit_code = 1


class ConfigError(AudiobookError):
    """voices.toml (or a command-line setting) is invalid."""

    exit_code = 2


class ChapterError(AudiobookError):
    """A chapter file is missing, unreadable, binary or empty."""

    exit_code = 3


class ModelError(AudiobookError):
    """The offline voice model is missing, corrupt or cannot be installed."""

    exit_code = 4


class SynthesisError(AudiobookError):
    """An engine could not produce complete audio for a segment."""

    exit_code = 5


class AssemblyError(AudiobookError):
    """Joining, encoding or tagging the chapter file failed."""

    exit_code = 6


class PublishError(AudiobookError):
    """Feed, batch state or import failed."""

    exit_code = 7


class BatchLockedError(PublishError):
    """Another batch run holds the lock."""

    exit_code = 75  # EX_TEMPFAIL: cron may simply try again later
