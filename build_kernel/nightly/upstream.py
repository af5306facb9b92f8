"""Tonight's upstream: the recipe's branch (or the newest tag a pattern matches) resolved to a commit in fetch's
mirror, and what is new since the last good night (how many commits, their one-line log)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from build_kernel import network, process
from build_kernel.errors import FetchError
from build_kernel.plan import Plan
from build_kernel.stages.fetch import remote as fetch
from build_kernel.stages.patch.mirrorgit import out, rev_parse

DEFAULT_BRANCH = "main"
LOG_LINES = 20  # the morning report shows the newest ones; the count says how many there were


@dataclass(frozen=True)
class Tonight:
    url: str
    mirror: Path
    ref: str  # the branch or tag followed
    commit: str
    previous_good: str | None
    commits_since: int
    log: tuple[str, ...]  # `abc123456789 subject`, newest first, at most LOG_LINES

    @property
    def new(self) -> bool:
        return self.commit != self.previous_good

    def to_dict(self) -> dict[str, object]:
        return {"ref": self.ref, "commit": self.commit, "previous_good": self.previous_good,
                "commits_since": self.commits_since, "log": list(self.log), "url": self.url}


def followed(plan: Plan, asked: str | None) -> str:
    """The ref a night follows: `--upstream`, else the recipe's [source] ref when it names a branch or tag
    pattern (a bundled example's ref is a folder, not a branch), else main."""
    if asked:
        return asked
    ref = plan.recipe.source.ref
    return ref if ref and not plan.recipe.source.repo.startswith("example:") else DEFAULT_BRANCH


def is_pattern(ref: str) -> bool:
    return any(c in ref for c in "*?[")


def newest_tag(plan: Plan, pattern: str, url: str | None = None) -> str:
    """The newest tag of the recipe's repository (or `url`) matching the glob `pattern` (by PEP 440 after a
    leading `v`, else by name), asked with `git ls-remote`: nothing fetched."""
    url = url or fetch.resolve_url(plan.recipe.source.repo, plan.cache_dir, plan.recipe.root)
    # The network's own limits (network.py): git's HTTP stall timeout, and the fetch timeout for every protocol (a
    # `git://` or ssh server that accepts and never answers would hold the night forever).
    net = network.settings(plan.env)
    listed = plan.mirrors.rewrite(url).fetch_url  # through the user's [mirrors], as every fetch of it goes
    proc = process.run(["git", *net.git_options(), "ls-remote", "--tags", "--refs", listed], error=FetchError,
                       what=f"listing the tags of {url}", env=plan.env, check=True, timeout=net.fetch_cap_s,
                       fix=f"check the server and your network, or raise {network.FETCH_TIMEOUT_ENV}")
    tags = [line.split("refs/tags/", 1)[1] for line in proc.stdout.splitlines() if "refs/tags/" in line]
    matching = [t for t in tags if fnmatch.fnmatchcase(t, pattern)]
    if not matching:
        raise FetchError(f"no tag of {url} matches {pattern!r} ({len(tags)} tag(s) there)",
                         hint="pass --upstream BRANCH, or a pattern that matches, e.g. 'v0.4.*'")

    versioned = []
    for tag in matching:
        try:
            versioned.append((Version(tag.removeprefix("v")), tag))
        except InvalidVersion:
            continue
    return max(versioned)[1] if versioned else max(matching)


def resolve(plan: Plan, ref: str, previous_good: str | None, *, offline: bool = False) -> Tonight:
    """`ref` (a branch, or a tag glob such as `v0.4.*`) as tonight's commit, with what is new since `previous_good`."""
    src = plan.recipe.source
    url = fetch.resolve_url(src.repo, plan.cache_dir, plan.recipe.root)
    name = newest_tag(plan, ref, url) if is_pattern(ref) else ref
    try:
        mirror, sha = fetch.ensure_commit(url, name, plan.cache_dir, offline=offline, allow_floating=True,
                                          paths=src.paths, mirrors=plan.mirrors)
    except FetchError as exc:
        raise FetchError(f"upstream {name!r} of {url}: {exc.message}",
                         hint=exc.hint or "pass --upstream BRANCH (the branch the nights follow)") from exc
    commit = rev_parse(mirror, sha, plan.env) or sha
    if previous_good is None or previous_good == commit:
        return Tonight(url, mirror, ref, commit, previous_good, 0, ())
    if rev_parse(mirror, previous_good, plan.env) is None and not offline:
        fetch.ensure_commit(url, previous_good, plan.cache_dir, offline=False, paths=src.paths, mirrors=plan.mirrors)
    since = out(mirror, "rev-list", "--count", "--first-parent", f"{previous_good}..{commit}", env=plan.env)
    log = out(mirror, "log", "--first-parent", f"--max-count={LOG_LINES}", "--format=%H %s",
              f"{previous_good}..{commit}", env=plan.env).splitlines()
    return Tonight(url, mirror, ref, commit, previous_good, int(since.strip() or 0),
                   tuple(f"{line[:12]}{line[40:]}" for line in log))
