"""`build-kernel lock`: resolve a recipe's resolvable pins ahead of any build and write its lock, as `uv lock`
and `cargo update` do.

Resolvable pins: a [toolchain] wheel pin from the recipe's torch_index (`torch = "nightly"` included: the
newest development release the index lists), a `[deps.NAME] tag` and a floating `[source] commit` (a
branch). A pin the lock already holds is kept; `upgrade` resolves every pin again (a `nightly` moves to
the newest listed, a tag or branch to what it names now). Everything is resolved first and written after,
in one atomic rewrite per pin through the lock's one writer (stages/fetch/pins.py): a pin that cannot be
resolved is one error and leaves the lock as it was. A torch pinned without torch_index is a release from
pip's own index, which never prunes one: it is listed, not locked.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from build_kernel.errors import ToolchainError
from build_kernel.plan import Plan
from build_kernel.recipe import SHA_RE
from build_kernel.stages.builder import wheelindex, wheelpins
from build_kernel.stages.fetch import pins


@dataclass(frozen=True)
class Entry:
    key: str  # the recipe key: `toolchain.torch`, `deps.repo-triton`, `source`
    pin: str  # as the recipe says it: `torch nightly`, `tag v3.5.1`, `commit main`
    before: str | None  # what the lock held (None: nothing)
    after: str | None  # what it holds once written (None: not locked at all)
    action: str  # "added", "updated", "kept", "unchanged", "not locked"
    line: str
    write: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("key", "pin", "before", "after", "action", "line")}


def _entry(key: str, pin: str, before: str | None, after: str | None, write: Callable[[], None] | None,
           note: str = "") -> Entry:
    action = "kept" if write is None and before else "unchanged" if before == after else \
        "updated" if before else "added"
    shown = {"kept": f"{before} (kept; --upgrade resolves it again)", "unchanged": f"{after} (unchanged)",
             "updated": f"{before} -> {after}", "added": f"{after} (added)"}[action]
    return Entry(key, pin, before, after, action, f"[{key}] {pin}: {shown}{note}",
                 write if action in ("updated", "added") else None)


def _wheel(plan: Plan, pin: wheelpins.WheelPin, upgrade: bool) -> Entry:
    current = wheelpins.locked(plan, pin)
    before = f"{current.version} ({current.file}, sha256 {current.sha256[:12]}...)" if current else None
    label = f"{pin.name} {pin.pin}"
    if current and not upgrade:
        return _entry(pin.key, label, before, before, None)
    try:
        listed = wheelindex.listed(pin.fetch_index, pin.name, plan.env)
    except ToolchainError as exc:
        held = "the lock keeps its file; nothing written" if current else "not locked"
        raise ToolchainError(f"[{pin.key}] {pin.name} {pin.pin}: {exc.message}; {held}",
                             hint=wheelpins.unfound_fix(plan, pin)) from None
    want = (wheelindex.newest_nightly(listed) if pin.pin == wheelpins.NIGHTLY and (upgrade or current is None)
            else wheelpins.version(plan, pin) or pin.pin)
    if want is None:
        raise ToolchainError(f"[{pin.key}] {pin.name} = \"nightly\": {pin.reads} lists no development release of "
                             f"{pin.name} for {wheelpins.target()}; nothing written",
                             hint="check [toolchain] torch_index (a nightly index, e.g. "
                                  "https://download.pytorch.org/whl/nightly/cu130)")
    if not wheelindex.is_listed(listed, want):
        if current and current.version == want:  # the lock still installs it: an upgrade has nothing newer
            return _entry(pin.key, label, before, before, None, f"; {pin.reads} no longer lists it")
        raise wheelpins.not_listed(plan, pin, want, "nothing written")
    logs = plan.cache_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    # This interpreter's pip: the build environment is a venv of it, so pip chooses the same file there.
    try:
        found = wheelpins.resolve(plan, pin, want, sys.executable, logs / "lock.log")
    except ToolchainError as exc:
        if "pip found no file of it" not in exc.message:  # wheelpins.not_listed's words
            raise
        # The page this process just read lists it: pip was answered otherwise. pip does not say why with
        # --quiet (an HTTP 500 it retried is logged at debug level), so the line says what is certain.
        raise ToolchainError(f"[{pin.key}] {pin.name} {want}: {pin.reads} lists it, but pip found no file of it "
                             f"there (the index failed pip's requests, which pip retries: PIP_RETRIES, 5 by default); "
                             f"nothing written; full log: {logs / 'lock.log'}",
                             hint="run again; if it persists, `pip download --no-deps -v --index-url "
                                  f"{pin.fetch_index} '{pin.name}=={want}'` shows the index's answers") from None
    after = f"{found.version} ({found.file}, sha256 {found.sha256[:12]}...)"
    return _entry(pin.key, label, before, after, lambda: wheelpins.record(plan, pin, found))


def _ref(plan: Plan, key: str, kind: str, repo: str, ref: str, upgrade: bool) -> Entry:
    current = pins.locked_commit(plan, key, kind, repo, ref)
    if current and not upgrade:
        return _entry(key, f"{kind} {ref}", current, current, None)
    commit = pins.remote_commit(plan, key, kind, repo, ref)
    return _entry(key, f"{kind} {ref}", current, commit, lambda: pins.record(plan, key, kind, repo, ref, commit))


def resolve(plan: Plan, *, upgrade: bool) -> list[Entry]:
    """Every pin of the recipe that a lock can hold, resolved (nothing written yet)."""
    r = plan.recipe
    entries = [_wheel(plan, pin, upgrade) for pin in wheelpins.of(plan)]
    if (release := wheelpins.release(plan)) is not None:
        entries.append(Entry(release.key, f"{release.name} {release.pin}", None, None, "not locked",
                             f"[{release.key}] {release.name} {release.pin}: not locked (a release from pip's index "
                             f"{release.fetch_index}, which never prunes one)"))
    if r.source.allow_floating and not SHA_RE.match(r.source.commit):
        entries.append(_ref(plan, "source", "commit", r.source.repo, r.source.commit, upgrade))
    entries += [_ref(plan, f"deps.{dep.name}", "tag", dep.repo, dep.tag, upgrade)
                for dep in r.deps if dep.tag and not dep.path]
    return entries


def nightly(plan: Plan) -> list[Entry]:
    """The recipe's `nightly` wheel pins resolved again (as `lock --upgrade` does them), nothing written: what a
    night of `build-kernel nightly` moves (an entry's `write` applies it)."""
    return [_wheel(plan, pin, True) for pin in wheelpins.of(plan) if pin.pin == wheelpins.NIGHTLY]


def lock(plan: Plan, *, upgrade: bool = False, dry_run: bool = False) -> dict[str, Any]:
    """Resolve, then (unless `dry_run`) write what changed; the result as `lock` prints it."""
    entries = resolve(plan, upgrade=upgrade)
    changes = [e for e in entries if e.write is not None]
    if not dry_run:
        for entry in changes:
            assert entry.write is not None
            entry.write()
    return {"lock": str(pins.lock_path(plan)), "upgrade": upgrade, "dry_run": dry_run,
            "changed": len(changes), "written": bool(changes) and not dry_run, "exists": pins.lock_path(plan).is_file(),
            "pins": [e.to_dict() for e in entries]}


def render(result: dict[str, Any]) -> str:
    """One line per pin, then what happened to the file (the same words as --json)."""
    lines = [pin["line"] for pin in result["pins"]] or ["the recipe has no pin a lock holds (commits are exact)"]
    n = result["changed"]
    if result["dry_run"]:
        lines.append(f"dry run: {n} pin(s) would change in {result['lock']}; nothing written")
    elif result["written"]:
        lines.append(f"{result['lock']}: {n} pin(s) written; commit it beside the recipe")
    elif result["exists"]:
        lines.append(f"{result['lock']}: up to date")
    else:
        lines.append(f"nothing to lock: {result['lock']} not written")
    return "\n".join(lines)
