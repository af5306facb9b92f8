"""Is this file a wheel? Asked before a stage opens one, so a text file, an empty file, a zip of
something else or a folder is one error naming the file, not zipfile's traceback mid-stage."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from build_kernel.errors import VerifyError

_METADATA = re.compile(r"[^/]+\.dist-info/METADATA")
HINT = "pass a .whl that `build-kernel build` or `pip wheel` made"


def problem(path: Path) -> str | None:
    """What `path` is instead of a wheel, or None when it is one (as far as its index and METADATA tell:
    a member damaged further in is found by the stage that reads it)."""
    if not path.exists():
        return "no such file"
    if path.is_dir():
        return "a directory"
    if not path.is_file():
        return "not a regular file"
    if path.stat().st_size == 0:
        return "an empty file"
    try:
        with zipfile.ZipFile(path) as zf:
            metadata = [n for n in zf.namelist() if _METADATA.fullmatch(n)]
            if not metadata:
                return "a zip archive without *.dist-info/METADATA"
            zf.read(metadata[0])  # decompressed and its CRC checked
    except zipfile.BadZipFile as exc:
        return f"not a zip archive, or a damaged one ({exc})"
    except (OSError, RuntimeError, NotImplementedError) as exc:  # unreadable, encrypted, unknown compression
        return f"unreadable as a zip archive ({exc})"
    if path.suffix != ".whl":
        return "a zip archive whose name does not end in .whl"
    return None


def check_wheel(path: Path) -> Path:
    """`path`, when it is a wheel; else a VerifyError (exit 7) that names it and says what it is."""
    if (what := problem(path)) is not None:
        raise VerifyError(f"{path} is not a wheel: {what}", hint=HINT)
    return path
