"""Longest first: what stock ninja does with edge order, and build.ninja reordered by predicted time
(ninja_order), on a real CMake-generated manifest run by real ninja, through the CMAKE_MAKE_PROGRAM
script the build installs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from build_kernel import recipe
from build_kernel.errors import RecipeError
from build_kernel.stages.builder import ninja_order, profile, scheduling
from tests.conftest import copy_series, demo_recipe_text, run_cli, write_recipe

BIN = Path(sys.executable).parent
NINJA = shutil.which("ninja", path=str(BIN)) or shutil.which("ninja") or "ninja"
CMAKE = shutil.which("cmake", path=str(BIN)) or shutil.which("cmake") or "cmake"
PATCHES = sorted((Path(__file__).parent.parent / "patches/minikernel/v1/series").read_text().split())


def _ninja(folder: Path, *args: str) -> str:
    proc = subprocess.run([NINJA, "-C", str(folder), *args], capture_output=True, text=True, check=True, timeout=120)
    return proc.stdout + proc.stderr


def test_stock_ninja_starts_deeper_edges_first_then_manifest_order_and_ignores_its_log(tmp_path: Path) -> None:
    """The fact the reordering rests on (ninja >= 1.12): at -j1 independent edges run in manifest order, not
    in the order a phony lists them; a deeper chain's head runs before shallower earlier edges; and a slow
    edge stays last on the next run although .ninja_log recorded its time."""
    (tmp_path / "build.ninja").write_text(
        "d = 0\nrule t\n  command = sleep $d && echo $out >> order.txt && touch $out\n"
        "build x.o: t\nbuild y.o: t\nbuild slow.o: t\n  d = 0.3\nbuild deep.o: t\n"
        "build mid: t deep.o\nbuild all: phony slow.o y.o x.o mid\ndefault all\n")
    _ninja(tmp_path, "-j1")
    assert (tmp_path / "order.txt").read_text().split() == ["deep.o", "x.o", "y.o", "slow.o", "mid"]
    for name in ("x.o", "y.o", "slow.o", "deep.o", "mid", "order.txt"):
        (tmp_path / name).unlink()
    _ninja(tmp_path, "-j1")
    assert (tmp_path / "order.txt").read_text().split() == ["deep.o", "x.o", "y.o", "slow.o", "mid"]


MANIFEST = """\
# a comment stays where it is
ninja_required_version = 1.5
include rules.ninja

build a.o: cc src/a.cc || order
  FLAGS = -O2 $
      -g

build b$ c.o: cc src/b.cc
build c.o: cc src/c.cc
  FLAGS = -O0
# between blocks
build lib.so: link a.o b$ c.o c.o
rule late
  command = true
