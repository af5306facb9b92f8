"""Tag and branch pins, resolved once and recorded with their commit, so `--offline` needs no network;
and the owner of the recipe's lock file, which also records the wheel pins (stages/builder/wheelpins.py).

A tag (`[deps.NAME] tag`) or a branch (`[source] commit` with `allow_floating`) names a commit only
through a server. Online, the commit it resolves to is recorded twice: in the recipe's lock file
(`<recipe>.lock` beside it, TOML, one table per recipe key, meant to be committed like any lock file)
and in the cache (the mirror keeps the ref it was fetched under). Offline, the lock's commit is used
when it was recorded for the same repository and ref, else the cache's; a pin in neither is one error
naming the recipe key and the command that records it.

The lock is a tree of tables of strings: `[source]`, `[deps.NAME]`, `[toolchain.torch]` (a wheel pin's
version) and `[toolchain.torch.wheel.TARGET]` (its file per interpreter and platform). Every writer goes
through `record_entries`, which rewrites the whole file atomically. `build-kernel lock` (build_kernel/lock.py)
resolves every such pin ahead of a build: a tag or branch by `remote_commit` (`git ls-remote`, nothing fetched).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from build_kernel import atomic, log, network, process
from build_kernel.errors import FetchError
from build_kernel.plan import Plan
from build_kernel.recipe import recipes_dir
from build_kernel.stages.fetch import remote

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HEADER = ("# Written by build-kernel: the commit each tag or branch pin of {name} resolved to when it was\n"
          "# fetched, and the file (URL, sha256) each [toolchain] wheel pin resolved to; `--offline` and\n"
          "# reinstalls use these (docs/pins.md). Commit it beside the recipe.\n")

Key = tuple[str, ...]
_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def lock_path(plan: Plan) -> Path:
    return plan.recipe.path.with_suffix(".lock")


def _field(kind: str) -> str:
    """The lock's field for the ref: `tag`, or `ref` for a branch named by `[source] commit` (a field `commit`
    would be overwritten by the commit it resolved to)."""
    return "ref" if kind == "commit" else kind


def _key(key: str) -> Key:
    """A recipe key as a table path: `source`, `deps.NAME` (NAME may hold dots), `toolchain.torch`."""
    head, _, rest = key.partition(".")
    return (head, rest) if rest else (head,)


def _flatten(table: Mapping[str, object], path: Key, out: dict[Key, dict[str, str]]) -> None:
    values = {k: str(v) for k, v in table.items() if not isinstance(v, dict)}
    if values:
        out[path] = values
    for k, v in table.items():
        if isinstance(v, dict):
            _flatten(v, (*path, k), out)


def _read(path: Path) -> dict[Key, dict[str, str]]:
    """table path -> its string values; an unreadable lock counts as none."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    out: dict[Key, dict[str, str]] = {}
    _flatten(data, (), out)
    return out


def _write(path: Path, name: str, entries: dict[Key, dict[str, str]]) -> None:
    def part(k: str) -> str:
        return k if _BARE.match(k) else json.dumps(k)

    def table(key: Key) -> str:  # JSON's string escapes are TOML's basic-string escapes
        return (f"[{'.'.join(part(k) for k in key)}]\n"
                + "".join(f"{part(k)} = {json.dumps(v)}\n" for k, v in entries[key].items()))
    # A parent table sorts before its children, as TOML wants it written.
    atomic.write_text(path, HEADER.format(name=name) + "\n".join(table(k) for k in sorted(entries)))


def entries(plan: Plan) -> dict[Key, dict[str, str]]:
    """Every table of the recipe's lock (none when there is no lock)."""
    return _read(lock_path(plan))


def record_entries(plan: Plan, changes: Mapping[Key, dict[str, str] | None], *, what: str) -> bool:
    """Set (a dict) or drop (None) tables of the lock in one atomic rewrite; False (and a warning) when the
    lock cannot be written (a read-only site recipe): the caller's own record still serves."""
    path = lock_path(plan)
    before = _read(path)
    after = dict(before)
    for key, entry in changes.items():
        if entry is None:
            after.pop(key, None)
        else:
            after[key] = entry
    if after == before:
        return True
    try:
        _write(path, plan.recipe.name, after)
    except OSError as exc:
        log.warn(f"cannot record {what} in {path}: {exc.strerror}")
        return False
    return True


