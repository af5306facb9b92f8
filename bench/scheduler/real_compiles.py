"""Real nvcc compiles for the scheduler bench: the recorder's overhead, and the governor on what it recorded.

The TUs: the miniature's two torch-free CUDA sources (examples/minikernel/csrc/*.cu) and
three template-heavy ones (the OOM tests' HEAVY_CU at growing sizes), sm_120a (or the
newest arch nvcc has). Built by real ninja -j2, plain and through the recorder, alternating;
overhead = wall with the recorder / wall without - 1. Then the recorded profile drives the
governor over the same compiles under a cap below the plain -j2's peak.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from build_kernel import toolchain
from build_kernel.stages.builder import cgroup, ninja_order, planner, profile, scheduling

ROOT = Path(__file__).resolve().parents[2]
MINI = ROOT / "examples" / "minikernel"
MiB = 1024 * 1024
HEAVY_CU = (ROOT / "tests" / "test_oom.py").read_text().split('HEAVY_CU = """\\\n')[1].split('"""')[0]
COUNTS = (2500, 3500, 4500, 5500)
ROUNDS = 4


def _sources(src: Path) -> list[Path]:
    src.mkdir(parents=True, exist_ok=True)
    out = sorted((MINI / "csrc").glob("*.cu"))
    for n in COUNTS:
        path = src / f"heavy_{n}.cu"
        path.write_text(f"#define COUNT {n}\n{HEAVY_CU}")
        out.append(path)
    return out


def _gencode(nvcc: str) -> str:
    listed = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, check=False).stdout
    archs = re.findall(r"compute_(\d+)", listed)
    arch = "120" if "120" in archs else max(archs, key=int)
    return f"arch=compute_{arch}a,code=sm_{arch}a"


def write_build(folder: Path, nvcc: str, sources: list[Path], launcher: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [*launcher, nvcc, "-std=c++17", "-O2", f"-I{MINI / 'include'}", f"-I{ROOT / 'examples' / 'minidep' / 'include'}", "-gencode", _gencode(nvcc), "-c", "$in",
           "-o", "$out"]
    lines = ["rule nvcc", f"  command = {' '.join(shlex.quote(w) if w[0] != '$' else w for w in cmd)}", ""]
    lines += [f"build {s.stem}.o: nvcc {s}" for s in sources]
    (folder / "build.ninja").write_text("\n".join(lines) + "\n")


NINJA = shutil.which("ninja", path=str(Path(sys.executable).parent)) or "ninja"


def _ninja(folder: Path, *args: str, env: dict[str, str] | None = None, group: Path | None = None,
           ninja: str = NINJA) -> float:
    shutil.rmtree(folder / ".ninja_log", ignore_errors=True)
    for obj in folder.glob("*.o"):
        obj.unlink()
    argv = [ninja, "-C", str(folder), *args]
    start = time.monotonic()
    subprocess.run(cgroup.in_cgroup(group, argv) if group else argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def recorder_overhead(work: Path) -> dict[str, object]:
    nvcc = toolchain.find_nvcc(dict(os.environ))
    if nvcc is None:
        return {"skipped": "no nvcc"}
    sources, db = _sources(work / "src"), work / "profile.sqlite"
    rec = [sys.executable, "-S", scheduling.RECORDER, "--db", str(db), "--strip", str(work / "src"),
           "--strip", str(MINI), "--"]
    write_build(work / "plain", nvcc, sources, [])
    write_build(work / "recorded", nvcc, sources, rec)
    _ninja(work / "plain", "-j2")  # warm the page cache
    plain, recorded = [], []
    for i in range(ROUNDS):  # alternating, and which goes first alternates too
        for side in (("plain", plain), ("recorded", recorded))[:: 1 if i % 2 == 0 else -1]:
            side[1].append(_ninja(work / side[0], "-j2"))
    launch = []
    for _ in range(5):
        t0 = time.monotonic()
        subprocess.run([*rec, "true"], check=True)
        launch.append(time.monotonic() - t0)
    best_plain, best_rec = min(plain), min(recorded)
    rows = profile.rows(db)
    return {"tus": [s.name for s in sources], "jobs": 2, "rounds": ROUNDS,
            "plain_wall_s": [round(x, 2) for x in plain], "recorded_wall_s": [round(x, 2) for x in recorded],
            "overhead_pct_best": round(100 * (best_rec / best_plain - 1), 2),
            "overhead_pct_mean": round(100 * (sum(recorded) / sum(plain) - 1), 2),
            "recorder_launch_s": round(min(launch), 3),
            # Per compile, deterministic where the wall ratio is noise-bound: the recorder's own start-up over
            # the mean compile's wall, as recorded.
            "launch_over_mean_compile_pct": round(100 * min(launch) / (sum(r.wall_s for r in rows) / len(rows)), 2),
            "profile_rows": [t.describe() for t in planner.plan_tus(db, 4 << 30)],
            "governed": governed(work, nvcc, sources, db)}


def governed(work: Path, nvcc: str, sources: list[Path], db: Path) -> dict[str, object]:
    """The same compiles with the governor reading what the recorder wrote, under a cap that -j2 exceeds."""
    tus = planner.plan_tus(db, 4 << 30)
    sum2 = sum(sorted((t.peak_bytes for t in tus), reverse=True)[:2])
    cap = int(sum2 * 0.8) + 64 * MiB  # the two heaviest together do not fit; each alone does
    # As the build ships: the sources in their own order, ninja through ninja_order's script (longest
    # first by what the recorder wrote), the governor with the build's defaults (scheduling.governor).
    write_build(work / "governed", nvcc, sources, [])
    ninja = str(ninja_order.install(work / "governed-bin", python=sys.executable, ninja=NINJA,
                                    build_dir=work / "governed",
                                    data=ninja_order.predictions(db, None, [work / "src", MINI])))
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS")}
    preds = {Path(t.source).name: t.peak_bytes + 8 * MiB for t in tus}
    with cgroup.memory_cgroup(cap, "bench-real") as group:
        with scheduling.governor(work / "gov", budget=cap - 32 * MiB, predictions=preds, default=512 * MiB,
                                 max_jobs=2, available=lambda: cgroup.available(group), reserve=32 * MiB) as gov:
            wall = _ninja(work / "governed", env={**env, "MAKEFLAGS": gov.makeflags}, group=group, ninja=ninja)
        kills, peak = cgroup.oom_kills(group), cgroup.peak(group)
    return {"cap_mb": cap // MiB, "wall_s": round(wall, 2), "peak_mb": peak // MiB, "oom_kills": kills,
            "max_jobs_seen": gov.stats.max_jobs_seen, "predicted_mb": {k: v // MiB for k, v in preds.items()}}
