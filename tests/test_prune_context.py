"""bench/prune_context.py: the pruned build's own compile of one object, read from a real ninja manifest, with every
GPU family turned on (the pruning defines dropped, the recorder's launcher dropped, the object written elsewhere).
The compile and the SASS comparison need the real tree's build folders: run by hand (bench/raw/
local-2c-2026-12-06d-prune-context/README.md), not here."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
from prune_context import all_families_command


def test_the_command_is_the_pruned_builds_own_with_every_family_on(tmp_path: Path) -> None:
    nvcc = ["/usr/local/cuda/bin/nvcc", "-DFOO=1", "-DSGL_ARCH_SM90=1", '-DSGL_KERNEL_ARCHS="sm_90a"',
            "-DSGL_KERNEL_ARCH_PRUNED=1", "-gencode=arch=compute_90a,code=sm_90a", "-o", "CMakeFiles/x.dir/k.cu.o",
            "-c", "k.cu"]
    launcher = ["/venv/bin/python", "-S", "recorder.py", "--db", "p.sqlite", "--"]
    (tmp_path / "build.ninja").write_text(
        "rule cuda\n  command = " + shlex.join(launcher) + " " + shlex.join(nvcc[:-3]) + " -o $out -c $in\n"
        "build CMakeFiles/x.dir/k.cu.o: cuda k.cu\n")
    (tmp_path / "k.cu").write_text("")
    argv = all_families_command(tmp_path, "CMakeFiles/x.dir/k.cu.o", tmp_path / "all.o")
    assert argv[0] == "/usr/local/cuda/bin/nvcc" and "recorder.py" not in argv
    assert "-DSGL_KERNEL_ARCH_PRUNED=1" not in argv and "-DSGL_ARCH_SM90=1" not in argv
    assert "-DFOO=1" in argv and '-DSGL_KERNEL_ARCHS="sm_90a"' in argv  # the rest as the build had it
    assert argv[argv.index("-o") + 1] == str(tmp_path / "all.o") and argv[-2:] == ["-c", "k.cu"]
