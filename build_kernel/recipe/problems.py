"""Every problem is collected with its `file:line` and key path, then reported at once."""

from __future__ import annotations

import json
from typing import Any

from build_kernel.errors import RecipeError


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
