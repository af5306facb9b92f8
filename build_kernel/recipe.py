"""Recipes: TOML files that name everything a build depends on.

One frozen dataclass per section; unknown keys are refused with a "did you mean";
every problem is collected with its `file:line` and key path, then reported at once.
`extends = "parent"` merges the parent's tables key by key (lists are replaced).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

from build_kernel.archs import Arch, ArchSpellingError, parse_arch_list
from build_kernel.errors import RecipeError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
DEFAULT_ROOT = Path(__file__).resolve().parent.parent


def _doc(text: str, default: Any = None, factory: Any = None) -> Any:
    """A dataclass field with its reference-doc text attached."""
    if factory is not None:
        return field(default_factory=factory, metadata={"doc": text})
    return field(default=default, metadata={"doc": text})


@dataclass(frozen=True)
class Source:
    repo: str = _doc("Git URL, local path, or `example:NAME` for a bundled miniature project.", "")
    commit: str = _doc("Full 40-hex commit SHA to build; HEAD must equal it after checkout.", "")
    ref: str = _doc("Branch or tag the commit came from, for humans only.", "")
    subdir: str = _doc("Folder of the package inside the repository (sgl-kernel: `sgl-kernel`).", "")
    allow_floating: bool = _doc("Allow `commit` to be a branch or tag instead of a SHA.", False)
    sparse: bool = _doc("Check out only `subdir` (and fetch only its files); false: the whole tree.", True)

    @property
    def paths(self) -> tuple[str, ...]:
        """What the build reads of the repository: `subdir` alone, or everything."""
        return (self.subdir,) if self.sparse and self.subdir else ()


@dataclass(frozen=True)
class Patches:
    series: str = _doc("Patch series name: the folder `patches/<series>/`.", "")
    version: str = _doc("Series version: the folder `patches/<series>/<version>/`.", "")


@dataclass(frozen=True)
class Toolchain:
    cuda: str = _doc("CUDA major.minor the build targets; torch's CUDA must share its major.", "")
    cuda_source: str = _doc("Where nvcc comes from: `system`, `wheels` (PyPI nvidia-*) or `auto`.", "auto")
    torch: str = _doc("torch version to build against, or `existing` for the current environment's.", "existing")
    torch_index: str = _doc("Package index holding that torch (e.g. PyTorch's nightly cu130 index).", "")
    python: str = _doc("Python version of the build environment (informational when torch = existing).", "")
    cmake: str = _doc("Version specifier CMake must satisfy, e.g. `>=3.26`.", ">=3.26")
    flashinfer_python: str = _doc("flashinfer-python version installed for serving.", "")
    sglang: str = _doc("sglang version whose argparse validates the serve flags.", "")


@dataclass(frozen=True)
class Build:
    arch: tuple[Arch, ...] = _doc("Arch list (TORCH_CUDA_ARCH_LIST), e.g. [\"12.0a\"].", factory=tuple)
    fp4: bool = _doc("FP4 kernels are wanted: needs an arch-specific 10.0+ target such as 12.0a.", False)
    jobs: int | str = _doc("Parallel compile jobs: `auto` (from available memory) or a number.", "auto")
    nvcc_threads: int = _doc("nvcc --threads per job (archs compiled in parallel inside one job).", 1)
    job_memory_gb: float = _doc("Predicted peak memory of one compile job per arch in flight, GB.", 4.0)
    reserve_gb: float = _doc("Memory left free for everything else while compiling, GB.", 2.0)
    max_oom_retries: int = _doc("Times an OOM-killed build resumes with fewer jobs before failing.", 3)
    compile_cache: str = _doc("Compiler launcher for CUDA and C++ compiles: `none`, `ccache` or `sccache` "
                              "(not installed: a warning, then uncached).", "none")
    defines: dict[str, str] = _doc("Extra CMake `-D` defines.", factory=dict)
    env: dict[str, str] = _doc("Extra environment variables for the build.", factory=dict)


@dataclass(frozen=True)
class Dep:
    name: str = _doc("FetchContent name (upper-cased into FETCHCONTENT_SOURCE_DIR_<NAME>).", "")
    repo: str = _doc("Git URL, local path or `example:NAME` to fetch the dependency from.", "")
    commit: str = _doc("Full 40-hex SHA of the dependency to use.", "")
    tag: str = _doc("A tag instead of `commit`, where upstream pins a tag (sgl-kernel: triton `v3.5.1`); "
                    "the SHA it resolves to is recorded.", "")
    path: str = _doc("A local source folder to use as is instead of repo + commit.", "")
    paths: tuple[str, ...] = _doc("Folders the build reads (sparse checkout; only their files are fetched). "
                                  "Empty: the whole tree.", factory=tuple)
    submodules: tuple[str, ...] = _doc("Submodule paths to check out at the commit the dependency pins (as "
                                       "FetchContent would); `paths` below one make it sparse.", factory=tuple)


@dataclass(frozen=True)
class Verify:
    import_modules: tuple[str, ...] = _doc("Modules that must import in a clean process.", factory=tuple)
    op_namespace: str = _doc("torch.ops namespace of the library's ops.", "")
    ops: tuple[str, ...] = _doc("Ops that must be registered under torch.ops.<namespace>.", factory=tuple)
    fp4_library: str = _doc("Glob (inside the wheel) of the library whose cubins must hold FP4 code.", "")
    fp4_sass: tuple[str, ...] = _doc("Regexes of SASS opcodes that prove FP4 kernels, e.g. `E2M1`.", factory=tuple)
    gpu_check: str = _doc("`module:function` run on a GPU of a built arch (e.g. build_kernel.stages.verify.gpu_checks:minikernel_nvfp4).", "")


@dataclass(frozen=True)
class Serve:
    model: str = _doc("Model path or hub id to serve.", "")
    args: tuple[str, ...] = _doc("Flags for `python -m sglang.launch_server`.", factory=tuple)
    host: str = _doc("Address to bind.", "127.0.0.1")
    port: int = _doc("Port to bind.", 30000)


@dataclass(frozen=True)
class Publish:
    target: str = _doc("Index to publish to: a name from [publish.targets] or a URL.", "")
    targets: dict[str, str] = _doc("Named upload URLs.", factory=dict)


@dataclass(frozen=True)
class Recipe:
    name: str
    path: Path
    root: Path
    description: str
    extends: str
    source: Source
    patches: Patches
    toolchain: Toolchain
    build: Build
    deps: tuple[Dep, ...]
    verify: Verify
    serve: Serve
    publish: Publish
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def digest(self) -> str:
        """sha256 of the merged recipe content (inheritance resolved)."""
        blob = json.dumps(self.raw, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()

    @property
    def build_digest(self) -> str:
        """sha256 of what the wheel depends on: not [verify], [serve], [publish] or the description,
        so changing where a wheel goes or how it is checked does not rebuild it."""
        kept = {k: v for k, v in self.raw.items() if k not in _NOT_BUILD_INPUTS}
        return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()

    @property
    def series_dir(self) -> Path:
        return self.root / "patches" / self.patches.series / self.patches.version


_NOT_BUILD_INPUTS = ("description", "extends", "verify", "serve", "publish")
SECTIONS: dict[str, type] = {
    "source": Source,
    "patches": Patches,
    "toolchain": Toolchain,
    "build": Build,
    "verify": Verify,
    "serve": Serve,
    "publish": Publish,
}
TOP_KEYS = ("description", "extends", "deps", *SECTIONS)


class _Problems:
    """Collects `file:line: key: message (fix)` lines; raises them all at once."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.keys: set[str] = set()

    def add(self, where: str, key: str, message: str) -> None:
        self.lines.append(f"{where}: {key}: {message}")
        self.keys.add(key)

    def raise_if_any(self) -> None:
        if self.lines:
            raise RecipeError(self.lines)


