"""Patch health: the series checked at every upstream commit that changed the package version.

A version bump is where users meet a new upstream, so those are the commits a series
must survive. The commits come from `git log --first-parent` on the package's
pyproject.toml (first parent: the version as the branch had it, merges included, not
the side branches' own steps), kept where `[project] version` differs from the parent's.

The mirror is fetch's partial clone (commits and trees, blobs only where asked for), and
everything enters it through `fetch.ensure_commit`: the history with the branch, then the
pyproject.toml of each commit that touched it, then the package's files at each commit
that is checked. Those commits are checked one after the other in a single scratch clone. More series
(`--series sm120/v4`) are checked at the same commits: one column per series, and which
commits none of them covers.
The result's rows are healthrows', rendering and writing them healthreport's (`render` and `write`
importable here); neither imports this module, so the imports run one way.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from build_kernel import log
from build_kernel.errors import FetchError, PatchError
from build_kernel.plan import Plan
from build_kernel.series import Series, load_series
from build_kernel.stages.fetch import remote as fetch
from build_kernel.stages.fetch.mirror import checkout
from build_kernel.stages.patch import apply as patches
from build_kernel.stages.patch import upstreamed
from build_kernel.stages.patch.healthreport import as_json as as_json
from build_kernel.stages.patch.healthreport import render as render
from build_kernel.stages.patch.healthreport import write as write
from build_kernel.stages.patch.healthrows import Health, Row, SeriesAt
from build_kernel.stages.patch.mirrorgit import git as _git
from build_kernel.stages.patch.mirrorgit import out as _out
from build_kernel.stages.patch.mirrorgit import rev_parse as _rev_parse

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class Fetcher:
    """fetch.ensure_commit for this recipe's repository: the one way objects enter the mirror."""

    plan: Plan
    url: str
    offline: bool

    @property
    def env(self) -> Mapping[str, str]:
        return self.plan.env

    def __call__(self, ref: str, paths: tuple[str, ...], *, floating: bool = False) -> tuple[Path, str]:
        return fetch.ensure_commit(self.url, ref, self.plan.cache_dir, offline=self.offline, allow_floating=floating,
                                   paths=paths, mirrors=self.plan.mirrors)

    def objects(self, oids: list[str]) -> None:
        fetch.fetch_objects(self.url, oids, self.plan.cache_dir, offline=self.offline, mirrors=self.plan.mirrors)


def _until(get: Fetcher, until: str | None, pyproject: str) -> tuple[Path, str]:
    """The mirror and the newest commit to walk from (a branch or tag comes with its history)."""
    ref = until or get.plan.recipe.source.ref or "HEAD"
    try:
        mirror, sha = get(ref, (pyproject,), floating=True)
    except FetchError as exc:
        if until:
            raise FetchError(f"--until {ref}: {exc.message}", hint=exc.hint) from exc
        also = "pass --until BRANCH|TAG|SHA"
        raise FetchError(f"the recipe's [source] ref {ref!r} (the default --until): {exc.message}",
                         hint=f"{exc.hint}, or {also}" if exc.hint else also) from exc
    return mirror, _rev_parse(mirror, sha, get.env) or sha  # an annotated tag: its commit


def _since(get: Fetcher, mirror: Path, since: str, pyproject: str) -> str:
    """`since` resolved in the mirror (a SHA, even abbreviated), else fetched as a ref."""
    sha = _rev_parse(mirror, since, get.env)
    if sha is not None:
        return sha
    try:
        sha = get(since, (pyproject,), floating=True)[1]
    except FetchError as exc:
        hint = ("it is not in the cached mirror: run without --offline" if get.offline
                else f"check the name (`git ls-remote {get.url}` lists branches and tags)")
        raise FetchError(f"--since {since} is not a commit, branch or tag of {get.url}", hint=hint) from exc
    return _rev_parse(mirror, sha, get.env) or sha


def _cut(mirror: Path, until: str, since: str | None, env: Mapping[str, str]) -> str | None:
    """The commit where the walk's history ends early: a pin fetched alone (`--depth=1`) has no parents."""
    shallow = mirror / "shallow"
    if not shallow.is_file():
        return None
    cut = set(shallow.read_text().split())
    walked = _out(mirror, "rev-list", "--first-parent", until, *([f"^{since}"] if since else []), env=env).split()
    return next((sha for sha in walked if sha in cut), None)


