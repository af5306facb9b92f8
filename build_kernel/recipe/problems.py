"""Every problem is collected with its `file:line` and key path, then reported at once."""

from __future__ import annotations

import json
import re
from typing import Any

from build_kernel.errors import RecipeError


class _Problems:
    """Collects `file:line: key: message (fix)` lines; raises them all at once."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.keys: set[str] = set()

    def add(self, where: str, key: str, message: str) -> None:
        # A key is the recipe's own text: a newline or control character in it is written as its escape, so a
        # problem stays one line (RecipeError joins them with newlines) and a key cannot drive the terminal.
        shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in f"{key}: {message}")
        self.lines.append(f"{where}: {shown}")
        self.keys.add(key)

    def raise_if_any(self) -> None:
        if self.lines:
            raise RecipeError(sorted(self.lines, key=self._position))

    def _position(self, line: str) -> tuple[int, int]:
        """Files in the order they were first named, then line numbers: the order a reader fixes them in."""
        m = re.match(r"^(.*?):(\d+): ", line)
        if not m:
            return (len(self.lines), 0)
        files = list(dict.fromkeys(re.sub(r":\d+: .*$", "", ln, flags=re.S) for ln in self.lines))
        return (files.index(m.group(1)) if m.group(1) in files else len(files), int(m.group(2)))


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
