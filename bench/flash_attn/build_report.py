"""flash-attn 2.8.3 built by the tool for 9.0 on the H200 host, verified and tested there: issue 40 item 4.

Reads the raw outputs of two device calls and writes one JSON file:
- `bench/flash_attn/raw/h200-2026-12-04-fa/fa-h-raw.tar.gz` (bench/flash_attn/build_on_gpu_host.sh PART=host): the build on the
  host's 16 cores, whole, then `verify` and flash-attn's own tests (the recipe's [test] subset) on the GPU;
- `bench/flash_attn/raw/h200-2026-12-03-fa/fa-c-raw.tar.gz` (that script's first form, PART=cgroup): the same build in a
  32 GiB memory cgroup, cut by `timeout` when the session's device time ran out (at 5 jobs the build is
  longer than the 28 minutes a machine is held: it cannot finish there);
and the per-arch compile cost of two flash-attn TUs measured on the local 2-core machine
(bench/flash_attn/arch_cost.py). Nothing in it is typed by hand; what is projected rather than measured
says so in its key.

- jobs: the tool's own choice and the rule it printed (`jobs = clamp(...)`);
- progress: every `[done/total] s` line the build printed;
- peak GB: the largest `total - available` in the 0.5 s memory sample, less the first sample; in
  the cgroup also the kernel's `memory.peak` and `memory.events` (oom_kill);
- per compile: the profile recorder's wall, CPU and peak of the nvcc tree (nvcc compiles: the one
  host-only .cpp, flash_api, is not recorded; it is an edge of the ninja log);
- a whole build: ninja's span (first start to last end of .ninja_log), the compiler CPU s, the lower
  bound max(CPU s / cores, longest compile) and the span's ratio to it;
- replays (list scheduling of the measured edge times on the build's job slots, a projection): in the
  order the edges really started (it must give back the measured span: the model's check) and longest
  first, the order a build with the recorded or the shipped profile (recipes/flash-attn-2.8.3.profile.csv,
  written from this run by bench/real_build/order_profile.py) starts them in; and the cgroup's whole build at its
  job count, from the host's edge times (an upper estimate: 5 jobs contend less than 16);
- upstream's own rule (setup.py: MAX_JOBS = max(1, min(os.cpu_count() // 2, psutil available GB / 9)),
  NVCC_THREADS 4): psutil reads /proc/meminfo, which a cgroup does not change, so in the cgroup
  it picks what it picks on the bare host;
- upstream's default four-arch build (80;90;100;120) vs 9.0 alone: the median over the measured
  TUs of (sum of the four archs' CPU) / (9.0's CPU), and that factor times the build's compiler CPU s.

    python bench/flash_attn/build_report.py bench/flash_attn/raw/h200-2026-12-04-fa/fa-h-raw.tar.gz \
        bench/flash_attn/raw/h200-2026-12-03-fa/fa-c-raw.tar.gz --arch-cost bench/flash_attn/raw/local-2c-2026-12-03-fa/arch-cost.json
"""

from __future__ import annotations

import argparse
import heapq
import json
import re
import statistics
import sys
import tarfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared raw-pack reader
# The profile database's rows and the ninja log's edges, one reader for every bench script.
from raw_pack import ROOT, compiles, max_overlap, ninja_edges

UPSTREAM_GB_PER_JOB = 9  # setup.py: "each JOB peak memory cost is ~8-9GB when threads = 4"
UPSTREAM_NVCC_THREADS = 4


def members(path: Path) -> dict[str, bytes]:
    """`name -> bytes` of one raw tarball, by the file's name inside its run folder."""
    with tarfile.open(path) as tar:
        return {Path(m.name).name: f.read() for m in tar.getmembers() if m.isfile() and (f := tar.extractfile(m))}


def meminfo_gb(host: str, key: str) -> float:
    m = re.search(rf"{key}:\s+(\d+) kB", host)
    assert m, f"host.txt lacks {key}"
    return int(m.group(1)) * 1024 / 2**30