def recipes_dir(root: Path | None = None) -> Path:
    return (root or DEFAULT_ROOT) / "recipes"


def list_recipes(root: Path | None = None) -> list[str]:
    return sorted(p.stem for p in recipes_dir(root).glob("*.toml"))


def _find(name_or_path: str, root: Path) -> Path:
    candidate = Path(name_or_path)
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
            # A table-valued key may be written as its own `[table.key]` header.
            if current == (f"{table}.{key}" if key else table):
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
    parent_name = data.get("extends")
    if parent_name is None:
        return data, origins
    line = _line_of(text, "", "extends")
    if not isinstance(parent_name, str):
        raise RecipeError([f"{path}:{line}: extends: must be a recipe name string"])
    # A name is a sibling; a path (a site's overlay of a shipped recipe) is relative to this file.
    by_path = parent_name.endswith(".toml") or "/" in parent_name
    parent_path = (path.parent / parent_name).resolve() if by_path else path.parent / f"{parent_name}.toml"
    if not parent_path.is_file():
        where = parent_path if by_path else path.parent
        raise RecipeError([f"{path}:{line}: extends: parent recipe {parent_name!r} not found in {where} (create it or fix the name)"])
    parent, parent_origins = _load_raw(parent_path, (*chain, path))
    parent_origins.update(origins)
    return _merge(parent, data), parent_origins


