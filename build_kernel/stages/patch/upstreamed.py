"""When upstream caught up: per patch, the first upstream commit from which it is no longer needed.

Two ways to know, both kept beside the patch (as spack keeps a patch's `when=` beside it):
- **its reverse applies**: upstream holds the change verbatim. The walk's rows show at which version
  changes; the exact commit is then bisected among the first-parent commits between the last row that
  needs the patch and the first that does not, over the files it (and the patches before it, which
  may change the same files) touches: its state can change only where one of those files does;
- **its DEP-3 header** `Applied-Upstream: <version>, commit:<sha>` (or a `.../commit/<sha>` URL) names
  an equivalent upstream fix, whose text need not match the patch's (0009 against sglang's
  fe9b9b254): the patch is not needed at every checked commit that has that commit in its history.

Where both hold, the earlier commit wins. What the walk's newest row says is the answer: a patch
upstream once had verbatim and that conflicts now may need a refresh, or an Applied-Upstream header.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol

from build_kernel import log
from build_kernel.errors import PatchError
from build_kernel.series import PatchFile
from build_kernel.stages.patch import apply as patches
from build_kernel.stages.patch.healthrows import DECLARED, REVERSE, Retired, Row
from build_kernel.stages.patch.mirrorgit import date, is_ancestor, out, rev_parse

HEADER = "Applied-Upstream"
_SHA = re.compile(r"[0-9a-f]{7,40}")
_FULL = re.compile(r"[0-9a-f]{40}")
_URL = re.compile(r"\w+://\S+/commits?/([0-9a-fA-F]+)/?")


@dataclass(frozen=True)
class Declared:
    """A patch's Applied-Upstream header: the upstream commit (as written) and the rest (a version)."""

    patch: str
    commit: str
    version: str = ""


@dataclass(frozen=True)
class Fix:
    """A declared commit found in the mirror."""

    patch: str
    sha: str
    date: str


def declared(patch: PatchFile) -> Declared | None:
    """The patch's Applied-Upstream header parsed (None without one); a header health cannot verify is a
    one-line PatchError that says what to write."""
    text = patch.headers.get(HEADER)
    if text is None:
        return None
    fix = (f"write `{HEADER}: <version>, commit:<upstream SHA>` (DEP-3) in the header of {patch.path}, "
           f"then `build-kernel patch lock {patch.path.parent}`")
    said = " ".join(text.split())
    commits, rest = [], []
    for part in (p.strip() for p in said.split(",")):
        url = _URL.fullmatch(part)
        if part.startswith("commit:") or url:
            sha = (url.group(1) if url else part.removeprefix("commit:")).strip().lower()
            if not _SHA.fullmatch(sha):
                raise PatchError(f"{patch.name}: {HEADER} commit {sha!r} is not a commit SHA (7 to 40 hex digits)",
                                 hint=fix)
            commits.append(sha)
        elif part:
            rest.append(part)
    if not commits:
        raise PatchError(f"{patch.name}: {HEADER} {said!r} names no upstream commit, so health cannot check it",
                         hint=fix)
    if len({c[:min(map(len, commits))] for c in commits}) > 1:
        raise PatchError(f"{patch.name}: {HEADER} names {len(commits)} different commits ({', '.join(commits)})",
                         hint=f"keep the one commit that brought the fix upstream; {fix}")
    return Declared(patch.name, max(commits, key=len), ", ".join(rest))


class Where(Protocol):
    """What the search needs of health's walk: the mirror, and the recipe's series checked at any commit."""

    mirror: Path
    env: Mapping[str, str]
    url: str
    offline: bool

    def statuses(self, sha: str) -> tuple[patches.PatchStatus, ...]:
        """The recipe's series at `sha` (fetched and checked out as the walk does; cached)."""

    def fetch_commit(self, sha: str) -> bool:
        """Fetch a commit the mirror lacks; False when upstream has none of that SHA."""


def resolve(series: Sequence[PatchFile], where: Where) -> dict[str, Fix]:
    """Each Applied-Upstream commit of the series found in the mirror (fetched when it lacks it); a commit
    upstream does not have is a one-line PatchError."""
    found = {}
    for patch in series:
        decl = declared(patch)
        if decl is None:
            continue
        sha = rev_parse(where.mirror, decl.commit, where.env)
        if sha is None and _FULL.fullmatch(decl.commit) and not where.offline and where.fetch_commit(decl.commit):
            sha = rev_parse(where.mirror, decl.commit, where.env)
        if sha is None:
            hint = ("the cached mirror lacks it: run without --offline" if where.offline and _FULL.fullmatch(decl.commit)
                    else f"name upstream's commit that brought the fix by its full SHA (`git log -1 --format=%H SHA` "
                         f"in a clone of {where.url}), in the header of {patch.path}, then relock")
            raise PatchError(f"{patch.name}: {HEADER} commit {decl.commit} is not in the history of {where.url}",
                             hint=hint)
        found[patch.name] = Fix(patch.name, sha, date(where.mirror, sha, where.env))
    return found


