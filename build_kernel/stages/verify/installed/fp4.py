"""FP4 for an arch: ahead of time (FP4 instructions in the SASS of the library that arch loads), or by
JIT, or not at all.

From f88acf878 (2026-03-07, sglang-kernel >= 0.4) the NVFP4 kernels are compiled at run time and
the kernel package no longer has them: the real sglang-kernel 0.4.10 wheel holds no FP4
instruction, no FP4 function (`scaled_fp4_quant`, `cutlass_scaled_fp4_mm`) and no FP4 source.
The JIT sources ship in sglang instead: `sglang/jit_kernel/nvfp4.py` defines those functions and
compiles `sglang/jit_kernel/csrc/gemm/nvfp4/*.cuh` on first use (in sglang 0.5.23's `sglang/kernels/`
layout, an op under `kernels/ops/` compiles `kernels/jit/csrc/` sources: sglang_layout). So: a kernel package that defines
the FP4 functions promises them ahead of time; one that does not leaves FP4 to sglang's JIT.
"""

from __future__ import annotations

from dataclasses import dataclass

from build_kernel.stages.verify.installed import sglang_layout

# Where the JIT was looked for, for the messages: either layout.
JIT_WHERE = f"sglang/{sglang_layout.OLD_JIT_MODULE}, or an op of sglang/{sglang_layout.OPS}/ loading nvfp4 sources"


@dataclass(frozen=True)
class Fp4:
    arch: str
    # "aot" | "jit" | "jit-without-sglang" | "absent"
    how: str
    detail: str

    @property
    def ok(self) -> bool:
        return self.how != "absent"


def api(spec_ops: tuple[str, ...]) -> tuple[str, ...]:
    """The FP4 functions a kernel package defines when it has the kernels (the recipe's FP4 ops)."""
    return tuple(op for op in spec_ops if "fp4" in op)


def jit_in_sglang(sglang_root: str | None, names: tuple[str, ...]) -> str | None:
    """Where sglang's NVFP4 JIT lives (its module(s) and CUDA sources), in the `jit_kernel/` layout or the
    `kernels/` one of sglang 0.5.23 (sglang_layout); None if absent."""
    return sglang_layout.nvfp4_jit(sglang_root, names)


def classify(arch: str, aot_matches: dict[str, int] | None, library: str, kernel_names: set[str],
             names: tuple[str, ...], jit: str | None, sglang: str | None) -> Fp4:
    """FP4 for `arch`: `aot_matches` are the opcode counts of the FP4 library's `arch` SASS (None: not scanned)."""
    counts = {k.split(":", 1)[1]: n for k, n in (aot_matches or {}).items() if k.startswith(arch + ":")}
    if any(counts.values()):
        shown = ", ".join(f"{n} {p}" for p, n in counts.items() if n)
        return Fp4(arch, "aot", f"ahead of time in {library} ({shown})")
    promised = sorted(set(names) & kernel_names)
    if promised:
        return Fp4(arch, "absent", f"the package defines {', '.join(promised)} but the {arch} SASS of {library} has "
                                   "no FP4 instruction (built with ENABLE_NVFP4 off?)")
    if jit:
        return Fp4(arch, "jit", f"by JIT at first use: sglang {sglang} compiles it ({jit}); none ahead of time")
    if sglang:
        return Fp4(arch, "absent", f"none ahead of time in {library}, and sglang {sglang} here has no NVFP4 JIT "
                                   f"({JIT_WHERE})")
    return Fp4(arch, "jit-without-sglang", "none ahead of time: this kernel leaves FP4 to sglang's JIT "
                                           f"({JIT_WHERE}), and no sglang that has it is installed")
