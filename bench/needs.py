"""A study's own dependencies, asked for by name: a missing one is one line saying what to install, not a traceback.

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/
    from needs import need
    need("coverage", extra="bench", why="the error-site count reads coverage's data")
"""

from __future__ import annotations

import importlib.util
import os
import sys


def need(*modules: str, extra: str = "", why: str, where: str = "") -> None:
    """Exit 2 with one line when a module is missing: which, why the study needs it, and the extra that brings it
    (or `where` it is found, for what no extra brings: the wheel under test, the GPU host's torch)."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        script = os.path.relpath(sys.argv[0]) if sys.argv and sys.argv[0] else "this study"
        fix = where or f"install it with: pip install -e '.[{extra}]'"
        print(f"{script}: needs {', '.join(missing)} ({why}); {fix}", file=sys.stderr)
        sys.exit(2)
