"""The package's own test files, as pytest would find them under `[test] paths` of the pinned tree.

They are copied into the run's folder so that nothing of the source tree is importable beside them:
`import sgl_kernel` must find the installed wheel, not a source folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from build_kernel.errors import TestError

# pytest's default `python_files`.
_PATTERNS = ("test_*.py", "*_test.py")


def files(project: Path, paths: tuple[str, ...]) -> list[str]:
    """Test files under `paths` (relative to the package folder), sorted, as relative POSIX paths."""
    found: list[str] = []
    for rel in paths:
        where = project / rel
        if where.is_file():
            found.append(rel)
        elif where.is_dir():
            found += [p.relative_to(project).as_posix() for pattern in _PATTERNS for p in where.rglob(pattern)
                      if "__pycache__" not in p.parts]
        else:
            raise TestError(f"[test] paths names {rel!r}, which is not in the tree at this commit ({project})",
                            hint="list the package's test folder as it is at the pinned commit, e.g. paths = [\"tests\"]")
    return sorted(set(found))


def stage(project: Path, paths: tuple[str, ...], dest: Path) -> Path:
    """Copy the test folders (conftest.py and helpers too) to `dest`; `dest` is where pytest runs."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for rel in paths:
        source, target = project / rel, dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)
        else:
            shutil.copy2(source, target)
    return dest