build d.o: late src/d.cc
build e.o: late src/e.cc
default lib.so
"""


def test_reorder_moves_whole_blocks_within_runs_and_is_idempotent() -> None:
    seconds = {"a.o": 1.0, "b c.o": None, "c.o": 9.0, "d.o": 2.0, "e.o": 5.0}
    out = ninja_order.reorder(MANIFEST, seconds)
    blocks = [body for kind, body, _ in ninja_order.statements(out) if kind == "build"]
    # c (9 s) then a (1 s), then b (no prediction) in the first run; the link keeps its slot; e before d
    # only after `rule late`, which no block crosses.
    assert [b.split(":")[0] for b in blocks] == ["build c.o", "build a.o", "build b$ c.o", "build lib.so",
                                                 "build e.o", "build d.o"]
    assert "build a.o: cc src/a.cc || order\n  FLAGS = -O2 $\n      -g\n" in out  # continuation kept with it
    assert sorted(ninja_order.statements(out)) == sorted(ninja_order.statements(MANIFEST))  # byte for byte
    fixed = [body for kind, body, _ in ninja_order.statements(out) if kind != "build"]
    assert fixed == [body for kind, body, _ in ninja_order.statements(MANIFEST) if kind != "build"]
    assert ninja_order.reorder(out, seconds) == out
    with pytest.raises(ValueError, match="indented line outside"):
        ninja_order.statements("# x\n  v = 1\n")


SOURCES = {"a.cpp": 0, "b.cpp": 1, "c.cpp": 2, "d.cpp": 3}


def _project(root: Path) -> Path:
    src = root / "src"
    src.mkdir(parents=True)
    for name, i in SOURCES.items():
        (src / name).write_text(f"int f{i}() {{ return {i}; }}\n")
    # A target the default build leaves out (as sgl-kernel's sm90 variant when no 9.x arch is asked).
    (src / "unbuilt.cpp").write_text("int g() { return 0; }\n")
    (src / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.20)\nproject(t CXX)\n"
                                        f"add_library(t SHARED {' '.join(SOURCES)})\n"
                                        "add_library(unbuilt SHARED EXCLUDE_FROM_ALL unbuilt.cpp)\n")
    return src


def _configure(src: Path, build: Path, script: Path, db: Path) -> str:
    launcher = ";".join([sys.executable, "-S", scheduling.RECORDER, "--db", str(db), "--strip", str(src), "--"])
    proc = subprocess.run([CMAKE, "-S", str(src), "-B", str(build), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={script}",
                           f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}"], capture_output=True, text=True, timeout=300,
                          check=False, env={k: v for k, v in os.environ.items() if k != "MAKEFLAGS"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def _object_order(build: Path) -> list[str]:
    text = (build / "build.ninja").read_text()
    return [line.split(".dir/")[1].split(".o:")[0] for line in text.splitlines()
            if line.startswith("build CMakeFiles/t.dir/") and ".o:" in line]


def _compiled(build: Path, n: int) -> list[str]:
    """The last `n` objects ninja compiled, by start time (.ninja_log: start, end, mtime, output, hash)."""
    rows = [line.split("\t") for line in (build / ".ninja_log").read_text().splitlines()[1:]]
    objects = [r for r in rows if r[3].endswith(".o")][-n:]
    return [r[3].split(".dir/")[1].removesuffix(".o") for r in sorted(objects, key=lambda r: int(r[0]))]


def test_cmake_manifest_longest_first_by_shipped_then_recorded_profile(tmp_path: Path) -> None:
    src, build, db = _project(tmp_path), tmp_path / "build", tmp_path / "profile.sqlite"
    shipped = tmp_path / "order.csv"
    shipped.write_text("# from another machine\nsource,seconds\nd.cpp,30\nb.cpp,20\n")
    script = ninja_order.install(tmp_path / "bin", python=sys.executable, ninja=NINJA, build_dir=build,
                                 data=ninja_order.predictions(db, shipped, [src]))
    # CMake orders it itself: right after generating it runs the script with `-t restat build.ninja`.
    _configure(src, build, script, db)
    assert _object_order(build) == ["d.cpp", "b.cpp", "a.cpp", "c.cpp"]  # predicted first, the rest in CMake's order
    # ... and lists the compiles the build will run for the governor (predicted or not; not those of a
    # target outside `all`, which would count as still to come for the whole build).
    edges = tmp_path / "bin" / ninja_order.EDGES
    assert json.loads(edges.read_text()) == {"sources": sorted(SOURCES)}
    # A build of named targets: the list is theirs.
    subprocess.run([str(script), "-C", str(build), "-n", "unbuilt"], capture_output=True, text=True, check=True)
    assert json.loads(edges.read_text()) == {"sources": ["unbuilt.cpp"]}
    subprocess.run([str(script), "-C", str(build), "-t", "restat", "build.ninja"], capture_output=True, check=True)
    assert json.loads(edges.read_text()) == {"sources": sorted(SOURCES)}
    # The rewrite does not make build.ninja look out of date (ninja would re-run CMake).
    explained = _ninja(build, "-n", "-d", "explain", "build.ninja")
    assert "no work to do" in explained and "dirty" not in explained
    out = subprocess.run([str(script), "-C", str(build), "-j1"], capture_output=True, text=True, check=True).stderr
    assert "5 compile(s) in order, longest first by the shipped profile (2 predicted; first d.cpp 30 s, b.cpp 20 s)" in out
    assert _compiled(build, 4) == ["d.cpp", "b.cpp", "a.cpp", "c.cpp"]
    assert "no work to do" in _ninja(build)  # reordering made nothing dirty

    # The recorder measured those four compiles; now the recorded profile wins over the shipped one, by
    # source and flags digest first: c.cpp's 99 s under other flags does not count.
    digest = {r.source: r.flags_digest for r in profile.rows(db)}
    assert set(digest) == set(SOURCES)
    row = profile.rows(db)[0]
    profile.insert(db, [profile.Compile(**{**vars(row), "source": s, "flags_digest": d, "wall_s": w})
                        for s, d, w in (("a.cpp", digest["a.cpp"], 50.0), ("b.cpp", digest["b.cpp"], 10.0),
                                        ("d.cpp", digest["d.cpp"], 5.0), ("c.cpp", digest["c.cpp"], 1.0),
                                        ("c.cpp", "other-flags", 99.0))])
    ninja_order.install(tmp_path / "bin", python=sys.executable, ninja=NINJA, build_dir=build,
                        data=ninja_order.predictions(db, shipped, [src]))
    _configure(src, build, script, db)  # CMake regenerates (CMake's order) and the script orders it again
    assert _object_order(build) == ["a.cpp", "b.cpp", "d.cpp", "c.cpp"]
    _ninja(build, "-t", "clean")
    out = subprocess.run([str(script), "-C", str(build), "-j1"], capture_output=True, text=True, check=True).stderr
    assert "longest first by the recorded profile (4 predicted; first a.cpp 50 s" in out
    assert _compiled(build, 4) == ["a.cpp", "b.cpp", "d.cpp", "c.cpp"]
    assert "no work to do" in _ninja(build)


def test_cmakes_own_ninja_calls_start_no_python(tmp_path: Path) -> None:
    """CMake calls CMAKE_MAKE_PROGRAM for itself (`--version`, a build in each try-compile folder) ~26 times a
    configure: the script runs ninja straight for those, Python (~0.07 s a start) only where it orders."""
    src, build, db, calls = _project(tmp_path), tmp_path / "build", tmp_path / "profile.sqlite", tmp_path / "calls"

    def logged(name: str, real: str) -> str:
        path = tmp_path / f"logged-{name}"
        path.write_text(f'#!/bin/sh\necho "{name} $(pwd -P) $*" >> {calls}\nexec {real} "$@"\n')
        path.chmod(0o755)
        return str(path)

    script = ninja_order.install(tmp_path / "bin", python=logged("python", sys.executable), ninja=logged("ninja", NINJA),
                                 build_dir=build, data=ninja_order.predictions(db, None, [src]))
    _configure(src, build, script, db)
    subprocess.run([str(script), "-C", str(build)], capture_output=True, check=True)  # from elsewhere: -C
    lines = [line.split(" ", 2) for line in calls.read_text().splitlines()]
    ninja_calls = [(cwd, args) for who, cwd, args in lines if who == "ninja"]
    assert any(args == "--version" for _, args in ninja_calls)
    try_compiles = [cwd for cwd, _ in ninja_calls if "/CMakeFiles/CMakeScratch/" in cwd]
    assert try_compiles, ninja_calls
    python_calls = [args.split(" -- ")[1] for who, _, args in lines if who == "python"]
    assert python_calls == [f"-C {build} -t restat build.ninja", f"-C {build}"]  # CMake's, then mine
    assert any(args.endswith("-t restat build.ninja") for cwd, args in ninja_calls if cwd in try_compiles)
    assert ninja_order.EDGES in os.listdir(tmp_path / "bin")  # the restat ordered the build folder


def test_order_profile_is_checked_at_load(project: Path) -> None:
    copy_series(project, PATCHES, "v1")
    path = write_recipe(project, "r", demo_recipe_text(extra_build='order_profile = "r.profile.csv"\n'))
    with pytest.raises(RecipeError) as missing:
        recipe.load(str(path))
    [problem] = missing.value.problems
    assert problem.startswith(f"{path}:") and "build.order_profile: no such file " in problem
    assert str(project / "recipes" / "r.profile.csv") in problem and "relative to the recipe file" in problem
    (project / "recipes" / "r.profile.csv").write_text("tu,wall\ncsrc/a.cu,3\n")
    with pytest.raises(RecipeError, match=r"r\.toml:\d+: build\.order_profile: .*r\.profile\.csv: no seconds or "
                                          r"source column \(the header must name source and seconds\)"):
        recipe.load(str(path))
    (project / "recipes" / "r.profile.csv").write_text("source,seconds\ncsrc/a.cu,slow\n")
    with pytest.raises(RecipeError, match=r"data row 1: needs a source and seconds >= 0, not 'csrc/a.cu', 'slow'"):
        recipe.load(str(path))
    (project / "recipes" / "r.profile.csv").write_text("source,seconds,peak_gb\ncsrc/a.cu,3.5,1\n")
    assert recipe.load(str(path)).build.order_profile == str(project / "recipes" / "r.profile.csv")


def test_plan_says_what_orders_the_compiles(project: Path, tmp_path: Path) -> None:
    copy_series(project, PATCHES, "v1")
    (project / "recipes" / "r.profile.csv").write_text("source,seconds\ncsrc/light.cu,3\ncsrc/heavy.cu,40\n")
    path = write_recipe(project, "r", demo_recipe_text(extra_build='order_profile = "r.profile.csv"\n'))
    cache = tmp_path / "cache"

    def order() -> dict[str, object]:
        proc = run_cli("--cache-dir", str(cache), "--json", "plan", "--recipe", str(path))
        assert proc.returncode == 0, proc.stderr
        return dict(json.loads(proc.stdout)["scheduling"]["order"])

    assert order() == {"source": "shipped profile", "file": str(project / "recipes" / "r.profile.csv"),
                       "first": [{"source": "csrc/heavy.cu", "seconds": 40.0}, {"source": "csrc/light.cu", "seconds": 3.0}]}
    profile.insert(cache / "profile.sqlite", [profile.Compile(0.0, "csrc/x.cu", "", "nvcc", "d", "sm_120a", 1, 7.0, 7.0,
                                                              7.0, 0.0, 100.0, 100.0, 1, 0, 0, 0, 0, "/")])
    # A source of another project (a cache shared by recipes) does not set the shipped profile aside ...
    assert order()["source"] == "shipped profile"

    def record(source: str, wall: float) -> None:
        profile.insert(cache / "profile.sqlite", [profile.Compile(0.0, source, "", "nvcc", "d", "sm_120a", 1, wall,
                                                                  wall, wall, 0.0, 100.0, 100.0, 1, 0, 0, 0, 0, "/")])

    record("csrc/heavy.cu", 30.0)
    assert order()["source"] == "shipped profile"  # ... nor does knowing one of its two sources
    record("csrc/light.cu", 2.0)  # once this machine has measured them all, its own times order the build
    assert order() == {"source": "recorded profile", "file": None,
                       "first": [{"source": "csrc/heavy.cu", "seconds": 30.0}, {"source": "csrc/x.cu", "seconds": 7.0},
                                 {"source": "csrc/light.cu", "seconds": 2.0}]}
    text = run_cli("--cache-dir", str(cache), "plan", "--recipe", str(path)).stdout
    assert "longest first by the recorded profile: csrc/heavy.cu 30 s" in text
    # Nothing to order by: the table names the recipe key to set, brackets and all.
    bare = write_recipe(project, "bare", demo_recipe_text())
    text = run_cli("--cache-dir", str(tmp_path / "empty"), "plan", "--recipe", str(bare)).stdout
    assert "CMake's (no recorded profile, no [build] order_profile)" in " ".join(text.split())


def test_targets_of_a_ninja_command_line() -> None:
    assert ninja_order.targets_of(["-C", "build", "-j", "4", "-v"]) == []  # the defaults
    assert ninja_order.targets_of(["-C", "build", "-j4", "-k", "0", "install", "all"]) == ["install", "all"]
    assert ninja_order.targets_of(["-t", "restat", "build.ninja"]) == []  # a tool run builds nothing


def test_the_profile_that_knows_more_edges_orders_the_build() -> None:
    edges = {f"o/{n}.o": (f"csrc/{n}.cu", "d") for n in ("a", "b", "common")}
    data = {"recorded": {"exact": {}, "any": {"csrc/common.cu": 16.0}}, "shipped": {"csrc/a.cu": 300.0, "csrc/b.cu": 9.0}}
    # One source of the same name recorded for another project: the shipped profile still orders it.
    assert ninja_order.choose(edges, data) == (ninja_order.SHIPPED, {"o/a.o": 300.0, "o/b.o": 9.0, "o/common.o": None})
    data["recorded"]["any"] |= {"csrc/a.cu": 200.0}  # a tie: this machine's own times win
    assert ninja_order.choose(edges, data)[0] == ninja_order.RECORDED
    assert ninja_order.choose(edges, {"recorded": {"exact": {}, "any": {}}, "shipped": {}}) == (
        ninja_order.NONE, dict.fromkeys(edges))
