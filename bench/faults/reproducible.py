"""Reproducible wheels (issue 68 item 6): pairs of builds of the same inputs in other folders, compared byte for byte.

    python bench/faults/reproducible.py pair RECIPE NAME [--work DIR]     # two builds, two folders, two caches
    python bench/faults/reproducible.py collect NAME RECIPE DIR1 DIR2     # a pair built before (same commands)
    python bench/faults/reproducible.py real OVERLAY [--work DIR] [--tu FRAGMENTS]...  # the real tree, a subset
    python bench/faults/reproducible.py report bench/faults/raw/reproducible --out bench/faults/results/reproducible.json

`pair`: `build-kernel --cache-dir D/cache --output-dir D/out --arch 12.0a build --recipe RECIPE` in D = WORK/NAME-1,
then (after it ended: another time, another folder, another cache) in WORK/NAME-2; the two wheels compared
(build_kernel.stages.verify.rebuild.compare: which members differ and, for an ELF member, which sections).

`real`: the real 12.0a tree (OVERLAY: nightly-cu130 with `torch = "existing"` and the sgl-flash-attn stand-in;
git reaches GitHub through `source .device/gitenv.sh`, see bench/gpu_host/make_device_folder.sh) in two folders
with two caches. A whole build is ~1,200 compiler CPU s on 2 shared cores, so each folder runs the tool's build
up to its first compile (fetch, patch, CMake configure with the tool's flags and launchers: build.ninja as a full
build has it), which is then stopped, and ninja compiles only the chosen TUs' objects there (`--tu`: fragments
that name one source each). Each pair of objects is compared section by section, then each object is linked
alone into a shared library (`g++ -shared`, the build ID on) and stripped as CMake's install does, and those
compared too: what would reach the wheel.

Raw: raw/reproducible/<name>.json, one per pair (commands, folders, start/end times, sha256s, differences).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from build_kernel.stages.builder import provenance, reproducible
from build_kernel.stages.verify import rebuild

PY = str(REPO / ".venv/bin/python")
ARCH = "12.0a"
# The real subset, as TARGET:SOURCE-SUFFIX (sgl-kernel compiles some sources into both common_ops libraries): a host
# C++ TU of sgl-kernel, a fetched dependency's CUDA TU (its folder is in the cache, not the build folder), and a
# sgl-kernel CUDA TU (anonymous namespaces, torch headers), lightest first.
REAL_TUS = ("common_ops_sm100_build:src/csrc/memory/weak_ref_tensor.cpp", "common_ops_sm100_build:/csrc/norm.cu",
            "common_ops_sm100_build:src/csrc/unity/flashinfer_1.cu")


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_cmd(folder: Path, recipe: str) -> list[str]:
    return [PY, "-m", "build_kernel", "--cache-dir", str(folder / "cache"), "--output-dir", str(folder / "out"),
            "--arch", ARCH, "build", "--recipe", recipe]


def side(folder: Path, recipe: str) -> dict[str, Any]:
    """One build of the pair: where, when, the wheel and its run record (beside it)."""
    [wheel] = list((folder / "out").glob("*.whl"))
    run = provenance.read(wheel) or {}  # the run's record beside the wheel; inside it for a wheel built before
    return {"folder": str(folder), "cache": str(folder / "cache"), "command": build_cmd(folder, recipe),
            "wheel": wheel.name, "sha256": sha256(wheel), "start": run.get("start"), "end": run.get("end"),
            "cpu_seconds": run.get("cpu_seconds"), "host": run.get("host")}


def compare_wheels(one: Path, two: Path) -> list[dict[str, Any]]:
    [a], [b] = list((one / "out").glob("*.whl")), list((two / "out").glob("*.whl"))
    return [{"member": d.member, "what": d.what, "sections": list(d.sections)} for d in rebuild.compare(a, b)]


def collect(name: str, recipe: str, one: Path, two: Path, out: Path, note: str = "") -> Path:
    data = {"pair": name, "kind": "wheel", "recipe": recipe, "arch": ARCH, "builds": [side(one, recipe), side(two, recipe)],
            "differences": compare_wheels(one, two), "note": note}
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def pair(recipe: str, name: str, work: Path, out: Path) -> Path:
    folders = [work / f"{name}-{i}" for i in (1, 2)]
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        with (folder / "build.log").open("w") as log:
            subprocess.run(["nice", "-n", "10", *build_cmd(folder, recipe)], stdout=log, stderr=subprocess.STDOUT,
                           check=True, cwd=REPO)
    return collect(name, recipe, *folders, out)


def configure_only(folder: Path, recipe: str) -> Path:
    """The tool's build in `folder` up to its first compile (build.ninja written, ninja started), then stopped."""
    if done := list((folder / "cache/build").glob("*/cmake/.ninja_log")):  # configured by an earlier run
        return done[0].parent
    log = (folder / "build.log").open("w")
    proc = subprocess.Popen(["nice", "-n", "10", *build_cmd(folder, recipe)], stdout=log, stderr=subprocess.STDOUT,
                            cwd=REPO, start_new_session=True)
    try:
        while proc.poll() is None:
            started = list((folder / "cache/build").glob("*/cmake/.ninja_log"))
            if started:
                return started[0].parent
            time.sleep(1)
        raise SystemExit(f"the build in {folder} ended (rc {proc.returncode}) before compiling: see {folder}/build.log")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


