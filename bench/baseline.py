"""The baseline side of a side-by-side bench: a commit checked out once as a git worktree beside this one."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def checkout(commit: str, work: Path) -> Path:
    """`commit` as a detached worktree at `work`/base-src (made on the first run, reused after)."""
    base_src = work / "base-src"
    if not base_src.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base_src), commit],
                       check=True, capture_output=True)
    return base_src
