"""SIGKILL anywhere (issue 68 item 2): a killed run, then the same command, ends as an uninterrupted one.

The publish tests kill a real child process with SIGKILL at an exact line (the child kills itself there: a
barrier, not a timer): inside the wheel's copy into the static index, and between the copy and the pages.
The pipeline test kills `build-kernel --recipe demo` (make demo's pipeline, bench/faults/kill_anywhere.py's
command) once in each stage, at the stage's start line, and reruns it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from build_kernel import static_index
from build_kernel.series import load_series
from build_kernel.stages import publish as pub
from build_kernel.stages.verify.report import RECORD_SUFFIX
from tests.conftest import REPO_ROOT, DemoBuild, copy_series, demo_recipe_text, run_cli, write_recipe
from tests.test_build import BUILD_CACHE
from tests.test_publish import LOCAL, clean_env, listing, make_wheel, target_for

# The child: publish one wheel into a static folder, SIGKILLed (by itself) at `where`.
_KILLED_PUBLISH = textwrap.dedent("""
    import os, shutil, signal, sys
    from pathlib import Path
    from build_kernel import static_index
    from build_kernel.stages import publish as pub

    where, wheel, folder, tmp = sys.argv[1], Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    if where == "copy":  # half the wheel written into the copy's temporary file, then killed
        def half(source, dest, **kwargs):
            Path(dest).write_bytes(Path(source).read_bytes()[:200])
            die()
        shutil.copy2 = half
    else:  # the wheel copied in, killed before its pages are written
        static_index.regenerate = die
    target = pub.resolve_target(folder, None, env=os.environ, indexes_file=tmp / "none.toml", pypirc=tmp / "none")
    pub.publish([wheel], target, env=os.environ)
""")


@pytest.mark.parametrize(("where", "status"), [("copy", "copied"), ("pages", "unchanged")])
def test_publish_killed_midway_is_finished_by_the_rerun(tmp_path: Path, where: str, status: str) -> None:
    env = clean_env()
    wheel = make_wheel(tmp_path / "w", "bk-killed", f"0.1.0{LOCAL}")
    clean, folder = tmp_path / "clean", tmp_path / "killed"
    pub.publish([wheel], target_for(str(clean), tmp_path, env), env=env)
    child = subprocess.run([sys.executable, "-c", _KILLED_PUBLISH, where, str(wheel), str(folder), str(tmp_path)],
                           env=env, capture_output=True, text=True, check=False)
    assert child.returncode == -signal.SIGKILL, child.stderr
    left = sorted(p.name for p in folder.iterdir())
    if where == "copy":  # the killed copy's temporary file, and no wheel under its own name
        assert [n for n in left if n.endswith(".tmp")] and wheel.name not in left
    else:  # the wheel is there, but no page lists it
        assert wheel.name in left and not (folder / "simple" / "bk-killed" / "index.html").exists()

    done = pub.publish([wheel], target_for(str(folder), tmp_path, env), env=env)

    assert done.wheels[0].status == status
    assert done.wheels[0].imports == {"bk_killed": "ok"}  # installed back from the finished index
    assert listing(folder) == listing(clean)  # byte for byte the uninterrupted publish: no temporary file left
    assert not [p for p in folder.rglob("*") if p.name.startswith(".")]


def test_other_writers_temporaries_are_not_swept(tmp_path: Path) -> None:
    """Only the atomic writes' own temporary names are removed: a user's dotfile in the index folder stays."""
    from build_kernel import atomic

    (tmp_path / ".htaccess").write_text("Options +Indexes\n")
    (tmp_path / ".keep.tmp").write_text("")
    (tmp_path / ".page.html.abcd_123.tmp").write_text("half")
    assert [p.name for p in atomic.sweep_files(tmp_path)] == [".page.html.abcd_123.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".htaccess", ".keep.tmp"]


# ---------------------------------------------------------------------------- the pipeline, one kill per stage

# The demo recipe without its test stage (its environment alone takes longer than this test's budget; the study,
# bench/faults/kill_anywhere.py, kills it there too), publishing to a static index in the current folder.
_PUBLISHED = "./index"  # a folder (a bare word would name an index in indexes.toml)


def _recipe(project: Path) -> Path:
    text = demo_recipe_text()
    text = text[: text.index("# The miniature's own tests")] + f'[publish]\ntarget = "{_PUBLISHED}"\n'
    copy_series(project, [p.name for p in load_series(REPO_ROOT / "patches" / "minikernel" / "v1").patches], "v1")
    return write_recipe(project, "killed", text)


def _warm_copy(demo_build: DemoBuild, folder: Path) -> dict[str, str]:
    """The session's cache (its wheel cached: the build stage reuses it) and its verified wheel, copied."""
    for name in BUILD_CACHE:
        source = demo_build.cache / name
        if source.is_dir():
            shutil.copytree(source, folder / "cache" / name, symlinks=True)
        elif source.is_file():
            shutil.copy2(source, folder / "cache" / name)
    (folder / "out").mkdir()
    for path in (demo_build.wheel, demo_build.wheel.with_name(demo_build.wheel.name + RECORD_SUFFIX)):
        shutil.copy2(path, folder / "out" / path.name)
    return {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "BUILD_KERNEL_CACHE_DIR": str(folder / "cache"),
            "BUILD_KERNEL_OUTPUT_DIR": str(folder / "out")}