def _ensure_history(get: Fetcher, mirror: Path, until: str, since: str | None, pyproject: str) -> None:
    if _cut(mirror, until, since, get.env) is None:
        return
    if not get.offline:
        with contextlib.suppress(FetchError):  # reported below, as what it means for the walk
            get("HEAD", (pyproject,), floating=True)  # fetching a branch unshallows the whole mirror
    cut = _cut(mirror, until, since, get.env)
    if cut is not None:
        raise FetchError(f"the cached mirror of {get.url} has no history before {cut[:12]} (a commit fetched alone)",
                         hint="run without --offline: that fetches the history" if get.offline
                         else "pass a branch or tag that has it as --until")


def _blobs(mirror: Path, oids: list[str], env: Mapping[str, str]) -> dict[str, str]:
    """The contents of many blobs (all present) in one process, as text."""
    if not oids:
        return {}
    try:
        out = _git(mirror, "cat-file", "--batch", env=env, stdin="".join(f"{o}\n" for o in oids), check=True).stdout
    except UnicodeDecodeError:  # a blob that is not UTF-8: read one by one, skip those
        return _blobs_one_by_one(mirror, oids, env)
    # Sizes count bytes, the text counts characters: a blob ends where the next header starts.
    found: dict[str, str] = {}
    pos = 0
    for i, oid in enumerate(oids):
        end = out.index("\n", pos)
        header = out[pos:end].split()
        pos = end + 1
        if len(header) != 3:  # "<oid> missing"
            continue
        stop = out.find(f"\n{oids[i + 1]} ", pos) if i + 1 < len(oids) else len(out) - 1
        found[oid] = out[pos:stop]
        pos = stop + 1
    return found


