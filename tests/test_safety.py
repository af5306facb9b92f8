"""The safety logic, each piece made to matter: tests that fail when it goes.

Found by mutation testing (`make mutate`, bench/code_health/mutation.py): publish's import check after
the install-back, the all-or-nothing restore after a partly applied series, the static
folder's lock and restore, the fetch cache's partial folder and marker, atomic writes.
Real pieces: git repos, wheels, pip, processes racing each other. The faults are injected
from outside where possible (a `git` on PATH that fails, or kills its caller, when a patch
is really applied; a wheel that will not import); the static index's page writer is
interposed on as in test_publish.py.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path
from typing import Any

import git
import pytest

from build_kernel import atomic, recipe
from build_kernel.errors import DiskFullError, FetchError, PatchError, PublishError
from build_kernel.plan import Plan, resolve
from build_kernel.resources import Resources
from build_kernel.stages import publish as pub
from build_kernel.stages.fetch import workspace
from build_kernel.stages.patch.apply import APPLIES, CONFLICT, OFFSET, UPSTREAM, apply_series, check_series, restore
from build_kernel.static_index import regenerate
from tests.conftest import REPO_ROOT, commit_files, write_recipe, write_series
from tests.test_publish import LOCAL, clean_env, listing, make_wheel, target_for

RES = Resources(cpus=2, cpus_why="test", memory_bytes=8 * 1024**3, memory_why="test")
CMAKE = """\
cmake_minimum_required(VERSION 3.26)
project(up LANGUAGES CXX)
set(UP_FLAGS -O3)
set(UP_STD 17)
cmake_policy(SET CMP0169 OLD)
cmake_policy(SET CMP0177 NEW)
add_library(up up.cc)
"""
HEADER = "Description: {what}\nOrigin: vendor, build-kernel tests\nForwarded: not-needed\nLast-Update: 2026-11-30\n---\n"
POLICY_DIFF = """\
diff --git a/CMakeLists.txt b/CMakeLists.txt
--- a/CMakeLists.txt
+++ b/CMakeLists.txt
@@ -2,6 +2,8 @@
 project(up LANGUAGES CXX)
 set(UP_FLAGS -O3)
 set(UP_STD 17)
-cmake_policy(SET CMP0169 OLD)
+if(POLICY CMP0169)
+  cmake_policy(SET CMP0169 OLD)
+endif()
 cmake_policy(SET CMP0177 NEW)
 add_library(up up.cc)
"""


def new_file_diff(name: str, text: str) -> str:
    return (f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n"
            f"@@ -0,0 +1 @@\n+{text}\n")


# 0001 changes a tracked file and creates one; 0002 creates a file.
PATCH_1 = HEADER.format(what="guard a policy, add a file") + POLICY_DIFF + new_file_diff("added.txt", "added by 0001")
PATCH_2 = HEADER.format(what="add another file") + new_file_diff("second.txt", "added by 0002")


@pytest.fixture
def upstream(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "upstream"
    sha = commit_files(repo, {"pkg/CMakeLists.txt": CMAKE, "pkg/up.cc": "int up() { return 1; }\n",
                              "pkg/pyproject.toml": '[project]\nname = "up"\nversion = "0.3.21"\n',
                              "README": "upstream\n"})
    return repo, sha


def make_plan(project: Path, repo: Path | str, commit: str, cache: Path, env: dict[str, str] | None = None, *,
              source: str = "", tables: str = "", info: str = "", patches: dict[str, str] | None = None) -> Plan:
    write_series(project, "s", "v1", {"0001-policy-and-file.patch": PATCH_1, "0002-second-file.patch": PATCH_2}
                 if patches is None else patches, info=info)
    write_recipe(project, "r", f"""
        [source]
        repo = "{repo}"
        commit = "{commit}"
        subdir = "pkg"
        {source}
        [patches]
        series = "s"
        version = "v1"
        [build]
        arch = ["12.0a"]
        {tables}
    """)
    return resolve(recipe.load("r", project), env=env or {}, resources=RES, cache_dir=cache)


def files_of(tree: Path) -> dict[str, bytes]:
    """Every file under `tree` but git's own, with its bytes."""
    return {str(p.relative_to(tree)): p.read_bytes() for p in sorted(tree.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(tree).parts}


def pristine(repo: Path, sha: str, dest: Path) -> dict[str, bytes]:
    """What a fresh checkout of `sha` holds, independently of the code under test."""
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(repo), str(dest)], check=True)
    subprocess.run(["git", "-C", str(dest), "checkout", "--quiet", "--detach", sha], check=True)
    return files_of(dest)


def git_status(tree: Path) -> str:
    return subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=all"],
                          capture_output=True, text=True, check=True).stdout


def fake_git(folder: Path, action: str) -> Path:
    """A `git` that runs the real one, except a real (not --cached, not --check) `apply` of
    0002: there it does `action` (a shell command) instead."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "git"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case " $* " in
          *" --cached "*|*" --check "*) ;;
          *" apply "*0002-*) {action} ;;
        esac
        exec {shutil.which("git")} "$@"
        """))
    script.chmod(0o755)
    return folder


# ---------------------------------------------------------------------------- (b) all or nothing


