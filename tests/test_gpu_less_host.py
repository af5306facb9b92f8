"""A GPU-less build host: system prerequisites refused before configure, the driver link stub.

Real parts throughout: the host C compiler answers whether a header or library is there;
the miniature's comm_ops links CUDA::cuda_driver (as mscclpp does) and this host has no
libcuda, so the session's demo build (conftest) configured and linked through the stub.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from build_kernel import cuda_driver, toolchain
from build_kernel.archs import parse_arch_list
from build_kernel.errors import ToolchainError
from build_kernel.recipe import Verify
from build_kernel.recipe.model import SystemDep
from build_kernel.stages.builder import system_deps
from build_kernel.stages.verify import checks as verify
from tests.conftest import REPO_ROOT, DemoBuild, demo_recipe_text, run_cli, write_recipe

MISSING = """
[system.libnothere]
needed_by = "the test's pretend dependency"
headers = ["build_kernel_no_such_header.h"]
libraries = ["build_kernel_no_such_lib"]
apt = "libnothere-dev"
dnf = "nothere-devel"
"""


def _recipe(tmp_path: Path, extra: str) -> Path:
    root = tmp_path / "proj"
    (root / "recipes").mkdir(parents=True)
    shutil.copytree(REPO_ROOT / "patches", root / "patches")
    return write_recipe(root, "sys", demo_recipe_text() + extra)


def test_present_and_missing_prerequisites_are_told_apart_by_the_compiler() -> None:
    present = SystemDep(name="libc", headers=("stdio.h",), libraries=("m",))
    absent = SystemDep(name="libnothere", needed_by="x", headers=("stdio.h", "build_kernel_no_such_header.h"),
                       libraries=("m", "build_kernel_no_such_lib"), apt="libnothere-dev")
    [ok, bad] = system_deps.check((present, absent), os.environ)
    assert ok.ok and not ok.missing
    assert bad.missing == ("build_kernel_no_such_header.h", "libbuild_kernel_no_such_lib")
    assert bad.problem() == ("system prerequisite libnothere missing (build_kernel_no_such_header.h, "
                             "libbuild_kernel_no_such_lib not found by the C compiler), needed by x: "
                             "apt-get install libnothere-dev")


def test_a_header_found_through_cpath_counts(tmp_path: Path) -> None:
    (tmp_path / "build_kernel_no_such_header.h").write_text("#define X 1\n")
    dep = SystemDep(name="x", headers=("build_kernel_no_such_header.h",))
    assert not system_deps.check((dep,), os.environ)[0].ok
    assert system_deps.check((dep,), {**os.environ, "CPATH": str(tmp_path)})[0].ok


def test_no_c_compiler_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    [st] = system_deps.check((SystemDep(name="libnuma", headers=("numa.h",), apt="libnuma-dev"),),
                             {"PATH": str(tmp_path)})
    assert not st.ok and "a C compiler (cc)" in st.problem() and "apt-get install libnuma-dev" in st.problem()


def test_build_refuses_a_missing_prerequisite_before_configure(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, MISSING)
    cache = tmp_path / "cache"
    done = run_cli("--cache-dir", str(cache), "--output-dir", str(tmp_path / "out"), "build", "--recipe", str(recipe))
    assert done.returncode == 3, done.stdout + done.stderr
    [line] = [ln for ln in done.stderr.splitlines() if "system prerequisite" in ln]
    assert "libnothere missing" in line and "apt-get install libnothere-dev or dnf install nothere-devel" in line
    # Nothing was configured or compiled, and no wheel came out.
    assert not list((cache / "build").glob("*/cmake")) and not list((tmp_path / "out").glob("*.whl"))


def test_doctor_lists_the_prerequisites_and_exits_3_on_a_missing_one(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, MISSING + '\n[system.libc]\nheaders = ["stdio.h"]\nlibraries = ["m"]\n')
    done = run_cli("--json", "doctor", "--recipe", str(recipe))
    assert done.returncode == 3, done.stderr
    data = json.loads(done.stdout)
    assert {d["name"]: d["ok"] for d in data["system"]} == {"libnothere": False, "libc": True}
    assert any(p.startswith("system prerequisite libnothere missing") for p in data["problems"])


def test_nightly_recipe_names_libnuma_for_mscclpp() -> None:
    from build_kernel.recipe import load

    [numa] = load("nightly-cu130").system
    assert (numa.headers, numa.libraries, numa.apt) == (("numa.h",), ("numa",), "libnuma-dev")
    assert "mscclpp" in numa.needed_by


def test_a_misspelt_system_key_is_a_recipe_error(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, '\n[system.libnuma]\nheader = ["numa.h"]\n')
    done = run_cli("plan", "--recipe", str(recipe))
    assert done.returncode == 2 and "system.libnuma.header: unknown key (did you mean 'headers'?)" in done.stderr


# The driver link stub.

ENV = {k: v for k, v in os.environ.items() if k != "LIBRARY_PATH"}  # the C compiler's; no link path of the caller's


def _cuda_h() -> Path:
    home = toolchain.detect(sys.executable, os.environ).cuda_home
    header = cuda_driver.find_header([Path(home)]) if home else None
    if header is None:
        pytest.skip("needs a CUDA toolkit with include/cuda.h")
    return header


def test_no_libcuda_anywhere_gives_a_stub_of_every_header_entry_point(tmp_path: Path) -> None:
    header = _cuda_h()
    toolkit = tmp_path / "toolkit"
    (toolkit / "include").mkdir(parents=True)
    shutil.copy(header, toolkit / "include" / "cuda.h")
    link = cuda_driver.for_link(tmp_path / "cache", [toolkit], {}, env=ENV, system_dirs=())
    stub = Path(link.defines[cuda_driver.DEFINE])
    assert stub.name == "libcuda.so" and stub.resolve().name == "libcuda.so.1" and "linking a stub" in link.why[0]
    with stub.open("rb") as fh:
        elf = ELFFile(fh)
        soname = [t.soname for t in elf.get_section_by_name(".dynamic").iter_tags() if t.entry.d_tag == "DT_SONAME"]
        exported = {s.name for s in elf.get_section_by_name(".dynsym").iter_symbols() if s["st_shndx"] != "SHN_UNDEF"}
    assert soname == ["libcuda.so.1"]
    assert {"cuInit", "cuDriverGetVersion", "cuMemAlloc_v2", "cuLaunchKernel"} <= exported
    # `-lcuda` (sgl-kernel links `cuda` by name) finds it on LIBRARY_PATH.
    folder = Path(link.env["LIBRARY_PATH"])
    assert (folder / "libcuda.so").resolve() == stub.resolve()
    # Made once, kept in the cache: a second build reuses it, nothing partial is left.
    again = cuda_driver.for_link(tmp_path / "cache", [toolkit], {}, env=ENV, system_dirs=())
    assert again.defines == link.defines and again.env == link.env
    assert [p for p in (tmp_path / "cache").rglob("*") if ".partial-" in p.name] == []


def test_libraries_linked_by_name_come_from_torchs_cuda_wheels(tmp_path: Path) -> None:
    # torch's nvidia wheels ship libcublas.so.13 without the unversioned name `-lcublas` looks for.
    nvidia = tmp_path / "site" / "nvidia"
    (nvidia / "cu13" / "lib").mkdir(parents=True)
    for name in ("libcublas.so.13", "libcublasLt.so.13", "libnvrtc.so.13"):
        (nvidia / "cu13" / "lib" / name).write_bytes(b"")
    system = tmp_path / "sys"
    system.mkdir()
    (system / "libcuda.so").write_bytes(b"")
    toolkit = tmp_path / "toolkit"
    (toolkit / "lib64").mkdir(parents=True)
    (toolkit / "lib64" / "libnvrtc.so").write_bytes(b"")  # the toolkit's own wins
    link = cuda_driver.for_link(tmp_path / "cache", [toolkit], {}, env={"LIBRARY_PATH": "/opt/x"}, torch_nvidia=nvidia,
                               system_dirs=(str(system),))
    folder, rest = link.env["LIBRARY_PATH"].split(os.pathsep)
    assert rest == "/opt/x" and link.defines == {}
    assert sorted(p.name for p in Path(folder).iterdir()) == ["libcublas.so", "libcublasLt.so"]
    assert (Path(folder) / "libcublas.so").resolve() == (nvidia / "cu13" / "lib" / "libcublas.so.13").resolve()
    assert "cublas, cublasLt" in link.why[-1]


def test_a_libcuda_the_link_finds_means_no_stub(tmp_path: Path) -> None:
    system = tmp_path / "lib"
    system.mkdir()
    (system / "libcuda.so").write_bytes(b"")
    link = cuda_driver.for_link(tmp_path / "cache", [tmp_path / "toolkit"], {}, env=ENV, system_dirs=(str(system),))
    assert link.defines == {} and link.env == {} and str(system / "libcuda.so") in link.why[0]
    assert not (tmp_path / "cache").exists()
    # The toolkit's stubs/ is off the linker's own path: `-lcuda` gets it through the link folder.
    stubs = tmp_path / "toolkit" / "lib64" / "stubs"
    stubs.mkdir(parents=True)
    (stubs / "libcuda.so").write_bytes(b"")
    found = cuda_driver.for_link(tmp_path / "cache", [tmp_path / "toolkit"], {}, env=ENV, system_dirs=())
    assert found.defines == {} and (Path(found.env["LIBRARY_PATH"]) / "libcuda.so").resolve() == (stubs / "libcuda.so")
    given = cuda_driver.for_link(tmp_path / "cache2", [], {cuda_driver.DEFINE: "/opt/x/libcuda.so"}, env={},
                                system_dirs=())
    assert given.defines == {} and given.env == {} and "given" in given.why[0]


def test_no_libcuda_and_no_cuda_h_is_one_line_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError) as exc:
        cuda_driver.for_link(tmp_path / "cache", [tmp_path / "empty"], {}, env=ENV, system_dirs=())
    text = exc.value.render()
    assert "\n" not in text and "no libcuda.so to link" in text and "CUDA_cuda_driver_LIBRARY" in text
    assert not (tmp_path / "cache" / "driver-stub").exists() or not any((tmp_path / "cache" / "driver-stub").iterdir())


def test_demo_build_linked_the_driver_through_the_stub_and_ships_no_libcuda(demo_build: DemoBuild) -> None:
    if cuda_driver.linkable([Path(p) for p in ("/usr/local/cuda",) if Path(p).is_dir()]):
        pytest.skip("this host has a libcuda.so to link: the stub is not used")
    assert "linking a stub of the" in demo_build.output and "linked by name from torch's CUDA wheels" in demo_build.output
    with zipfile.ZipFile(demo_build.wheel) as zf:
        names = zf.namelist()
        [comm] = [n for n in names if "comm_ops" in n]
        data = zf.read(comm)
    assert not [n for n in names if Path(n).name.startswith("libcuda")]
    tmp = demo_build.cache / "comm-check.so"
    tmp.write_bytes(data)
    with tmp.open("rb") as fh:
        needed = [t.needed for t in ELFFile(fh).get_section_by_name(".dynamic").iter_tags()
                  if t.entry.d_tag == "DT_NEEDED"]
    assert "libcuda.so.1" in needed


def test_verify_refuses_a_wheel_that_carries_a_libcuda(demo_build: DemoBuild, tmp_path: Path) -> None:
    wheel = tmp_path / demo_build.wheel.name
    shutil.copy(demo_build.wheel, wheel)
    stub = cuda_driver.make_stub(["cuInit"], tmp_path)  # a real shared library, as a link stub is
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.write(stub, "minikernel/lib/libcuda.so.1")
    report = verify.verify(wheel, Verify(), parse_arch_list("12.0a"), env=os.environ, static=True)
    assert not report.passed
    assert any(f.startswith("the wheel carries minikernel/lib/libcuda.so.1") for f in report.failures)
