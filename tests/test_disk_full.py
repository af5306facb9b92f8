"""A full disk (issue 68 item 3): said before any work when the plan will not fit, and as one line naming the
folder, what it needed and what was free when a folder fills during the work; nothing half-written, and the same
command succeeds once there is room.

The small disks are real: tmpfs mounts (`mount -t tmpfs -o size=...`), grown with `mount -o remount,size=...`
("space freed"). Mounting needs root (CAP_SYS_ADMIN): elsewhere these tests skip, saying so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from build_kernel import disk_space
from build_kernel.errors import BuildError, DiskFullError
from tests.conftest import DemoBuild, run_cli

# Temporary files and partial folders of the atomic writes (build_kernel/atomic.py), and leftovers of the kind
# bench/faults/kill_anywhere.py counts.
HALF_WRITTEN = (".tmp", ".part", ".partial-", ".old-")


def _can_mount(probe: Path) -> str | None:
    probe.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        return done.stderr.strip() or f"mount exited {done.returncode}"
    subprocess.run(["umount", str(probe)], check=True)
    return None


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[Path, str], Path]]:
    """mount(folder, size): a tmpfs of that size at `folder`; unmounted after the test."""
    if shutil.which("mount") is None or (why := _can_mount(tmp_path / f"probe-{uuid.uuid4().hex[:6]}")):
        pytest.skip(f"cannot mount a tmpfs here (needs root): {why if shutil.which('mount') else 'no mount'}")
    mounted: list[Path] = []

    def mount(folder: Path, size: str) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)
        mounted.append(folder)
        return folder

    yield mount
    for folder in reversed(mounted):
        subprocess.run(["umount", "--lazy", str(folder)], check=False)


def grow(folder: Path, size: str) -> None:
    """Space freed: the same tmpfs made larger, its files kept."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(folder)], check=True)


def half_written(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if any(m in p.name for m in HALF_WRITTEN))


def test_preflight_says_the_cache_is_too_small_before_any_work(tmp_path: Path, small_disk: Callable[..., Path]) -> None:
    cache = small_disk(tmp_path / "cache", "1m")
    proc = run_cli("--cache-dir", str(cache), "--output-dir", str(tmp_path / "out"), "--recipe", "demo",
                   "--arch", "12.0a")
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert proc.returncode == DiskFullError.exit_code, proc.stderr
    said = (f"1.0 MB free in {cache}; the cache {cache} (70.0 MB: a miniature build, measured) needs about 70.0 MB "
            "there (free space, or pass --cache-dir on a larger disk)")
    assert line == f"error: {said}"
    assert list(cache.iterdir()) == []  # said before anything was fetched
    assert "▶ fetch" not in proc.stderr
    doctor = run_cli("--json", "--cache-dir", str(cache), "doctor", "--recipe", "demo", "--arch", "12.0a")
    assert said in json.loads(doctor.stdout)["problems"]  # doctor says it too (readiness: one owner)


def test_cache_filling_during_fetch_is_one_line_and_the_rerun_succeeds(tmp_path: Path,
                                                                       small_disk: Callable[..., Path]) -> None:
    """`fetch` (no preflight: the stage alone) into a 512 kB cache: the example repositories do not fit."""
    cache = small_disk(tmp_path / "cache", "512k")
    proc = run_cli("--cache-dir", str(cache), "fetch", "--recipe", "demo")
    errors = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert proc.returncode == DiskFullError.exit_code, proc.stderr
    assert errors == [f"error: no space left in {cache} (the cache) during the fetch stage: about 70.0 MB needed "
                      "there (a miniature build, measured), 0 B free (free space there, or pass --cache-dir on a "
                      "larger disk, then run the same command again)"]
    assert half_written(cache) == []
    grow(cache, "64m")
    again = run_cli("--cache-dir", str(cache), "fetch", "--recipe", "demo")
    assert again.returncode == 0, again.stderr
    assert half_written(cache) == []


