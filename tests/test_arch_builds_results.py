"""bench/arch_builds/builds_report.py: a build run's raw pack (as bench/arch_builds/build_one.sh or the GPU host's script packs it) into
the results file: the archs the plan gave, the build figures from the ninja log, verify per library."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.conftest import REPO_ROOT


def _add(tar: tarfile.TarFile, name: str, data: object) -> None:
    raw = (data if isinstance(data, str) else json.dumps(data)).encode()
    info = tarfile.TarInfo(name)
    info.size = len(raw)
    tar.addfile(info, io.BytesIO(raw))


def test_a_pack_without_profile_gives_the_ninja_figures_and_verify_per_library(tmp_path: Path) -> None:
    pack = tmp_path / "gb10-raw.tar.gz"
    ninja_log = "# ninja log v7\n0\t60000\t0\ta.o\tx\n1000\t150000\t0\tb.o\ty\n150000\t151500\t0\tlib.so\tz\n"
    verify = {"passed": True, "wheel": "sgl_kernel-0.3.21+cu130.sm121a.whl", "asked": ["sm_121a"], "failures": [],
              "libraries": [{"path": "sgl_kernel/sm100/common_ops.abi3.so", "rule": "sgl_kernel/sm100/common_ops*",
                             "applies": True, "archs": ["sm_121a"], "missing": [],
                             "fp4_matches": {"sm_121a:OMMA\\.SF\\.\\S*E2M1": 512, "sm_121a:E2M1": 1128}}]}
    with tarfile.open(pack, "w:gz") as tar:
        _add(tar, "./host.txt", "16\nSat Dec  5 2026\nNVIDIA H200, 9.0\n")
        _add(tar, "./build.err", "  [3/3] 151 s\n✓ build sgl-kernel (153.2 s)\n")
        _add(tar, "./build.json", {"wheel": "x.whl"})
        _add(tar, "./ninja_log.txt", ninja_log)
        _add(tar, "./verify.json", verify)
        _add(tar, "./steps.txt", "build rc=0 160 s\nverify --static rc=0 200 s\n")
    out = tmp_path / "arch-builds.json"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "arch_builds" / "builds_report.py"), str(pack), "--out", str(out)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    [build] = json.loads(out.read_text())["builds"]
    assert build["build"]["built"] and build["build"]["tool_build_step_s"] == 153.2
    assert build["build"]["ninja_wall_s"] == 151.5 and build["build"]["edges"] == 3
    assert build["build"]["compiler_cpu_s"] is None and "not measured" in build["build"]["note"]
    [lib] = build["verify"]["libraries"]
    assert lib["fp4"]["sm_121a:OMMA\\.SF\\.\\S*E2M1"] == 512 and build["verify"]["passed"]
    assert build["host"]["cores"] == 16 and build["steps"][0] == "build rc=0 160 s"


def _pack(path: Path, step_s: float, ninja_log: str) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        _add(tar, "./host.txt", "2\nSun Dec  6 2026\nno GPU\narch=12.0a recipe=/tmp/ov/x.toml\n")
        _add(tar, "./build.err", f"✓ build sgl-kernel ({step_s} s)\n")
        _add(tar, "./build.json", {"wheel": "x.whl"})
        _add(tar, "./ninja_log.txt", ninja_log)
    return path


def test_a_pair_puts_two_builds_side_by_side_with_new_over_base(tmp_path: Path) -> None:
    base = _pack(tmp_path / "v8-sm120a-2c-raw.tar.gz", 200.0, "# ninja log v7\n0\t100000\t0\ta.o\tx\n")
    new = _pack(tmp_path / "v11-sm120a-2c-raw.tar.gz", 150.0, "# ninja log v7\n0\t80000\t0\ta.o\tx\n")
    out = tmp_path / "split.json"
    script = str(REPO_ROOT / "bench" / "arch_builds" / "builds_report.py")
    proc = subprocess.run([sys.executable, script, str(base), str(new), "--pair", str(base), str(new),
                           "--out", str(out)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    [p] = json.loads(out.read_text())["pairs"]
    assert p["figures"]["tool_build_step_s"] == {"base": 200.0, "new": 150.0, "ratio": 0.75}
    assert p["figures"]["ninja_wall_s"]["ratio"] == 0.8 and p["figures"]["compiler_cpu_s"]["ratio"] is None
    assert p["base"].endswith("v8-sm120a-2c-raw.tar.gz") and p["new"].endswith("v11-sm120a-2c-raw.tar.gz")
    # A pair naming a pack that is not among the packs read: one line naming it and the fix, nothing written.
    other = tmp_path / "other.json"
    bad = subprocess.run([sys.executable, script, str(base), "--pair", str(base), str(new), "--out", str(other)],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "v11-sm120a-2c-raw.tar.gz" in bad.stderr and "list it among the packs" in bad.stderr
    assert not other.exists()


def test_a_pack_whose_memory_sampler_saturated_has_no_host_peak(tmp_path: Path) -> None:
    """build_one.sh's sampler printed `%d` through mawk, which caps at 2^31-1: such a pack says it has no peak."""
    script = str(REPO_ROOT / "bench" / "arch_builds" / "builds_report.py")
    notes = []
    for name, used in (("capped", 2**31 - 1), ("whole", 3_000_000_000)):
        pack = _pack(tmp_path / f"{name}-raw.tar.gz", 10.0, "# ninja log v7\n0\t1000\t0\ta.o\tx\n")
        with tarfile.open(tmp_path / f"{name}-mem-raw.tar.gz", "w:gz") as tar:
            with tarfile.open(pack) as src:
                for m in src.getmembers():
                    tar.addfile(m, src.extractfile(m))
            _add(tar, "./mem.txt", f"1.0 1000000000\n1.5 {used}\n")
        out = tmp_path / f"{name}.json"
        proc = subprocess.run([sys.executable, script, str(tmp_path / f"{name}-mem-raw.tar.gz"), "--out", str(out)],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        [build] = json.loads(out.read_text())["builds"]
        notes.append(build["build"].get("peak_note", ""))
    assert "saturated at 2 GiB" in notes[0] and notes[1] == ""


def test_a_proof_kept_beside_a_pack_is_read_with_it(tmp_path: Path) -> None:
    """A prune-proof run away from the build (the GPU host's wheels brought back) sits beside the reference's pack as
    `<label>-prune-proof.json`; a pack without one has no proof."""
    script = str(REPO_ROOT / "bench" / "arch_builds" / "builds_report.py")
    ref = _pack(tmp_path / "u43-sm90a-raw.tar.gz", 10.0, "# ninja log v7\n0\t1000\t0\ta.o\tx\n")
    plain = _pack(tmp_path / "p43-sm90a-raw.tar.gz", 5.0, "# ninja log v7\n0\t500\t0\ta.o\tx\n")
    lib = {"path": "sgl_kernel/sm90/common_ops.abi3.so", "archs": ["sm_90a"], "functions_pruned": 3,
           "functions_unpruned": 4, "identical": 2, "missing": [], "differing": [{"arch": "sm_90a", "function": "k"}],
           "removed": 1, "removed_functions": ["sm_90a r"], "fp4_pruned": {}, "fp4_unpruned": {}}
    (tmp_path / "u43-sm90a-prune-proof.json").write_text(json.dumps(
        {"pruned": "p.whl", "unpruned": "u.whl", "passed": False, "failures": ["1 function(s) have other SASS"],
         "libraries": [lib]}))
    out = tmp_path / "b.json"
    proc = subprocess.run([sys.executable, script, str(ref), str(plain), "--out", str(out)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    builds = {Path(b["raw"]).name: b for b in json.loads(out.read_text())["builds"]}
    with_proof, without = builds["u43-sm90a-raw.tar.gz"], builds["p43-sm90a-raw.tar.gz"]
    assert with_proof["proof"]["passed"] is False and with_proof["proof"]["against"] == "u.whl"
    assert with_proof["proof"]["libraries"][0]["differing"] == 1 and with_proof["proof"]["libraries"][0]["removed"] == 1
    assert "proof" not in without
