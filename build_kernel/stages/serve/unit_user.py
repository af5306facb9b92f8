"""Can the unit's `User=` write the JIT cache? Read from ownership and mode bits, before the unit is written.

tvm-ffi (sglang's JIT) needs write access even to a module the prewarm built: every load takes a
lock file in the module's folder (`FileLock(build_dir / "lock")`) and runs ninja there, which writes
its log. So the cache folder and every folder in it must be writable by the server's user; a folder
the prewarm made as another user (root, or the builder) is an error at first request, not at start.
ACLs are not read: a folder they open up is refused here, and `chown` is the fix either way.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

READ, WRITE, SEARCH = 4, 2, 1


def _allowed(st: os.stat_result, uid: int, gids: set[int], want: int) -> bool:
    if uid == 0:
        return True
    mode = st.st_mode
    bits = (mode >> 6) & 7 if st.st_uid == uid else (mode >> 3) & 7 if st.st_gid in gids else mode & 7
    return bits & want == want


def _describe(path: Path, st: os.stat_result) -> str:
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{path} (owned by {owner}:{group}, mode {stat.filemode(st.st_mode)})"


def problem(folder: Path, user: str) -> str | None:
    """Why `user` could not use `folder` as the tvm-ffi cache (reach it, create it, write in it and in every
    folder inside it); None when it can. A user this host does not know is a problem too."""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return f"there is no user {user!r} on this host"
    uid = pw.pw_uid
    gids = {pw.pw_gid} | {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}
    folder = Path(os.path.abspath(folder))
    existing = folder
    while not existing.exists():  # created on first use: the deepest folder that exists must let it
        existing = existing.parent
    for parent in reversed(existing.parents):
        st = parent.stat()
        if not _allowed(st, uid, gids, SEARCH):
            return f"{user} cannot reach {folder}: it may not enter {_describe(parent, st)}"
    if not existing.is_dir():
        return f"{existing} is not a folder"
    folders = [existing, *(p for p in existing.rglob("*") if p.is_dir() and not p.is_symlink())]
    for here in folders:
        st = here.stat()
        if not _allowed(st, uid, gids, READ | WRITE | SEARCH):
            what = "create" if here == existing and existing != folder else "write in"
            return f"{user} cannot {what} {_describe(here, st)}"
    return None
