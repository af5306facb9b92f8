"""`build-kernel nightly --dry-run`: what tonight would do, creating, fetching and writing nothing.

Tonight's commit comes from the server by `git ls-remote` (nothing fetched); the series is checked only when the
cache's mirror already holds that commit (offline, in a scratch clone under the system's temporary folder),
else the answer says a night would fetch it first. The nightly pins are asked of their index, as
`lock --dry-run` does. No state file, lock, record or report is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from build_kernel import gpus
from build_kernel import lock as pins
from build_kernel.errors import FetchError
from build_kernel.nightly import series_choice, state, upstream
from build_kernel.plan import Plan
from build_kernel.stages.fetch import mirror, remote
from build_kernel.stages.fetch import pins as refs
from build_kernel.stages.patch.mirrorgit import out, rev_parse


def _cached(plan: Plan, url: str, commit: str) -> bool:
    path = mirror.path_for(plan.cache_dir, url)
    return path.is_dir() and rev_parse(path, commit, plan.env) is not None


def tonight(plan: Plan, state_dir: Path, night: str, ref: str | None) -> dict[str, Any]:
    """The dry run's answer: upstream, pins, series (when the commit is cached), what the night would do."""
    current = state.current(state_dir)
    if current is not None:
        return {"dry_run": True, "would": f"resume the night of {current['night']} at {current['commit'][:12]} "
                                          "(it was interrupted)", "current": current}
    good = state.last_good(state_dir)
    followed = upstream.followed(plan, ref)
    src = plan.recipe.source
    name = upstream.newest_tag(plan, followed) if upstream.is_pattern(followed) else followed
    commit = refs.remote_commit(plan, "source", "branch", src.repo, name)
    url = remote.resolve_url(src.repo, plan.cache_dir, plan.recipe.root)
    cached = _cached(plan, url, commit)
    previous = good["commit"] if good else None
    since = None
    if previous and cached and _cached(plan, url, previous):
        since = int(out(mirror.path_for(plan.cache_dir, url), "rev-list", "--count", "--first-parent",
                        f"{previous}..{commit}", env=plan.env).strip() or 0)
    moved = [e for e in pins.nightly(plan) if e.write is not None]
    said: dict[str, Any] = {
        "dry_run": True, "recipe": plan.recipe.name, "night": night, "state_dir": str(state_dir),
        "upstream": {"ref": followed, "commit": commit, "previous_good": previous, "commits_since": since},
        "lock_changes": [{"pin": e.key, "from": e.before, "to": e.after or ""} for e in moved],
        "archs": [a.torch for a in plan.archs], "series": None}
    newest = series_choice.versions(plan)[0].directory.name
    if good and commit == previous and not moved and good.get("series_version") == newest:
        return {**said, "would": "nothing: nothing new since the last good night"}
    if not cached:
        return {**said, "would": f"fetch {commit[:12]}, then choose the series and build (the series is checked "
                                 "once the commit is fetched: a dry run fetches nothing)"}
    reference = plan.series
    if good and (plan.series.directory.parent / str(good.get("series_version"))).is_dir():
        reference = series_choice.series_named(plan, str(good["series_version"]))
    try:
        choice = series_choice.choose(plan, commit, reference=reference, good=previous, offline=True)
    except FetchError as exc:  # the package's files at that commit are not all cached
        return {**said, "would": f"fetch the files of {commit[:12]}, then choose the series ({exc.message})"}
    said["series"] = choice.to_dict()
    if choice.chosen is None:
        return {**said, "would": "stop before compiling: no series version applies"}
    return {**said, "would": f"build {plan.arch_list} with series {choice.chosen.name}, verify, "
                             + ("test, " if gpus.present() else "") + "publish",
            "version": f"<package version>.dev{night.replace('-', '')}+<local label>"}
