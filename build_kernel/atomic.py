"""Nothing half-written: a folder is filled as a `.partial-` sibling and renamed into place
when complete; a file is written beside its target and `os.replace`d over it.

Readers therefore see either the old content or the whole new one; an interrupted fill
leaves only a `.partial-` sibling, which `sweep` removes (under the caller's lock).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def partial_dir(final: Path) -> Path:
    """A fresh, empty sibling of `final` to fill."""
    final.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.parent))


def sweep(final: Path) -> None:
    """Remove what interrupted fills of `final` left behind (call it holding the lock)."""
    for stale in final.parent.glob(f".{final.name}.partial-*"):
        shutil.rmtree(stale, ignore_errors=True)


@contextmanager
def folder(final: Path, *, replace: bool = False) -> Iterator[Path]:
    """Yield a partial folder; on success it becomes `final`, on any error it is removed.

    `replace`: an existing `final` is swapped out (removed after the new one is in place
    where the filesystem allows, else just before).
    """
    tmp = partial_dir(final)
    try:
        yield tmp
        if replace and final.exists():
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# What write_bytes and copy_file name their temporary files: `.NAME.` + mkstemp's 8 characters + `.tmp`.
_TEMP = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")


def sweep_files(folder: Path) -> list[Path]:
    """Remove the temporary files that killed `write_bytes`/`copy_file` calls left in `folder` (a SIGKILL
    runs no `except`); return them. Call it holding the lock under which that folder is written."""
    stale = [p for p in folder.glob(".*.tmp") if _TEMP.match(p.name) and p.is_file()] if folder.is_dir() else []
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def write_text(path: Path, text: str) -> None:
    """Write `text` to `path` so a reader never sees half of it."""
    write_bytes(path, text.encode())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes 0600; a file served by an index or read by others keeps the usual mode.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def copy_file(source: Path, dest: Path) -> None:
    """Copy (with metadata) so that `dest` appears whole or not at all."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    try:
        shutil.copy2(source, tmp)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
