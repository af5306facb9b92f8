"""Issue 53 item 4: real builds of the shipped sgl-kernel recipe for other archs, from their raw outputs.

Reads each `<label>-raw.tar.gz` that bench/arch_builds/build_one.sh packed (host.txt, plan.json, build.err, mem.txt,
ninja_log.txt, profile.sqlite, verify.json, and split-proof.json where kept; or a `<label>-prune-proof.json` kept beside
the pack) and writes one JSON file: per build the host, the archs asked and
what the plan gave each (libraries, FP4, the parts each carries), the build figures (raw_pack.py's
run_figures: tool step, ninja wall, compiler CPU s, jobs, peak, OOM kills, lower bound) and verify per library
(archs found, missing, FP4 opcode counts per arch). `peak_gb` is the host's memory in use over its first sample,
which other work on a shared box moves; `largest_tu_peak` is the recorder's own peak of the largest compile.

    python bench/arch_builds/builds_report.py bench/arch_builds/raw/local-2c-2026-12-05-arch/*-raw.tar.gz \
        bench/serving/raw/h200-2026-12-05-pair/pt-raw.tar.gz [--out bench/arch_builds/results/arch-builds.json]

`--pair BASE NEW` (packs also given as RAW; bench/split_tus/build_pair.sh's two builds on one host) adds the two side by side
under `pairs`: each figure of both and NEW over BASE.

The GPU pack (bench/gpu_host/pair_and_tests.sh's pt-raw.tar.gz) has no plan.json: archs, series and jobs come from its
build.json's provenance.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sqlite3
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared raw-pack reader
from raw_pack import ROOT, compiles, member, ninja_edges, run_figures

# build_one.sh's memory sampler printed `%d` until 2026-12-06: mawk (Debian's awk) caps it at 2^31-1, so a pack
# holding that value never saw the host's memory in use above 2 GiB, and has no host peak.
SATURATED = 2**31 - 1
SATURATED_NOTE = ("no host peak: the memory sampler saturated at 2 GiB (mawk's printf %d, before 2026-12-06); "
                  "largest_tu_peak is each compile's own, from the recorder")


def _json(tar: tarfile.TarFile, name: str) -> Any:
    raw = member(tar, name)
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def one(path: Path, resumed: bool = False) -> dict[str, Any]:
    with tarfile.open(path) as tar:
        host = (member(tar, "host.txt") or b"").decode().splitlines()
        steps = (member(tar, "steps.txt") or b"").decode().split("\n")
        plan, verify, build = _json(tar, "plan.json"), _json(tar, "verify.json"), _json(tar, "build.json")
        err = (member(tar, "build.err") or b"").decode()
        # `build-kernel prune-proof THIS --against OTHER --across-tus`, where the run kept one: sm120 v10's split
        # against v8 (split-proof.json), or the unpruned reference's pack holding the pruned build's proof
        # against it (prune-proof.json).
        proof = _json(tar, "split-proof.json") or _json(tar, "prune-proof.json")
        mem = (member(tar, "mem.txt") or b"").decode().splitlines()
    beside = path.with_name(path.name.removesuffix("-raw.tar.gz") + "-prune-proof.json")
    if proof is None and beside.is_file():  # a proof run elsewhere than the build (its wheels brought back from a GPU host)
        proof = json.loads(beside.read_text())
    # build_one.sh's host.txt starts with the core count and names the GPU third; the GPU scripts' (bench/
    # gpu_host_lib.sh host_record) start with the date and name the GPU by nvidia-smi's line.
    cores = next((int(h) for h in host if h.strip().isdigit()), None)
    gpu = next((h for h in host if h.startswith("NVIDIA")), host[2] if len(host) > 2 else None)
    out: dict[str, Any] = {"raw": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
                           "host": {"cores": cores, "gpu": gpu,
                                    "asked": next((h for h in host if h.startswith("arch=")), None)},
                           "steps": [s for s in steps if s]}
    if plan:
        out["archs"] = plan["archs"]["list"]
        out["per_arch"] = plan["archs"]["per_arch"]
        out["series"] = f"{plan['patches']['series']}/{plan['patches']['version']}"
        out["jobs"] = plan["jobs"]["jobs"]
    elif build and build.get("provenance"):  # a pack without plan.json: what the build itself recorded
        prov = build["provenance"]
        out["archs"], out["series"] = prov["archs"], prov["patch_series"]
        out["jobs"] = prov["jobs"][0] if isinstance(prov["jobs"], list) else prov["jobs"]
        out["host"]["asked"] = f"arch={';'.join(prov['archs'])} recipe={prov['recipe']}"
    if build is not None or "✓ build" in err or "✕ build" in err:
        pack = _as_run_pack(path, resumed)
        try:
            figures = run_figures(pack)
            if resumed:  # the compiles of every run of the build's folder; ninja's times restart with each run
                figures.update(ninja_wall_s=None, ratio_to_lower_bound=None, concurrency=None, peak_gb=None,
                               note="resumed: an earlier run of the same build folder compiled part of it. compiler "
                                    "CPU s, compiles, the longest edge and the lower bound count every run's "
                                    "compiles; the tool step is the last run's only, and no wall of a cold "
                                    "build exists")
        except AssertionError:  # no profile or memory sample (a run packed by another script): the ninja log's own
            figures = _from_ninja_log(pack, err)
        out["build"] = {k: v for k, v in figures.items() if k not in ("raw",)}
        if any(line.split()[1:2] == [str(SATURATED)] for line in mem):
            out["build"].update(peak_gb=None, peak_note=SATURATED_NOTE)
        with tarfile.open(pack) as tar:
            db = member(tar, "profile.sqlite")
        if db:  # the host's memory in use moves with whatever else runs on a shared box; a TU's own peak does not
            rows = compiles(db)
            top = max(rows, key=lambda r: r["tree_peak_mb"])
            out["build"]["largest_tu_peak"] = {"source": top["source"], "gb": round(top["tree_peak_mb"] / 1024, 1)}
    if proof:
        out["proof"] = {"pruned": proof.get("pruned"), "against": proof.get("unpruned"), "passed": proof.get("passed"),
                        "failures": [f[:400] for f in proof.get("failures", [])],
                        "libraries": [{k: (len(v) if k in ("missing", "differing") else v) for k, v in lib.items()
                                       if k in ("path", "archs", "functions_pruned", "functions_unpruned", "identical",
                                                "missing", "differing", "removed", "fp4_pruned", "fp4_unpruned")}
                                      for lib in proof.get("libraries", [])]}
    oom = re.findall(r"OOM|Killed signal terminated program cicc", err)
    out["oom_lines_in_log"] = len(oom)
    if verify:
        out["verify"] = {
            "passed": verify["passed"], "wheel": verify["wheel"], "asked": verify["asked"],
            "failures": verify["failures"],
            "libraries": [{"path": lib["path"], "rule": lib["rule"], "applies": lib["applies"], "archs": lib["archs"],
                           "missing": lib["missing"], "fp4": lib.get("fp4_matches")} for lib in verify["libraries"]],
        }
    return out


def _as_run_pack(path: Path, resumed: bool = False) -> Path:
    """The pack with its members named `<label>-<file>`, as run_figures reads the other build runs' packs; memory
    samples as whole bytes (the first packs' awk printed `2.17654e+09`); the profile cut to this build's compiles
    (the cache's profile.sqlite holds every build made with that cache: rows from the first memory sample on)."""
    out = Path(tempfile.mkdtemp(prefix="arch-builds-")) / path.name
    with tarfile.open(path) as src, tarfile.open(out, "w:gz") as dst:
        members = [(m, f.read()) for m in src.getmembers() if m.isfile() and (f := src.extractfile(m))]
        mem = next((data for m, data in members if m.name.endswith("mem.txt")), b"")
        samples = [line.split() for line in mem.decode().splitlines() if len(line.split()) >= 2]
        key = _build_key(members)  # before the loop renames the members
        for m, data in members:
            if m.name.endswith("mem.txt"):
                data = "".join(f"{s[0]} {int(float(s[1]))}\n" for s in samples).encode()
            elif m.name.endswith("profile.sqlite") and (samples or key):
                # From the first memory sample on; a resumed build (or a pack without samples): every compile run
                # in its own folder, from whichever run.
                data = _rows_since(data, 0.0 if (resumed and key) or not samples else float(samples[0][0]), key)
            m.name, m.size = f"run-{Path(m.name).name}", len(data)
            dst.addfile(m, io.BytesIO(data))
    return out


def _build_key(members: list[tuple[tarfile.TarInfo, bytes]]) -> str:
    """The build folder's key from build.json (empty where the build wrote none)."""
    raw = next((data for m, data in members if m.name.endswith("/build.json")), b"")
    try:
        return str(json.loads(raw).get("key") or "") if raw else ""
    except ValueError:
        return ""


def _rows_since(db: bytes, start: float, key: str = "") -> bytes:
    """The compiles from `start` on, and where the build's key is known only those run in its own folder (a build
    sharing the cache at the same time records its compiles there too)."""
    with tempfile.NamedTemporaryFile(suffix=".sqlite") as f:
        f.write(db)
        f.flush()
        conn = sqlite3.connect(f.name)
        conn.execute("DELETE FROM compiles WHERE at < ?", (start,))
        if key:
            conn.execute("DELETE FROM compiles WHERE cwd NOT LIKE ?", (f"%/build/{key}/%",))
        conn.commit()
        conn.close()
        return Path(f.name).read_bytes()


def _from_ninja_log(pack: Path, err: str) -> dict[str, Any]:
    """What a pack (`_as_run_pack`'s) without a memory sample still shows: the tool's build step, ninja's span and
    edges, and either the recorder's figures of the build's own compiles (where the pack kept profile.sqlite) or
    the OOM kills the tool reported."""
    with tarfile.open(pack) as tar:
        log = (member(tar, "ninja_log.txt") or b"").decode()
        db = member(tar, "profile.sqlite")
    edges = ninja_edges(log) if log else []
    step = re.search(r"[✓✕] build .*? \(([\d.]+) s\)", err)
    rows = compiles(db) if db else []
    out: dict[str, Any] = {
        "built": "✓ build" in err, "tool_build_step_s": float(step.group(1)) if step else None,
        "ninja_wall_s": round(max(e[1] for e in edges) - min(e[0] for e in edges), 1) if edges else None,
        "edges": len(edges), "peak_gb": None}
    if rows:  # the recorder's own figures of this build's compiles
        return {**out, "compiles": len(rows), "compiler_cpu_s": round(sum(r["cpu_s"] for r in rows), 1),
                "oom_kills": sum(1 for r in rows if r["oom_kill"]),
                "note": "no memory sample in this pack: the host's peak not measured"}
    return {**out, "compiler_cpu_s": None,
            # Each edge's wall time summed: one compiler process per edge, so an upper bound of its CPU s
            # (nvcc's host and device passes run one after another) that waits on nothing but the disk.
            "edge_seconds_sum": round(sum(e[1] - e[0] for e in edges), 1) if edges else None,
            "oom_kills": len(re.findall(r"OOM-killed|Killed signal terminated program", err)),
            "note": "no profile.sqlite or memory sample in this pack: compiler CPU s and peak not measured "
                    "(edge_seconds_sum: the compiles' summed wall time instead)"}


# The figures a pair compares (issue 56 item 4): dotted paths into a build's `build` figures.
PAIR_FIGURES = ("tool_build_step_s", "ninja_wall_s", "compiler_cpu_s", "compiles", "lower_bound_s",
                "ratio_to_lower_bound", "longest_edge.s", "largest_tu_peak.gb", "peak_gb", "oom_kills")


def _figure(build: dict[str, Any], path: str) -> Any:
    value: Any = build.get("build", {})
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def pair(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Two builds of one host side by side: each figure of both, and NEW / BASE where both are numbers."""
    rows: dict[str, Any] = {}
    for path in PAIR_FIGURES:
        b, n = _figure(base, path), _figure(new, path)
        rows[path] = {"base": b, "new": n,
                      "ratio": round(n / b, 3) if isinstance(b, (int, float)) and isinstance(n, (int, float)) and b
                      else None}
    return {"base": base["raw"], "new": new["raw"], "base_series": base.get("series"),
            "new_series": new.get("series"), "archs": new.get("archs"), "host": new["host"],
            "jobs": {"base": base.get("jobs"), "new": new.get("jobs")}, "figures": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", nargs="+", type=Path)
    ap.add_argument("--resumed", action="append", type=Path, default=[],
                    help="a pack (also given as RAW) of a build resumed in a folder an earlier run began")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "arch_builds" / "results" / "arch-builds.json")
    ap.add_argument("--pair", nargs=2, action="append", type=Path, default=[], metavar=("BASE", "NEW"),
                    help="two packs (also given as RAW) of one host to put side by side, NEW over BASE")
    args = ap.parse_args()
    resumed = {p.resolve() for p in args.resumed}
    # In the order of their runs: the run's folder, then the pack (whichever study's raw/ holds the folder).
    ordered = sorted(args.raw, key=lambda p: (p.resolve().parent.name, p.name))
    by_path = {p.resolve(): one(p.resolve(), p.resolve() in resumed) for p in ordered}
    missing = [str(p) for two in args.pair for p in two if p.resolve() not in by_path]
    if missing:
        ap.error(f"--pair names a pack not given as RAW: {', '.join(missing)}; list it among the packs too")
    out: dict[str, Any] = {"builds": list(by_path.values())}
    if args.pair:
        out["pairs"] = [pair(by_path[b.resolve()], by_path[n.resolve()]) for b, n in args.pair]
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()