def _toml(value: Any) -> str:
    """A value as a recipe would spell it, for messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }" if value else "{}"
    return str(value)


class _Bad(Exception):
    """A value of the wrong type: what was expected, and (maybe) an example of the right value."""

    def __init__(self, expected: str, example: Any = None) -> None:
        super().__init__(expected)
        self.expected, self.example = expected, example


def _to_str(value: Any) -> str:
    if not isinstance(value, str):
        raise _Bad("a string", str(value) if isinstance(value, (int, float)) else None)
    return value


def _to_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Bad("true or false")
    return value


def _to_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        whole = isinstance(value, float) and value.is_integer()
        raise _Bad("an integer", int(value) if whole else None)
    return value


def _to_float(value: Any) -> float:
    # TOML `8` is as good as `8.0`; nan and inf are no sizes.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Bad("a number")
    return float(value)


def _to_jobs(value: Any) -> int | str:
    # "auto" versus a positive number is `_check`'s business.
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _Bad('"auto" or a positive integer', "auto")
    return value


def _to_strings(value: Any) -> tuple[str, ...]:
    # A bare string is refused, not split: `"a b"` could mean one item or two.
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        example = [value] if isinstance(value, str) else [str(v) for v in value] if isinstance(value, list) else ["..."]
        raise _Bad("a list of strings", example)
    return tuple(value)


def _to_table(value: Any) -> dict[str, str]:
    scalar = (str, int, float, bool)
    if not isinstance(value, dict) or not all(isinstance(v, scalar) for v in value.values()):
        example = {k: v if isinstance(v, scalar) else "..." for k, v in value.items()} if isinstance(value, dict) else {}
        raise _Bad("a table of strings or numbers", example or {"NAME": "value"})
    return {str(k): str(v) for k, v in value.items()}


def _to_archs(value: Any) -> tuple[Arch, ...]:
    if not isinstance(value, (str, list)) or (isinstance(value, list) and not all(isinstance(v, str) for v in value)):
        raise _Bad("a list of arch names", ["12.0a"])
    return parse_arch_list(value)


_CONVERTERS: dict[Any, Callable[[Any], Any]] = {
    str: _to_str, bool: _to_bool, int: _to_int, float: _to_float, int | str: _to_jobs,
    tuple[str, ...]: _to_strings, dict[str, str]: _to_table, tuple[Arch, ...]: _to_archs,
}


@functools.cache
def _fields_of(cls: type) -> dict[str, tuple[Field[Any], Callable[[Any], Any]]]:
    """Each field of a section with the converter for its annotation (KeyError: an unsupported one)."""
    hints = get_type_hints(cls)
    return {f.name: (f, _CONVERTERS[hints[f.name]]) for f in fields(cls)}


def _convert(f: Field[Any], convert: Callable[[Any], Any], value: Any) -> Any:
    """`convert(value)`, or raise `_Bad` with a finished `(e.g. key = ...)` example."""
    try:
        return convert(value)
    except _Bad as bad:
        example = bad.example
        if example is None and isinstance(value, str):
            with contextlib.suppress(tomllib.TOMLDecodeError, _Bad):  # `"2"` for an integer: suggest it unquoted
                example = convert(tomllib.loads(f"v = {value}")["v"])
        if example is None:
            example = f.default if f.default not in (MISSING, "") else "..."
        bad.example = f"{f.name} = {_toml(example)}"
        raise


def _build_section(cls: type, table: Any, section: str, problems: _Problems, where: Any) -> Any:
    if not isinstance(table, dict):
        problems.add(where(section, ""), section, f"must be a table, not {_toml(table)} (write [{section}] and key = value lines below it)")
        return cls()
    known = _fields_of(cls)
    values: dict[str, Any] = {}
    for key, value in table.items():
        pykey = key.replace("-", "_")
        if pykey not in known:
            close = difflib.get_close_matches(pykey, list(known), n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(known)}"
            problems.add(where(section, key), f"{section}.{key}", f"unknown key ({fix})")
            continue
        try:
            values[pykey] = _convert(*known[pykey], value)
        except _Bad as bad:
            problems.add(where(section, key), f"{section}.{key}",
                         f"must be {bad.expected}, not {_toml(value)} (e.g. {bad.example})")
        except ArchSpellingError as exc:
            problems.add(where(section, key), f"{section}.{key}", str(exc))
    return cls(**values)


def load(name_or_path: str, root: Path | None = None) -> Recipe:
    """Load, merge and validate one recipe; raise RecipeError listing every problem."""
    path = _find(name_or_path, root or DEFAULT_ROOT)
    # A recipe given by path lives in <root>/recipes/: its siblings and patches/ are there.
    root = path.parent.parent
    raw, origins = _load_raw(path, ())
    problems = _Problems()

    def where(table: str, key: str) -> str:
        top = table.split(".")[0]
        file, text = origins.get(top, (path, path.read_text()))
        return f"{file}:{_line_of(text, table, key)}"

    for key in raw:
        if key not in TOP_KEYS:
            close = difflib.get_close_matches(key, TOP_KEYS, n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(TOP_KEYS)}"
            problems.add(where("", key), key, f"unknown key ({fix})")

    sections = {
        name: _build_section(cls, raw.get(name, {}), name, problems, where)
        for name, cls in SECTIONS.items()
    }
    deps = []
    dep_tables = raw.get("deps", {})
    if not isinstance(dep_tables, dict):
        problems.add(where("", "deps"), "deps", f"must be a table, not {_toml(dep_tables)} (write [deps.NAME] and key = value lines below it)")
        dep_tables = {}
    for dep_name, table in dep_tables.items():
        dep = _build_section(Dep, {**table, "name": dep_name} if isinstance(table, dict) else table,
                             f"deps.{dep_name}", problems, where)
        deps.append(dep)
    recipe = Recipe(
        name=path.stem,
        path=path,
        root=root,
        description=str(raw.get("description", "")),
        extends=str(raw.get("extends", "")),
        deps=tuple(deps),
        raw=raw,
        **sections,
    )
    _check(recipe, problems, where)
    problems.raise_if_any()
    return recipe


def _check(r: Recipe, problems: _Problems, where: Any) -> None:
    """Cross-field rules that a single field's type cannot express."""
    refused = set(problems.keys)  # a value refused for its type is not also "missing"
    if not r.source.repo and "source.repo" not in refused:
        problems.add(where("source", "repo"), "source.repo", "missing (set the git URL or path to build from)")
    if "source.commit" not in refused:
        if not r.source.commit:
            problems.add(where("source", "commit"), "source.commit", "missing (pin a full 40-hex commit SHA)")
        elif not SHA_RE.match(r.source.commit) and not r.source.allow_floating:
            problems.add(where("source", "commit"), "source.commit",
                         f"{r.source.commit!r} is not a full 40-hex SHA (pin the commit, or set allow_floating = true)")
    if not {"patches.series", "patches.version"} & refused:
        if not r.patches.series or not r.patches.version:
            problems.add(where("patches", ""), "patches", "series and version are required (e.g. series = \"sm120\", version = \"v1\")")
        elif not (r.series_dir / "series").is_file():
            problems.add(where("patches", "series"), "patches.series",
                         f"no series file at {r.series_dir}/series (create the folder or fix series/version)")
    if not r.build.arch and "arch" not in (r.raw.get("build") or {}):
        problems.add(where("build", "arch"), "build.arch", "missing (name the archs to build, e.g. [\"12.0a\"])")
    elif r.build.arch and r.build.fp4:
        check_fp4(r.build.arch, lambda msg: problems.add(where("build", "arch"), "build.arch", msg))
    jobs = r.build.jobs
    if not (jobs == "auto" or (isinstance(jobs, int) and not isinstance(jobs, bool) and jobs >= 1)):
        problems.add(where("build", "jobs"), "build.jobs",
                     f"{jobs!r} is neither \"auto\" nor a positive number (e.g. jobs = \"auto\" or jobs = 8)")
    b, default = r.build, Build()
    for key, ok, rule in (
        ("nvcc_threads", b.nvcc_threads >= 1, "at least 1"),
        ("max_oom_retries", b.max_oom_retries >= 0, "0 or more"),
        ("job_memory_gb", b.job_memory_gb > 0, "more than 0"),
        ("reserve_gb", b.reserve_gb >= 0, "0 or more"),
    ):
        if not ok:
            problems.add(where("build", key), f"build.{key}",
                         f"must be {rule}, not {_toml(getattr(b, key))} (e.g. {key} = {_toml(getattr(default, key))})")
    if not 1 <= r.serve.port <= 65535:
        problems.add(where("serve", "port"), "serve.port",
                     f"must be a port number from 1 to 65535, not {r.serve.port} (e.g. port = {Serve().port})")
    if r.build.compile_cache not in ("none", "ccache", "sccache"):
        problems.add(where("build", "compile_cache"), "build.compile_cache",
                     f"{r.build.compile_cache!r} is not one of none, ccache, sccache (e.g. compile_cache = \"ccache\")")
    if r.toolchain.cuda_source not in ("auto", "system", "wheels"):
        problems.add(where("toolchain", "cuda_source"), "toolchain.cuda_source",
                     f"{r.toolchain.cuda_source!r} is not one of auto, system, wheels")
    for dep in r.deps:
        key = f"deps.{dep.name}"
        if bool(dep.path) == bool(dep.repo):
            problems.add(where(key, ""), key, "give either repo + commit (or tag) or path")
        elif dep.repo and dep.tag and dep.commit:
            problems.add(where(key, "tag"), f"{key}.tag", "give commit or tag, not both")
        elif dep.repo and not dep.tag and not SHA_RE.match(dep.commit):
            problems.add(where(key, "commit"), f"{key}.commit", "must be a full 40-hex SHA (or give tag = \"vX.Y.Z\")")
        if dep.paths and dep.path:
            problems.add(where(key, "paths"), f"{key}.paths", "only with repo + commit (a local path is used whole)")
        for sub in dep.paths:
            if sub.startswith("/") or ".." in sub.split("/") or not sub.strip("/"):
                problems.add(where(key, "paths"), f"{key}.paths", f"{sub!r} is not a folder inside the repository")


