"""Converting and checking each section's values by field type; unknown keys are refused with a "did you mean"."""

from __future__ import annotations

import contextlib
import difflib
import functools
import math
import sys
from collections.abc import Callable
from dataclasses import MISSING, Field, fields
from typing import Any, get_type_hints

from build_kernel.archs import Arch, ArchSpellingError, parse_arch_list
from build_kernel.recipe.model import Expectation, LibraryRule
from build_kernel.recipe.problems import _Problems, _toml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


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


def _to_fp4(value: Any) -> bool | str:
    # "required" versus another string is `_check`'s business.
    if not isinstance(value, (bool, str)):
        raise _Bad('true, false or "required"', True)
    return value


def _to_strings(value: Any) -> tuple[str, ...]:
    # A bare string is refused, not split: `"a b"` could mean one item or two.
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        example = [value] if isinstance(value, str) else [str(v) for v in value] if isinstance(value, list) else ["..."]
        raise _Bad("a list of strings", example)
    return tuple(value)


def _to_ints(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise _Bad("a list of integers", [1, 32])
    return tuple(value)


def _to_table(value: Any) -> dict[str, str]:
    scalar = (str, int, float, bool)
    if not isinstance(value, dict) or not all(isinstance(v, scalar) for v in value.values()):
        example = {k: v if isinstance(v, scalar) else "..." for k, v in value.items()} if isinstance(value, dict) else {}
        raise _Bad("a table of strings or numbers", example or {"NAME": "value"})
    return {str(k): str(v) for k, v in value.items()}


def _to_rules(value: Any) -> Any:
    # [verify.libraries."GLOB"] tables are built by the loader (each one a section of its own).
    raise _Bad("tables [verify.libraries.\"GLOB\"]")


def _to_expectations(value: Any) -> Any:
    # [test.expect."GLOB"] tables likewise.
    raise _Bad("tables [test.expect.\"GLOB\"]")


def _to_archs(value: Any) -> tuple[Arch, ...]:
    if not isinstance(value, (str, list)) or (isinstance(value, list) and not all(isinstance(v, str) for v in value)):
        raise _Bad("a list of arch names", ["12.0a"])
    return parse_arch_list(value)


_CONVERTERS: dict[Any, Callable[[Any], Any]] = {
    str: _to_str, bool: _to_bool, int: _to_int, float: _to_float, int | str: _to_jobs, bool | str: _to_fp4,
    tuple[str, ...]: _to_strings, tuple[int, ...]: _to_ints, dict[str, str]: _to_table, tuple[Arch, ...]: _to_archs,
    tuple[LibraryRule, ...]: _to_rules, tuple[Expectation, ...]: _to_expectations,
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
        # A top-level `section = value` sits on its own line; a [deps.x]-style table on its header.
        problems.add(where("" if "." not in section else section, section if "." not in section else ""), section,
                     f"must be a table, not {_toml(table)} (write [{section}] and key = value lines below it)")
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
