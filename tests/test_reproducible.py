"""Reproducible wheels (issue 68 item 6): two builds of the same recipe and archs, in other folders with other
cache folders at another time, give the same wheel bytes; `verify --rebuild WHEEL` shows it or names what differs."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest

from build_kernel.stages.builder import nvcc_paths, provenance, reproducible
from build_kernel.stages.verify import rebuild
from tests.conftest import DemoBuild, run_cli

DIST = "pkg-1.0.dist-info"


def _wheel(path: Path, order: list[str], date: tuple[int, int, int, int, int, int], mode: int) -> Path:
    """A small real wheel whose members come in `order`, dated `date`, with permission bits `mode`."""
    files = {"pkg/__init__.py": b"x = 1\n", "pkg/lib/a.so": b"\x7fELF-not-really", f"{DIST}/METADATA":
             b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n\n", f"{DIST}/WHEEL": b"Wheel-Version: 1.0\n",
             f"{DIST}/RECORD": b""}
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in order:
            info = zipfile.ZipInfo(name, date_time=date)
            info.external_attr = (0o100000 | (mode if name.endswith(".so") else 0o644)) << 16
            zf.writestr(info, files[name])
    return path


def test_the_repack_gives_the_same_bytes_whatever_order_times_and_umask_the_backend_wrote(tmp_path: Path) -> None:
    """Two wheels of the same members, written in other orders, at other times, with other modes: repacked with
    the commit's time they are one file; members sorted (dist-info last, RECORD last), RECORD hashes right."""
    names = ["pkg/__init__.py", "pkg/lib/a.so", f"{DIST}/METADATA", f"{DIST}/WHEEL", f"{DIST}/RECORD"]
    one = _wheel(tmp_path / "one/pkg-1.0-py3-none-any.whl", names, (2026, 12, 7, 10, 0, 0), 0o775)
    two = _wheel(tmp_path / "two/pkg-1.0-py3-none-any.whl", names[::-1], (2026, 12, 8, 23, 59, 58), 0o755)
    record = {"recipe": "demo", "commit": "c" * 40, "start": "2026-12-07T10:00:00", "cpu_seconds": 12.5,
              "toolchain": {"nvcc_version": "13.0", "nvcc": "/opt/cuda/bin/nvcc"}}
    packed = [provenance.inject(w, sys.executable, {**record, "start": w.parent.name}, w.parent / "work", w.parent / "log",
                                epoch=1_700_000_000) for w in (one, two)]
    assert packed[0].read_bytes() == packed[1].read_bytes()
    with zipfile.ZipFile(packed[0]) as zf:
        order = zf.namelist()
        inside = json.loads(zf.read(f"{DIST}/{provenance.FILE}"))
        rows = zf.read(f"{DIST}/RECORD").decode().splitlines()
        assert {i.date_time for i in zf.infolist()} == {(2023, 11, 14, 22, 13, 20)}
        assert zf.getinfo("pkg/lib/a.so").external_attr >> 16 == 0o100755
    assert order[:2] == ["pkg/__init__.py", "pkg/lib/a.so"] and order[-1] == f"{DIST}/RECORD"
    assert inside == {"recipe": "demo", "commit": "c" * 40, "toolchain": {"nvcc_version": "13.0"}}
    assert len(rows) == len(order) and rows[-1] == f"{DIST}/RECORD,,"


def test_what_varies_per_run_goes_beside_the_wheel_and_comes_back_merged(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl", ["pkg/__init__.py", f"{DIST}/METADATA"], (2026, 1, 1, 0, 0, 0),
                   0o644)
    record = {"recipe": "demo", "archs": ["12.0a"], "jobs": [2], "start": "t0", "folders": {"work": "/w"},
              "toolchain": {"torch": "2.14.1", "cuda_home": "/usr/local/cuda"}}
    inside, run = provenance.split(record)
    assert inside == {"recipe": "demo", "archs": ["12.0a"], "toolchain": {"torch": "2.14.1"}}
    assert provenance.merged(inside, run) == record
    beside = provenance.write_beside(wheel, record)
    assert beside.name == wheel.name + ".build.json"
    assert json.loads(beside.read_text())["toolchain"] == {"cuda_home": "/usr/local/cuda"}


def test_the_nvcc_launcher_gives_cudafe_the_sources_mapped_path() -> None:
    """cudafe++ hashes the source's absolute path into anonymous-namespace names: the launcher passes the mapped
    one, for a CMake and a cpp_extension command line alike; the prefix maps go by environment."""
    maps = [("/c", "/build-kernel-cache"), ("/c/build/k", ".")]
    cmake = ["nvcc", "-DX", "-x", "cu", "-c", "/c/build/k/src/csrc/a.cu", "-o", "a.o", "-MF", "a.d"]
    torch = ["sccache", "nvcc", "--generate-dependencies-with-compile", "--dependency-output", "b.o.d", "-c",
             "/c/deps/dep/b.cu", "-o", "b.o"]
    assert nvcc_paths.rewrite(cmake, maps) == [*cmake, "-Xcudafe", "--orig_src_path_name=./src/csrc/a.cu"]
    assert nvcc_paths.rewrite(torch, maps)[-1] == "--orig_src_path_name=/build-kernel-cache/deps/dep/b.cu"
    assert nvcc_paths.rewrite(["nvcc", "--version"], maps) == ["nvcc", "--version"]
    env = reproducible.flags(maps, {"CXXFLAGS": "-O2"})
    assert env["CXXFLAGS"] == "-ffile-prefix-map=/c=/build-kernel-cache -ffile-prefix-map=/c/build/k=. -O2"
    assert env["NVCC_APPEND_FLAGS"].split() == ["-Xcompiler=-ffile-prefix-map=/c=/build-kernel-cache",
                                                "-Xcompiler=-ffile-prefix-map=/c/build/k=."]
    assert set(reproducible.flags(maps, {}, host=False)) == {"NVCC_APPEND_FLAGS"}  # sccache: host folders kept


