"""Tag and branch pins, resolved once and recorded with their commit, so `--offline` needs no network.

A tag (`[deps.NAME] tag`) or a branch (`[source] commit` with `allow_floating`) names a commit only
through a server. Online, the commit it resolves to is recorded twice: in the recipe's lock file
(`<recipe>.lock` beside it, TOML, one table per recipe key, meant to be committed like any lock file)
and in the cache (the mirror keeps the ref it was fetched under). Offline, the lock's commit is used
when it was recorded for the same repository and ref, else the cache's; a pin in neither is one error
naming the recipe key and the command that records it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from build_kernel import log
from build_kernel.errors import FetchError
from build_kernel.plan import Plan
from build_kernel.recipe import recipes_dir
from build_kernel.stages.fetch import remote

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HEADER = ("# Written by build-kernel: the commit each tag or branch pin of {name} resolved to when it was\n"
          "# fetched; `--offline` uses these (README: Fetching). Commit it beside the recipe.\n")


def lock_path(plan: Plan) -> Path:
    return plan.recipe.path.with_suffix(".lock")


def _read(path: Path) -> dict[str, dict[str, str]]:
    """key ("deps.NAME", "source") -> {"repo", "tag" or "branch", "commit"}; an unreadable lock counts as none."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    out: dict[str, dict[str, str]] = {}
    for table, entries in data.items():
        if table == "source" and isinstance(entries, dict):
            out["source"] = {k: str(v) for k, v in entries.items()}
        elif table == "deps" and isinstance(entries, dict):
            out.update({f"deps.{name}": {k: str(v) for k, v in e.items()} for name, e in entries.items()
                        if isinstance(e, dict)})
    return out


def _write(path: Path, name: str, entries: dict[str, dict[str, str]]) -> None:
    def table(key: str) -> str:
        head = "source" if key == "source" else f'deps."{key[5:]}"' if "." in key[5:] else key
        return f"[{head}]\n" + "".join(f'{k} = "{v}"\n' for k, v in entries[key].items())
    text = HEADER.format(name=name) + "\n".join(table(k) for k in sorted(entries))
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


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
    entry = _read(lock_path(plan)).get(key, {})
    if entry.get("repo") == repo and entry.get(kind) == ref and entry.get("commit"):
        return entry["commit"]
    cached = remote.cached_ref(url, ref, plan.cache_dir)
    if cached:
        return cached
    raise FetchError(f"[{key}] {kind} {ref!r} was never resolved to a commit (not in {lock_path(plan)} nor in the "
                     f"cache {plan.cache_dir}) and --offline forbids asking {repo}",
                     hint=f"run `{command(plan)}` once with the network")


def record(plan: Plan, key: str, kind: str, repo: str, ref: str, commit: str) -> None:
    """Note what `ref` resolved to in the recipe's lock (the cache's ref is fetch's own record)."""
    path = lock_path(plan)
    entries = _read(path)
    entry = {"repo": repo, kind: ref, "commit": commit}
    if entries.get(key) == entry:
        return
    before = entries.get(key, {})
    if before.get("repo") == repo and before.get(kind) == ref and before.get("commit") != commit:
        log.warn(f"[{key}] {kind} {ref!r} moved: {before.get('commit', '')[:12]} -> {commit[:12]} (recorded in {path})")
    entries[key] = entry
    try:
        _write(path, plan.recipe.name, entries)
    except OSError as exc:  # a read-only site recipe: the cache's record still serves --offline
        log.warn(f"cannot record [{key}] {kind} {ref!r} = {commit[:12]} in {path}: {exc.strerror}")
