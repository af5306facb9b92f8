"""The runner's reading of a failed build (fast, no compile): which output is an OOM kill and what
the first real error is. The texts are real outputs, recorded from the programs named at each."""

from __future__ import annotations

import pytest

from build_kernel.stages.builder.runner import first_error, oom_killed

# nvcc 13.0.88, cicc OOM-killed in a memory-capped cgroup (tests/test_oom.py does it for real).
# /bin/sh is bash: bash execs the step that nvcc's system() hands it, nvcc sees the SIGKILL and
# names the step as its command line spells it; nvcc exits 9.
NVCC_CICC_KILLED_BASH_SH = "nvcc error   : '\"$CICC_PATH/cicc\"' died due to signal 9 (Kill signal)\n"
# /bin/sh is dash: dash forks the step, prints a bare `Killed` for it and exits 137; nvcc passes the
# 137 on and prints nothing. With `--threads 2` and two archs both steps are killed; nvcc exits 255.
NVCC_CICC_KILLED_DASH_SH = "Killed\n"
NVCC_THREADS_KILLED_DASH_SH = "Killed\nKilled\n"
# The same inside ninja 1.13 (the FAILED line carries the exit code since ninja 1.12).
NINJA_NVCC_KILLED_DASH_SH = """\
[3/5] Building CUDA object CMakeFiles/minikernel.dir/csrc/activation.cu.o
FAILED: [code=137] CMakeFiles/minikernel.dir/csrc/activation.cu.o\x20
/usr/local/cuda-13.0/bin/nvcc -forward-unknown-to-host-compiler -O3 -gencode arch=compute_120a,code=sm_120a \
-c /src/csrc/activation.cu -o CMakeFiles/minikernel.dir/csrc/activation.cu.o
Killed
ninja: build stopped: subcommand failed.
"""
# g++ 12, cc1plus OOM-killed in a capped cgroup (tests/test_oom.py).
GXX_CC1PLUS_KILLED = "g++: fatal error: Killed signal terminated program cc1plus\ncompilation terminated.\n"
# cmake 3.x configure of a project whose find_package(Torch) finds nothing.
CMAKE_NO_TORCH = """\
-- Detecting CXX compile features - done
CMake Error at CMakeLists.txt:3 (find_package):
  Could not find a package configuration file provided by "Torch" with any of
  the following names:

    TorchConfig.cmake
    torch-config.cmake

  Add the installation prefix of "Torch" to CMAKE_PREFIX_PATH or set
  "Torch_DIR" to a directory containing one of the above files.  If "Torch"
  provides a separate development package or SDK, be sure it has been
  installed.


-- Configuring incomplete, errors occurred!
"""
# nvcc 13.0.88 on a kernel using an undeclared name, after a preprocessor warning.
NVCC_UNDEFINED = """\
<command-line>: warning: "X" redefined
<command-line>: note: this is the location of the previous definition
bad.cu(3): error: identifier "undefined_thing" is undefined
    out[threadIdx.x] = undefined_thing;
                       ^

1 error detected in the compilation of "bad.cu".
"""


@pytest.mark.parametrize(("output", "killed"), [
    pytest.param(NVCC_CICC_KILLED_BASH_SH, "'cicc' died due to signal 9 (Kill signal)", id="nvcc-bash-sh"),
    pytest.param(NVCC_CICC_KILLED_DASH_SH, "Killed", id="nvcc-dash-sh"),
    pytest.param(NVCC_THREADS_KILLED_DASH_SH, "Killed", id="nvcc-threads-dash-sh"),
    pytest.param(NINJA_NVCC_KILLED_DASH_SH, "Killed: CMakeFiles/minikernel.dir/csrc/activation.cu.o",
                 id="ninja-nvcc-dash-sh"),
    pytest.param(GXX_CC1PLUS_KILLED, "Killed signal terminated program cc1plus", id="gxx"),
    # The README's forms.
    pytest.param("nvcc error   : 'cicc' died due to signal 9", "'cicc' died due to signal 9", id="readme-cicc"),
    pytest.param("Killed signal terminated program cicc", "Killed signal terminated program cicc",
                 id="readme-killed-signal"),
    pytest.param("c++: internal compiler error: Killed (program cc1plus)\nPlease submit a full bug report,\n",
                 "internal compiler error: Killed (program cc1plus)", id="readme-ice"),
    # A plain step (no $VAR/ in nvcc's command line) is named as written.
    pytest.param("nvcc error   : 'ptxas' died due to signal 9 (Kill signal)\n",
                 "'ptxas' died due to signal 9 (Kill signal)", id="ptxas"),
])
def test_oom_killed_names_the_kill(output: str, killed: str) -> None:
    assert oom_killed(output) == killed


@pytest.mark.parametrize("output", [
    pytest.param(NVCC_UNDEFINED, id="nvcc-error"),
    pytest.param(CMAKE_NO_TORCH, id="cmake-error"),
    pytest.param("nvcc error   : 'cicc' died due to signal 11 (Invalid memory reference)\n", id="segfault"),
    pytest.param("csrc/x.cu(4): error: identifier \"Killed\" is undefined\n", id="killed-in-a-line"),
    pytest.param("", id="empty"),
])
def test_oom_killed_is_none_for_other_failures(output: str) -> None:
    assert oom_killed(output) is None


def test_first_error_cmake_joins_the_reason_lines() -> None:
    assert first_error(CMAKE_NO_TORCH) == (
        'CMake Error at CMakeLists.txt:3 (find_package): Could not find a package configuration file provided by'
        ' "Torch" with any of the following names:')


def test_first_error_nvcc_skips_warnings() -> None:
    assert first_error(NVCC_UNDEFINED) == 'bad.cu(3): error: identifier "undefined_thing" is undefined'


def test_first_error_falls_back_to_the_last_line() -> None:
    assert first_error("step one\nninja: build stopped: interrupted by user.\n\n") == (
        "ninja: build stopped: interrupted by user.")
    assert first_error("") == "(no output)"
