"""SIGKILL anywhere: the demo pipeline (`make demo`: fetch, patch, build, verify, test, publish into a real
static index) killed at ≥ 100 points, each followed by the same command again (issue 68 item 2).

    python bench/faults/kill_anywhere.py run [--work DIR] [--workers N] [--limit N]   # measure (resumable)
    python bench/faults/kill_anywhere.py report bench/faults/raw/kill_anywhere --out bench/faults/results/kill_anywhere.json

Anchors: SQLite's crash tests (power loss simulated at every write, then the database checked) and ALICE
(Pillai et al., OSDI 2014: application-level crash consistency, each persistence point a crash state). Here a
crash is SIGKILL to the process group of `build-kernel --recipe demo` (what the issue tried by hand), plus any
descendant that left the group (recorded as `escaped`: a real crash takes those too).

Two starting states, each a fresh copy per point (chosen before any data exists, here):
- `cold`: an empty work folder: `make demo` in a fresh clone (every stage does real work: the build compiles).
- `warm`: the folder after `build-kernel build --recipe demo` (the wheel is in the build cache): `make demo` after
  `make wheel`. Reaching verify, test and publish takes seconds instead of a compile, so most late points are warm.

A point is an anchor and a delay, both fixed in POINTS below before running: `start` (delay = fraction of the
reference run's whole time), `>stage` / `<stage` (the moment the tool prints that stage's start `▶` / end `✓`
line: the stage boundaries), `in:stage` (delay = fraction of that stage's reference duration after its start
line), `exit` (the run finished before the kill: nothing to kill, the rerun meets a finished folder). Stage
times are the tool's own (its `▶`/`✓` lines, timestamped as they arrive).

Per point: the rerun's exit code; its wheel (output folder) and published wheel byte-identical to the
reference run's, or else identical in content except build_kernel_provenance.json and its RECORD line (wheels
are not byte-reproducible yet: the provenance carries times and CPU seconds); the index (wheels/published)
byte-identical, or else identical once the wheel's sha256 is read as the reference's; and leftovers: temporary
files (`*.tmp`, `*.part`), partial folders (`.partial-`, `.old-`) and lock files anywhere in the cache, output or
index that the reference run's folder does not have. Recovered = exit 0, wheel and index identical (in bytes, or
in content where only the provenance differs), no leftover. Target: 100 %.

Raw output (appended per point, so a stopped run resumes where it was): raw/kill_anywhere/points.jsonl,
reference-{cold,warm}-slotN.json (one per worker folder), logs/NNN.txt (the killed run's and the rerun's last lines).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import queue
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT / "bench" / "faults" / "raw" / "kill_anywhere"
PROVENANCE = "build_kernel_provenance.json"
STAGES = ("check", "fetch", "patch", "build", "verify", "test", "publish")

# ---- the schedule, fixed before any run (points.jsonl keys each result by its id) -----------------------------


def _points() -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []

    def add(state: str, anchor: str, fraction: float = 0.0) -> None:
        points.append({"state": state, "anchor": anchor, "fraction": round(fraction, 3)})

    for state in ("cold", "warm"):
        for stage in STAGES:  # every stage boundary, in both starting states
            add(state, f">{stage}")
            add(state, f"<{stage}")
        add(state, "exit")
    for f in (0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95):
        add("cold", "in:build", f)  # the compile, spread over its time
    for stage in ("check", "fetch", "verify", "test"):
        add("cold", f"in:{stage}", 0.5)
    for f in (0.25, 0.5, 0.75):
        add("cold", "in:publish", f)
    for f in (0.2, 0.4, 0.6, 0.8):
        add("cold", "start", f)  # spread over the whole run's time
    for f in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
        add("warm", "in:verify", f)
        add("warm", "in:test", f)
    for i in range(19):
        add("warm", "in:publish", 0.05 + 0.05 * i)  # the failures were here
    for f in (0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95):
        add("warm", "start", f)
    for stage in ("check", "fetch", "build"):
        add("warm", f"in:{stage}", 0.5)
    # A seeded shuffle: a partial run samples every stage and both states, not the first stages only.
    random.Random(68).shuffle(points)
    for i, p in enumerate(points):
        p["id"] = i
    return points


POINTS = _points()

# ---- running ------------------------------------------------------------------------------------------------

COMMAND = [sys.executable, "-m", "build_kernel", "--recipe", "demo"]
_MARK = re.compile(r"^([▶✓✗]) (\S+)")


def _env(work: Path) -> dict[str, str]:
    # The demo's folders inside the work folder (make demo's are ~/.cache/build-kernel and wheels/); the
    # recipe's [publish] target wheels/published is relative to the current folder, the work folder.
    # TMPDIR too: what a killed run leaves in the temporary folder (nvcc's tmpxft files, a venv of the
    # install-back) is counted per point, apart from the cache, output and index.
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    return {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "BUILD_KERNEL_CACHE_DIR": str(work / "cache"),
            "BUILD_KERNEL_OUTPUT_DIR": str(work / "wheels"), "TMPDIR": str(work / "tmp")}


def _stage_of(line: str) -> tuple[str, str] | None:
    """(`>`|`<`|`x`, stage) for a stage's start/end line; sub-steps (`▶ test environment`) are not stages."""
    m = _MARK.match(line)
    if not m:
        return None
    word = m.group(2)
    stage = {"test:": "test", "patch:": "patch", "test": None}.get(word, word)  # `test` alone: its environment
    if stage not in STAGES:
        return None
    return {"▶": ">", "✓": "<", "✗": "x"}[m.group(1)], stage


