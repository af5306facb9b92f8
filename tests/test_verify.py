"""verify on real wheels: missing arch, FP4 compiled out, missing op, flash_attn raising."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from build_kernel import recipe as recipe_mod
from build_kernel.archs import parse_arch_list
from build_kernel.errors import VerifyError
from build_kernel.stages.builder import provenance
from build_kernel.stages.verify import checks as verify
from build_kernel.stages.verify import prune_proof
from build_kernel.stages.verify.report import require_verified
from tests.conftest import REPO_ROOT, DemoBuild, UpstreamArchsBuild, run_cli, wheel_with

pytestmark = pytest.mark.slow
DEMO = recipe_mod.load("demo")
ARCH = parse_arch_list("12.0a")


def test_good_wheel_passes_on_a_gpu_less_host(demo_build: DemoBuild) -> None:
    report = verify.verify(demo_build.wheel, DEMO.verify, ARCH, env=os.environ)
    assert report.passed, report.failures
    # comm_ops (the miniature's mscclpp) holds device code too, without FP4.
    [lib] = [lib for lib in report.libraries if lib.path == "minikernel/sm100/common_ops.so"]
    assert lib.path == "minikernel/sm100/common_ops.so" and lib.archs == ["sm_120a"] and not lib.extra
    assert lib.fp4_matches and lib.fp4_matches["sm_120a:F2FP\\.SATFINITE\\.E2M1"] > 0
    assert report.imports == {"minikernel": "ok", "minikernel.flash_attn": "ok"}
    assert report.ops_found == ["scaled_fp4_quant", "silu_and_mul"]
    import torch

    if not torch.cuda.is_available():
        assert report.gpu == {"status": "skipped", "why": "no GPU"}
    record = json.loads(demo_build.wheel.with_name(demo_build.wheel.name + ".verify.json").read_text())
    assert record["passed"] and require_verified(demo_build.wheel)["sha256"] == record["sha256"]


def test_cli_table_and_json_agree(demo_build: DemoBuild) -> None:
    table = run_cli("verify", str(demo_build.wheel), "--recipe", "demo")
    assert table.returncode == 0 and "passed" in table.stdout and "sm_120a" in table.stdout
    data = json.loads(run_cli("--json", "verify", str(demo_build.wheel), "--recipe", "demo").stdout)
    assert data["passed"] is True and data["asked"] == ["sm_120a"]


def test_missing_op_fails(demo_build: DemoBuild, tmp_path: Path) -> None:
    # A copy: verify writes its (failed) record beside the wheel, and the session wheel's passing record is what
    # the other tests of the demo_build group read (publish of a copy with its record, serve).
    wheel = Path(shutil.copy2(demo_build.wheel, tmp_path))
    spec = replace(DEMO.verify, ops=(*DEMO.verify.ops, "scaled_fp4_experts_quant"))
    report = verify.verify(wheel, spec, ARCH, env=os.environ)
    assert not report.passed
    assert "ops missing from torch.ops.minikernel: scaled_fp4_experts_quant" in report.failures
    assert json.loads(demo_build.wheel.with_name(demo_build.wheel.name + ".verify.json").read_text())["passed"]


def test_wheel_whose_flash_attn_raises_fails(demo_build: DemoBuild, tmp_path: Path) -> None:
    # The same real wheel with upstream's unpatched flash_attn.py (raises without flash_ops).
    unpacked = tmp_path / "unpacked"
    subprocess.run([sys.executable, "-m", "wheel", "unpack", "-d", str(unpacked), str(demo_build.wheel)], check=True,
                   capture_output=True)
    [root] = list(unpacked.iterdir())
    shutil.copy(REPO_ROOT / "examples/minikernel/python/minikernel/flash_attn.py", root / "minikernel/flash_attn.py")
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run([sys.executable, "-m", "wheel", "pack", "-d", str(out), str(root)], check=True, capture_output=True)
    [broken] = list(out.glob("*.whl"))
    report = verify.verify(broken, DEMO.verify, ARCH, env=os.environ)
    assert not report.passed
    assert any(f.startswith("import minikernel.flash_attn failed: ImportError") for f in report.failures)
    with pytest.raises(VerifyError, match=r"failed verification: import minikernel.flash_attn failed"):
        require_verified(broken)


def test_wheel_lacking_sm120a_fails(demo_build: DemoBuild, tmp_path: Path) -> None:
    """The session's wheel with its FP4 library replaced by a real one compiled for sm_100a only (what a build
    for 10.0a holds: one nvcc compile here, not a second build of the miniature)."""
    nvcc = (provenance.read(demo_build.wheel) or {})["toolchain"]["nvcc"]  # a path: the run's record, beside the wheel
    so = tmp_path / "common_ops.so"
    subprocess.run([nvcc, "-shared", "-Xcompiler", "-fPIC", "-O3", "-gencode=arch=compute_100a,code=sm_100a",
                    "-I", str(REPO_ROOT / "examples/minikernel/include"),
                    str(REPO_ROOT / "examples/minikernel/csrc/activation.cu"), "-o", str(so)],
                   check=True, capture_output=True)
    wheel = wheel_with(demo_build.wheel, {"minikernel/sm100/common_ops.so": so}, tmp_path / "w")
    report = verify.verify(wheel, DEMO.verify, ARCH, env=os.environ)
    assert not report.passed
    assert "minikernel/sm100/common_ops.so: no cubin or PTX for sm_120a (has sm_100a)" in report.failures
    assert any("sm_100a was not asked for" in w for w in report.warnings)


def test_wheel_built_without_fp4_define_fails(upstream_archs_build: UpstreamArchsBuild, demo_build: DemoBuild) -> None:
    # Upstream's failure mode: NVFP4 gated on a version variable that is empty where it is read (CUDA_VERSION
    # before torch's FindCUDA ran); here a misspelt name, equally empty: conftest.FP4_GATE_PATCH, in the session's
    # build without the arch patches (its sm100 library holds sm_120a among upstream's archs).
    wheel = upstream_archs_build.wheel
    report = verify.verify(wheel, DEMO.verify, ARCH, env=os.environ)
    assert not report.passed
    [failure] = report.failures
    assert "no FP4 instructions (F2FP\\.SATFINITE\\.E2M1) in its sm_120a SASS" in failure
    assert "ENABLE_NVFP4 off?" in failure
    # The op is registered all the same: registration proves nothing.
    assert "scaled_fp4_quant" in report.ops_found
    # A pair built with other flags: the prune proof of the demo wheel against this one fails.
    proof = prune_proof.prove(demo_build.wheel, wheel, DEMO.verify.fp4_sass, env=os.environ)
    assert any("function(s) of the pruned library are not in the unpruned one" in f for f in proof.failures)
    assert any("FP4 opcode counts differ: sm_120a:F2FP\\.SATFINITE\\.E2M1 pruned " in f and f.endswith("vs unpruned 0")
               for f in proof.failures), proof.failures


def test_unverified_wheel_is_refused(tmp_path: Path, demo_build: DemoBuild) -> None:
    copy = tmp_path / demo_build.wheel.name
    shutil.copy(demo_build.wheel, copy)
    with pytest.raises(VerifyError, match=r"has not been verified.*build-kernel verify"):
        require_verified(copy)


def test_a_failed_verdict_is_no_success_and_rules_follow_the_asked_archs(demo_build: DemoBuild, tmp_path: Path) -> None:
    """`verify --arch 10.0a --recheck` of the 12.0a miniature fails: it exits 7 and its step closes with ✕ (it
    printed ✓). A required FP4 rule for the library cc 9.0 does not load asks nothing of a 9.0a-only check."""
    wheel = shutil.copy(demo_build.wheel, tmp_path / demo_build.wheel.name)  # its failing record stays here
    proc = run_cli("--arch", "10.0a", "verify", str(wheel), "--recipe", "demo", "--recheck")
    assert proc.returncode == 7, proc.stderr
    assert "✕ verify" in proc.stderr and "✓ verify" not in proc.stderr, proc.stderr
    assert "failed" in proc.stdout
    rule = recipe_mod.LibraryRule(glob="minikernel/sm100/common_ops*", fp4=True, required=True)
    spec = replace(DEMO.verify, fp4_library="", libraries=(rule,))
    hopper = parse_arch_list("9.0a")
    before = verify.verify(Path(wheel), spec, hopper, env=os.environ, reuse=False, static=True)
    assert "no library matching minikernel/sm100/common_ops* holds device code" not in " ".join(before.failures)
    assert any("no cubin or PTX for sm_90a" in f for f in before.failures)  # the rule applies: it must cover 9.0a
    after = verify.verify(Path(wheel), replace(spec, libraries=(replace(rule, not_loaded_on=("9.0",)),)), hopper,
                          env=os.environ, reuse=False, static=True)
    sm100 = [lib for lib in after.libraries if lib.path == "minikernel/sm100/common_ops.so"]
    assert sm100 and not sm100[0].applies and not any("sm100/common_ops" in f for f in after.failures), after.failures