def _killed_at(cmd: list[str], cwd: Path, env: dict[str, str], mark: re.Pattern[str]) -> list[str]:
    """Run `cmd` in its own process group; SIGKILL the group the moment a line matches `mark`."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    seen = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if mark.match(line):
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.stdout.close()
    assert proc.wait() == -signal.SIGKILL, "".join(seen)  # killed there, not finished or failed before it
    return seen


# Where the kills land, one per stage, in order: a stage's start line, and for publish the line between the copy
# (the wheel and its pages in the index) and the install-back: the "already in wheels/published" case.
KILLS = {"fetch": r"▶ fetch", "patch": r"▶ patch", "build": r"▶ build", "verify": r"▶ verify",
         "publish": r"minikernel-\S+\.whl -> .*\(copied\)"}


@pytest.mark.slow
def test_pipeline_killed_once_in_each_stage_then_rerun(demo_build: DemoBuild, tmp_path: Path) -> None:
    """A chain, to keep the suite short (the study runs each point from a fresh copy): the run killed in fetch,
    its rerun killed in patch (it got through fetch), that one's in build, ..., in publish; then the same command
    once more ends green with the uninterrupted run's wheel and index, byte for byte, and nothing left behind."""
    project = tmp_path / "proj"
    (project / "recipes").mkdir(parents=True)
    recipe = _recipe(project)
    env = _warm_copy(demo_build, tmp_path)
    cmd = [sys.executable, "-m", "build_kernel", "--arch", "12.0a", "--recipe", str(recipe)]
    for mark in KILLS.values():
        _killed_at(cmd, project, env, re.compile(mark))

    rerun = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, check=False)

    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    index = project / _PUBLISHED
    assert (index / demo_build.wheel.name).read_bytes() == demo_build.wheel.read_bytes()
    assert (tmp_path / "out" / demo_build.wheel.name).read_bytes() == demo_build.wheel.read_bytes()
    clean = tmp_path / "clean"
    clean.mkdir()
    shutil.copy2(demo_build.wheel, clean / demo_build.wheel.name)
    static_index.regenerate(clean)
    assert listing(index) == listing(clean)  # the index an uninterrupted publish writes, byte for byte
    left = [str(p) for folder in (tmp_path / "cache", tmp_path / "out", index) for p in folder.rglob("*")
            if p.name.endswith((".tmp", ".part")) or ".partial-" in p.name or ".old-" in p.name]
    assert left == []


def test_git_locks_a_killed_fetch_left_in_a_mirror_are_removed_by_the_next_fetch(tmp_path: Path) -> None:
    """bench/faults/kill_anywhere.py's point 16 (killed during fetch) left `shallow.lock` in a mirror: a killed
    git's lock, which a later fetch into that mirror would refuse. The next fetch removes it, under the mirror's
    lock (no git of ours runs in it then), even when it has nothing to fetch."""
    cache = tmp_path / "cache"
    assert run_cli("--cache-dir", str(cache), "fetch", "--recipe", "demo").returncode == 0
    mirrors = sorted((cache / "mirrors").glob("*.git"))
    assert mirrors
    for repo in mirrors:  # what the killed git left (git's lock names)
        (repo / "shallow.lock").write_text("")
        (repo / "refs" / "build-kernel").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "build-kernel" / "pin.lock").write_text("")
    again = run_cli("--cache-dir", str(cache), "fetch", "--recipe", "demo")
    assert again.returncode == 0, again.stderr
    assert [str(p) for repo in mirrors for p in repo.rglob("*.lock")] == []
