"""A study's own dependencies, asked for by name: a missing one is one line saying what to install, not a traceback.

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/
    from needs import need
    need("coverage", extra="bench", why="the error-site count reads coverage's data")
"""

from __future__ import annotations

import importlib.util
import os
import sys


def need(*modules: str, extra: str, why: str) -> None:
    """Exit 2 with one line when a module is missing: which, why the study needs it, the extra that brings it."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        script = os.path.relpath(sys.argv[0]) if sys.argv and sys.argv[0] else "this study"
        print(f"{script}: needs {', '.join(missing)} ({why}); install it with: pip install -e '.[{extra}]'",
              file=sys.stderr)
        sys.exit(2)