def fixed_at(commit: str, fixes: Mapping[str, Fix], where: Where) -> tuple[str, ...]:
    """The patches whose declared fix is in `commit`'s history."""
    return tuple(name for name, fix in fixes.items() if is_ancestor(where.mirror, fix.sha, commit, where.env))


def _touching(where: Where, start: str, end: str, paths: list[str]) -> list[str]:
    """First-parent commits in start..end (oldest first) that change one of `paths`."""
    return out(where.mirror, "log", "--first-parent", "--format=%H", "--reverse", f"{start}..{end}", "--", *paths,
               env=where.env).split()


def _first_upstream(where: Where, index: int, start: str, end: str, paths: list[str]) -> str:
    """The first commit after `start` (patch needed) up to `end` (reverse applies) where patch `index`'s
    reverse applies, bisected: like `git bisect`, it finds where the state turns, once."""
    commits = _touching(where, start, end, paths)
    if not commits:  # it changed where none of its files did: say where it was seen
        return end
    lo, hi, checked = 0, len(commits) - 1, 0  # the state at `end` is the state at the last commit that touched them
    while lo < hi:
        mid, checked = (lo + hi) // 2, checked + 1
        if where.statuses(commits[mid])[index].state == patches.UPSTREAM:
            hi = mid
        else:
            lo = mid + 1
    log.info(f"  patch {index + 1}: its reverse first applies at {commits[lo][:12]} (of {len(commits)} commit(s) "
             f"touching its files after {start[:12]}, {checked} checked)")
    return commits[lo]


class _Seen(NamedTuple):
    sha: str
    date: str
    how: str
    release: str  # the first row's version
    exact: bool


def _reverse(where: Where, rows: Sequence[Row], index: int, since: str | None, paths: list[str]) -> _Seen | None:
    """Where the newest stretch of rows with the patch's reverse applying begins."""
    k = len(rows)
    while k and rows[k - 1].statuses[index].state == patches.UPSTREAM:
        k -= 1
    if k == len(rows):
        return None
    start = rows[k - 1].commit if k else since
    # Before the first row only --since is known, and only once checked: the pin, say, may have it already.
    if start is None or (not k and where.statuses(start)[index].state == patches.UPSTREAM):
        return _Seen(rows[k].commit, rows[k].date, REVERSE, rows[k].version, False)
    sha = _first_upstream(where, index, start, rows[k].commit, paths)
    return _Seen(sha, date(where.mirror, sha, where.env), REVERSE, rows[k].version, True)


def _one(where: Where, rows: Sequence[Row], index: int, patch: PatchFile, fix: Fix | None, since: str | None,
         paths: list[str]) -> Retired:
    seen = [s for s in (_reverse(where, rows, index, since, paths),) if s is not None]
    notes = []
    if fix is not None:
        first = next((r for r in rows if patch.name in r.fixed), None)
        if first is not None:
            seen.append(_Seen(fix.sha, fix.date, DECLARED, first.version, True))
        else:
            notes.append(f"its {HEADER} commit {fix.sha[:9]} ({fix.date}) is not in the history up to "
                         f"{rows[-1].commit[:9]}")
    if len(seen) == 2 and not is_ancestor(where.mirror, seen[0].sha, seen[1].sha, where.env):
        seen.reverse()  # the declared fix came first
    if seen:
        return Retired(patch.name, False, *seen[0], note="; ".join(notes))
    last = rows[-1].statuses[index].state
    if last in (patches.APPLIES, patches.OFFSET):
        return Retired(patch.name, True, note="; ".join(notes))
    verbatim = [r.version for r in rows if r.statuses[index].state == patches.UPSTREAM]
    notes.append(f"conflicts at {rows[-1].version}" + (f", upstream had it verbatim at {', '.join(verbatim)}"
                                                        if verbatim else "")
                 + f" (refresh it, or name upstream's equivalent fix in {HEADER})")
    return Retired(patch.name, None, note="; ".join(notes))


def retire(rows: Sequence[Row], series: Sequence[PatchFile], fixes: Mapping[str, Fix], where: Where,
           since: str | None, subdir: str) -> tuple[Retired, ...]:
    """Each patch at the newest row: needed, or not needed from which commit and how."""
    found: list[Retired] = []
    files: set[str] = set()
    for index, patch in enumerate(series if rows else ()):
        files |= {f"{subdir}/{f}" if subdir else f for f in rows[-1].statuses[index].files}
        found.append(_one(where, rows, index, patch, fixes.get(patch.name), since, sorted(files)))
    return tuple(found)