_BUILD = re.compile(r"^build (\S+\.o): \S+ (\S+)")


def objects_for(cmake: Path, fragments: tuple[str, ...]) -> dict[str, str]:
    """`TARGET:SUFFIX` -> the object build.ninja compiles for TARGET from the one source whose path ends with SUFFIX."""
    rules = [m.groups() for line in (cmake / "build.ninja").read_text().splitlines() if (m := _BUILD.match(line))]
    found = {}
    for fragment in fragments:
        target, _, suffix = fragment.partition(":")
        hits = [obj for obj, src in rules if obj.startswith(f"CMakeFiles/{target}.dir/") and src.endswith(suffix)]
        if len(hits) != 1:
            raise SystemExit(f"{fragment!r} names {len(hits)} sources of {cmake}/build.ninja, not one")
        found[fragment] = hits[0]
    return found


def linked(obj: Path, out: Path) -> Path:
    """`obj` alone in a shared library with a GNU build ID, stripped as `cmake --install --strip` does."""
    subprocess.run(["g++", "-shared", "-Wl,--build-id=sha1", "-o", str(out), str(obj)], check=True)
    subprocess.run(["strip", str(out)], check=True)
    return out


def real(overlay: str, work: Path, fragments: tuple[str, ...], out: Path, *, compile_: bool = True,
         note: str = "") -> Path:
    """`compile_` False: compare what the two folders hold (a TU compiled in one folder only is listed as such:
    the rule, written before the run, for a box too loaded to finish them all in the session's time)."""
    folders = [work / f"real-{i}" for i in (1, 2)]
    sides = []
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        start = now()
        cmake = configure_only(folder, overlay)
        targets = objects_for(cmake, fragments)
        if not compile_:
            sides.append({"folder": str(folder), "cache": str(folder / "cache"), "cmake": str(cmake), "start": None,
                          "end": None, "objects": targets, "configure_command": build_cmd(folder, overlay),
                          "compiled_at": {f: _mtime(cmake / o) for f, o in targets.items()}})
            continue
        # nvcc's host steps get their prefix maps by environment at compile time, as the tool's build gives them
        # (CFLAGS/CXXFLAGS and the nvcc launcher are in build.ninja since configure).
        env = {**os.environ, **reproducible.flags(reproducible.prefix_maps(cmake.parent, folder / "cache"), os.environ,
                                                  host=False)}
        with (folder / "ninja.log").open("a") as log:  # ninja compiles what is not up to date (a rerun: nothing)
            subprocess.run(["nice", "-n", "10", "ninja", "-C", str(cmake), "-j", "2", *targets.values()], stdout=log,
                           stderr=subprocess.STDOUT, check=True, env=env)
        sides.append({"folder": str(folder), "cache": str(folder / "cache"), "cmake": str(cmake), "start": start,
                      "end": now(), "objects": targets,
                      "configure_command": build_cmd(folder, overlay)})
    rows: list[dict[str, Any]] = []
    for fragment in fragments:
        a, b = (Path(s["cmake"]) / s["objects"][fragment] for s in sides)
        if not (a.is_file() and b.is_file()):
            rows.append({"tu": fragment, "compiled": [a.is_file(), b.is_file()]})
            continue
        so_a, so_b = linked(a, folders[0] / "one.so"), linked(b, folders[1] / "one.so")
        rows.append({"tu": fragment, "compiled": [True, True], "object_identical": a.read_bytes() == b.read_bytes(),
                     "object_sections": list(rebuild.elf_sections(a.read_bytes(), b.read_bytes())),
                     "object_strtab_names": _strtab_differences(a, b),
                     "linked_stripped_identical": so_a.read_bytes() == so_b.read_bytes(),
                     "linked_stripped_sections": list(rebuild.elf_sections(so_a.read_bytes(), so_b.read_bytes()))})
    data = {"pair": "real-12.0a-subset", "kind": "objects", "recipe": overlay, "arch": ARCH, "builds": sides,
            "tus": rows, "note": note}
    out.mkdir(parents=True, exist_ok=True)
    path = out / "real-12.0a-subset.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def _mtime(path: Path) -> str | None:
    if not path.is_file():
        return None
    return dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc).isoformat(timespec="seconds")


