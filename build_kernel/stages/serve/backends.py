"""Backends known to crash or mis-compute on an arch, from `known_bad.toml` (data, each row sourced)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from build_kernel.archs import Arch
from build_kernel.stages.serve.flags import Parsed

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

DATA = Path(__file__).with_name("known_bad.toml")


@dataclass(frozen=True)
class Row:
    dests: tuple[str, ...]
    values: tuple[str, ...]
    on: tuple[str, ...]
    only: tuple[str, ...]
    why: str
    source: str

    def refuses(self, cc: str) -> bool:
        return cc in self.on or bool(self.only and cc not in self.only)


def load(path: Path = DATA) -> list[Row]:
    rows = tomllib.loads(path.read_text())["refuse"]
    return [Row(tuple(r["dest"]), tuple(r["values"]), tuple(r.get("on", ())), tuple(r.get("only", ())),
                r["why"], r["source"]) for r in rows]


@dataclass(frozen=True)
class Refusal:
    flag: str
    value: str
    arch: str
    why: str
    source: str

    def line(self) -> str:
        return f"{self.flag} {self.value} on sm_{self.arch.replace('.', '')}: {self.why} ({self.source})"


def _flag(dest: str) -> str:
    # sglang's flags are their dests with dashes, except a few renamed ones.
    return {"fp4_gemm_runner_backend": "--fp4-gemm-backend"}.get(dest, "--" + dest.replace("_", "-"))


def refusals(parsed: Parsed, archs: Sequence[Arch], rows: Iterable[Row] | None = None) -> list[Refusal]:
    """Every (flag, value, arch) the data refuses for these served archs."""
    found: list[Refusal] = []
    ccs = sorted({f"{a.major}.{a.minor}" for a in archs})
    for row in load() if rows is None else rows:
        for dest in row.dests:
            value = parsed.given(dest)
            if value not in row.values:
                continue
            for cc in ccs:
                if row.refuses(cc):
                    found.append(Refusal(_flag(dest), str(value), cc, row.why, row.source))
    return found