def command(plan: Plan) -> str:
    """The command that fetches this recipe (by name when it is one of the project's, else by path)."""
    r = plan.recipe
    by_name = (recipes_dir() / f"{r.name}.toml").resolve() == r.path.resolve()
    return f"build-kernel fetch --recipe {r.name if by_name else r.path}"


def for_fetch(plan: Plan, key: str, kind: str, repo: str, url: str, ref: str, *, offline: bool) -> str:
    """What to hand to fetch.ensure_commit for a tag or branch pin: the ref itself online (it is resolved
    there), its recorded commit offline."""
    if not offline:
        return ref
    if locked := locked_commit(plan, key, kind, repo, ref):
        return locked
    cached = remote.cached_ref(url, ref, plan.cache_dir)
    if cached:
        return cached
    raise FetchError(f"[{key}] {kind} {ref!r} was never resolved to a commit (not in {lock_path(plan)} nor in the "
                     f"cache {plan.cache_dir}) and --offline forbids asking {repo}",
                     hint=f"run `{command(plan)}` once with the network")


def locked_commit(plan: Plan, key: str, kind: str, repo: str, ref: str) -> str | None:
    """The commit the lock records for this pin (None: none, or recorded for another repository or ref)."""
    entry = _read(lock_path(plan)).get(_key(key), {})
    matches = entry.get("repo") == repo and entry.get(_field(kind)) == ref
    return entry["commit"] if matches and entry.get("commit") else None


def locked_refs(plan: Plan) -> list[str]:
    """One line per tag or branch pin the lock holds (`plan` prints them; the wheel pins have their own lines)."""
    out = []
    for key, entry in sorted(entries(plan).items()):
        kind = next((k for k in ("tag", "ref") if k in entry), None)
        if kind and entry.get("commit"):
            out.append(f"[{'.'.join(key)}] {'tag' if kind == 'tag' else 'branch'} {entry[kind]} = {entry['commit']} "
                       f"({lock_path(plan).name})")
    return out


def remote_commit(plan: Plan, key: str, kind: str, repo: str, ref: str) -> str:
    """The commit a tag or branch names on its server now (an annotated tag peeled), asked with `git ls-remote`
    through the user's [mirrors] (git applies its own insteadOf): nothing is fetched."""
    url = plan.mirrors.rewrite(remote.resolve_url(repo, plan.cache_dir, plan.recipe.root)).fetch_url
    # `ref^{}` too: a pattern matches refs by their tail, so `v3.5.1` alone lists the tag object, not its commit.
    net = network.settings(plan.env)
    proc = process.run(["git", *net.git_options(), "ls-remote", url, ref, f"{ref}^{{}}"], error=FetchError,
                       what=f"resolving [{key}] {kind} {ref!r}", env=plan.env, cwd=Path("/"), check=False,
                       timeout=net.fetch_cap_s, fix=f"check the server and your network, or raise {network.FETCH_TIMEOUT_ENV}")
    if proc.returncode != 0:
        said = [line.strip() for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        raise FetchError(f"cannot read {url} to resolve [{key}] {kind} {ref!r}: {said[-1] if said else 'git failed'}",
                         hint=f"check [{key}] repo, your network and {plan.mirrors.config_words()}")
    refs = {name: sha for sha, _, name in (line.partition("\t") for line in proc.stdout.splitlines())}
    for name in (f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}", f"refs/heads/{ref}", ref):
        if name in refs:
            return refs[name]
    raise FetchError(f"[{key}] {kind} {ref!r} is neither a branch nor a tag of {url}",
                     hint=f"check [{key}] {kind} (`git ls-remote {url}` lists them)")


def record(plan: Plan, key: str, kind: str, repo: str, ref: str, commit: str) -> None:
    """Note what `ref` resolved to in the recipe's lock (the cache's ref is fetch's own record)."""
    entry = {"repo": repo, _field(kind): ref, "commit": commit}
    before = _read(lock_path(plan)).get(_key(key), {})
    if before == entry:
        return
    if before.get("repo") == repo and before.get(_field(kind)) == ref and before.get("commit") != commit:
        log.warn(f"[{key}] {kind} {ref!r} moved: {before.get('commit', '')[:12]} -> {commit[:12]} "
                 f"(recorded in {lock_path(plan)})")
    record_entries(plan, {_key(key): entry}, what=f"[{key}] {kind} {ref!r} = {commit[:12]}")
