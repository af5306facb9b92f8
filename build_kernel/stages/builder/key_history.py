"""What changed since the last build of the same recipe and archs, when a build's key is new.

Each build folder keeps the inputs its key hashes (`key.json`). A build whose folder is new looks for the
newest other folder of the same recipe and arch list and names the inputs that differ, so a user whose
hour-long build starts from scratch learns why (a new torch, another series, a define) and that the earlier
objects are still in the cache.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from build_kernel import atomic

KEY_FILE = "key.json"
# The key's own names, as a user reads them.
_NAMES = {"recipe": "the recipe's build inputs", "commit": "the source commit", "series": "the patch series",
          "archs": "the arch list", "defines": "the CMake defines", "deps": "a dependency's commit",
          "tools": "the toolchain", "env": "the recipe's build environment", "toolkit": "the CUDA toolkit wheels"}


def record(work: Path, recipe: str, archs: str, inputs: dict[str, Any]) -> None:
    """Keep the inputs of the build in `work` (once: a resumed build has the same)."""
    path = work / KEY_FILE
    if not path.is_file():
        work.mkdir(parents=True, exist_ok=True)
        atomic.write_text(path, json.dumps({"recipe": recipe, "archs": archs, "inputs": inputs}, sort_keys=True,
                                           indent=1) + "\n")


def _differences(old: Any, new: Any, where: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any, Any]]:
    """(key path, old value, new value) of each leaf that differs."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new)) for d in _differences(old.get(k), new.get(k), (*where, k))]
    return [] if old == new else [(where, old, new)]


def _short(value: Any) -> str:
    """A sha256 as its first 12 digits; anything else as it is."""
    return value[:12] if isinstance(value, str) and len(value) == 64 else str(value)


def newest(builds: Path, recipe: str, archs: str, *, having: str = KEY_FILE) -> Path | None:
    """The newest build folder under `builds` of `recipe` for `archs` that holds `having` (its record, or a file
    the build left there); None when there is none."""
    earlier = []
    for path in builds.glob(f"*/{KEY_FILE}"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if data.get("recipe") == recipe and data.get("archs") == archs and (path.parent / having).is_file():
            earlier.append((path.stat().st_mtime, path.parent.name, path.parent))
    return max(earlier)[2] if earlier else None


def changed_since(builds: Path, work: Path, recipe: str, archs: str, inputs: dict[str, Any]) -> str | None:
    """One line for a new build folder `work`: the newest other build of `recipe` for `archs` under `builds`,
    and which inputs differ; None when there is none (or `work` was built before)."""
    # A folder with its record (or, from before records, CMake's folder) was built in: a resumed build.
    if (work / KEY_FILE).is_file() or (work / "cmake").is_dir():
        return None
    if (last := newest(builds, recipe, archs)) is None:
        return None
    key, old = last.name, json.loads((last / KEY_FILE).read_text()).get("inputs") or {}
    changed = _differences(old, inputs)
    if not changed:
        return None
    names = sorted({_NAMES.get(where[0], where[0]) for where, _, _ in changed})
    shown = [f"{'.'.join(where)} {_short(a)} -> {_short(b)}" for where, a, b in changed[:3]]
    return (f"a new build: the last build of {recipe} for {archs} (folder {key}, kept) had other inputs: "
            f"{', '.join(names)} ({'; '.join(shown)}{'; ...' if len(changed) > 3 else ''})")