def test_series_failing_after_a_partial_apply_leaves_the_pristine_checkout(
        project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    """Both patches pass the check; the real apply of 0002 then fails (a file in its way):
    what 0001 already changed and created is undone, byte for byte, nothing stray is left."""
    repo, sha = upstream
    plan = make_plan(project, repo, sha, tmp_path / "cache")
    before = pristine(repo, sha, tmp_path / "pristine")
    (repo / "pkg" / "second.txt").write_text("an untracked file in the way of 0002\n")
    assert [s.state for s in check_series(repo, plan.series, "pkg", env=plan.env)] == [APPLIES, APPLIES]
    with pytest.raises(PatchError, match=r"0002-second-file\.patch.*already exists in working directory"):
        apply_series(repo, plan.series, "pkg", env=plan.env)
    assert files_of(repo) == before  # 0001's edit reverted, its new file gone, no leftovers
    assert git_status(repo) == ""
    assert git.Repo(repo).head.commit.hexsha == sha


def test_series_whose_apply_dies_midway_is_restored(project: Path, upstream: tuple[Path, str],
                                                    tmp_path: Path) -> None:
    """The same with git itself failing at the second patch (disk full, killed): all or nothing."""
    repo, sha = upstream
    fake = fake_git(tmp_path / "fakebin", "echo 'fatal: unable to write new index file' >&2; exit 128")
    plan = make_plan(project, repo, sha, tmp_path / "cache", env={"PATH": f"{fake}:{os.environ['PATH']}"})
    before = pristine(repo, sha, tmp_path / "pristine")
    with pytest.raises(PatchError, match=r"failed in .*unable to write new index file"):
        apply_series(repo, plan.series, "pkg", env=plan.env)
    assert files_of(repo) == before and git_status(repo) == ""


def test_series_applies_whole_and_restore_returns_to_head(project: Path, upstream: tuple[Path, str],
                                                          tmp_path: Path) -> None:
    repo, sha = upstream
    plan = make_plan(project, repo, sha, tmp_path / "cache")
    before = pristine(repo, sha, tmp_path / "pristine")
    statuses = apply_series(repo, plan.series, "pkg", env=plan.env)
    assert [(s.name, s.state) for s in statuses] == [("0001-policy-and-file.patch", APPLIES),
                                                     ("0002-second-file.patch", APPLIES)]
    assert statuses[0].files == ("CMakeLists.txt", "added.txt")
    after = files_of(repo)
    assert after["pkg/added.txt"] == b"added by 0001\n" and after["pkg/second.txt"] == b"added by 0002\n"
    assert b"if(POLICY CMP0169)" in after["pkg/CMakeLists.txt"]
    restore(repo)
    assert files_of(repo) == before and git_status(repo) == ""


def test_check_series_never_touches_the_tree_or_its_index(project: Path, upstream: tuple[Path, str],
                                                          tmp_path: Path) -> None:
    repo, sha = upstream
    plan = make_plan(project, repo, sha, tmp_path / "cache")
    before = files_of(repo)
    index = (repo / ".git" / "index").read_bytes()
    states = check_series(repo, plan.series, "pkg", env=plan.env)
    assert [(s.name, s.state, s.detail) for s in states] == [("0001-policy-and-file.patch", APPLIES, ""),
                                                            ("0002-second-file.patch", APPLIES, "")]
    assert files_of(repo) == before and git_status(repo) == "" and (repo / ".git" / "index").read_bytes() == index
    # Each patch is checked on top of the ones before it: with 0001 upstream, 0001 is
    # "already upstream" and 0002 still applies; with 0002's file upstream, 0002 conflicts.
    commit_files(repo, {"pkg/CMakeLists.txt": CMAKE.replace("cmake_policy(SET CMP0169 OLD)\n",
                                                            "if(POLICY CMP0169)\n  cmake_policy(SET CMP0169 OLD)\nendif()\n"),
                        "pkg/added.txt": "added by 0001\n"})
    states = check_series(repo, plan.series, "pkg", env=plan.env)
    assert [s.state for s in states] == [UPSTREAM, APPLIES]
    assert states[0].detail == "its reverse applies: drop it from the series"
    commit_files(repo, {"pkg/second.txt": "something else\n"})
    states = check_series(repo, plan.series, "pkg", env=plan.env)
    assert [s.state for s in states] == [UPSTREAM, CONFLICT]
    assert "second.txt" in states[1].detail
    assert git_status(repo) == ""


def test_check_series_reports_offsets_hunk_by_hunk(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, _ = upstream
    shifted = commit_files(repo, {"pkg/CMakeLists.txt": "# a\n# b\n" + CMAKE})
    plan = make_plan(project, repo, shifted, tmp_path / "cache")
    first, second = check_series(repo, plan.series, "pkg", env=plan.env)
    assert (first.state, second.state) == (OFFSET, APPLIES)
    assert first.offsets == ("pkg/CMakeLists.txt: hunk #1 at line 4 (offset 2)",)


def test_dirty_tree_is_refused_before_anything_is_applied(project: Path, upstream: tuple[Path, str],
                                                          tmp_path: Path) -> None:
    repo, sha = upstream
    plan = make_plan(project, repo, sha, tmp_path / "cache")
    (repo / "README").write_text("local edit\n")
    with pytest.raises(PatchError) as info:
        apply_series(repo, plan.series, "pkg", env=plan.env)
    assert info.value.render() == (f"{repo} has uncommitted changes (patches apply to a clean checkout only; "
                                   "use a fresh worktree)")
    assert (repo / "README").read_text() == "local edit\n"  # the user's edit is not thrown away
    assert not (repo / "pkg" / "added.txt").exists()


# ---------------------------------------------------------------------------- (d) interrupted fills


_PREPARE = """
import json, sys
from pathlib import Path
from build_kernel import recipe
from build_kernel.plan import resolve
from build_kernel.resources import Resources
from build_kernel.stages.fetch import workspace
project, cache, path = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
res = Resources(cpus=2, cpus_why="test", memory_bytes=8 * 1024**3, memory_why="test")
plan = resolve(recipe.load("r", project), env={"PATH": path}, resources=res, cache_dir=cache)
print(json.dumps(str(workspace.prepare(plan).root)))
"""


def test_run_killed_mid_fill_leaves_no_tree_and_the_next_run_succeeds(
        project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, sha = upstream
    cache = tmp_path / "cache"
    plan = make_plan(project, repo, sha, cache)
    fake = fake_git(tmp_path / "fakebin", "kill -9 $PPID; exit 1")
    killed = subprocess.run([sys.executable, "-c", _PREPARE, str(project), str(cache), f"{fake}:{os.environ['PATH']}"],
                            capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=False)
    assert killed.returncode == -9, killed.stderr  # SIGKILL: no handler ran, no cleanup
    src = cache / "src"
    [lock] = [p.name for p in src.iterdir() if p.name.endswith(".lock")]
    name = lock.removesuffix(".lock")
    # Nothing a later run could take for a finished tree: only the partial fill, under its own name.
    [partial] = [p for p in src.iterdir() if p.name != lock]
    assert partial.name.startswith(f".{name}.partial-") and not (src / name).exists()
    assert (partial / "pkg" / "added.txt").is_file()  # it was killed after 0001 applied
    tree = workspace.prepare(plan)
    assert (tree.root, tree.cached) == (src / name, False)
    assert (tree.project / "second.txt").read_text() == "added by 0002\n"
    assert json.loads((tree.root / ".build-kernel.json").read_text())["commit"] == sha
    assert sorted(p.name for p in src.iterdir()) == sorted([name, lock])  # the partial is swept
    assert workspace.prepare(plan, offline=True).cached


def test_failed_fill_leaves_neither_tree_nor_partial(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, sha = upstream
    cache = tmp_path / "cache"
    fake = fake_git(tmp_path / "fakebin", "echo 'fatal: disk full' >&2; exit 128")
    plan = make_plan(project, repo, sha, cache, env={"PATH": f"{fake}:{os.environ['PATH']}"})
    with pytest.raises(PatchError, match=r"disk full"):
        workspace.prepare(plan)
    assert [p.suffix for p in (cache / "src").iterdir()] == [".lock"]


def test_tree_of_another_commit_under_the_key_is_rebuilt(project: Path, upstream: tuple[Path, str],
                                                         tmp_path: Path) -> None:
    """A marker that does not match its key (another commit's HEAD) is never trusted."""
    repo, sha = upstream
    plan = make_plan(project, repo, sha, tmp_path / "cache")
    tree = workspace.prepare(plan)
    newer = commit_files(repo, {"pkg/up.cc": "int up() { return 2; }\n"})
    subprocess.run(["git", "-C", str(tree.root), "fetch", "--quiet", str(repo), newer], check=True)
    subprocess.run(["git", "-C", str(tree.root), "checkout", "--quiet", "--detach", newer], check=True)
    again = workspace.prepare(plan)
    assert not again.cached and git.Repo(again.root).head.commit.hexsha == sha
    assert (again.project / "up.cc").read_text() == "int up() { return 1; }\n"
    assert [s.name for s in again.patches] == ["0001-policy-and-file.patch", "0002-second-file.patch"]
    cached = workspace.prepare(plan)
    assert cached.cached and cached.root == again.root
    assert [(s.name, s.state) for s in cached.patches] == [(s.name, s.state) for s in again.patches]


def test_atomic_folder_is_all_or_nothing(tmp_path: Path) -> None:
    final = tmp_path / "a" / "b" / "final"  # parents are made
    with pytest.raises(RuntimeError), atomic.folder(final) as tmp:
        (tmp / "half").write_text("x")
        raise RuntimeError("interrupted")
    assert not final.exists() and list(final.parent.iterdir()) == []
    with atomic.folder(final) as tmp:
        (tmp / "whole").write_text("1")
        assert not final.exists()  # nothing under the final name until the fill is complete
    assert files_of(final) == {"whole": b"1"}
    with atomic.folder(final, replace=True) as tmp:
        (tmp / "new").write_text("2")
    assert files_of(final) == {"new": b"2"} and [p.name for p in final.parent.iterdir()] == ["final"]
    with pytest.raises(KeyboardInterrupt), atomic.folder(final, replace=True) as tmp:
        (tmp / "newer").write_text("3")
        raise KeyboardInterrupt
    assert files_of(final) == {"new": b"2"} and [p.name for p in final.parent.iterdir()] == ["final"]


def test_sweep_removes_only_what_interrupted_fills_of_that_folder_left(tmp_path: Path) -> None:
    final = tmp_path / "tree"
    stale = atomic.partial_dir(final)
    (stale / "deep" / "er").mkdir(parents=True)
    other = atomic.partial_dir(tmp_path / "other")
    final.mkdir()
    atomic.sweep(final)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([final.name, other.name])


def test_atomic_writes_replace_whole_files_beside_their_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    umask = os.umask(0o022)
    os.umask(umask)
    # Beside the target, not in the temp folder: a rename across filesystems is no rename.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-temp-dir"))
    page = tmp_path / "deep" / "er" / "index.html"
    atomic.write_text(page, "old\n")
    assert page.read_text() == "old\n" and oct(page.stat().st_mode & 0o777) == oct(0o666 & ~umask)
    with pytest.raises(TypeError):
        atomic.write_bytes(page, "not bytes")  # type: ignore[arg-type]  # fails mid-write
    assert page.read_text() == "old\n" and [p.name for p in page.parent.iterdir()] == ["index.html"]
    source = tmp_path / "src.bin"
    source.write_bytes(b"\0wheel bytes")
    copied = tmp_path / "x" / "y" / "dest.whl"
    atomic.copy_file(source, copied)
    assert copied.read_bytes() == b"\0wheel bytes" and [p.name for p in copied.parent.iterdir()] == ["dest.whl"]
    with pytest.raises(FileNotFoundError):
        atomic.copy_file(tmp_path / "missing", copied)
    assert copied.read_bytes() == b"\0wheel bytes" and [p.name for p in copied.parent.iterdir()] == ["dest.whl"]


# ---------------------------------------------------------------------------- (a) the import check


def _static(tmp_path: Path) -> tuple[pub.Target, dict[str, str], Path]:
    env = clean_env()
    folder = tmp_path / "static"
    return target_for(str(folder), tmp_path, env), env, folder


def test_wheel_that_installs_but_does_not_import_is_refused(tmp_path: Path) -> None:
    target, env, folder = _static(tmp_path)
    broken = make_wheel(tmp_path / "w", "bk-noimport", f"0.1.0{LOCAL}",
                        extra={"bk_noimport/__init__.py": 'raise ImportError("libbk.so: cannot open shared object file")\n'})
    with pytest.raises(PublishError) as info:
        pub.publish([broken], target, env=env)
    assert str(info.value) == (f"installed back from {target.label}, but import bk_noimport: ImportError: libbk.so: "
                               "cannot open shared object file (the wheel on the index does not work here: fix it and "
                               "publish a new build)")
    # It was published, the install-back caught it, and it was taken out again: the fleet never sees it.
    assert not (folder / broken.name).exists()


def test_module_answered_by_another_copy_is_refused(tmp_path: Path) -> None:
    """The recipe's module is not in the wheel, but the interpreter has one of that name."""
    target, env, _ = _static(tmp_path)
    wheel = make_wheel(tmp_path / "w", "bk-elsewhere", f"0.1.0{LOCAL}")
    with pytest.raises(PublishError, match=r"import json came from .*json.*, not from the installed wheel"):
        pub.publish([wheel], target, env=env, import_modules=["bk_elsewhere", "json"])
    with pytest.raises(PublishError, match=r"but import bk_elsewhere\.nope: ModuleNotFoundError: .*; import json came"):
        pub.publish([wheel], target, env=env, import_modules=["bk_elsewhere.nope", "json"], skip_existing=True)
    done = pub.publish([wheel], target, env=env, import_modules=["bk_elsewhere"], skip_existing=True)
    assert done.wheels[0].imports == {"bk_elsewhere": "ok"}
    assert pub.publish([wheel], target, env=env, import_modules=[], skip_existing=True).wheels[0].imports == {}


def test_wheel_whose_import_kills_the_interpreter_is_refused(tmp_path: Path) -> None:
    target, env, _ = _static(tmp_path)
    wheel = make_wheel(tmp_path / "w", "bk-crash", f"0.1.0{LOCAL}",
                       extra={"bk_crash/__init__.py": "import os\nos._exit(3)\n"})
    with pytest.raises(PublishError, match=r"import check of the installed wheel crashed"):
        pub.publish([wheel], target, env=env)


def test_import_is_not_answered_by_a_copy_in_the_working_directory(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Publishing from the source checkout: its package folder must not answer the import."""
    target, env, _ = _static(tmp_path)
    wheel = make_wheel(tmp_path / "w", "bk-shadow", f"0.1.0{LOCAL}", value="wheel")
    checkout = tmp_path / "checkout"
    (checkout / "bk_shadow").mkdir(parents=True)
    (checkout / "bk_shadow" / "__init__.py").write_text('VALUE = "source tree"\n')
    monkeypatch.chdir(checkout)
    done = pub.publish([wheel], target, env=env)
    assert done.wheels[0].imports == {"bk_shadow": "ok"}


def test_install_back_ignores_the_users_pip_settings(tmp_path: Path) -> None:
    """pip config and PIP_* source settings could make pip look elsewhere, or nowhere."""
    target, env, _ = _static(tmp_path)
    wheel = make_wheel(tmp_path / "w", "bk-pipenv", f"0.1.0{LOCAL}", value="ours")
    home = tmp_path / "home"
    for conf in (home / ".config" / "pip" / "pip.conf", home / ".pip" / "pip.conf", tmp_path / "pip.conf"):
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text("[global]\nno-index = true\n")
    env = {**env, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "PIP_CONFIG_FILE": str(tmp_path / "pip.conf"),
           "PIP_NO_INDEX": "1", "PIP_DEFAULT_TIMEOUT": "30"}
    result = pub.publish([wheel], target, env=env)
    [done] = result.wheels
    assert (done.status, done.imports, done.installed_from) == ("copied", {"bk_pipenv": "ok"}, target.simple_url)
    assert done.index_sha256 == done.sha256


def test_install_back_of_a_version_the_folder_lacks_names_the_simple_url(tmp_path: Path) -> None:
    from build_kernel.stages.publish.install_back import install_back

    target, env, folder = _static(tmp_path)
    pub.publish([make_wheel(tmp_path / "w", "bk-lacks", f"0.1.0{LOCAL}")], target, env=env)
    with pytest.raises(PublishError, match=rf"bk-lacks=+0\.2\.0 was published but is not installable from "
                                           rf"{re.escape(target.simple_url)}"):
        install_back(target, "bk-lacks", "0.2.0", modules=["bk_lacks"], python=sys.executable, env=env)
    back = install_back(target, "bk-lacks", f"0.1.0{LOCAL}", modules=["bk_lacks"], python=sys.executable,
                        env=env, log_path=tmp_path / "log")
    wheel = folder / f"bk_lacks-0.1.0{LOCAL}-py3-none-any.whl"
    assert back.imports == {"bk_lacks": "ok"} and back.fetched == hashlib.sha256(wheel.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------- (c) locks


def _put_in_child(args: tuple[str, str, str, Any]) -> str:
    folder, wheel, version, barrier = args
    none = Path(folder).parent / "none"
    target = pub.resolve_target(folder, env={}, indexes_file=none, pypirc=none)
    barrier.wait()
    try:
        return pub.StaticDirBackend(target).put(Path(wheel), version, skip_existing=False)
    except PublishError as exc:
        return f"refused: {exc.message}"


def _race(folder: Path, wheels: list[tuple[Path, str]]) -> list[str]:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(len(wheels))
        with ctx.Pool(len(wheels)) as pool:
            return pool.map(_put_in_child, [(str(folder), str(w), v, barrier) for w, v in wheels])


def _big_wheel(folder: Path, project: str, version: str, value: str) -> Path:
    # Some megabytes that do not compress, so that racers meet while one is still copying.
    blob = "# " + os.urandom(3 << 20).hex() + "\n"
    return make_wheel(folder, project, version, value=value, extra={f"{project.replace('-', '_')}/blob.py": blob})


def test_racing_publishes_of_one_version_give_one_copy(tmp_path: Path) -> None:
    folder = tmp_path / "static"
    version = f"0.1.0{LOCAL}"
    wheels = [_big_wheel(tmp_path / f"w{i}", "bk-race", version, value=str(i)) for i in range(3)]
    outcomes = _race(folder, [(w, version) for w in wheels])
    assert sorted(o.split(":")[0] for o in outcomes) == ["copied", "refused", "refused"], outcomes
    winner = wheels[outcomes.index("copied")]
    assert listing(folder)[winner.name] == winner.read_bytes()  # one whole wheel: the winner's bytes
    assert sorted(listing(folder)) == [winner.name, "simple/bk-race/index.html", "simple/index.html"]
    page = (folder / "simple" / "bk-race" / "index.html").read_text()
    assert page.count(winner.name) == 2  # href and text, once


def test_racing_publishes_of_several_versions_lose_none(tmp_path: Path) -> None:
    folder = tmp_path / "static"
    versions = [f"0.{i}.0{LOCAL}" for i in range(1, 4)]
    wheels = [(_big_wheel(tmp_path / f"w{i}", "bk-many", v, value=str(i)), v) for i, v in enumerate(versions)]
    assert _race(folder, wheels) == ["copied"] * 3
    page = (folder / "simple" / "bk-many" / "index.html").read_text()
    assert all(w.name in page for w, _ in wheels)
    assert not [p for p in folder.rglob("*") if p.name.startswith(".")]
    assert regenerate(folder).joinpath("bk-many", "index.html").read_text() == page  # the page is the whole truth


def test_publish_waits_for_the_publish_in_progress(tmp_path: Path) -> None:
    """Publishers of one folder take turns on its flock (the folder itself: no lock file in
    what is served); while another holds it, nothing is added."""
    folder = tmp_path / "static"
    folder.mkdir()
    wheel = make_wheel(tmp_path / "w", "bk-turns", f"0.1.0{LOCAL}")
    target = target_for(str(folder), tmp_path, clean_env())
    outcome: list[str] = []
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another publisher, mid-publish
        worker = threading.Thread(target=lambda: outcome.append(
            pub.StaticDirBackend(target).put(wheel, f"0.1.0{LOCAL}", skip_existing=False)))
        worker.start()
        worker.join(timeout=1.0)
        assert worker.is_alive() and outcome == [] and listing(folder) == {}
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    worker.join(timeout=30)
    assert outcome == ["copied"] and (folder / wheel.name).read_bytes() == wheel.read_bytes()
    assert sorted(listing(folder)) == [wheel.name, "simple/bk-turns/index.html", "simple/index.html"]


def _fail_at_root_page(monkeypatch: pytest.MonkeyPatch, folder: Path, exc: BaseException) -> list[Path]:
    """Every page is written for real except the root page, which is written last."""
    from build_kernel import static_index

    real, written = static_index._atomic_write, []

    def write(path: Path, text: str) -> None:
        written.append(path)
        if path == folder / "simple" / "index.html":
            raise exc
        real(path, text)

    monkeypatch.setattr(static_index, "_atomic_write", write)
    return written


def modes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): oct(p.stat().st_mode & 0o777) for p in sorted(folder.rglob("*")) if p.is_file()}


def test_failed_publish_into_a_new_folder_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = clean_env()
    folder = tmp_path / "new" / "static"
    target = target_for(str(folder), tmp_path, env)
    written = _fail_at_root_page(monkeypatch, folder, OSError(28, "No space left on device"))
    # A full disk is its own kind (exit 12), naming the folder and what it needed there.
    with pytest.raises(DiskFullError, match=r"no space left in .*static \(the index\).*the folder unchanged"):
        pub.publish([make_wheel(tmp_path / "w", "bk-nospace", f"0.1.0{LOCAL}")], target, env=env)
    assert folder / "simple" / "bk-nospace" / "index.html" in written  # simple/ and its project folder were made
    assert not folder.exists() and (tmp_path / "new").is_dir()
    folder.mkdir()  # a folder that was there (empty) before the failed publish stays
    with pytest.raises(DiskFullError, match=r"no space left in .*the folder unchanged"):
        pub.publish([make_wheel(tmp_path / "w", "bk-nospace", f"0.1.0{LOCAL}")], target, env=env)
    assert folder.is_dir() and list(folder.iterdir()) == []


@pytest.mark.parametrize("project", ["bk-keep", "bk-other"])  # a changed page, a new page
def test_failed_publish_puts_every_page_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project: str) -> None:
    env = clean_env()
    folder = tmp_path / "static"
    target = target_for(str(folder), tmp_path, env)
    pub.publish([make_wheel(tmp_path / "w1", "bk-keep", f"0.1.0{LOCAL}")], target, env=env)
    before, before_modes = listing(folder), modes(folder)
    written = _fail_at_root_page(monkeypatch, folder, OSError(5, "Input/output error"))
    with pytest.raises(PublishError, match=r"Input/output error; the folder is unchanged"):
        pub.publish([make_wheel(tmp_path / "w2", project, f"0.2.0{LOCAL}")], target, env=env)
    assert folder / "simple" / project / "index.html" in written  # it was written, then put back / taken away
    assert listing(folder) == before and modes(folder) == before_modes
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_dir()) == ["simple", "simple/bk-keep"]


def test_interrupted_publish_is_undone_and_still_interrupts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = clean_env()
    folder = tmp_path / "static"
    target = target_for(str(folder), tmp_path, env)
    pub.publish([make_wheel(tmp_path / "w1", "bk-ctrlc", f"0.1.0{LOCAL}")], target, env=env)
    before = listing(folder)
    _fail_at_root_page(monkeypatch, folder, KeyboardInterrupt())
    wheel = make_wheel(tmp_path / "w2", "bk-ctrlc", f"0.2.0{LOCAL}")
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C is not turned into a publish error, nor swallowed
        pub.StaticDirBackend(target).put(wheel, f"0.2.0{LOCAL}", skip_existing=False)
    assert listing(folder) == before


def test_wheel_gone_before_its_copy_is_one_error_and_no_change(tmp_path: Path) -> None:
    env = clean_env()
    folder = tmp_path / "static"
    target = target_for(str(folder), tmp_path, env)
    pub.publish([make_wheel(tmp_path / "w1", "bk-gone", f"0.1.0{LOCAL}")], target, env=env)
    before = listing(folder)
    gone = tmp_path / "w2" / f"bk_gone-0.2.0{LOCAL}-py3-none-any.whl"  # e.g. the build folder was cleaned meanwhile
    with pytest.raises(PublishError, match=rf"writing {re.escape(gone.name)} into {re.escape(str(folder))} failed: "
                                           r".*No such file.*; the folder is unchanged \(free space or fix "
                                           r"permissions, then publish again\)$"):
        pub.StaticDirBackend(target).put(gone, f"0.2.0{LOCAL}", skip_existing=False)
    assert listing(folder) == before


def test_static_folder_that_cannot_be_made_is_one_error(tmp_path: Path) -> None:
    env = clean_env()
    (tmp_path / "a-file").write_text("not a folder\n")
    target = target_for(str(tmp_path / "a-file" / "static"), tmp_path, env)
    with pytest.raises(PublishError) as info:
        pub.publish([make_wheel(tmp_path / "w", "bk-nofolder", f"0.1.0{LOCAL}")], target, env=env)
    assert info.value.render() == (f"cannot publish into {tmp_path / 'a-file' / 'static'}: {tmp_path / 'a-file'} is a "
                                   "file, not a folder (pass --to a folder path (or set [publish] target to one))")


def test_published_files_are_world_readable_whatever_the_umask(tmp_path: Path) -> None:
    """A web server running as another user must read the wheel and the pages."""
    env = clean_env()
    folder = tmp_path / "static"
    target = target_for(str(folder), tmp_path, env)
    old = os.umask(0o077)
    try:
        status = pub.StaticDirBackend(target).put(make_wheel(tmp_path / "w", "bk-umask", f"0.1.0{LOCAL}"),
                                                  f"0.1.0{LOCAL}", skip_existing=False)
    finally:
        os.umask(old)
    assert status == "copied"
    assert set(modes(folder).values()) == {oct(0o644)} and len(modes(folder)) == 3


def test_failed_fetch_into_an_existing_mirror_keeps_it(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    """Only a mirror made by the failing fetch is removed; what was cached stays usable."""
    repo, sha = upstream
    cache = tmp_path / "cache"
    first = workspace.prepare(make_plan(project, repo, sha, cache))
    dead = "54f99a8a" + "0" * 32
    with pytest.raises(FetchError, match=rf"commit {dead} is not in"):
        workspace.prepare(make_plan(project, repo, dead, cache))
    shutil.rmtree(first.root)  # the tree must be made again, from the mirror alone
    shutil.rmtree(repo)
    again = workspace.prepare(make_plan(project, tmp_path / "upstream", sha, cache), offline=True)
    assert not again.cached and (again.project / "second.txt").read_text() == "added by 0002\n"


# ---------------------------------------------------------------------------- what the tree is made from


def test_tree_is_the_pinned_sparse_subdir_with_its_record(project: Path, upstream: tuple[Path, str],
                                                          tmp_path: Path) -> None:
    repo, sha = upstream
    plan = make_plan(project, repo, sha, tmp_path / "cache")
    tree = workspace.prepare(plan)
    assert (tree.commit, tree.series_digest, tree.cached, tree.dep_dirs) == (sha, plan.series.digest, False, {})
    assert tree.project == tree.root / "pkg" and (tree.project / "second.txt").is_file()
    assert not (tree.root / "README").exists()  # sparse: only the subdir is checked out
    cached = workspace.prepare(plan)
    assert (cached.commit, cached.series_digest, cached.cached, cached.project) == (sha, plan.series.digest, True,
                                                                                    tree.project)
    whole = workspace.prepare(make_plan(project, repo, sha, tmp_path / "cache", source="sparse = false"))
    assert (whole.root / "README").read_text() == "upstream\n" and whole.root != tree.root  # a tree of its own


def test_each_commit_and_series_has_a_tree_of_its_own(project: Path, upstream: tuple[Path, str],
                                                      tmp_path: Path) -> None:
    repo, sha = upstream
    cache = tmp_path / "cache"
    newer = commit_files(repo, {"pkg/up.cc": "int up() { return 2; }\n"})
    first = workspace.prepare(make_plan(project, repo, sha, cache))
    other_commit = workspace.prepare(make_plan(project, repo, newer, cache))
    edited = {"0001-policy-and-file.patch": PATCH_1, "0002-second-file.patch": PATCH_2.replace("by 0002", "by 0002 v2")}
    other_series = workspace.prepare(make_plan(project, repo, sha, cache, patches=edited))
    assert len({first.root, other_commit.root, other_series.root}) == 3
    assert (other_series.project / "second.txt").read_text() == "added by 0002 v2\n"
    again = [workspace.prepare(make_plan(project, repo, sha, cache)), workspace.prepare(make_plan(project, repo, newer, cache))]
    assert [(t.cached, t.root) for t in again] == [(True, first.root), (True, other_commit.root)]  # none evicted another


def test_bundled_example_repo_is_made_in_the_cache(project: Path, tmp_path: Path) -> None:
    from build_kernel import examples

    cache = tmp_path / "cache"
    sha = examples.commit_of("example:minidep", tmp_path / "elsewhere")  # deterministic: the same commit anywhere
    write_series(project, "s", "v1", {})
    write_recipe(project, "ex", f"""
        [source]
        repo = "example:minidep"
        commit = "{sha}"
        [patches]
        series = "s"
        version = "v1"
        [build]
        arch = ["12.0a"]
    """)
    tree = workspace.prepare(resolve(recipe.load("ex", project), env={}, resources=RES, cache_dir=cache))
    assert tree.commit == sha and (cache / "examples" / "minidep").is_dir()
    made = files_of(tree.root)
    assert json.loads(made.pop(".build-kernel.json"))["commit"] == sha
    assert made == files_of(cache / "examples" / "minidep")


def test_fetch_refuses_a_branch_unless_floating_and_offline_names_the_way(upstream: tuple[Path, str],
                                                                          tmp_path: Path) -> None:
    from build_kernel.stages.fetch import remote

    repo, sha = upstream
    cache = tmp_path / "cache"
    with pytest.raises(FetchError) as info:
        remote.ensure_commit(str(repo), "main", cache, offline=False)
    assert info.value.render() == "'main' is not a full commit SHA (pin a 40-hex SHA, or set allow_floating = true in [source])"
    with pytest.raises(FetchError) as info:
        remote.ensure_commit(str(repo), sha, cache, offline=True)
    assert info.value.render() == (f"{repo} is not in the cache and --offline forbids fetching it (run once without "
                                   "--offline, or map it to a local mirror ([mirrors] of the user config "
                                   "(~/.config/build-kernel/config.toml, or the file $BUILD_KERNEL_CONFIG names)))")
    assert not (cache / "mirrors").exists() or not list((cache / "mirrors").glob("*.git"))
    path, got = remote.ensure_commit(str(repo), sha, cache, offline=False)
    assert got == sha and path.is_dir()
    newer = commit_files(repo, {"pkg/up.cc": "int up() { return 3; }\n"})
    with pytest.raises(FetchError, match=rf"^{newer} is not in the cached mirror of {re.escape(str(repo))} and --offline"):
        remote.ensure_commit(str(repo), newer, cache, offline=True)
    assert remote.ensure_commit(str(repo), sha, cache, offline=True) == (path, sha)


def test_branch_pin_when_floating_is_allowed(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, sha = upstream
    tree = workspace.prepare(make_plan(project, repo, "main", tmp_path / "cache", source="allow_floating = true"))
    assert tree.commit == sha and git.Repo(tree.root).head.commit.hexsha == sha


def test_relative_repo_is_relative_to_the_recipe_project(project: Path, upstream: tuple[Path, str],
                                                         tmp_path: Path) -> None:
    _, sha = upstream
    tree = workspace.prepare(make_plan(project, "../upstream", sha, tmp_path / "cache"))
    assert tree.commit == sha and (tree.project / "added.txt").is_file()


def test_public_url_is_fetched_from_the_site_mirror(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    _, sha = upstream
    config = tmp_path / "user-config.toml"
    config.write_text(f'[mirrors]\n"https://git.example.invalid/" = "file://{tmp_path}/"\n')
    plan = make_plan(project, "https://git.example.invalid/upstream", sha, tmp_path / "cache",
                     env={"BUILD_KERNEL_CONFIG": str(config)})
    tree = workspace.prepare(plan)  # nothing answers at git.example.invalid: the mirror did
    assert tree.commit == sha and (tree.project / "second.txt").is_file()


def test_series_made_for_the_upstream_version_applies(project: Path, upstream: tuple[Path, str],
                                                      tmp_path: Path) -> None:
    repo, sha = upstream
    ok = make_plan(project, repo, sha, tmp_path / "cache", info='applies_to_versions = ">=0.3.21,<0.4"\n')
    assert workspace.prepare(ok).commit == sha  # not a listed commit, but the version (0.3.21) is one it is made for
    newer = make_plan(project, repo, sha, tmp_path / "cache2", info='applies_to_versions = ">=0.4"\n')
    with pytest.raises(PatchError, match=r"is made for >=0\.4, not .* \(version 0\.3\.21\)"):
        workspace.prepare(newer)


def test_dependency_is_fetched_too_and_offline_means_offline(project: Path, upstream: tuple[Path, str],
                                                              tmp_path: Path) -> None:
    repo, sha = upstream
    dep_sha = commit_files(tmp_path / "dep", {"CMakeLists.txt": "project(dep)\n"})
    cache = tmp_path / "cache"
    workspace.prepare(make_plan(project, repo, sha, cache))  # the source is cached, the dependency is not
    with_dep = make_plan(project, repo, sha, cache, tables=f'[deps.dep]\nrepo = "{tmp_path / "dep"}"\ncommit = "{dep_sha}"')
    with pytest.raises(FetchError, match=r"dep is not in the cache and --offline forbids"):
        workspace.prepare(with_dep, offline=True)
    tree = workspace.prepare(with_dep)
    assert list(tree.dep_dirs) == ["dep"] and (tree.dep_dirs["dep"] / "CMakeLists.txt").read_text() == "project(dep)\n"
    assert tree.fetchcontent_defines() == {"FETCHCONTENT_SOURCE_DIR_DEP": str(tree.dep_dirs["dep"])}
    assert workspace.prepare(with_dep, offline=True).dep_dirs == tree.dep_dirs


def test_series_of_root_patches_applies_without_a_subdir(upstream: tuple[Path, str], project: Path,
                                                         tmp_path: Path) -> None:
    repo, sha = upstream
    plan = make_plan(project, repo, sha, tmp_path / "cache", patches={
        "0001-readme.patch": HEADER.format(what="readme") + new_file_diff("NOTES", "at the top")})
    [status] = apply_series(repo, plan.series, env=plan.env)
    assert status.state == APPLIES and (repo / "NOTES").read_text() == "at the top\n"


def test_conflict_names_the_way_out(upstream: tuple[Path, str], project: Path, tmp_path: Path) -> None:
    repo, _ = upstream
    changed = commit_files(repo, {"pkg/CMakeLists.txt": CMAKE.replace("CMP0169 OLD", "CMP0169 NEW")})
    plan = make_plan(project, repo, changed, tmp_path / "cache")
    with pytest.raises(PatchError) as info:
        apply_series(repo, plan.series, "pkg", env=plan.env)
    assert info.value.hint == f"run `build-kernel patch check` and refresh the series in {plan.series.directory}"
    assert git_status(repo) == ""


# ---------------------------------------------------------------------------- recipe validation


_NONE = ("FP4 kernels need an arch-specific 10.0+ target (e.g. 12.0a) and {archs} has none, while recipe fp4 sets "
         'fp4 = "required": {hint}add an FP4 arch (--arch "{arch_list};12.0a"), or build without FP4 from an overlay '
         "with fp4 = true (FP4 where the arch has it)")


@pytest.mark.parametrize("archs,message", [
    ('["10.0"]', _NONE.format(archs="10.0", hint="use 10.0a instead of 10.0, or ", arch_list="10.0")),  # Blackwell too
    ('["8.0", "9.0a"]', _NONE.format(archs="8.0, 9.0a", hint="", arch_list="8.0;9.0a")),
])
def test_fp4_arch_problems_name_every_arch(project: Path, archs: str, message: str) -> None:
    from tests.test_recipe import GOOD, problems

    write_series(project, "s", "v1", {})
    required = GOOD.replace('["12.0a"]', archs).replace("fp4 = true", 'fp4 = "required"')
    assert problems(project, "fp4", required) == [f"{project / 'recipes' / 'fp4.toml'}:9: build.arch: {message}"]


@pytest.mark.parametrize("value,shown", [("false", "false"), ("true", "true"), ("{}", "{}"),
                                         ('{ a = 1, b = "x" }', '{ a = 1, b = "x" }'), ('["a", 2]', '["a", 2]')])
def test_wrong_value_is_shown_as_the_recipe_spells_it(project: Path, value: str, shown: str) -> None:
    from tests.test_recipe import GOOD, problems

    write_series(project, "s", "v1", {})
    [line] = problems(project, "bad", GOOD + f"[toolchain]\ncuda = {value}\n")
    assert line.startswith(f"{project / 'recipes' / 'bad.toml'}:13: toolchain.cuda: must be a string, not {shown} (e.g.")