def test_compare_names_the_member_and_the_elf_section_that_differ(tmp_path: Path) -> None:
    """A real ELF file (this interpreter) with one byte of its code changed, as a member of two wheels."""
    from elftools.elf.elffile import ELFFile

    elf = Path(sys.executable).resolve().read_bytes()
    with Path(sys.executable).resolve().open("rb") as fh:
        section = ELFFile(fh).get_section_by_name(".text")
        offset = section.header.sh_offset + section.header.sh_size // 2
    changed = elf[:offset] + bytes([elf[offset] ^ 0xFF]) + elf[offset + 1:]
    wheels = []
    for name, data in (("a", elf), ("b", changed)):
        wheels.append(tmp_path / name / "pkg-1.0-py3-none-any.whl")
        wheels[-1].parent.mkdir()
        with zipfile.ZipFile(wheels[-1], "w") as zf:
            zf.writestr("pkg/lib.so", data)
            zf.writestr("pkg/same.py", b"")
    assert rebuild.compare(wheels[0], wheels[0]) == []
    [diff] = rebuild.compare(wheels[0], wheels[1])
    assert (diff.member, diff.what, diff.sections) == ("pkg/lib.so", f"1 of {len(elf)} bytes differ", (".text (1 bytes differ)",))


def test_rebuild_of_a_wheel_its_recipe_no_longer_pins_stops_before_building(tmp_path: Path) -> None:
    wheel = tmp_path / "minikernel-0.1.0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("minikernel-0.1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: minikernel\nVersion: 0.1.0\n")
        zf.writestr(f"minikernel-0.1.0.dist-info/{provenance.FILE}", json.dumps(
            {"recipe": "demo", "commit": "0" * 40, "series_digest": "s" * 64, "archs": ["12.0a"]}))
    done = run_cli("--offline", "verify", "--rebuild", str(wheel), "--rebuild-in", str(tmp_path / "re"))
    assert done.returncode == 7, done.stdout + done.stderr
    assert f"was built from commit {'0' * 12}; recipe demo pins" in done.stderr
    assert not (tmp_path / "re" / "cache" / "build").exists()


@pytest.mark.slow
def test_the_demo_rebuilt_in_another_folder_and_cache_is_the_same_bytes(demo_build: DemoBuild, tmp_path: Path) -> None:
    """The session's demo wheel (its cache folder, built at the session's start) and `verify --rebuild` of it: a
    new cache folder, a new build folder, another time zone, later. Byte-identical, and the wheel names no folder."""
    folder = tmp_path / "rebuild"
    done = run_cli("--json", "verify", "--rebuild", str(demo_build.wheel), "--rebuild-in", str(folder),
                   env={"TZ": "Pacific/Kiritimati"})
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["identical"] and result["differences"] == []
    rebuilt = Path(result["rebuilt"])
    assert rebuilt.read_bytes() == demo_build.wheel.read_bytes() and str(folder) in str(rebuilt)
    for wheel, cache in ((demo_build.wheel, demo_build.cache), (rebuilt, folder / "cache")):
        with zipfile.ZipFile(wheel) as zf:
            assert not any(str(cache).encode() in zf.read(n) for n in zf.namelist())
        run = json.loads(provenance.beside(wheel).read_text())
        assert run["folders"]["cache"] == str(cache) and run["cpu_seconds"] >= 0 and run["start"]


@pytest.mark.slow
def test_one_cuda_source_compiled_through_the_launcher_in_two_folders_is_one_object(tmp_path: Path) -> None:
    """A real nvcc compile of a TU with an anonymous-namespace kernel and __FILE__, in two folders, through the
    launcher with the maps the build gives (NVCC_APPEND_FLAGS, the cudafe++ path, -keep): the same bytes."""
    import os
    import shutil
    import subprocess

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on PATH")
    source = ('#include <cstdio>\nnamespace { __global__ void k(float* x) { x[0] = 1; } }\n'
              'void launch(float* x) { k<<<1, 1>>>(x); std::printf("%s\\n", __FILE__); }\n')
    objects = []
    for name in ("one", "other-folder"):
        work = tmp_path / name / "build" / "key"
        (work / "src").mkdir(parents=True)
        (work / "src" / "k.cu").write_text(source)
        maps = reproducible.prefix_maps(work, tmp_path / name)
        env = {**os.environ, **reproducible.flags(maps, {}, host=False)}
        words = reproducible.cuda_launcher(sys.executable, maps).split(";")
        subprocess.run([*words, nvcc, "-c", "-arch=sm_120a", "-x", "cu", str(work / "src" / "k.cu"), "-o",
                        str(work / "k.o")], check=True, env=env, cwd=work)
        objects.append((work / "k.o").read_bytes())
    assert objects[0] == objects[1] and b"./src/k.cu" in objects[0]
