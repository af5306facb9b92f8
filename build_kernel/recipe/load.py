"""Finding, reading and merging recipe files, then building a validated `Recipe`.

`extends = "parent"` merges the parent's tables key by key (lists are replaced).
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from build_kernel.errors import RecipeError
from build_kernel.recipe.convert import _build_section
from build_kernel.recipe.model import SECTIONS, TOP_KEYS, Dep, Expectation, LibraryRule, Recipe, SystemDep
from build_kernel.recipe.problems import _Problems, _toml
from build_kernel.recipe.rules import _check

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# The repository root: recipes/ and patches/ live there (this file is build_kernel/recipe/load.py).
DEFAULT_ROOT = Path(__file__).resolve().parent.parent.parent


def recipes_dir(root: Path | None = None) -> Path:
    return (root or DEFAULT_ROOT) / "recipes"


def list_recipes(root: Path | None = None) -> list[str]:
    return sorted(p.stem for p in recipes_dir(root).glob("*.toml"))


def _find(name_or_path: str, root: Path) -> Path:
    candidate = Path(name_or_path)
    if candidate.is_dir() and (name_or_path.endswith(".toml") or "/" in name_or_path or not (root / "recipes" /
                                                                                          f"{name_or_path}.toml").is_file()):
        inside = sorted(p.name for p in candidate.glob("*.toml"))
        raise RecipeError([f"{name_or_path}: is a folder, not a recipe file (name one of its recipes: "
                           f"{', '.join(inside[:5]) + (', …' if inside[5:] else '') if inside else 'it has no .toml'})"])
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        if candidate.is_file():
            return candidate.resolve()
        raise RecipeError([f"{name_or_path}: no such recipe file (check the path)"])
    path = recipes_dir(root) / f"{name_or_path}.toml"
    if path.is_file():
        return path
    known = list_recipes(root)
    close = difflib.get_close_matches(name_or_path, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known recipes: {', '.join(known) or 'none'}"
    raise RecipeError([f"recipe {name_or_path!r} not found in {recipes_dir(root)} ({hint})"])


def _read_toml(path: Path) -> tuple[dict[str, Any], str]:
    text = path.read_text()
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        where = f"{path}:{m.group(1)}:{m.group(2)}" if m else str(path)
        msg = re.sub(r"\s*\(at line.*\)", "", str(exc))
        raise RecipeError([f"{where}: invalid TOML: {msg} (fix the syntax at that position)"]) from None


def _line_of(text: str, table: str, key: str) -> int:
    """Best-effort line number of `key` inside `[table]` (1 when not found)."""
    current = ""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = re.match(r"^\[+\s*([^\]]+?)\s*\]+", stripped)
        if header:
            current = header.group(1)
            # A table-valued key may be written as its own `[table.key]` header (a top-level one, `[key]`).
            if current == (f"{table}.{key}" if table and key else key or table):
                return number
            continue
        # `job-memory-gb` is accepted for `job_memory_gb`, so look for either spelling.
        if current == table and re.match(rf"^{re.escape(key).replace('_', '[-_]')}\s*=", stripped):
            return number
    return 1


def _merge(parent: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    merged = dict(parent)
    for key, value in child.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _load_raw(path: Path, chain: tuple[Path, ...]) -> tuple[dict[str, Any], dict[str, tuple[Path, str]]]:
    """Merged table plus, per top-level table, the file that last set it (for line lookup)."""
    if path in chain:
        cycle = " -> ".join(p.stem for p in (*chain, path))
        raise RecipeError([f"{chain[-1]}:{_line_of(chain[-1].read_text(), '', 'extends')}: extends: cycle {cycle} (remove one `extends`)"])
    data, text = _read_toml(path)
    origins = {key: (path, text) for key in data}
    # And per key of each table: an inherited key's line (and a path's base) is in the file that set it.
    origins.update({f"{table}.{key.replace('-', '_')}": (path, text) for table, keys in data.items()
                    if isinstance(keys, dict) for key in keys})
    parent_name = data.get("extends")
    if parent_name is None:
        return data, origins
    line = _line_of(text, "", "extends")
    if not isinstance(parent_name, str):
        raise RecipeError([f"{path}:{line}: extends: must be a recipe name string (e.g. extends = \"nightly-cu130\", or a .toml path)"])
    # A name is a sibling; a path (a site's overlay of a shipped recipe) is relative to this file.
    by_path = parent_name.endswith(".toml") or "/" in parent_name
    parent_path = (path.parent / parent_name).resolve() if by_path else path.parent / f"{parent_name}.toml"
    if not parent_path.is_file():
        where = parent_path if by_path else path.parent
        raise RecipeError([f"{path}:{line}: extends: parent recipe {parent_name!r} not found in {where} (create it or fix the name)"])
    parent, parent_origins = _load_raw(parent_path, (*chain, path))
    parent_origins.update(origins)
    return _merge(parent, data), parent_origins


def _without(table: Any, key: str) -> Any:
    return {k: v for k, v in table.items() if k != key} if isinstance(table, dict) else table


# Sections with a table of named sub-tables, each checked like a section of its own.
_SUBTABLES = {"verify": "libraries", "test": "expect"}


def _subtables(section: str, raw: Any, cls: type, key: str, problems: _Problems, where: Any) -> tuple[Any, ...]:
    """`[SECTION.KEY."GLOB"]` tables (verify.libraries, test.expect), each checked like a section of its own,
    its glob as the first field."""
    tables = raw.get(key, {}) if isinstance(raw, dict) else {}
    if not isinstance(tables, dict):
        problems.add(where(section, key), f"{section}.{key}",
                     f"must be tables, not {_toml(tables)} (write [{section}.{key}.\"GLOB\"] and key = value lines "
                     "below it)")
        return ()
    first = fields(cls)[0].name
    return tuple(_build_section(cls, {**table, first: glob} if isinstance(table, dict) else table,
                                f'{section}.{key}."{glob}"', problems, where) for glob, table in tables.items())


def _named_tables(raw: dict[str, Any], key: str, cls: type, problems: _Problems, where: Any) -> tuple[Any, ...]:
    """`[KEY.NAME]` tables (deps, system), each checked like a section, its name as `name`."""
    tables = raw.get(key, {})
    if not isinstance(tables, dict):
        problems.add(where("", key), key, f"must be a table, not {_toml(tables)} (write [{key}.NAME] and key = value lines below it)")
        return ()
    return tuple(_build_section(cls, {**table, "name": name} if isinstance(table, dict) else table,
                                f"{key}.{name}", problems, where) for name, table in tables.items())


def _patches_root(recipe: Recipe, origins: Mapping[str, tuple[Path, str]]) -> Path | None:
    """The project whose patches/ holds the series: the recipe's own, else that of the file that set
    [patches] version, then series (an overlay outside the project, `extends = "/…/recipes/x.toml"`)."""
    for file in (recipe.path, *(origins.get(key, (recipe.path, ""))[0] for key in ("patches.version", "patches.series"))):
        candidate = file.parent.parent
        if (candidate / "patches" / recipe.patches.series / recipe.patches.version / "series").is_file():
            return None if candidate == recipe.root else candidate
    return None


def load(name_or_path: str, root: Path | None = None) -> Recipe:
    """Load, merge and validate one recipe; raise RecipeError listing every problem."""
    path = _find(name_or_path, root or DEFAULT_ROOT)
    # A recipe given by path lives in <root>/recipes/: its siblings and patches/ are there.
    root = path.parent.parent
    raw, origins = _load_raw(path, ())
    problems = _Problems()

    def where(table: str, key: str) -> str:
        # The most specific origin known: `deps.NAME.commit` -> `deps.NAME` (the file that wrote that table)
        # before `deps`, so an inherited key is not blamed on an overlay that only added a sibling table.
        dotted = f"{table}.{key.replace('-', '_')}" if table else key
        candidates = [dotted.rsplit(".", n)[0] for n in range(dotted.count(".") + 1)]
        file, text = next((origins[c] for c in candidates if c in origins), (path, path.read_text()))
        return f"{file}:{_line_of(text, table, key)}"

    for key in raw:
        if key not in TOP_KEYS:
            close = difflib.get_close_matches(key, TOP_KEYS, n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(TOP_KEYS)}"
            problems.add(where("", key), key, f"unknown key ({fix})")

    sections = {
        name: _build_section(cls, _without(raw.get(name, {}), _SUBTABLES[name]) if name in _SUBTABLES
                             else raw.get(name, {}), name, problems, where)
        for name, cls in SECTIONS.items()
    }
    sections["verify"] = replace(sections["verify"], libraries=_subtables("verify", raw.get("verify"), LibraryRule,
                                                                          "libraries", problems, where))
    sections["test"] = replace(sections["test"], expect=_subtables("test", raw.get("test"), Expectation, "expect",
                                                                   problems, where))
    if order_profile := sections["build"].order_profile:
        # Relative to the recipe file that names it (a parent's, when inherited), as `extends` paths are.
        base = origins.get("build.order_profile", (path, ""))[0].parent
        sections["build"] = replace(sections["build"], order_profile=str((base / order_profile).resolve()))
    deps = _named_tables(raw, "deps", Dep, problems, where)
    system = _named_tables(raw, "system", SystemDep, problems, where)
    recipe = Recipe(
        name=path.stem,
        path=path,
        root=root,
        description=str(raw.get("description", "")),
        extends=str(raw.get("extends", "")),
        deps=deps,
        system=system,
        raw=raw,
        **sections,
    )
    recipe = replace(recipe, patches_root=_patches_root(recipe, origins))
    _check(recipe, problems, where)
    problems.raise_if_any()
    return recipe
