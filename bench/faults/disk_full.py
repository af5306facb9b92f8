"""A full disk (issue 68 item 3): what the demo needs in each folder it writes, and what happens when one fills.

    python bench/faults/disk_full.py need [--work DIR]    # the demo on four roomy tmpfs mounts, their use sampled
    python bench/faults/disk_full.py cases [--work DIR]   # a small tmpfs filled during fetch, build, publish
    python bench/faults/disk_full.py report bench/faults/raw/disk_full --out bench/faults/results/disk_full.json

Needs root (mount -t tmpfs). `need`: `build-kernel --recipe demo` (make demo's pipeline) with its cache, output
folder, index (the recipe's [publish] target wheels/published) and TMPDIR each on a tmpfs of its own, each
mount's used bytes (statvfs: what a tmpfs holds is its use, deleted temporaries included while open) sampled
every 0.1 s: the peak per folder is what a plan needs there (build_kernel/disk_space.py's DEMO figures).

`cases`: for each stage (fetch, build, publish) the folder that stage writes sits on a tmpfs that is filled
(a ballast file, leaving FREE_LEFT bytes) at the moment the stage's start line (`▶`) appears, with the run held
(SIGSTOP to its process group) while the ballast is written: everything the stage writes after its start meets
the full disk, whatever the machine's load. Per case: the run's exit code and error line, what was left
half-written (temporary files, partial folders: the same names kill_anywhere.py looks for), then the ballast
removed and the same command run again: its exit code. Raw: raw/disk_full/need.json, cases.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT / "bench" / "faults" / "raw" / "disk_full"
COMMAND = [sys.executable, "-m", "build_kernel", "--recipe", "demo"]
FOLDERS = {"cache": "cache", "output": "wheels", "index": "wheels/published", "temporary": "tmp"}
# Left free by the ballast: less than any file the stage writes, more than 0 (a truly 0-byte disk fails the
# first open, a nearly full one fails halfway through a write: the case that leaves half-written files).
FREE_LEFT = 48 * 1024
# The cases, fixed before running: (stage whose start line fills the disk, folder on the small tmpfs).
CASES = [("fetch", "cache"), ("build", "cache"), ("build", "temporary"), ("build", "output"),
         ("verify", "cache"), ("test", "cache"), ("publish", "index")]
LEFTOVER = re.compile(r"(\.tmp$|\.part$|\.partial|\.old-|^tmp[a-z0-9_]{6,}$)")


def _env(work: Path) -> dict[str, str]:
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    return {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "BUILD_KERNEL_CACHE_DIR": str(work / "cache"),
            "BUILD_KERNEL_OUTPUT_DIR": str(work / "wheels"), "TMPDIR": str(work / "tmp")}


def mount(folder: Path, size: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)


def unmount_all(work: Path) -> None:
    for rel in sorted(FOLDERS.values(), key=len, reverse=True):  # wheels/published before wheels
        if os.path.ismount(work / rel):
            subprocess.run(["umount", str(work / rel)], check=False)


def used(folder: Path) -> int:
    st = os.statvfs(folder)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def measure_need(work: Path) -> None:
    unmount_all(work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for rel in ("cache", "wheels", "wheels/published", "tmp"):
        # Roomy: a size is only a limit (a tmpfs holds what is written), and more than the preflight asks.
        mount(work / rel, "16g")
    peaks = {role: 0 for role in FOLDERS}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for role, rel in FOLDERS.items():
                peaks[role] = max(peaks[role], used(work / rel))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.monotonic()
    done = subprocess.run(COMMAND, cwd=work, env=_env(work), capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    stop.set()
    sampler.join()
    final = {role: used(work / rel) for role, rel in FOLDERS.items()}
    # The index is mounted inside the output folder: the output's own use excludes it (separate mounts).
    RAW.mkdir(parents=True, exist_ok=True)
    (RAW / "need.json").write_text(json.dumps({
        "command": "build-kernel --recipe demo", "exit": done.returncode, "seconds": round(seconds, 1),
        "peak_bytes": peaks, "final_bytes": final, "sample_interval_s": 0.1,
        "last_lines": (done.stdout + done.stderr).splitlines()[-12:]}, indent=1) + "\n")
    unmount_all(work)
    print(json.dumps({"peak": peaks, "final": final, "exit": done.returncode}))


def _leftovers(work: Path) -> list[str]:
    found = []
    for p in work.rglob("*"):
        rel = p.relative_to(work)
        if rel.parts[:2] == ("cache", "build") and len(rel.parts) > 3:
            continue  # CMake's own build tree
        if LEFTOVER.search(p.name) and p.name != "ballast":
            found.append(str(rel))
    return sorted(found)


def run_case(work: Path, stage: str, role: str) -> dict[str, Any]:
    folder = work / f"{stage}-{role}"
    unmount_all(folder)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rel = FOLDERS[role]
    mount(folder / rel, "256m")
    proc = subprocess.Popen(COMMAND, cwd=folder, env=_env(folder), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1, start_new_session=True)
    lines: list[str] = []
    filled = {"at": None}
    assert proc.stdout is not None
    ballast = folder / rel / "ballast"
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        word = line.split()[1].rstrip(":") if line.startswith("▶ ") and len(line.split()) > 1 else ""
        if filled["at"] is None and word == stage:
            # Hold the run while the disk fills: its next write meets the full disk.
            os.killpg(proc.pid, signal.SIGSTOP)
            free = shutil.disk_usage(folder / rel).free
            with ballast.open("wb") as fh:
                fh.truncate(0)
                fh.write(b"\0" * max(0, free - FREE_LEFT))
            filled["at"] = shutil.disk_usage(folder / rel).free
            os.killpg(proc.pid, signal.SIGCONT)
    code = proc.wait()
    errors = [x for x in lines if x.startswith("error:")]
    left = _leftovers(folder)
    ballast.unlink(missing_ok=True)
    again = subprocess.run(COMMAND, cwd=folder, env=_env(folder), capture_output=True, text=True, check=False)
    again_left = _leftovers(folder)
    unmount_all(folder)
    shutil.rmtree(folder, ignore_errors=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=False).stdout.strip()
    return {"stage": stage, "folder": role, "path": rel, "tool_commit": commit, "free_left_bytes": filled["at"], "exit": code,
            "error_lines": errors, "error_line_count": len(errors), "leftovers": left,
            "rerun_exit": again.returncode, "rerun_leftovers": again_left,
            "rerun_error": [x for x in (again.stdout + again.stderr).splitlines() if x.startswith("error:")],
            "last_lines": lines[-8:]}


def run_cases(work: Path) -> None:
    RAW.mkdir(parents=True, exist_ok=True)
    out = RAW / "cases.jsonl"
    done = {(r["stage"], r["folder"]) for r in map(json.loads, out.read_text().splitlines())} if out.exists() else set()
    for stage, role in CASES:
        if (stage, role) in done:
            continue
        row = run_case(work, stage, role)
        with out.open("a") as fh:
            fh.write(json.dumps(row, sort_keys=True) + "\n")
        print(f"{stage}/{role}: exit {row['exit']} {row['error_lines'][-1:]} rerun {row['rerun_exit']}", flush=True)


def report(raw: Path, out: Path) -> None:
    need = json.loads((raw / "need.json").read_text())
    rows = [json.loads(line) for line in (raw / "cases.jsonl").read_text().splitlines()]
    rows.sort(key=lambda r: [c[0] for c in CASES].index(r["stage"]) * 10 + list(FOLDERS).index(r["folder"]))
    cases = [{"stage": r["stage"], "folder": r["folder"], "exit": r["exit"],
              "error": r["error_lines"][-1] if r["error_lines"] else "", "one_line": r["error_line_count"] == 1,
              "names_the_folder": any(f"/{r['stage']}-{r['folder']}/{r['path']} " in e for e in r["error_lines"]),
              "leftovers": r["leftovers"], "rerun_exit": r["rerun_exit"], "rerun_leftovers": r["rerun_leftovers"]}
             for r in rows]
    result = {
        "what": "make demo's pipeline with one folder on a tmpfs filled at a stage's start (bench/faults/disk_full.py)",
        "demo_need_bytes": {"peak": need["peak_bytes"], "final": need["final_bytes"]},
        "cases": cases,
        "clear_one_line_errors": sum(c["one_line"] and c["names_the_folder"] and c["exit"] != 0 for c in cases),
        "reruns_green_after_freeing": sum(c["rerun_exit"] == 0 for c in cases),
        "cases_with_leftovers": sum(bool(c["leftovers"]) for c in cases),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("need", "cases"):
        p = sub.add_parser(name)
        p.add_argument("--work", type=Path, default=Path("/tmp/disk_full"))
    rep = sub.add_parser("report")
    rep.add_argument("raw", type=Path)
    rep.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "need":
        measure_need(args.work)
    elif args.command == "cases":
        run_cases(args.work)
    else:
        report(args.raw, args.out)


if __name__ == "__main__":
    main()