def _blobs_one_by_one(mirror: Path, oids: list[str], env: Mapping[str, str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for oid in oids:
        with contextlib.suppress(UnicodeDecodeError):
            proc = _git(mirror, "cat-file", "blob", oid, env=env)
            if proc.returncode == 0:
                found[oid] = proc.stdout
    return found


def pyproject_version(blob: str | None) -> str | None:
    """The [project] version of a pyproject.toml's text (None: no file, no version, or not TOML)."""
    if blob is None:
        return None
    try:
        version = tomllib.loads(blob).get("project", {}).get("version")
    except tomllib.TOMLDecodeError:
        return None  # a broken pyproject.toml is no release
    return version if isinstance(version, str) else None


_NULL = "0" * 40


def _touching(mirror: Path, until: str, since: str | None, path: str,
              env: Mapping[str, str]) -> list[tuple[str, str, str, str]]:
    """(sha, date, blob before, blob after) of `path`, oldest first, for the first-parent commits that change it.
    Blob ids come from the trees, which a blob-less mirror has: no file is read yet."""
    out = _out(mirror, "log", "--first-parent", "--diff-merges=first-parent", "--reverse", "--raw", "--no-abbrev",
               "--no-renames", "--format=%x00%H %cs", until, *([f"^{since}"] if since else []), "--", path, env=env)
    found = []
    for record in out.split("\0")[1:]:
        head, _, raw = record.partition("\n")
        sha, date = head.split()
        old = new = _NULL
        for line in raw.splitlines():
            if line.startswith(":") and line.split("\t", 1)[1] == path:
                _m1, _m2, old, new, _status = line[1:].split("\t", 1)[0].split()
        found.append((sha, date, old, new))
    return found


def version_commits(get: Fetcher, mirror: Path, until: str, since: str | None,
                    path: str) -> list[tuple[str, str, str]]:
    """(sha, date, version), oldest first, for the first-parent commits of `until` (after `since`)
    whose `[project] version` in `path` differs from their parent's."""
    commits = _touching(mirror, until, since, path, get.env)
    holder: dict[str, str] = {}  # blob id -> a commit that has it at `path`, to fetch it through
    for sha, _date, old, new in commits:
        holder.setdefault(new, sha)
        holder.setdefault(old, f"{sha}^")
    holder.pop(_NULL, None)
    with log.step(f"{path} of {len(holder)} commit(s)"):
        get.objects(list(holder))  # those not in the mirror yet, in one request
    blobs = _blobs(mirror, list(holder), get.env)
    found = []
    for sha, date, old, new in commits:
        version, before = pyproject_version(blobs.get(new)), pyproject_version(blobs.get(old))
        if version is not None and version != before:
            found.append((sha, date, version))
    return found


def other_series(plan: Plan, name: str) -> Series:
    """`SERIES/VERSION` of the recipe's patches/ folder (beside the recipe's own series), loaded and lock-checked."""
    patches_dir = plan.recipe.root / "patches"
    parts = name.strip("/").split("/")
    directory = patches_dir.joinpath(*parts)
    if len(parts) != 2 or ".." in parts or not (directory / "series").is_file():
        raise PatchError(f"--series {name}: no series file at {directory}/series",
                         hint=f"name a folder of {patches_dir} as SERIES/VERSION, e.g. {plan.series.name}")
    return load_series(directory)


class Tree:
    """One scratch clone for the walk and the search for where upstream caught up: check_series reads
    HEAD, so moving HEAD is all a commit needs. The recipe's series' states are kept per commit."""

    def __init__(self, get: Fetcher, mirror: Path, tree: Path, pyproject: str) -> None:
        self.get, self.mirror, self.tree, self.pyproject = get, mirror, tree, pyproject
        self.url, self.offline, self.env = get.url, get.offline, get.env
        self.made = False
        self.seen: dict[str, tuple[patches.PatchStatus, ...]] = {}

    def at(self, sha: str) -> Path:
        src = self.get.plan.recipe.source
        self.get(sha, src.paths)  # the package's files at this commit, as `patch check` fetches them
        if not self.made:
            checkout(self.mirror, sha, self.tree, paths=src.paths).close()
            self.made = True
        else:
            _out(self.tree, "checkout", "--quiet", "--force", "--detach", sha, env=self.env)
        return self.tree

    def check(self, sha: str, series: Series) -> tuple[patches.PatchStatus, ...]:
        plan = self.get.plan
        return tuple(patches.check_series(self.at(sha), series, plan.recipe.source.subdir, env=plan.env))

    def statuses(self, sha: str) -> tuple[patches.PatchStatus, ...]:
        if sha not in self.seen:
            self.seen[sha] = self.check(sha, self.get.plan.series)
        return self.seen[sha]

    def fetch_commit(self, sha: str) -> bool:
        try:
            self.get(sha, (self.pyproject,))  # the commit; one small file, not every blob of its tree
        except FetchError:
            return False
        return True


def walk(plan: Plan, *, since: str | None = None, until: str | None = None, offline: bool = False,
         also: tuple[Series, ...] = ()) -> Health:
    """`patches.check_series` at every version change of the recipe's package, oldest first;
    `also`: more series checked at the same commits (one column each). Then each patch of the recipe's
    series: needed at the newest, or from which commit not (upstreamed.py)."""
    src = plan.recipe.source
    url = fetch.resolve_url(src.repo, plan.cache_dir, plan.recipe.root)
    get = Fetcher(plan, url, offline)
    path = f"{src.subdir}/pyproject.toml" if src.subdir else "pyproject.toml"
    mirror, until_sha = _until(get, until, path)
    since_sha = _since(get, mirror, since, path) if since else None
    _ensure_history(get, mirror, until_sha, since_sha, path)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bk-health-") as tmp:
        tree = Tree(get, mirror, Path(tmp) / "tree", path)
        fixes = upstreamed.resolve(plan.series.patches, tree)  # a bad header fails before the walk says a word
        commits = version_commits(get, mirror, until_sha, since_sha, path)
        with log.step(f"patch health: {len(commits)} version change(s) of {path} up to {until_sha[:12]}"):
            for i, (sha, date, version) in enumerate(commits):
                statuses = tree.statuses(sha)
                compared = (SeriesAt(plan.series.name, statuses),
                            *(SeriesAt(s.name, tree.check(sha, s)) for s in also)) if also else ()
                rows.append(Row(sha, date, version, statuses, compared, upstreamed.fixed_at(sha, fixes, tree)))
                log.info(f"  {i + 1}/{len(commits)} {sha[:12]} {version}: "
                         + (", ".join(f"{c.name} {'applies' if c.applies else 'does not apply'}" for c in compared)
                            or ("applies" if rows[-1].applies else "does not apply")))
            retired = upstreamed.retire(rows, plan.series.patches, fixes, tree, since_sha, src.subdir)
    return Health(url, until_sha, since_sha, tuple(rows), (plan.series.name, *(s.name for s in also)) if also else (),
                  retired)
