"""Backends known to crash or mis-compute on an arch, from `known_bad.toml` (data, each row sourced)."""

from __future__ import annotations

import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Sequence
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


# Backends that need a library of the wheel itself, with device code for the served arch.
NEEDS_LIBRARY = {"fa3": "flash_ops"}
_ATTENTION = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")


def runs_on(cubins: Sequence[str], ptx: Sequence[str], cc: str) -> bool:
    """Whether device code of these archs runs on compute capability `cc` (e.g. "12.0"): a cubin of
    the same major and a minor not above it (an `a` cubin only on its exact arch), or PTX of one not above it."""
    major, minor = (int(x) for x in cc.split("."))

    def arch(name: str) -> tuple[int, int, str]:
        digits = name.removeprefix("sm_").rstrip("af")
        return int(digits[:-1]), int(digits[-1]), name[len("sm_") + len(digits):]

    for name in cubins:
        a_major, a_minor, suffix = arch(name)
        if a_major == major and (a_minor == minor if suffix == "a" else a_minor <= minor):
            return True
    return any(arch(p)[2] != "a" and (arch(p)[0], arch(p)[1]) <= (major, minor) for p in ptx)


def wheel_refusals(parsed: Parsed, archs: Sequence[Arch], wheel: Path, module: str,
                   list_archs: Callable[[Path], tuple[Sequence[str], Sequence[str]]]) -> list[Refusal]:
    """A backend whose library the wheel lacks, or holds without device code for a served arch
    (`list_archs`: a library's cubin and PTX archs, cuobjdump's listing). Read from the wheel, not a table."""
    found: list[Refusal] = []
    ccs = sorted({f"{a.major}.{a.minor}" for a in archs})
    for dest in _ATTENTION:
        value = parsed.given(dest)
        lib = NEEDS_LIBRARY.get(str(value))
        if lib is None:
            continue
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if n.startswith(f"{module}/{lib}") and ".so" in n]
            if not names:
                found += [Refusal(_flag(dest), str(value), cc, f"{wheel.name} has no {module}/{lib} library (it was "
                                  "not built for this wheel's archs)", "the wheel's contents") for cc in ccs]
                continue
            with tempfile.TemporaryDirectory() as tmp:
                zf.extract(names[0], tmp)
                cubins, ptx = list_archs(Path(tmp) / names[0])
        for cc in ccs:
            if not runs_on(cubins, ptx, cc):
                held = ", ".join([*cubins, *(f"compute_{p[3:]} PTX" for p in ptx)]) or "no device code"
                found.append(Refusal(_flag(dest), str(value), cc, f"{names[0]} holds {held}: nothing that runs on "
                                     f"sm_{cc.replace('.', '')}", "the wheel's cubins (cuobjdump)"))
    return found