def _strtab_differences(a: Path, b: Path) -> list[list[str]]:
    """The symbol-table names that differ (nvcc's temporary file name, tmpxft_<pid>_...), as [one, two] pairs."""
    def names(path: Path) -> list[str]:
        return subprocess.run(["nm", "-a", str(path)], capture_output=True, text=True, check=True).stdout.splitlines()

    return [[x, y] for x, y in zip(names(a), names(b), strict=False) if x != y]


def report(raw: Path, out: Path) -> None:
    """The pairs as one table: per pair, identical or the members/sections that differ."""
    pairs = []
    for path in sorted(raw.glob("*.json")):
        data = json.loads(path.read_text())
        row: dict[str, Any] = {"pair": data["pair"], "kind": data["kind"], "recipe": data["recipe"],
                               "arch": data["arch"],
                               "folders": [b["folder"] for b in data["builds"]],
                               "caches": [b["cache"] for b in data["builds"]],
                               "starts": [b["start"] for b in data["builds"]], "note": data.get("note", "")}
        if data["kind"] == "wheel":
            row["sha256"] = [b["sha256"] for b in data["builds"]]
            row["identical"] = not data["differences"]
            row["differences"] = data["differences"]
        else:
            row["tus"] = [t if not all(t["compiled"]) else
                          {"tu": t["tu"], "compiled": t["compiled"], "object_identical": t["object_identical"],
                           "object_sections": t["object_sections"],
                           "object_strtab_names": t["object_strtab_names"],
                           "linked_stripped_identical": t["linked_stripped_identical"]} for t in data["tus"]]
            compared = [t for t in data["tus"] if all(t["compiled"])]
            row["identical"] = bool(compared) and all(t["linked_stripped_identical"] for t in compared)
        pairs.append(row)
    summary = {"pairs": len(pairs), "identical": sum(p["identical"] for p in pairs)}
    out.write_text(json.dumps({"summary": summary, "pairs": pairs}, indent=2, sort_keys=True) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    raw_default = REPO / "bench/faults/raw/reproducible"
    p = sub.add_parser("pair")
    p.add_argument("recipe")
    p.add_argument("name")
    p.add_argument("--work", type=Path, default=Path("/tmp/bk-reproducible"))
    c = sub.add_parser("collect")
    c.add_argument("name")
    c.add_argument("recipe")
    c.add_argument("one", type=Path)
    c.add_argument("two", type=Path)
    c.add_argument("--note", default="")
    r = sub.add_parser("real")
    r.add_argument("overlay")
    r.add_argument("--work", type=Path, default=Path("/tmp/bk-reproducible"))
    r.add_argument("--tu", action="append", default=None)
    r.add_argument("--compare-only", action="store_true", help="compare what the two folders hold, compile nothing")
    r.add_argument("--note", default="")
    rep = sub.add_parser("report")
    rep.add_argument("raw", type=Path)
    rep.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.cmd == "pair":
        print(pair(args.recipe, args.name, args.work, raw_default))
    elif args.cmd == "collect":
        print(collect(args.name, args.recipe, args.one, args.two, raw_default, args.note))
    elif args.cmd == "real":
        print(real(args.overlay, args.work, tuple(args.tu or REAL_TUS), raw_default, compile_=not args.compare_only,
                   note=args.note))
    else:
        report(args.raw, args.out)


if __name__ == "__main__":
    main()
