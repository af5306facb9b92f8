"""bench/pruning/prune_context.py: the pruned build's own compile of one object, read from a real ninja manifest, with every
GPU family turned on (the pruning defines dropped, the recorder's launcher dropped, the object written elsewhere),
and the three-way comparison docs/pruning.md relies on: each named function's normalised SASS in the pruned, the
unpruned and the all-families object, and the verdict. Run here on the session's real miniature pair (the pruned
demo wheel's build folder and the unpruned one's): one recompile of one small TU."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from build_kernel.stages.builder import provenance
from build_kernel.stages.verify import cubins, prune_proof
from tests.conftest import REPO_ROOT, DemoBuild

SCRIPT = REPO_ROOT / "bench" / "pruning" / "prune_context.py"
sys.path.insert(0, str(SCRIPT.parent))
from prune_context import (  # noqa: E402
    NOT_THE_TU,
    PRUNED_AWAY,
    SAME,
    THE_TU,
    all_families_command,
    verdict,
)

OBJECT = "CMakeFiles/common_ops_sm100_build.dir/csrc/arch_dispatch.cu.o"


def test_the_command_is_the_pruned_builds_own_with_every_family_on(tmp_path: Path) -> None:
    nvcc = ["/usr/local/cuda/bin/nvcc", "-DFOO=1", "-DSGL_ARCH_SM90=1", '-DSGL_KERNEL_ARCHS="sm_90a"',
            "-DSGL_KERNEL_ARCH_PRUNED=1", "-DMINIKERNEL_ARCH_SM12X=1", "-gencode=arch=compute_90a,code=sm_90a",
            "-o", "CMakeFiles/x.dir/k.cu.o", "-c", "k.cu"]
    launcher = ["/venv/bin/python", "-S", "recorder.py", "--db", "p.sqlite", "--"]
    (tmp_path / "build.ninja").write_text(
        "rule cuda\n  command = " + shlex.join(launcher) + " " + shlex.join(nvcc[:-3]) + " -o $out -c $in\n"
        "build CMakeFiles/x.dir/k.cu.o: cuda k.cu\n")
    (tmp_path / "k.cu").write_text("")
    argv = all_families_command(tmp_path, "CMakeFiles/x.dir/k.cu.o", tmp_path / "all.o")
    assert argv[0] == "/usr/local/cuda/bin/nvcc" and "recorder.py" not in argv
    assert not {"-DSGL_KERNEL_ARCH_PRUNED=1", "-DSGL_ARCH_SM90=1", "-DMINIKERNEL_ARCH_SM12X=1"} & set(argv)
    assert "-DFOO=1" in argv and '-DSGL_KERNEL_ARCHS="sm_90a"' in argv  # the rest as the build had it
    assert argv[argv.index("-o") + 1] == str(tmp_path / "all.o") and argv[-2:] == ["-c", "k.cu"]


@pytest.mark.parametrize(("pruned", "unpruned", "all_families", "said"), [
    ("a", "b", "b", THE_TU),  # the 0.4.3 9.0a pair's two fp8 kernels (bench/pruning/raw/local-2c-2026-12-06d-prune-context)
    ("a", "b", "c", NOT_THE_TU),
    ("a", "a", "a", SAME),
    (None, "b", "b", PRUNED_AWAY),
])
def test_each_combination_of_digests_has_its_verdict(pruned: str | None, unpruned: str, all_families: str,
                                                     said: str) -> None:
    assert verdict({"pruned": pruned, "unpruned": unpruned, "all_families": all_families}) == said


def _build_folder(cache: Path, wheel: Path) -> Path:
    """The CMake folder a wheel of the cache was built in (its provenance names the key)."""
    record = provenance.read(wheel)  # the key is the run's record's, beside the wheel
    assert record is not None
    return cache / "build" / record["key"] / "cmake"


@pytest.mark.slow
def test_the_real_pair_recompiled_with_every_family_matches_the_unpruned_object(
        demo_build: DemoBuild, unpruned_demo_build: Path, tmp_path: Path) -> None:
    """The miniature's arch_dispatch.cu: pruned to the 12.0 family in the demo build, with every family in the
    unpruned one. The script's recompile of the pruned build's own command, pruning defines dropped, gives the
    unpruned object's SASS for the kept kernel and for one the pruning removed; the pruned object lacks that one."""
    pruned, unpruned = _build_folder(demo_build.cache, demo_build.wheel), _build_folder(demo_build.cache,
                                                                                       unpruned_demo_build)
    assert "MINIKERNEL_ARCH_PRUNED=1" in (pruned / "build.ninja").read_text()
    tool = cubins.cuobjdump(os.environ)
    names = sorted(n for _, n in prune_proof.parse(cubins.sass_lines(unpruned / OBJECT, tool, os.environ), (),
                                                   across_tus=True).functions if "arch_tag_kernel" in n)
    kept = [n for n in names if "ILi120E" in n]
    away = [n for n in names if "ILi90E" in n]
    assert len(names) == 4 and len(kept) == len(away) == 1, names  # one instantiation per family: 80, 90, 100, 120
    proof = tmp_path / "proof.json"
    proof.write_text(json.dumps({"libraries": [{"differing": [{"function": n} for n in kept + away]}]}))
    out = tmp_path / "context"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--pruned-build", str(pruned), "--unpruned-build",
                           str(unpruned), "--object", OBJECT, "--proof", str(proof), "--out", str(out)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    context = json.loads((out / "context.json").read_text())
    assert "MINIKERNEL_ARCH_PRUNED" not in context["command"] and "recorder.py" not in context["command"]
    rows = {r["function"]: r for r in context["functions"]}
    same = rows[kept[0]]["digests"]
    assert same["pruned"] == same["unpruned"] == same["all_families"] is not None
    assert rows[kept[0]]["verdict"] == SAME
    gone = rows[away[0]]["digests"]
    assert gone["pruned"] is None and gone["unpruned"] == gone["all_families"] is not None
    assert rows[away[0]]["verdict"] == PRUNED_AWAY