def _descendants(pid: int) -> dict[int, tuple[int, str]]:
    """pid -> (pgid, name) of every live descendant of `pid`."""
    children: dict[int, list[int]] = {}
    info: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1: stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] == "Z":
            continue
        child = int(entry.name)
        children.setdefault(int(fields[1]), []).append(child)
        info[child] = (int(fields[2]), name)
    found: dict[int, tuple[int, str]] = {}
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = info[child]
            todo.append(child)
    return found


class Run:
    """The command in its own process group, its output lines timestamped as they come."""

    def __init__(self, work: Path) -> None:
        self.start = time.monotonic()
        self.proc = subprocess.Popen(COMMAND, cwd=work, env=_env(work), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True, text=True, bufsize=1)
        self.lines: list[tuple[float, str]] = []
        self.marks: list[tuple[float, str, str]] = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            t = time.monotonic() - self.start
            with self.changed:
                self.lines.append((t, line.rstrip("\n")))
                if (mark := _stage_of(line)) is not None:
                    self.marks.append((t, *mark))
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def wait_mark(self, kind: str, stage: str) -> float | None:
        """Seconds from start when `kind stage` was printed; None if the run ended without it."""
        with self.changed:
            while True:
                for t, k, s in self.marks:
                    if (k, s) == (kind, stage):
                        return t
                if not self.reader.is_alive():
                    return None
                self.changed.wait(0.5)

    def finish(self) -> int:
        code = self.proc.wait()
        self.reader.join()
        return code


def reference(work: Path, state: str, slot: int) -> dict[str, Any]:
    """One uninterrupted run from `state` in a slot's folder: its stage times, wheel and index (what every point
    run in that folder is compared with)."""
    folder = _fresh(work, state, f"slot-{slot}")
    run = Run(folder)
    code = run.finish()
    if code != 0:
        sys.exit(f"the uninterrupted {state} run failed (exit {code}):\n" + "\n".join(line for _, line in run.lines[-30:]))
    found = {"state": state, "slot": slot, "tool": tool_version(), "exit": code,
             "seconds": round(time.monotonic() - run.start, 2), "stages": _stage_times(run.marks),
             "marks": [[round(t, 2), k, s] for t, k, s in run.marks], "folder": str(folder), **snapshot(folder)}
    shutil.rmtree(folder)
    return found


