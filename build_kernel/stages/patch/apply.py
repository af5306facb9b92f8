"""Apply a patch series: check everything first, then apply all or nothing, zero fuzz.

Checking runs `git apply --cached` against a private index, so the work tree is never
touched until every patch is known to apply; each patch then applies for real, and any
surprise restores the tree to HEAD. A patch whose reverse applies is already upstream.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from build_kernel import process
from build_kernel.errors import PatchError
from build_kernel.series import PatchFile, Series

APPLIES, OFFSET, UPSTREAM, CONFLICT = "applies", "applies with offset", "already upstream", "conflicts"


@dataclass(frozen=True)
class PatchStatus:
    name: str
    state: str
    offsets: tuple[str, ...] = ()
    detail: str = ""
    files: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def read_diff(path: Path, text: str | None = None) -> PatchSet:
    """The patch's diff, parsed; a malformed one is the patch stage's one-line error naming the file."""
    try:
        return PatchSet(path.read_text(errors="replace") if text is None else text)
    except UnidiffParseError as exc:
        raise PatchError(f"{path.name} is not a valid unified diff: {exc}",
                         hint=f"regenerate it (git diff, or build-kernel patch refresh) and relock: build-kernel "
                              f"patch lock {path.parent}") from None


def _git(tree: Path, *args: str, env: Mapping[str, str] | None = None, index: str | None = None,
         check: bool = False) -> process.CompletedProcess[str]:
    """git in `tree`, in `env` (None: this process's); `index`: a private index (needs `env`)."""
    if index:
        if env is None:
            raise ValueError("a private index needs the environment to add GIT_INDEX_FILE to")
        env = {**env, "GIT_INDEX_FILE": index}
    proc = process.run(["git", "-C", tree, *args], error=PatchError, what=f"git {args[0]} in {tree}", env=env,
                       check=False)
    if check and proc.returncode:
        raise PatchError(f"git {' '.join(args)} failed in {tree}: {_last(proc.stderr or proc.stdout)}")
    return proc


def _last(output: str) -> str:
    """The last non-empty line (git says what went wrong last)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def _apply_args(patch: PatchFile, subdir: str) -> list[str]:
    args = ["apply", "-p1", "--whitespace=nowarn", "-v"]
    if subdir:
        args.append(f"--directory={subdir}")
    return [*args, str(patch.path)]


def _parse_offsets(output: str) -> tuple[str, ...]:
    found, current = [], "?"
    for line in output.splitlines():
        m = re.match(r"Checking patch (.+)\.\.\.$", line)
        if m:
            current = m.group(1)
        m = re.search(r"Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)", line)
        if m:
            found.append(f"{current}: hunk #{m.group(1)} at line {m.group(2)} (offset {m.group(3)})")
    return tuple(found)


def _conflict_detail(tree: Path, patch: PatchFile, subdir: str, index: str, stderr: str, env: Mapping[str, str]) -> str:
    """Which file and hunk failed, and the first line that differs (expected vs found)."""
    m = re.search(r"patch failed: (.+):(\d+)", stderr)
    missing = re.search(r"error: (.+): (?:No such file or directory|does not exist in index)", stderr)
    if missing and not m:
        return f"{missing.group(1)}: file not found in the tree"
    if not m:
        return stderr.strip().splitlines()[-1] if stderr.strip() else "git apply failed"
    failed_path = m.group(1)
    rel = failed_path[len(subdir) + 1:] if subdir and failed_path.startswith(subdir + "/") else failed_path
    content = _git(tree, "show", f":{failed_path}", env=env, index=index).stdout.splitlines()
    for pfile in read_diff(patch.path):
        if pfile.path != rel:
            continue
        for number, hunk in enumerate(pfile, 1):
            expected = [line.value.rstrip("\n") for line in hunk if line.is_context or line.is_removed]
            if _find_block(content, expected) is not None:
                continue
            start = hunk.source_start - 1
            found = content[start:start + len(expected)]
            for i, want in enumerate(expected):
                got = found[i] if i < len(found) else "<end of file>"
                if got != want:
                    return (f"{rel} hunk #{number} (line {hunk.source_start + i}): "
                            f"expected {want!r}, found {got!r}")
            return f"{rel} hunk #{number} (line {hunk.source_start}): context not found"
    return f"{rel}:{m.group(2)}: patch does not apply"


def _find_block(content: list[str], block: list[str]) -> int | None:
    if not block:
        return 0
    for i in range(len(content) - len(block) + 1):
        if content[i:i + len(block)] == block:
            return i
    return None


def check_series(tree: Path, series: Series, subdir: str = "", *, env: Mapping[str, str]) -> list[PatchStatus]:
    """The state of every patch, applied in order to a private index (tree untouched).

    `env`: the environment git runs in (the plan's), plus GIT_INDEX_FILE."""
    statuses = []
    with tempfile.TemporaryDirectory(prefix="bk-index-") as tmp:
        index = str(Path(tmp) / "index")
        _git(tree, "read-tree", "HEAD", env=env, index=index, check=True)
        for patch in series.patches:
            files = tuple(f.path for f in read_diff(patch.path))
            forward = _git(tree, *_apply_args(patch, subdir)[:-1], "--cached", "--check", str(patch.path), env=env,
                           index=index)
            if forward.returncode == 0:
                _git(tree, *_apply_args(patch, subdir)[:-1], "--cached", str(patch.path), env=env, index=index,
                     check=True)
                offsets = _parse_offsets(forward.stdout + forward.stderr)
                statuses.append(PatchStatus(patch.name, OFFSET if offsets else APPLIES, offsets, files=files))
                continue
            reverse = _git(tree, *_apply_args(patch, subdir)[:-1], "--cached", "--check", "-R", str(patch.path),
                           env=env, index=index)
            if reverse.returncode == 0:
                statuses.append(PatchStatus(patch.name, UPSTREAM, detail="its reverse applies: drop it from the series", files=files))
                continue
            detail = _conflict_detail(tree, patch, subdir, index, forward.stderr, env)
            statuses.append(PatchStatus(patch.name, CONFLICT, detail=detail, files=files))
    return statuses


def apply_series(tree: Path, series: Series, subdir: str = "", *, env: Mapping[str, str]) -> list[PatchStatus]:
    """Apply every patch or none; raise PatchError naming the first patch that cannot."""
    if _git(tree, "status", "--porcelain", "--untracked-files=no", env=env).stdout.strip():
        raise PatchError(f"{tree} has uncommitted changes", hint="patches apply to a clean checkout only; use a fresh worktree")
    statuses = check_series(tree, series, subdir, env=env)
    for status in statuses:
        if status.state == UPSTREAM:
            raise PatchError(f"{series.directory.name}/{status.name}: already upstream (its reverse applies)",
                             hint=f"drop it from {series.directory}/series and relock")
        if status.state == CONFLICT:
            raise PatchError(f"{status.name} does not apply: {status.detail}",
                             hint=f"run `build-kernel patch check` and refresh the series in {series.directory}")
    try:
        for patch in series.patches:
            _git(tree, *_apply_args(patch, subdir), env=env, check=True)
    except PatchError:
        restore(tree, env=env)
        raise
    return statuses


def restore(tree: Path, *, env: Mapping[str, str] | None = None) -> None:
    """Put the tree back to HEAD exactly (tracked files and anything patches created)."""
    _git(tree, "checkout", "--quiet", "--", ".", env=env)
    _git(tree, "clean", "-fdq", env=env)