def test_index_filling_during_publish_leaves_it_unchanged_and_the_rerun_publishes(
        tmp_path: Path, small_disk: Callable[..., Path], demo_build: DemoBuild) -> None:
    """The session's verified demo wheel (~94 kB) published to a static index on a 64 kB tmpfs."""
    index = small_disk(tmp_path / "index", "64k")
    (index / "README").write_text("an index folder that was there before\n")
    before = {p.name for p in index.iterdir()}
    env = {"BUILD_KERNEL_CACHE_DIR": str(demo_build.cache)}
    cmd = ("publish", "--recipe", "demo", "--arch", "12.0a", str(demo_build.wheel), "--to", str(index))
    proc = run_cli(*cmd, env=env)
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert proc.returncode == DiskFullError.exit_code, proc.stderr
    assert line.startswith(f"error: no space left in {index} (the index) during publishing {demo_build.wheel.name}: "
                           "about ")
    assert "needed there (the wheel and its pages, the folder unchanged)" in line and " free (free space there" in line
    assert {p.name for p in index.iterdir()} == before and half_written(index) == []
    grow(index, "4m")
    again = run_cli(*cmd, env=env)
    assert again.returncode == 0, again.stderr
    assert (index / demo_build.wheel.name).read_bytes() == demo_build.wheel.read_bytes()
    assert half_written(index) == []


def test_a_child_whose_log_says_no_space_is_a_full_disk(tmp_path: Path) -> None:
    """A build step's error names its log (process.run's `full log: PATH`); the log, not the message, says
    the disk filled (CMake's compiler check: the issue's exit-6 case): it is the full disk that is reported."""
    log = tmp_path / "logs" / "build.log"
    log.parent.mkdir()
    log.write_text("-- Detecting CUDA compiler ABI info\n/usr/bin/ld: final link failed: No space left on device\n")
    error = BuildError(f"building: `cmake` exited 1: CMake Error: compiling the CUDA compiler identification "
                       f"source file failed; full log: {log}", hint="fix the error above, then run again")
    need = disk_space.Need("cache", tmp_path, 10**18, "a test's need", "pass --cache-dir on a larger disk")
    full = disk_space.disk_full(error, [need], "the build stage")
    assert isinstance(full, DiskFullError) and full.exit_code == 12
    assert full.message.startswith(f"no space left in {tmp_path} (the cache) during the build stage: about "
                                   "1000000000.0 GB needed there (a test's need), ")
    log.write_text("-- Detecting CUDA compiler ABI info\nerror: identifier undefined\n")
    assert disk_space.disk_full(error, [need], "the build stage") is None  # another failure stays itself


def test_a_copy_that_fills_its_destination_names_the_destination(tmp_path: Path,
                                                                  small_disk: Callable[..., Path]) -> None:
    """shutil's copy names the source first, the file it was writing second: the full folder is the second's
    (the build stage's wheel, from the cache into a full output folder)."""
    from build_kernel import atomic

    source = tmp_path / "cache" / "big.whl"
    source.parent.mkdir()
    source.write_bytes(b"w" * 200_000)
    out = small_disk(tmp_path / "out", "64k")
    needs = [disk_space.Need("cache", source.parent, 1, "a", "-"), disk_space.Need("output", out, 1, "b", "-")]
    with pytest.raises(OSError) as raised:
        atomic.copy_file(source, out / "big.whl")
    full = disk_space.disk_full(raised.value, needs, "the build stage")
    assert full is not None and full.message.startswith(f"no space left in {out} (the output folder)")
    assert list(out.iterdir()) == []  # nothing half-written


def test_a_failure_that_leaves_a_folder_of_the_plan_full_is_the_full_disk(tmp_path: Path,
                                                                         small_disk: Callable[..., Path]) -> None:
    """nvcc in a full TMPDIR says only `Could not open output file` (a read-only folder says the same): with that
    folder next to full (under 256 kB free), the failure is reported as the full folder; with room, as itself."""
    from build_kernel.errors import ToolchainError

    tmp = small_disk(tmp_path / "tmp", "64k")
    error = ToolchainError(f"nvcc rejects host compiler /usr/bin/g++: nvcc fatal   : Could not open output file "
                           f"'{tmp}/tmpxft_00003dd7_0000000a'", hint="install a supported gcc and set CXX / CUDAHOSTCXX")
    roomy = disk_space.Need("cache", tmp_path, 1_000_000, "c", "-")
    full = disk_space.disk_full(error, [roomy, disk_space.Need("temporary", tmp, 16_000_000, "t", "set TMPDIR")],
                                "the build stage")
    assert full is not None and full.message.startswith(f"no space left in {tmp} (the temporary folder) during the "
                                                        "build stage: about 16.0 MB needed there (t), ")
    assert disk_space.disk_full(error, [roomy], "the build stage") is None
