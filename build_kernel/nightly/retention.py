"""Old nights' wheels: the `keep` newest good nights' wheels stay; older ones are removed from the state folder
and from the static folder the night publishes to (an upload index keeps what was uploaded: said, not done).

Never removed, whatever their age: the last good night's wheel (the index's newest), and any wheel a lock or a
recipe still names, by file name or by version (`*.toml` and `*.lock` beside the recipe, in the project's
recipes/ and on BUILD_KERNEL_RECIPE_PATH): a fleet pinned to it must still install it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from build_kernel.nightly import record as records
from build_kernel.nightly import state
from build_kernel.plan import Plan, recipe_search_path
from build_kernel.recipe import recipes_dir

DEFAULT_KEEP = 7


def _named_texts(plan: Plan) -> list[tuple[Path, str]]:
    folders = dict.fromkeys([plan.recipe.path.parent, recipes_dir(plan.recipe.root), *recipe_search_path(plan.env)])
    found = []
    for folder in folders:
        for path in sorted(folder.glob("*.toml")) + sorted(folder.glob("*.lock")) if folder.is_dir() else []:
            try:
                found.append((path, path.read_text(errors="replace")))
            except OSError:
                continue
    return found


def naming(wheel: str, texts: Iterable[tuple[Path, str]]) -> Path | None:
    """The first lock or recipe file that names `wheel` (its file name or its exact version)."""
    try:
        version = str(parse_wheel_filename(wheel)[1])
    except InvalidWheelFilename:
        version = wheel
    return next((path for path, text in texts if wheel in text or version in text), None)


def apply(state_dir: Path, plan: Plan, keep: int, *, to: str | None,
          say: Callable[[str], None]) -> dict[str, Any]:
    """Remove the wheels of good nights older than the `keep` newest; what was removed and what was kept why."""
    keep = max(keep, 1)
    good = [r["wheel"]["name"] for r in records.read_all(state_dir) if r["outcome"] == "built" and r["wheel"]]
    newest_first = list(dict.fromkeys(reversed(good)))
    last = (state.last_good(state_dir) or {}).get("wheel") or {}
    texts = _named_texts(plan)
    removed, named = [], {}
    for name in newest_first[keep:]:
        if name == last.get("name"):
            continue
        if (by := naming(name, texts)) is not None:
            named[name] = str(by)
            continue
        (state.wheels_dir(state_dir) / name).unlink(missing_ok=True)
        removed.append(name)
    index = _remove_from_index(plan, to, removed, say) if removed else None
    if removed:
        say(f"retention (keep {keep}): removed {len(removed)} old night wheel(s): {', '.join(removed)}")
    for name, file in named.items():
        say(f"retention: kept {name}: {file} names it")
    return {"keep": keep, "removed": removed, "kept_named": named, "index": index}


def _remove_from_index(plan: Plan, to: str | None, names: list[str], say: Callable[[str], None]) -> str | None:
    from build_kernel.errors import PublishError
    from build_kernel.stages import publish
    from build_kernel.stages.publish.backends import StaticDirBackend

    if not to and not plan.recipe.publish.target:
        return None
    try:
        target = publish.resolve_target(to, plan.recipe.publish, env=plan.env)
    except PublishError:
        return None
    if target.kind != "static":
        say(f"retention: {target.label} is an upload index: old nights' wheels stay there (delete them there)")
        return target.label
    backend = StaticDirBackend(target)
    for name in names:
        if (target.path / name).is_file():
            backend.remove(name)
    return str(target.path)