def check_fp4(archs: tuple[Arch, ...], report: Any) -> None:
    """FP4 instructions exist only on arch-specific 10.0+ targets."""
    generic = [a for a in archs if a.major >= 10 and not a.fp4_capable]
    for arch in generic:
        report(f"FP4 kernels need the arch-specific target: use {arch.torch}a instead of {arch.torch}")
    if not generic and not any(a.fp4_capable for a in archs):
        report(f"FP4 kernels need an arch >= 10.0 with 'a' (e.g. 12.0a); {', '.join(map(str, archs))} has none")


def reference_markdown() -> str:
    """The recipe reference, generated from the section models so it cannot drift."""
    out = ["# Recipe reference", "", "Generated by `build-kernel recipes reference`; do not edit by hand.", "",
           "Top level: `description` (text), `extends` (parent recipe name, or a `.toml` path relative to this file), and the tables below.", ""]
    tables: list[tuple[str, type]] = [*SECTIONS.items(), ("deps.NAME", Dep)]
    for name, cls in tables:
        out += [f"## [{name}]", "", "| key | default | meaning |", "| --- | --- | --- |"]
        for f in fields(cls):
            if name == "deps.NAME" and f.name == "name":
                continue
            default = f.default if f.default is not MISSING else ("{}" if f.default_factory is dict else "[]")
            out.append(f"| `{f.name}` | `{json.dumps(default) if isinstance(default, (str, bool, int, float)) else default}` | {f.metadata.get('doc', '')} |")
        out.append("")
    return "\n".join(out)