def _stage_times(marks: list[tuple[float, str, str]]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {}
    for t, kind, stage in marks:
        if kind == ">":
            times.setdefault(stage, [round(t, 2), round(t, 2)])
        elif stage in times:
            times[stage][1] = round(t, 2)
    return times


def _fresh(work: Path, state: str, name: str) -> Path:
    folder = work / name
    if folder.exists():
        shutil.rmtree(folder)
    if state == "cold":
        folder.mkdir(parents=True)
    else:
        shutil.copytree(work / "base-warm", folder, symlinks=True)
    return folder


def make_warm_base(work: Path) -> None:
    base = work / "base-warm"
    if (base / "done").exists():
        return
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    cmd = [sys.executable, "-m", "build_kernel", "build", "--recipe", "demo"]
    done = subprocess.run(cmd, cwd=base, env=_env(base), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"the warm base's build failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    (base / "done").write_text("")


def _delay(point: dict[str, Any], ref: dict[str, Any]) -> tuple[str, str, float]:
    """(mark kind, stage, seconds after it) for a point, from its reference run's times."""
    anchor, fraction = point["anchor"], point["fraction"]
    if anchor == "start":
        return "", "", fraction * ref["seconds"]
    if anchor.startswith("in:"):
        stage = anchor[3:]
        begin, end = ref["stages"][stage]
        return ">", stage, fraction * (end - begin)
    return anchor[0], anchor[1:], 0.0


def tool_version() -> dict[str, Any]:
    """The commit the tool ran from, and its files that differed from it (the checkout is shared while it runs)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()
    return {"commit": git("rev-parse", "--short", "HEAD"),
            "changed": git("status", "--porcelain", "--", "build_kernel").splitlines()}


def kill_point(work: Path, point: dict[str, Any], ref: dict[str, Any], slot: int, logs: Path) -> dict[str, Any]:
    tool = tool_version()
    folder = _fresh(work, point["state"], f"slot-{slot}")
    kind, stage, delay = _delay(point, ref)
    run = Run(folder)
    killed_at, escaped, finished_first = None, [], False
    if point["anchor"] == "exit":
        finished_first = True
    else:
        at = 0.0 if not kind else run.wait_mark(kind, stage)
        if at is not None:
            deadline = run.start + at + delay
            while (left := deadline - time.monotonic()) > 0 and run.proc.poll() is None:
                time.sleep(min(left, 0.05))
        if at is None or run.proc.poll() is not None:
            finished_first = True
        else:
            tree = _descendants(run.proc.pid)
            killed_at = time.monotonic() - run.start
            os.killpg(run.proc.pid, signal.SIGKILL)
            # Descendants in groups of their own (the compile governor starts each compile in one): a real
            # crash takes them too. Their whole groups, so a child they started since the scan goes as well.
            for pgid in sorted({g for g, _ in tree.values()} - {run.proc.pid}):
                escaped += sorted({n for g, n in tree.values() if g == pgid})
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
    first_code = run.finish()
    in_stage = next((f"{k}{s}" for t, k, s in reversed(run.marks) if killed_at is None or t <= killed_at), "")
    after_kill = snapshot(folder)
    rerun_start = time.monotonic()
    rerun = subprocess.run(COMMAND, cwd=folder, env=_env(folder), capture_output=True, text=True, check=False,
                           timeout=3600)
    rerun_s = time.monotonic() - rerun_start
    after = snapshot(folder)
    verdict = compare(after, ref)
    (logs / f"{point['id']:03d}.txt").write_text(
        f"point {json.dumps(point)}\nkilled at {killed_at} s (last mark {in_stage}), first run exit {first_code}\n"
        "--- killed run, last 15 lines\n" + "\n".join(f"{t:7.2f} {line}" for t, line in run.lines[-15:])
        + f"\n--- rerun exit {rerun.returncode} in {rerun_s:.1f} s, last 25 lines\n"
        + "\n".join((rerun.stdout + rerun.stderr).splitlines()[-25:]) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    return {**point, "slot": slot, "tool": tool, "delay_s": round(delay, 2), "killed_at_s": None if killed_at is None else round(killed_at, 2),
            "finished_before_kill": finished_first, "last_mark": in_stage, "escaped": sorted(escaped),
            "first_exit": first_code, "leftovers_after_kill": _leftovers(after_kill, ref),
            "tmp_after_kill": after_kill["tmp"],
            "rerun_exit": rerun.returncode, "rerun_s": round(rerun_s, 1),
            "rerun_error": _error_line(rerun.stdout + rerun.stderr) if rerun.returncode else "",
            "wheels_after": after["wheels"], "published_after": after["published"], **verdict}


def _error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith(("error", "✗"))]
    return (lines[-1] if lines else (output.strip().splitlines() or [""])[-1])[:400]


# ---- what a folder holds ------------------------------------------------------------------------------------

# Temporary files, partial folders and lock files (any place in the cache, output and index).
LEFTOVER = re.compile(r"(\.tmp$|\.part$|\.partial|\.old-|\.lock$|^lock$|\.pid$|\.tmp\b|^tmp[a-z0-9_]{6,}$)")


def _wheel_content(path: Path) -> str:
    """sha256 over the wheel's members except the provenance file and its RECORD line."""
    digest = hashlib.sha256()
    with zipfile.ZipFile(path) as zf:
        for name in sorted(zf.namelist()):
            if name.endswith("/" + PROVENANCE):
                continue
            data = zf.read(name)
            if name.endswith(".dist-info/RECORD"):
                data = b"\n".join(line for line in data.splitlines() if PROVENANCE.encode() not in line)
            digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def snapshot(folder: Path) -> dict[str, Any]:
    wheels = sorted((folder / "wheels").glob("*.whl"))
    published = sorted((folder / "wheels" / "published").glob("*.whl"))
    index = {}
    if (folder / "wheels" / "published").is_dir():
        for p in sorted((folder / "wheels" / "published").rglob("*")):
            if p.is_file():
                index[str(p.relative_to(folder / "wheels" / "published"))] = hashlib.sha256(p.read_bytes()).hexdigest()
    named = []
    for p in folder.rglob("*"):
        rel = p.relative_to(folder)
        if rel.parts[0] == "tmp" or (rel.parts[:2] == ("cache", "build") and len(rel.parts) > 3):
            continue  # CMake's own build tree (its files are the build's business, not this tool's state)
        if LEFTOVER.search(p.name):
            named.append(str(rel))
    pages = {}
    for p in sorted((folder / "wheels" / "published" / "simple").rglob("index.html")) if index else []:
        pages[str(p.relative_to(folder / "wheels" / "published"))] = p.read_text()
    return {
        "wheels": {w.name: {"sha256": hashlib.sha256(w.read_bytes()).hexdigest(), "content": _wheel_content(w)}
                   for w in wheels},
        "published": {w.name: {"sha256": hashlib.sha256(w.read_bytes()).hexdigest(), "content": _wheel_content(w)}
                      for w in published},
        "index": index, "pages": pages, "named": sorted(named),
        "tmp": sorted(p.name for p in (folder / "tmp").iterdir()) if (folder / "tmp").is_dir() else [],
    }


_HEX = re.compile(r"[0-9a-f]{8,}")


def _norm(path: str) -> str:
    # Some cache names hash the folder they live in (a mirror of `example:` repos: minidep-5102e49230.git.lock, a
    # test environment env-23d47563db2a): another work folder, another name for the same file. Compared with hex
    # runs blanked (the build keys, the same in every folder, compare equal either way).
    return _HEX.sub("#", path)


def _leftovers(snap: dict[str, Any], ref: dict[str, Any]) -> list[str]:
    return _new_names(snap["named"], ref)


def _new_names(named: list[str], ref: dict[str, Any]) -> list[str]:
    there = {_norm(p) for p in ref["named"]}
    return sorted(p for p in named if _norm(p) not in there)


def compare(snap: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    def same(kind: str, key: str) -> bool:
        return snap[kind].keys() == ref[kind].keys() and all(snap[kind][w][key] == ref[kind][w][key] for w in snap[kind])

    index_bytes = snap["index"] == ref["index"]
    index_content = index_bytes
    if not index_bytes and snap["index"].keys() == ref["index"].keys():
        # The pages name the wheel's sha256: read as the reference's, are they the same pages?
        swap = {v["sha256"]: ref["published"][w]["sha256"] for w, v in snap["published"].items() if w in ref["published"]}
        pages = dict(snap["pages"])
        for old, new in swap.items():
            pages = {k: v.replace(old, new) for k, v in pages.items()}
        wheels_same = all(snap["index"][k] == ref["index"][k] for k in snap["index"] if k.endswith(".whl")) or \
            same("published", "content")
        index_content = pages == ref["pages"] and wheels_same
    return {"wheel_bytes": same("wheels", "sha256"), "wheel_content": same("wheels", "content"),
            "published_bytes": same("published", "sha256"), "published_content": same("published", "content"),
            "index_bytes": index_bytes, "index_content": index_content, "leftovers": _leftovers(snap, ref),
            # The temporary folder (TMPDIR) is not the cache, output or index: counted, not in the verdict.
            "tmp_left": sorted(set(snap["tmp"]) - set(ref["tmp"]))}


# ---- the command --------------------------------------------------------------------------------------------


def run_study(work: Path, workers: int, limit: int | None, states: tuple[str, ...] = ("cold", "warm")) -> None:
    (RAW / "logs").mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    make_warm_base(work)
    # Each worker runs its points in a folder of its own, always the same one (slot-N): a build's libraries carry
    # bytes that depend on the folder they were built in (its path in the GNU build ID and debug strings), so
    # each point is compared with an uninterrupted run in the same folder: the slot's references.
    def refs_of(slot: int) -> None:
        for state in ("cold", "warm"):
            path = RAW / f"reference-{state}-slot{slot}.json"
            if not path.exists():
                ref = reference(work, state, slot)
                path.write_text(json.dumps(ref, indent=1, sort_keys=True) + "\n")
                print(f"reference {state} slot {slot}: {ref['seconds']} s, stages {ref['stages']}", flush=True)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(refs_of, range(workers)))
    refs = _references(RAW)
    slots: queue.Queue[int] = queue.Queue()
    for slot in range(workers):
        slots.put(slot)
    results = RAW / "points.jsonl"
    done = {json.loads(line)["id"] for line in results.read_text().splitlines()} if results.exists() else set()
    todo = [p for p in POINTS if p["id"] not in done and p["state"] in states][:limit]
    print(f"{len(done)} points done, {len(todo)} to run, {workers} at a time", flush=True)
    lock = threading.Lock()

    def one(point: dict[str, Any]) -> None:
        slot = slots.get()
        try:
            row = kill_point(work, point, refs[f"{point['state']}-{slot}"], slot, RAW / "logs")
        except Exception as exc:  # a harness failure is kept as such, not counted as the tool's
            row = {**point, "slot": slot, "harness_error": repr(exc)}
        finally:
            slots.put(slot)
        with lock, results.open("a") as fh:
            fh.write(json.dumps(row, sort_keys=True) + "\n")
        ok = _recovered(row)
        print(f"{time.strftime('%H:%M:%S')} point {point['id']:3d} {point['state']} {point['anchor']} "
              f"{point['fraction']}: {'recovered' if ok else 'NOT RECOVERED'} "
              f"(rerun exit {row.get('rerun_exit')}, last mark {row.get('last_mark')})", flush=True)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, todo))


