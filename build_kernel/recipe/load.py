"""Finding, reading and merging recipe files, then building a validated `Recipe`.

`extends = "parent"` merges the parent's tables key by key (lists are replaced). A parent named by
name is looked for beside the child, then on the search path (`BUILD_KERNEL_RECIPE_PATH`, read by
the plan's environment), then in the project's recipes/: a site's overlay kept anywhere extends a
shipped recipe by name. A child's key replaces the parent's keys it cannot stand beside
(`REPLACES`: a commit over a tag, a series of its own over the parent's version). Every value keeps
the file and line that set it (`Recipe.origins`, shown by `plan`).
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from build_kernel.errors import RecipeError
from build_kernel.recipe.convert import _build_section
from build_kernel.recipe.model import SECTIONS, TOP_KEYS, Dep, Expectation, LibraryRule, Recipe, SystemDep
from build_kernel.recipe.problems import _Problems, _toml
from build_kernel.recipe.rules import _check, drop_stale_omitted

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# The repository root: recipes/ and patches/ live there (this file is build_kernel/recipe/load.py).
DEFAULT_ROOT = Path(__file__).resolve().parent.parent.parent
# Folders of a site's own recipes, `:`-separated (the plan's environment reads it: plan.recipe_search_path).
SEARCH_ENV = "BUILD_KERNEL_RECIPE_PATH"


def recipes_dir(root: Path | None = None) -> Path:
    return (root or DEFAULT_ROOT) / "recipes"


def list_recipes(root: Path | None = None) -> list[str]:
    return sorted(p.stem for p in recipes_dir(root).glob("*.toml"))


def _by_name(name: str, folders: Sequence[Path]) -> Path | None:
    """The first `<folder>/<name>.toml` of `folders` that exists."""
    return next((folder / f"{name}.toml" for folder in folders if (folder / f"{name}.toml").is_file()), None)


def _find(name_or_path: str, root: Path, search: Sequence[Path] = ()) -> Path:
    candidate = Path(name_or_path)
    if candidate.is_dir() and (name_or_path.endswith(".toml") or "/" in name_or_path):
        inside = sorted(p.name for p in candidate.glob("*.toml"))
        raise RecipeError([f"{name_or_path}: is a folder, not a recipe file (name one of its recipes: "
                           f"{', '.join(inside[:5]) + (', …' if inside[5:] else '') if inside else 'it has no .toml'})"])
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        if candidate.is_file():
            return candidate.resolve()
        raise RecipeError([f"{name_or_path}: no such recipe file (check the path)"])
    path = _by_name(name_or_path, [recipes_dir(root), *search])
    if path is not None:
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


# (table, child key) -> the parent's keys of that table it replaces: keys that cannot stand together
# (`give commit or tag, not both`), or a value that belongs to the one replaced (a version to its series).
# `deps.*`: any [deps.NAME] table.
REPLACES: dict[tuple[str, str], tuple[str, ...]] = {
    ("deps.*", "commit"): ("tag",),
    ("deps.*", "tag"): ("commit",),
    ("deps.*", "path"): ("repo", "commit", "tag", "paths", "submodules"),
    ("deps.*", "repo"): ("path",),
    ("patches", "series"): ("version",),
    # The variants listed belong to `fa3 = "listed"`: a child choosing "all" or "model" drops them.
    ("build", "fa3"): ("fa3_head_dims", "fa3_dtypes", "fa3_softcap"),
}


def _replaced(table: str, key: str) -> tuple[str, ...]:
    generic = f"{table.split('.')[0]}.*" if table.count(".") == 1 else table
    return REPLACES.get((table, key), REPLACES.get((generic, key), ()))


def _merge(parent: dict[str, Any], child: dict[str, Any], table: str = "",
           dropped: dict[str, Any] | None = None) -> dict[str, Any]:
    """The child over the parent, key by key; `dropped` collects the parent's values a child key replaced
    (key path -> value)."""
    merged = dict(parent)
    for key, value in child.items():
        for other in _replaced(table, key.replace("-", "_")):
            if other in merged and other not in child:
                value_dropped = merged.pop(other)
                if dropped is not None:
                    dropped[f"{table}.{other}" if table else other] = value_dropped
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value, f"{table}.{key}" if table else key, dropped)
        else:
            merged[key] = value
    return merged


def values(raw: dict[str, Any]) -> dict[str, Any]:
    """key path -> value of every value of a (merged) recipe table, keyed as `Recipe.origins`."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        spelled = json.dumps(key) if re.search(r"[^A-Za-z0-9_-]", key) else key
        if isinstance(value, dict):
            out.update({f"{spelled}.{k}": v for k, v in values(value).items()})
        else:
            out[key.replace("-", "_")] = value
    return out


def _leaves(data: dict[str, Any], header: str = "") -> list[tuple[str, str, str, bool]]:
    """(key path, its table as a header spells it, key, is a table) of every key below `data`; the key
    path is what `where(table, key)` looks up (`deps.repo-triton.tag`, `verify.libraries."GLOB".fp4`)."""
    out: list[tuple[str, str, str, bool]] = []
    for key, value in data.items():
        spelled = json.dumps(key) if re.search(r"[^A-Za-z0-9_-]", key) else key
        if isinstance(value, dict):
            sub = f"{header}.{spelled}" if header else spelled
            out.append((sub, header, key, True))
            out.extend(_leaves(value, sub))
        else:
            leaf = key.replace("-", "_")
            out.append((f"{header}.{leaf}" if header else leaf, header, key, False))
    return out


