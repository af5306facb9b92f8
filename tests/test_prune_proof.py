"""Arch pruning (patches/minikernel/v1/0006) on real wheels: a pruned GPU family raises one line,
and the prune proof passes for pruned vs unpruned and fails for a pair that really differs.

MINIKERNEL_FAKE_SM is the miniature's declared test seam (include/minikernel/sm_version.h): it
stands in for a GPU of that compute capability, so a host without a GPU reaches the branch the
arch dispatch takes on that GPU (the dispatch runs before any kernel launch)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from build_kernel import recipe as recipe_mod
from build_kernel.stages.builder import provenance
from build_kernel.stages.verify import prune_proof
from tests.conftest import REPO_ROOT, DemoBuild, run_cli, wheel_with

pytestmark = pytest.mark.slow
FP4 = recipe_mod.load("demo").verify.fp4_sass
CALL = "import torch, minikernel\ntry:\n    torch.ops.minikernel.arch_tag(torch.ones(4))\n" \
       "except Exception as e:\n    print(type(e).__name__ + ': ' + str(e))\n"


def call_arch_tag(wheel: Path, tmp_path: Path, fake_sm: str) -> str:
    """arch_tag on CPU tensors, in a clean interpreter that imports the installed wheel."""
    site = tmp_path / "site"
    if not site.exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                        str(wheel)], check=True)
    proc = subprocess.run([sys.executable, "-c", CALL], env={**os.environ, "PYTHONPATH": str(site),
                                                                "MINIKERNEL_FAKE_SM": fake_sm},
                          capture_output=True, text=True, check=True, cwd=tmp_path)
    return proc.stdout.strip()


def test_a_pruned_family_raises_one_line_naming_op_gpu_archs_and_fix(demo_build: DemoBuild, tmp_path: Path) -> None:
    # demo builds for 12.0a only: the 9.0 branch was compiled out.
    assert call_arch_tag(demo_build.wheel, tmp_path, "90") == (
        "RuntimeError: arch_tag: this minikernel was built for sm_120a only and this GPU is compute capability 9.0; "
        "rebuild with 9.0a in TORCH_CUDA_ARCH_LIST")
    # The kept family gets past the dispatch to the op's own checks (CPU tensors).
    assert call_arch_tag(demo_build.wheel, tmp_path, "120") == "RuntimeError: arch_tag: input must be a float32 CUDA tensor"


def test_unpruned_keeps_every_family(unpruned_demo_build: Path, tmp_path: Path) -> None:
    assert call_arch_tag(unpruned_demo_build, tmp_path, "90") == "RuntimeError: arch_tag: input must be a float32 CUDA tensor"


def test_prune_proof_passes_for_pruned_against_unpruned(demo_build: DemoBuild, unpruned_demo_build: Path) -> None:
    proc = run_cli("--json", "prune-proof", str(demo_build.wheel), "--against", str(unpruned_demo_build),
                   "--recipe", "demo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["passed"] and not data["failures"]
    [lib] = [lib for lib in data["libraries"] if lib["path"] == "minikernel/sm100/common_ops.so"]
    assert lib["path"] == "minikernel/sm100/common_ops.so" and lib["archs"] == ["sm_120a"]
    # arch_tag's four branch kernels are in the unpruned sm_120a cubin; pruning kept one (120).
    assert lib["functions_unpruned"] - lib["functions_pruned"] == 3 == lib["removed"]
    # ... and they are named: the three other families' instantiations of the branch kernel.
    removed = lib["removed_functions"]
    assert len(removed) == 3 and all(f.startswith("sm_120a ") and "arch_tag_kernel" in f for f in removed)
    assert not any("ILi120E" in f for f in removed), removed
    assert lib["identical"] == lib["functions_pruned"] and not lib["missing"] and not lib["differing"]
    key = f"sm_120a:{FP4[0]}"
    assert lib["fp4_pruned"][key] == lib["fp4_unpruned"][key] > 0
    assert data["verdict"] == "identical" and not data["same_outputs"]
    table = run_cli("prune-proof", str(demo_build.wheel), "--against", str(unpruned_demo_build), "--recipe", "demo")
    assert table.returncode == 0 and "removed by pruning 3" in table.stdout


def test_prune_proof_the_other_way_round_fails_on_the_missing_kernels(demo_build: DemoBuild,
                                                                       unpruned_demo_build: Path) -> None:
    proc = run_cli("prune-proof", str(unpruned_demo_build), "--against", str(demo_build.wheel), "--recipe", "demo")
    assert proc.returncode == 7, proc.stdout + proc.stderr
    assert "3 function(s) of the pruned library are not in the unpruned one" in proc.stdout
    assert "arch_dispatch" in proc.stdout


def _wheel_with_library(template: Path, so: Path, out: Path) -> Path:
    """A copy of a real wheel whose common_ops.so is `so` (the wheel's other files kept)."""
    return wheel_with(template, {"minikernel/sm100/common_ops.so": so}, out)


def _compile_activation(demo_build: DemoBuild, folder: Path, *flags: str, batch: bool = False) -> Path:
    """activation.cu alone, for sm_120a, into a shared library, with the nvcc the demo wheel was built with;
    `batch`: compiled as a unity batch that #includes it, as sgl-kernel's csrc/unity files do."""
    nvcc = (provenance.read(demo_build.wheel) or {})["toolchain"]["nvcc"]  # a path: the run's record, beside the wheel
    folder.mkdir(parents=True)
    source = folder / "activation.cu"  # compiled from its own folder, as a build tree would
    shutil.copy(REPO_ROOT / "examples/minikernel/csrc/activation.cu", source)
    if batch:
        source = folder / "batch_1.cu"
        source.write_text('#include "activation.cu"\n')
    so = folder / "common_ops.so"
    subprocess.run([nvcc, "-shared", "-Xcompiler", "-fPIC", "-O3", "-gencode=arch=compute_120a,code=sm_120a",
                    "-I", str(REPO_ROOT / "examples/minikernel/include"), *flags, str(source), "-o", str(so)],
                   check=True, capture_output=True, cwd=folder)
    return so


@pytest.fixture(scope="module")
def plain_activation(demo_build: DemoBuild, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo wheel with activation.cu alone as its common_ops.so: the reference both SASS comparisons below
    prove against (one real compile, read only by the tests)."""
    folder = tmp_path_factory.mktemp("plain-activation")
    return _wheel_with_library(demo_build.wheel, _compile_activation(demo_build, folder / "a"), folder / "wa")


def test_prune_proof_names_the_first_differing_instruction(demo_build: DemoBuild, plain_activation: Path,
                                                          tmp_path: Path) -> None:
    # Real compiles of one TU: twice with the same flags in two folders (nvcc's anonymous-namespace
    # tag differs: normalised), and once with -use_fast_math (expf becomes other SASS).
    plain = plain_activation
    again = _wheel_with_library(demo_build.wheel, _compile_activation(demo_build, tmp_path / "b"), tmp_path / "wb")
    fast = _wheel_with_library(demo_build.wheel, _compile_activation(demo_build, tmp_path / "c", "-use_fast_math"),
                               tmp_path / "wc")
    same = prune_proof.prove(again, plain, FP4, env=os.environ)
    assert same.passed, same.failures
    [lib] = [lib for lib in same.libraries if lib.path == "minikernel/sm100/common_ops.so"]
    assert lib.identical == lib.functions_pruned == lib.functions_unpruned == 3
    differ = prune_proof.prove(fast, plain, FP4, env=os.environ)
    assert not differ.passed
    [lib] = [lib for lib in differ.libraries if lib.path == "minikernel/sm100/common_ops.so"]
    assert len(lib.differing) == 3 and lib.identical == 0 and not lib.missing
    assert all("silu_and_mul_kernel" in d.function for d in lib.differing)
    [failure] = differ.failures
    assert failure.startswith("minikernel/sm100/common_ops.so: 3 function(s) have other SASS than in the unpruned "
                              "library (first: ")
    first = lib.differing[0].first
    assert first.startswith("instruction ") and ": pruned `" in first and "unpruned `" in first
    # Issue 70 item 6: the same pair through the command with a GPU run's record that every differing function gave
    # the same bits on 12 cases: its own verdict, and still no pass (exit 7).
    record = tmp_path / "same-outputs.json"
    record.write_text(json.dumps({"functions": [{"arch": d.arch, "function": d.function, "cases": 12,
                                                 "bitwise_equal": 12} for d in lib.differing]}))
    proc = run_cli("--json", "prune-proof", str(fast), "--against", str(plain), "--same-outputs", str(record))
    assert proc.returncode == 7, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert (data["verdict"], data["passed"], len(data["same_outputs"])) == \
        ("different code, same outputs on 12 cases", False, 3)


def test_a_batched_build_is_proven_across_translation_units(demo_build: DemoBuild, plain_activation: Path,
                                                             tmp_path: Path) -> None:
    # Real compiles: activation.cu alone, and #included by a unity batch; nvcc names its anonymous namespace
    # after the file it compiles, so the kernels only match once the TU's name is normalised.
    plain = plain_activation
    batched = _wheel_with_library(demo_build.wheel, _compile_activation(demo_build, tmp_path / "b", batch=True),
                                  tmp_path / "wb")
    strict = prune_proof.prove(batched, plain, FP4, env=os.environ)
    [lib] = [lib for lib in strict.libraries if lib.path == "minikernel/sm100/common_ops.so"]
    assert not strict.passed and len(lib.missing) == 3 and all("batch_1_cu" in m for m in lib.missing)
    across = run_cli("--json", "prune-proof", str(batched), "--against", str(plain), "--across-tus")
    assert across.returncode == 0, across.stdout + across.stderr
    [lib_data] = [x for x in json.loads(across.stdout)["libraries"] if x["path"] == "minikernel/sm100/common_ops.so"]
    assert lib_data["identical"] == lib_data["functions_pruned"] == 3 and not lib_data["missing"]


def test_names_across_translation_units_and_bank_index_immediates() -> None:
    # Real names: topk_kernel of topk.cu (the unbatched 12.0a build) and of the batch that #includes it.
    alone = "_ZN39_GLOBAL__N__9fe90409_7_topk_cu_e84ba85211topk_kernelENS_14FastTopKParamsE"
    batched = "_ZN43_GLOBAL__N__5c0ffee1_10_batch_1_cu_2cab6b4011topk_kernelENS_14FastTopKParamsE"
    assert prune_proof.untag(alone) != prune_proof.untag(batched)
    assert prune_proof.untag_tu(alone) == prune_proof.untag_tu(batched) == "_ZN~_GLOBAL__N__~11topk_kernelENS_14FastTopKParamsE"
    static = "_ZN45_INTERNAL_02384fa1_14_gguf_kernel_cu_cd24131917vec_dot_q2_K_q8_1Ev"
    assert prune_proof.untag_tu(static) == "_ZN~_INTERNAL_~17vec_dot_q2_K_q8_1Ev"
    assert prune_proof.untag_tu("_ZN18_GLOBAL__N__93fb1d96_1kEv") == "_ZN18_GLOBAL__N__~_1kEv"  # no TU name in it
    # A bank-4 offset spelled as an immediate and a register index (build_tree_efficient, batched vs not).
    body = ["MOV R8, 0x148 ;", "CS2R R6, SRZ ;", "LDC.64 R8, c[0x4][R8] ;", "MOV R9, 0x10 ;", "LDC R2, c[0x0][R9] ;",
            "MOV R3, 0x20 ;", "IADD3 R4, R3, 0x1, RZ ;"]
    assert prune_proof.bank_index_immediates(body) == ["MOV R8, ~", *body[1:]]  # bank 0 and plain moves kept


def test_nvcc_compilation_tags_are_normalised_in_names() -> None:
    # Real names of the 12.0a pair (gguf_kernel.cu is not pruned, yet its tags differ between the builds).
    pruned = ("_Z13mul_mat_vec_qIN3c104HalfELi256ELi16E10block_q2_KLi1EXadL_ZN45_INTERNAL_02384fa1_14_gguf_"
              "kernel_cu_cd24131917vec_dot_q2_K_q8_1EPKvPK10block_q8_1RKiEEEvS5_S5_PT_iii")
    unpruned = pruned.replace("02384fa1", "9c1e77d0").replace("cd241319", "5a0b2e4f")
    assert prune_proof.untag(pruned) == prune_proof.untag(unpruned)
    assert "_INTERNAL_~_14_gguf_kernel_cu_~17vec_dot_q2_K_q8_1" in prune_proof.untag(pruned)
    # Another file's kernel of the same name stays another function; anonymous namespaces as before.
    other = pruned.replace("45_INTERNAL_02384fa1_14_gguf_kernel_cu", "45_INTERNAL_02384fa1_14_gguf_kernel_cx")
    assert prune_proof.untag(other) != prune_proof.untag(pruned)
    assert prune_proof.untag("_ZN18_GLOBAL__N__93fb1d96_1kEv") == "_ZN18_GLOBAL__N__~_1kEv"
    assert prune_proof.untag("no tags here") == "no tags here"