def _references(raw: Path) -> dict[str, dict[str, Any]]:
    """`state-slot` -> that slot's uninterrupted run from that state."""
    found = {}
    for path in sorted(raw.glob("reference-*-slot*.json")):
        ref = json.loads(path.read_text())
        found[f"{ref['state']}-{ref['slot']}"] = ref
    return found


def _recovered(row: dict[str, Any]) -> bool:
    return (row.get("rerun_exit") == 0 and bool(row.get("wheel_content")) and bool(row.get("published_content"))
            and bool(row.get("index_content")) and not row.get("leftovers"))


def report(raw: Path, out: Path) -> None:
    refs = _references(raw)
    rows = [json.loads(line) for line in (raw / "points.jsonl").read_text().splitlines()]
    rows.sort(key=lambda r: r["id"])
    for r in rows:  # the names compared as _norm does (rows measured before it compared them unnormalised)
        if "harness_error" not in r:
            ref = refs[f"{r['state']}-{r['slot']}"]
            r["leftovers"] = _new_names(r["leftovers"], ref)
            r["leftovers_after_kill"] = _new_names(r["leftovers_after_kill"], ref)
    planned = {p["id"] for p in POINTS}
    by_stage: dict[str, dict[str, int]] = {}
    failures = []
    for r in rows:
        where = "harness error" if "harness_error" in r else (
            "after the run ended" if r["finished_before_kill"] else (r["last_mark"] or "before any stage"))
        cell = by_stage.setdefault(where, {"points": 0, "recovered": 0})
        cell["points"] += 1
        if _recovered(r):
            cell["recovered"] += 1
        else:
            failures.append({k: r.get(k) for k in ("id", "state", "anchor", "fraction", "last_mark", "rerun_exit",
                                                    "rerun_error", "leftovers", "wheel_content", "index_content",
                                                    "harness_error")})
    ran = [r for r in rows if "harness_error" not in r]
    result = {
        "what": "SIGKILL to the process group of `build-kernel --recipe demo` (make demo's pipeline) at fixed points, "
                "then the same command again (bench/faults/kill_anywhere.py)",
        "references": {k: {"seconds": r["seconds"], "stages": r["stages"], "folder": r["folder"],
                           "wheel": r["wheels"], "index_files": sorted(r["index"])} for k, r in refs.items()},
        "points_planned": len(planned), "points_run": len(ran),
        "recovered": sum(_recovered(r) for r in ran),
        "rerun_green": sum(r["rerun_exit"] == 0 for r in ran),
        "wheel_bytes_identical": sum(bool(r["wheel_bytes"]) for r in ran),
        "wheel_content_identical": sum(bool(r["wheel_content"]) for r in ran),
        "index_bytes_identical": sum(bool(r["index_bytes"]) for r in ran),
        "index_content_identical": sum(bool(r["index_content"]) for r in ran),
        "with_leftovers": sum(bool(r["leftovers"]) for r in ran),
        "leftovers_right_after_kill": sum(bool(r["leftovers_after_kill"]) for r in ran),
        "tmpdir_entries_left_after_rerun": sum(len(r["tmp_left"]) for r in ran),
        "points_leaving_tmpdir_entries": sum(bool(r["tmp_left"]) for r in ran),
        "killed_while_running": sum(not r["finished_before_kill"] for r in ran),
        "escaped_the_group": sorted({n for r in ran for n in r["escaped"]}),
        "by_last_mark": dict(sorted(by_stage.items())),
        "not_recovered": failures,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--work", type=Path, default=Path("/tmp/kill_anywhere"))
    r.add_argument("--workers", type=int, default=1)
    r.add_argument("--limit", type=int)
    # Cold points rebuild: after a commit that changes the built libraries, run them with new references (remove
    # raw/kill_anywhere/reference-cold-*.json); warm points reuse the warm base's wheel and stay comparable.
    r.add_argument("--state", choices=("cold", "warm"), action="append")
    rep = sub.add_parser("report")
    rep.add_argument("raw", type=Path)
    rep.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "run":
        run_study(args.work, args.workers, args.limit, tuple(args.state or ("cold", "warm")))
    else:
        report(args.raw, args.out)


if __name__ == "__main__":
    main()
