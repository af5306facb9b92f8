"""Libraries that carry their own libstdc++: found in a wheel by verify, refused before a build.

Seen on the H200 host: every library of a real sgl-kernel wheel linked libstdc++.a (GCC 13.3)
and exported it; beside torch's libstdc++.so.6 the first `ostream << int` (a pruned op's error
message) called into the wrong copy and the process died with SIGSEGV. The libraries here are
real g++ links of a small C++ file, with and without -static-libstdc++.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from build_kernel import host_compiler
from build_kernel.stages.verify import diagnose
from tests.conftest import DemoBuild, run_cli, wheel_with

SOURCE = """\
#include <sstream>
#include <string>
std::string describe(int value) { std::ostringstream out; out << "value " << value; return out.str(); }
"""


def link(tmp_path: Path, name: str, *flags: str) -> Path:
    src = tmp_path / "describe.cpp"
    src.write_text(SOURCE)
    out = tmp_path / name
    subprocess.run(["g++", "-shared", "-fPIC", "-O2", str(src), "-o", str(out), *flags], check=True)
    return out


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("cxx")
    return link(tmp, "shared.so"), link(tmp, "static.so", "-static-libstdc++")


def test_a_library_linked_with_libstdcxx_a_exports_it(libraries: tuple[Path, Path]) -> None:
    shared, static = libraries
    assert diagnose.embedded_libstdcxx(shared) == []
    own = diagnose.embedded_libstdcxx(static)
    # The stream and locale machinery itself, not just the instantiations any C++ library has.
    assert "_ZNSt6locale7classicEv" in own and any(s.startswith("_ZNSo") for s in own)
    assert "libstdc++.so.6" in diagnose.needed(shared) and "libstdc++.so.6" not in diagnose.needed(static)


def test_verify_fails_a_wheel_whose_library_carries_libstdcxx(demo_build: DemoBuild, libraries: tuple[Path, Path],
                                                               tmp_path: Path) -> None:
    _, static = libraries
    wheel = wheel_with(demo_build.wheel, {"minikernel/describe.so": static}, tmp_path / "bad")
    proc = run_cli("--json", "verify", str(wheel), "--recipe", "demo", "--arch", "12.0a")
    assert proc.returncode != 0, proc.stdout
    [failure] = [f for f in json.loads(proc.stdout)["failures"] if "libstdc++" in f]
    assert failure.startswith("minikernel/describe.so carries its own libstdc++ (")
    assert "symbols such as std::locale::classic()" in failure
    assert "drop -static-libstdc++ from LDFLAGS" in failure and "\n" not in failure
    # The same wheel with the library linked as torch links it passes that check.
    shared = wheel_with(demo_build.wheel, {"minikernel/describe.so": libraries[0]}, tmp_path / "good")
    ok = run_cli("--json", "verify", str(shared), "--recipe", "demo", "--arch", "12.0a")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert not any("libstdc++" in f for f in json.loads(ok.stdout)["failures"])


def test_preflight_refuses_static_libstdcxx_in_the_flags_cmake_reads() -> None:
    env = {**os.environ, "LDFLAGS": "-O2 -static-libstdc++"}
    problem = host_compiler.check_cxx_runtime(shutil.which("g++"), env)
    assert problem is not None and problem.startswith("LDFLAGS has -static-libstdc++: ")
    assert "unset it or remove -static-libstdc++" in problem
    assert host_compiler.check_cxx_runtime(shutil.which("g++"), {**os.environ, "CXXFLAGS": "-static"})
    assert host_compiler.check_cxx_runtime(shutil.which("g++"), {**os.environ, "LDFLAGS": "-static-libgcc -O2"}) is None


def _wrapper(tmp_path: Path, name: str, print_file_name: bool) -> Path:
    """A real g++ that links libstdc++ in (as a specs file or a wrapper script would); with `print_file_name`,
    it also answers -print-file-name as a g++ does whose libstdc++.so is not installed."""
    fake = tmp_path / name
    answer = 'case "$1" in -print-file-name=*) echo "${1#*=}"; exit 0;; esac\n' if print_file_name else ""
    fake.write_text(f"#!/bin/sh\n{answer}"
                    f'case " $* " in *" -shared "*) exec {shutil.which("g++")} "$@" -static-libstdc++;; esac\n'
                    f'exec {shutil.which("g++")} "$@"\n')
    fake.chmod(0o755)
    return fake


def test_preflight_refuses_a_compiler_that_links_libstdcxx_in(tmp_path: Path) -> None:
    missing = _wrapper(tmp_path, "g++-nolib", print_file_name=True)
    problem = host_compiler.check_cxx_runtime(str(missing), dict(os.environ))
    assert problem is not None and problem.startswith(f"{missing} links libstdc++ into shared libraries (")
    assert "it finds no libstdc++.so (`-print-file-name=libstdc++.so` prints 'libstdc++.so')" in problem
    specs = _wrapper(tmp_path, "g++-specs", print_file_name=False)
    problem = host_compiler.check_cxx_runtime(str(specs), dict(os.environ))
    assert problem is not None and "its specs or a wrapper add -static-libstdc++" in problem
    # The compiler as installed here links it shared, as torch does.
    assert host_compiler.check_cxx_runtime(shutil.which("g++"), dict(os.environ)) is None


def test_build_stops_before_configure_on_static_libstdcxx(tmp_path: Path) -> None:
    cache, out = tmp_path / "cache", tmp_path / "out"
    done = run_cli("--cache-dir", str(cache), "--output-dir", str(out), "build", "--recipe", "demo", "--arch", "12.0a",
                   env={"LDFLAGS": "-static-libstdc++"})
    assert done.returncode != 0, done.stdout + done.stderr
    [line] = [ln for ln in done.stderr.splitlines() if "LDFLAGS has -static-libstdc++" in ln]
    assert "unset it" in line
    # Nothing was configured or compiled, and no wheel came out.
    assert not list((cache / "build").glob("*/cmake")) and not list(out.glob("*.whl"))


def test_doctor_names_static_libstdcxx_as_a_problem() -> None:
    proc = run_cli("--json", "doctor", "--recipe", "demo", env={"LDFLAGS": "-static-libstdc++"})
    assert proc.returncode == 3, proc.stderr
    assert any(p.startswith("LDFLAGS has -static-libstdc++") for p in json.loads(proc.stdout)["problems"])
