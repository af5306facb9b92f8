"""The FP4 verdict stops at the first FP4 instruction of the asked arch; whole counts only where asked (`--counts`).

A real library compiled here for two FP4 archs (sm_100a and sm_120a: three TUs, one with an FP4 conversion) and the
session's real miniature wheel: which cubins nvdisasm read is the scan's own record (`Scan.disassembled`), never a
timing. The counts a whole scan gives are checked against an independent `cuobjdump -sass` of the library.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from build_kernel.archs import parse_arch_list
from build_kernel.recipe import Verify
from build_kernel.stages.verify import checks, cubins
from tests.conftest import DemoBuild, run_cli
from tests.test_verify_wheels import FP4_TU, KERNEL, make_wheel, nvcc

PATTERNS = ("F2FP\\.\\S*E2M1", "UTCOMMA\\S*\\.4X")  # the second never occurs at sm_120a: it must not hold the scan
FP4_KERNEL = FP4_TU.replace("void quant(", "void quant_fp4(")  # named for FP4: the likeliest, read first


@pytest.fixture(scope="module")
def two_arch_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("two-arch")
    for name, text in (("a.cu", KERNEL), ("b.cu", KERNEL.replace("scale", "shift").replace("*=", "+=")),
                       ("fp4.cu", FP4_KERNEL)):
        (tmp / name).write_text(text)
    lib = tmp / "libwork.so"
    subprocess.run([nvcc(), "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_100a,code=sm_100a",
                    "-gencode=arch=compute_120a,code=sm_120a", "-o", str(lib),
                    *(str(tmp / s) for s in ("a.cu", "b.cu", "fp4.cu"))], check=True, capture_output=True)
    return lib


def whole_counts(lib: Path, arch: str, env: dict[str, str]) -> dict[str, int]:
    """The counts of every `arch` function, by another route: one `cuobjdump -sass` of the library."""
    sass = subprocess.run([cubins.cuobjdump(env), "-sass", "-arch", arch, str(lib)], env=env, capture_output=True,
                          text=True, check=True).stdout
    return {p: len(re.findall(p, sass)) for p in PATTERNS}


@pytest.mark.slow
def test_the_scan_stops_at_the_first_fp4_instruction_and_reads_no_other_arch(two_arch_lib: Path, tmp_path: Path) -> None:
    env = cubins.tool_env(dict(os.environ))
    tool, kept = cubins.cuobjdump(env), tmp_path / "kept"
    first = cubins.fp4_scan(two_arch_lib, "sm_120a", PATTERNS, tool, env, tmp_path / "w1", 1, counts_dir=kept)
    # One cubin read (the FP4-named one), and stopped in it; the sm_100a cubins never extracted nor read.
    [read] = first.disassembled
    assert read.endswith(".sm_120a.cubin") and first.total >= 3 and first.scanned == 1 and not first.whole
    assert first.matches[PATTERNS[0]] >= 1 and first.first.startswith("F2FP.") and first.first.endswith(read)
    assert not list((tmp_path / "w1").glob("*/*sm_100a*"))
    assert first.describe("sm_120a") == (f"1 of {first.total} sm_120a cubins disassembled (stopped at the first FP4 "
                                         f"instruction: {first.first}; --counts counts them all)")
    assert not kept.exists() or not list(kept.iterdir())  # a stopped reading is never kept as counts
    # Whole counts where asked: every sm_120a cubin to its end, the same counts as cuobjdump -sass gives.
    whole = cubins.fp4_scan(two_arch_lib, "sm_120a", PATTERNS, tool, env, tmp_path / "w2", 2, counts_dir=kept,
                            complete=True)
    assert whole.whole and whole.scanned == whole.total == first.total and not whole.first
    assert sorted(whole.disassembled) == sorted(p.name for p in (tmp_path / "w2").glob("*/*.cubin"))
    assert all(name.endswith(".sm_120a.cubin") for name in whole.disassembled)
    assert whole.matches == whole_counts(two_arch_lib, "sm_120a", env) and whole.matches[PATTERNS[1]] == 0
    # Those whole counts are kept: the next verdict disassembles nothing and says them.
    again = cubins.fp4_scan(two_arch_lib, "sm_120a", PATTERNS, tool, env, tmp_path / "w3", 2, counts_dir=kept)
    assert (again.disassembled, again.kept, again.matches, again.whole) == ((), whole.total, whole.matches, True)
    # The other arch alone: only its cubins.
    other = cubins.fp4_scan(two_arch_lib, "sm_100a", PATTERNS, tool, env, tmp_path / "w4", 1)
    assert other.disassembled and all(name.endswith(".sm_100a.cubin") for name in other.disassembled)


@pytest.mark.slow
def test_the_verdict_is_the_same_stopped_or_whole(two_arch_lib: Path, tmp_path: Path) -> None:
    """A passing FP4 verdict from one instruction; `counts` gives whole counts and is its own record; a library
    without FP4 has every cubin read and fails with the same line either way."""
    spec = Verify(fp4_library="fp4two/libwork.so", fp4_sass=PATTERNS)
    arch = parse_arch_list("12.0a")
    wheel = make_wheel(tmp_path / "p", "fp4two", two_arch_lib)
    stopped = checks.verify(wheel, spec, arch, env=os.environ, static=True, counts_dir=tmp_path / "k1")
    whole = checks.verify(wheel, spec, arch, env=os.environ, static=True, counts_dir=tmp_path / "k2", counts=True)
    assert stopped.passed and whole.passed and stopped.failures == whole.failures == []
    assert stopped.warnings == whole.warnings  # sm_100a not asked for, the same words
    [lib_s], [lib_w] = stopped.libraries, whole.libraries
    assert "stopped at the first FP4 instruction" in lib_s.fp4_scanned
    scanned, total = re.findall(r"^(\d+) of (\d+) sm_120a cubins disassembled", lib_w.fp4_scanned)[0]
    assert scanned == total and "stopped" not in lib_w.fp4_scanned
    assert lib_w.fp4_matches == {f"sm_120a:{p}": n for p, n in
                                 whole_counts(two_arch_lib, "sm_120a", cubins.tool_env(dict(os.environ))).items()}
    assert stopped.checks_digest != whole.checks_digest  # a record of partial counts never answers --counts
    plain = tmp_path / "plain.so"
    (tmp_path / "plain.cu").write_text(KERNEL)
    subprocess.run([nvcc(), "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_120a,code=sm_120a", "-o",
                    str(plain), str(tmp_path / "plain.cu")], check=True, capture_output=True)
    nofp4 = make_wheel(tmp_path / "n", "fp4two", plain)
    fails = [checks.verify(nofp4, spec, arch, env=os.environ, static=True, counts=c).failures for c in (False, True)]
    assert fails[0] == fails[1] and len(fails[0]) == 1 and "fp4two/libwork.so: no FP4 instructions" in fails[0][0]


@pytest.mark.slow
def test_verify_counts_on_the_miniature_wheel(demo_build: DemoBuild, tmp_path: Path) -> None:
    """The CLI flag: `verify --static` reaches the verdict stopping early, `--counts` counts every cubin (a copy of
    the session's wheel: its own record stays as it is)."""
    wheel = tmp_path / demo_build.wheel.name
    shutil.copy2(demo_build.wheel, wheel)
    runs = {}
    for extra in ((), ("--counts",)):
        proc = run_cli("--json", "--cache-dir", str(tmp_path / "cache"), "verify", str(wheel), "--recipe", "demo",
                       "--arch", "12.0a", "--static", *extra)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        runs[extra] = json.loads(proc.stdout)
    [fp4] = [lib for lib in runs[()]["libraries"] if lib["fp4_scanned"]]
    [fp4_whole] = [lib for lib in runs[("--counts",)]["libraries"] if lib["fp4_scanned"]]
    assert runs[()]["passed"] and runs[("--counts",)]["passed"]
    assert "stopped at the first FP4 instruction: F2FP.SATFINITE.E2M1" in fp4["fp4_scanned"]
    scanned, total = re.findall(r"^(\d+) of (\d+) sm_120a cubins disassembled", fp4_whole["fp4_scanned"])[0]
    assert scanned == total and "stopped" not in fp4_whole["fp4_scanned"]
    assert all(n >= 1 for n in fp4_whole["fp4_matches"].values())