def upstream_jobs(cpus: int, available_gib: float) -> int:
    return max(1, min(cpus // 2, int(available_gib / UPSTREAM_GB_PER_JOB)))


def replay(durations: list[float], slots: int) -> float:
    """The span of `durations` started in their order on `slots` job slots, each as soon as one is free."""
    free = [0.0] * slots
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


def edge_times(files: dict[str, bytes]) -> list[float]:
    """Each ninja edge's seconds, in the order the edges really started (ninja_edges sorts by start)."""
    return [end - start for start, end, _ in ninja_edges(files["ninja_log.txt"].decode())]


def whole_build(files: dict[str, bytes], cpus: int, jobs: int) -> dict[str, Any]:
    """A finished build's span, CPU, lower bound and the replays of its edges (see the module's list)."""
    edges = ninja_edges(files["ninja_log.txt"].decode())
    rows = compiles(files["profile.sqlite"])
    span = max(e[1] for e in edges) - min(e[0] for e in edges)
    cpu = sum(r["cpu_s"] for r in rows)
    longest = max(rows, key=lambda r: r["wall_s"])
    bound = max(cpu / cpus, longest["wall_s"])
    times = edge_times(files)
    longest_first = replay(sorted(times, reverse=True), jobs)
    return {
        "ninja_wall_s": round(span, 1), "edges": len(edges), "nvcc_compiles": len(rows),
        "compiler_cpu_s": round(cpu, 1),
        "longest_compile": {"source": longest["source"], "wall_s": round(longest["wall_s"], 1)},
        "lower_bound_s": round(bound, 1), "ratio_to_lower_bound": round(span / bound, 3),
        "most_compiles_at_once": max_overlap(edges),
        "heaviest_peak_gb": round(max(r["tree_peak_mb"] for r in rows) / 1024, 2),
        "replay": {"as_started_s": round(replay(times, jobs), 1),
                   "longest_first_s": round(longest_first, 1),
                   "longest_first_ratio_to_lower_bound": round(longest_first / bound, 3)},
    }


def run_figures(raw: Path) -> dict[str, Any]:
    files = members(raw)
    err = files["build.err"].decode()
    host = files["host.txt"].decode()
    jobs = re.search(r"▶ build \S+ with (\d+) job", err)
    rule = re.search(r"^jobs = .*$", err, re.M)
    progress = [[int(d), int(n), int(s)] for d, n, s in re.findall(r"\[(\d+)/(\d+)\] (\d+) s", err)]
    samples = [line.split() for line in files["mem.txt"].decode().splitlines() if line.strip()]
    used = [int(s[1]) for s in samples]
    out: dict[str, Any] = {
        "raw": str(raw.resolve().relative_to(ROOT)) if raw.resolve().is_relative_to(ROOT) else raw.name,
        "cpus": int(re.findall(r"^(\d+)$", host, re.M)[0]),  # nproc's line (host.txt may hold set -x's too)
        "mem_total_gib": round(meminfo_gb(host, "MemTotal"), 1),
        "finished": "✓ build" in err,
        "jobs": int(jobs.group(1)) if jobs else None,
        "jobs_rule": rule.group(0) if rule else None,
        "progress": progress,
        "last_progress_s": progress[-1][2] if progress else None,
        "sampled_s": round(float(samples[-1][0]) - float(samples[0][0]), 1),
        "peak_gb": round((max(used) - used[0]) / 1e9, 1),
    }
    if len(progress) >= 10 and not out["finished"]:
        # Edges a second over the steady stretch (after the first completion), carried to the last edge:
        # a projection, not a measurement.
        (d0, n, s0), (d1, _, s1) = progress[0], progress[-1]
        rate = (d1 - d0) / (s1 - s0) if s1 > s0 else None
        out["projected_wall_s"] = round(s1 + (n - d1) / rate) if rate else None
    if out["finished"]:
        out["build"] = whole_build(files, out["cpus"], out["jobs"])
        step = re.search(r"✓ build .*? \(([\d.]+) s\)", err)
        out["build"]["tool_build_step_s"] = float(step.group(1)) if step else None
    if "verify.json" in files:
        v = json.loads(files["verify.json"])
        out["verify"] = {"wheel": v["wheel"], "passed": v["passed"], "asked": v["asked"],
                         "libraries": {lib["path"]: lib["archs"] for lib in v["libraries"]},
                         "imports": v["imports"], "ops_found": v["ops_found"], "failures": v["failures"]}
    if "test.json" in files:
        t = json.loads(files["test.json"])
        out["test"] = {"files": t["files"], "pytest_args": t["pytest_args"], "gpu": t["gpu"]["name"],
                       "seconds": t["seconds"], "passed": t["passed"],
                       **{k: t["summary"][k] for k in ("passed_tests", "failed_tests", "skipped_tests")}}
    if "memory.peak" in files:
        events = dict(line.split() for line in files["memory.events"].decode().splitlines() if line.strip())
        limit = re.search(r"memory\.max: (\d+)", files["cgroup-before.txt"].decode())
        current = [int(s[2]) for s in samples if len(s) > 2]
        out["cgroup"] = {"memory_max_gib": round(int(limit.group(1)) / 2**30, 1) if limit else None,
                         "memory_peak_gib": round(int(files["memory.peak"]) / 2**30, 1),
                         "sampled_peak_gib": round(max(current) / 2**30, 1) if current else None,
                         "oom_kill": int(events["oom_kill"]), "cut_by_timeout": files.get("rc.txt", b"").strip() == b"rc=124"}
    if "profile.sqlite" in files:
        rows = compiles(files["profile.sqlite"])
        out["compiles_done"] = [{"source": r["source"].rsplit("/", 1)[-1], "wall_s": round(r["wall_s"], 1),
                                 "cpu_s": round(r["cpu_s"], 1), "peak_gb": round(r["tree_peak_mb"] / 1024, 2)} for r in rows]
        out["oom_kills"] = sum(1 for r in rows if r["oom_kill"])
    if "trace.jsonl" in files:
        steps = [json.loads(line) for line in files["trace.jsonl"].decode().splitlines() if line.strip()]
        out["governor"] = {"most_running": max(len(s["running"]) for s in steps), "most_slots": max(s["slots"] for s in steps),
                           "budget_gb": steps[-1]["budget_gb"], "last_t_s": steps[-1]["t"]}
    return out


def arch_factor(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    by_tu: dict[str, dict[str, dict[str, Any]]] = {}
    for r in data["rows"]:
        by_tu.setdefault(r["tu"].rsplit("/", 1)[-1], {})[r["arch"]] = r
    ratios = {tu: sum(a["cpu_s"] for a in archs.values()) / archs["90"]["cpu_s"] for tu, archs in by_tu.items()}
    return {"measured_on": data["machine"], "nvcc": data["nvcc"], "torch": data["torch"], "std": data["std"],
            "per_tu": {tu: {"cpu_s": {a: r["cpu_s"] for a, r in archs.items()},
                            "peak_gb": {a: round(r["peak_mb"] / 1024, 2) for a, r in archs.items()},
                            "four_archs_over_9_0": round(ratios[tu], 2)} for tu, archs in by_tu.items()},
            "four_archs_over_9_0_median": round(statistics.median(ratios.values()), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("host_raw", type=Path, help="fa-h-raw.tar.gz: the build on the host's cores")
    parser.add_argument("cgroup_raw", type=Path, help="fa-c-raw.tar.gz: the build in a memory cgroup")
    parser.add_argument("--arch-cost", type=Path, required=True, help="bench/flash_attn/arch_cost.py's output")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "flash_attn" / "results" / "flash-attn.json")
    args = parser.parse_args()
    host_raw, cg_raw = members(args.host_raw), members(args.cgroup_raw)
    host, cg = run_figures(args.host_raw), run_figures(args.cgroup_raw)
    available = meminfo_gb(host_raw["host.txt"].decode(), "MemAvailable")
    cg_available = meminfo_gb(cg_raw["host.txt"].decode(), "MemAvailable")
    factor = arch_factor(args.arch_cost)
    build = host.get("build")
    if build and cg["jobs"] and not cg["finished"]:
        # The cgroup's whole build at its own job count, from the host's measured edge times in the order they
        # started: an upper estimate (at 5 jobs each compile has more of the cores than at 16).
        cg["projected_wall_s_replay_of_host_edges"] = round(replay(edge_times(host_raw), cg["jobs"]))
    if build:
        factor["estimated_cpu_s"] = round(build["compiler_cpu_s"] * factor["four_archs_over_9_0_median"])
        factor["cpu_ratio_to_tool_build"] = factor["four_archs_over_9_0_median"]  # the same TUs, four archs over one
    done = [*host.get("compiles_done", []), *cg.get("compiles_done", [])]
    heaviest = max(done, key=lambda c: c["peak_gb"], default=None)
    result: dict[str, Any] = {
        "what": __doc__.split("\n\n")[0],
        "runs": {"host_16_cores": host, "cgroup_32_gib": cg},
        "upstream_rule": {
            "host": {"cpus": host["cpus"], "available_gib": round(available, 1),
                     "max_jobs": upstream_jobs(host["cpus"], available), "nvcc_threads": UPSTREAM_NVCC_THREADS},
            "cgroup_32_gib": {"cpus": cg["cpus"], "available_gib_psutil_sees": round(cg_available, 1),
                              "max_jobs": upstream_jobs(cg["cpus"], cg_available), "nvcc_threads": UPSTREAM_NVCC_THREADS},
            "tool_jobs": {"host": host["jobs"], "cgroup_32_gib": cg["jobs"]},
        },
        "upstream_four_arch_build": factor,
        # The tool's jobs come from the measured per-TU peak; upstream's from its 9 GB guess per job. A TU's peak
        # hardly moves with the arch (arch_cost's peak_gb per arch): it is the front end's, not the code generator's.
        "per_tu_peak_gb": {"heaviest_measured": heaviest, "upstream_guess_per_job": UPSTREAM_GB_PER_JOB},
        "not_measured": {
            "the cgroup build's whole wall": (
                f"at {cg['jobs']} jobs it is ~{cg.get('projected_wall_s_replay_of_host_edges')} s (replay), longer than "
                "the 28 minutes a machine is held; cut at " f"{cg['last_progress_s']} s"),
            "upstream's four-arch build": "estimated from two TUs' per-arch CPU (arch_cost), not built",
        },
    }
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({"build": build, "upstream_rule": result["upstream_rule"], "not_measured": result["not_measured"]},
                     indent=1))


if __name__ == "__main__":
    main()
