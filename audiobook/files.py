"""Writing files so that a reader (player, server, next run) sees the old or the new one, never half."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from audiobook.errors import AudiobookError


def write_atomic(path: Path, data: bytes, error: type[AudiobookError] = AudiobookError) -> None:
    """Replace ``path`` with ``data`` so readers see the old or the new file, never half.

    The temporary file is hidden (leading dot) so the server never offers it.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        # 0o666 minus the umask, like any other file the user creates.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise error(f"{path}: cannot write ({exc.strerror or exc})") from None
