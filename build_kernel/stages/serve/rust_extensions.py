"""sglang's Rust extensions in a source build of `python/` (`[serve] sglang = "source"`).

From 1d1972139 (2026-05-18) upstream's python/pyproject.toml builds a PyO3 extension,
`sglang.srt.grpc._core`, from `../rust/sglang-grpc/Cargo.toml`: outside the `python/` the serve
stage fetches, and a build that needs cargo and crates.io, which an offline GPU host has neither
of. Nothing in sglang imports it at 0753182b (the native gRPC server is "1/N"), so the source
build leaves each such extension out — unless some module imports it, where leaving it out would
break the server: then one line names the importer.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from build_kernel.errors import ServeError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

TABLE = "[[tool.setuptools-rust.ext-modules]]"


def declared(pyproject: Path) -> list[dict[str, Any]]:
    """The `[[tool.setuptools-rust.ext-modules]]` tables of a pyproject.toml."""
    data = tomllib.loads(pyproject.read_text())
    return list(data.get("tool", {}).get("setuptools-rust", {}).get("ext-modules", []))


def importer(project: Path, target: str) -> str | None:
    """`path:line` of the first module under `project` that imports the extension `target` (dotted)."""
    parent, _, last = target.rpartition(".")
    dotted, name = re.escape(target), re.escape(last)
    # `import a, b` on one line, or a parenthesised list over several.
    names = rf"import\s+(\([^)]*\b{name}\b[^)]*\)|[^#\n(]*\b{name}\b)"
    patterns = [re.compile(rf"^\s*(import\s+{dotted}\b|from\s+{dotted}\s+import\b)", re.M),
                re.compile(rf"""["']{dotted}["']""")]
    if parent:
        patterns.append(re.compile(rf"^\s*from\s+{re.escape(parent)}\s+{names}", re.M))
    package = project.joinpath(*parent.split(".")) if parent else None
    for path in sorted(project.rglob("*.py")):
        text = path.read_text(errors="replace")
        found = [p.search(text) for p in patterns]
        if package is not None and path.parent == package:  # `from . import _core`, `from ._core import x`
            found.append(re.search(rf"^\s*from\s+\.\s+{names}|^\s*from\s+\.{name}\s+import\b", text, re.M))
        if hit := next((m for m in found if m), None):
            return f"{path.relative_to(project)}:{text.count(chr(10), 0, hit.start()) + 1}"
    return None


def leave_out(project: Path, where: str) -> list[str]:
    """Drop every Rust extension from `project`'s pyproject.toml (the build copy's, never upstream's); the targets
    dropped. ServeError where a module imports one. Dropped, not made `optional`: an optional one still makes the
    wheel platform- and Python-specific (cp311-linux for a pure-Python package, which the GPU host's 3.12 refuses),
    and whether it built would depend on the host's cargo."""
    pyproject = project / "pyproject.toml"
    targets = [str(ext.get("target", "")) for ext in declared(pyproject)]
    for target in targets:
        if (user := importer(project, target)) is not None:
            raise ServeError(f"{where}: {user} imports the Rust extension {target}, which a source build of "
                             f"python/ leaves out (it needs cargo and a crate outside python/)",
                             hint='set [serve] sglang = "release" and [toolchain] sglang to a release wheel')
    if not targets:
        return []
    out, in_table = [], False
    for line in pyproject.read_text().splitlines(keepends=True):
        if line.strip().startswith("["):
            in_table = line.strip() == TABLE
        if not in_table:
            out.append(line)
    pyproject.write_text("".join(out))
    return targets
