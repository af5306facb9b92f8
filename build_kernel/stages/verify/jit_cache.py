"""Verify a prewarmed tvm-ffi cache: each module's cubins are of the asked archs, and its SASS
holds the recipe's FP4 opcodes, counted with the same cuobjdump/nvdisasm code as a wheel's
libraries (`cubins.listing`, `cubins.fp4_scan`, complete: the counts are whole)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from build_kernel.archs import Arch
from build_kernel.stages.verify import cubins


@dataclass
class Module:
    name: str
    so: str
    size: int
    cubins: dict[str, int] = field(default_factory=dict)  # arch -> number of cubins
    sass: dict[str, int] = field(default_factory=dict)  # "sm_120a:PATTERN" -> count


@dataclass
class CacheReport:
    cache: str
    archs: list[str]
    modules: list[Module] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


def libraries(cache: Path, prefix: str = "") -> list[Path]:
    """`<cache>/<name>_<hash>/<name>.so` entries (tvm-ffi's layout), names starting with `prefix`."""
    if not cache.is_dir():
        return []
    return sorted(so for entry in cache.iterdir() if entry.is_dir() and entry.name.startswith(prefix)
                  for so in entry.glob("*.so") if entry.name.startswith(so.stem + "_"))


def verify(cache: Path, archs: Sequence[Arch], patterns: Sequence[str], env: Mapping[str, str], *,
           only: Sequence[Path] = ()) -> CacheReport:
    """Check every module of the cache (or `only` those libraries)."""
    report = CacheReport(str(cache), [a.sm for a in archs])
    libs = list(only) or libraries(cache)
    if not libs:
        report.failures.append(f"no JIT module in {cache} (prewarm it: build-kernel jit-prewarm)")
        return report
    tool = cubins.cuobjdump(env)
    asked = {a.sm for a in archs}
    with tempfile.TemporaryDirectory(prefix="bk-jit-verify-") as tmp:
        for so in libs:
            found = cubins.listing(so, tool, env)
            mod = Module(so.stem, str(so), so.stat().st_size)
            report.modules.append(mod)
            if not found.cubins:
                report.failures.append(f"{so.stem}: no cubin ({'PTX only' if found.ptx else 'no device code'})")
                continue
            if other := sorted(set(found.cubins) - asked):
                report.failures.append(f"{so.stem}: cubins for {', '.join(other)}, not the asked {', '.join(sorted(asked))}")
            for sm in found.cubins:
                scan = cubins.fp4_scan(so, sm, tuple(patterns), tool, cubins.tool_env(env), Path(tmp), os.cpu_count() or 2,
                                       complete=True)
                mod.cubins[sm] = scan.total
                mod.sass.update({f"{sm}:{p}": n for p, n in scan.matches.items()})
            if patterns and not any(mod.sass.values()):
                report.failures.append(f"{so.stem}: none of {' / '.join(patterns)} in its "
                                       f"{', '.join(found.cubins)} SASS (not compiled for an `a` arch?)")
    return report


def summary(report: CacheReport) -> list[str]:
    lines = []
    for m in report.modules:
        counts = ", ".join(f"{k}={v}" for k, v in m.sass.items())
        cubs = ", ".join(f"{n}× {sm}" for sm, n in m.cubins.items()) or "no cubin"
        lines.append(f"{m.name}: {m.size / 1e6:.2f} MB, {cubs}{'; ' + counts if counts else ''}")
    return lines