def _load_raw(path: Path, chain: tuple[Path, ...], search: Sequence[Path] = (),
              dropped: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, tuple[Path, str]]]:
    """Merged table plus, per key path (each top-level table, each table and each value below it), the
    file that last set it (for line lookup); `dropped`: what a child's key replaced, and where it was set."""
    if path in chain:
        cycle = " -> ".join(p.stem for p in (*chain, path))
        raise RecipeError([f"{chain[-1]}:{_line_of(chain[-1].read_text(), '', 'extends')}: extends: cycle {cycle} (remove one `extends`)"])
    data, text = _read_toml(path)
    origins = {key: (path, text) for key in data}
    # And per key of each table: an inherited key's line (and a path's base) is in the file that set it.
    origins.update({f"{table}.{key.replace('-', '_')}": (path, text) for table, keys in data.items()
                    if isinstance(keys, dict) for key in keys})
    origins.update({key: (path, text) for key, *_ in _leaves(data)})
    parent_name = data.get("extends")
    if parent_name is None:
        return data, origins
    line = _line_of(text, "", "extends")
    if not isinstance(parent_name, str):
        raise RecipeError([f"{path}:{line}: extends: must be a recipe name string (e.g. extends = \"nightly-cu130\", or a .toml path)"])
    # A path (a site's overlay of a shipped recipe) is relative to this file; a name is a sibling, else
    # on the search path, else one of the project's recipes.
    by_path = parent_name.endswith(".toml") or "/" in parent_name
    folders = [path.parent, *search, recipes_dir()]
    found = (path.parent / parent_name).resolve() if by_path else _by_name(parent_name, folders)
    if found is None or not found.is_file():
        where = found if by_path else ", ".join(dict.fromkeys(str(f) for f in folders))
        fix = "fix the path" if by_path else f"create it, fix the name, or add its folder to {SEARCH_ENV}"
        raise RecipeError([f"{path}:{line}: extends: parent recipe {parent_name!r} not found in {where} ({fix})"])
    parent, parent_origins = _load_raw(found.resolve(), (*chain, path), search, dropped)
    here: dict[str, Any] = {}
    merged = _merge(parent, data, dropped=here)
    for key, value in here.items():  # the parent's value, and the file that set it, for messages
        if dropped is not None:
            siblings = parent.get(key.split(".")[0], {})  # the parent's table it stood in (its series)
            dropped[key] = (value, parent_origins.get(key, (found, ""))[0], siblings)
        parent_origins.pop(key, None)
    parent_origins.update(origins)
    return merged, parent_origins


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
    [patches] version, then series, then of any recipe it extends (an overlay outside the project,
    `extends = "/…/recipes/x.toml"`, that names another version of its parent's series)."""
    named = [origins.get(key, (recipe.path, ""))[0] for key in ("patches.version", "patches.series")]
    chain = dict.fromkeys([recipe.path, *named, *(file for file, _ in origins.values())])
    for want in (recipe.patches.version, ""):  # the version itself, else the project that holds the series
        for file in chain:
            candidate = file.parent.parent
            if (candidate / "patches" / recipe.patches.series / want / ("series" if want else "")).exists():
                return None if candidate == recipe.root else candidate
    return None


def load(name_or_path: str, root: Path | None = None, search: Sequence[Path] = ()) -> Recipe:
    """Load, merge and validate one recipe; raise RecipeError listing every problem. `search`: folders
    of a site's own recipes, for names (the recipe's and its parents')."""
    path = _find(name_or_path, root or DEFAULT_ROOT, search)
    # A recipe given by path lives in <root>/recipes/: its siblings and patches/ are there.
    root = path.parent.parent
    dropped: dict[str, Any] = {}
    raw, origins = _load_raw(path, (), search, dropped)
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
    recipe = replace(recipe, patches_root=_patches_root(recipe, origins),
                     origins={key: f"{file}:{_line_of(text, table, name)}" for key, table, name, is_table in _leaves(raw)
                              if not is_table for file, text in [origins.get(key, (path, ""))]})
    _inherited_version(recipe, dropped, problems, where)
    drop_stale_omitted(recipe)
    _check(recipe, problems, where)
    problems.raise_if_any()
    return recipe


def _inherited_version(r: Recipe, dropped: Mapping[str, Any], problems: _Problems, where: Any) -> None:
    """A child's series of its own without a version: the parent's version was of the parent's series."""
    if r.patches.version or "patches.version" not in dropped:
        return
    version, file, table = dropped["patches.version"]
    problems.add(where("patches", "series"), "patches.version",
                 f"missing: series {r.patches.series!r} is set here, the version {version} inherited from {file} is "
                 f"{table.get('series', 'the parent series')}'s (set version = \"...\" of {r.patches.series} too)")
