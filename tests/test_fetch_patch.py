"""Fetch and patch on real local git repos: cache, pins, locks, all-or-nothing series."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import subprocess
from pathlib import Path

import git
import pytest

from build_kernel import recipe
from build_kernel.errors import FetchError, PatchError
from build_kernel.plan import Plan, resolve
from build_kernel.resources import Resources
from build_kernel.series import load_series, write_lock
from build_kernel.stages.fetch import workspace
from build_kernel.stages.patch import check as patch_check
from tests.conftest import commit_files, run_cli, write_recipe, write_series

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
PATCH_POLICY = """\
Description: guard policies unknown to older CMake
Origin: vendor, build-kernel tests
Forwarded: not-needed
Last-Update: 2026-11-30
---
diff --git a/CMakeLists.txt b/CMakeLists.txt
--- a/CMakeLists.txt
+++ b/CMakeLists.txt
@@ -2,6 +2,10 @@
 project(up LANGUAGES CXX)
 set(UP_FLAGS -O3)
 set(UP_STD 17)
-cmake_policy(SET CMP0169 OLD)
-cmake_policy(SET CMP0177 NEW)
+if(POLICY CMP0169)
+  cmake_policy(SET CMP0169 OLD)
+endif()
+if(POLICY CMP0177)
+  cmake_policy(SET CMP0177 NEW)
+endif()
 add_library(up up.cc)
"""
PATCH_NEWFILE = """\
Description: add a file
Origin: vendor, build-kernel tests
Forwarded: not-needed
Last-Update: 2026-11-30
---
diff --git a/added.txt b/added.txt
new file mode 100644
--- /dev/null
+++ b/added.txt
@@ -0,0 +1 @@
+added by a patch
"""


@pytest.fixture
def upstream(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "upstream"
    sha = commit_files(repo, {"pkg/CMakeLists.txt": CMAKE, "pkg/up.cc": "int up() { return 1; }\n",
                              "pkg/pyproject.toml": '[project]\nname = "up"\nversion = "0.3.21"\n'})
    return repo, sha


def make_plan(project: Path, repo: Path, commit: str, cache: Path, patches: dict[str, str] | None = None,
              extra: str = "", info: str = "") -> Plan:
    write_series(project, "s", "v1", patches if patches is not None else
                 {"0001-policy.patch": PATCH_POLICY, "0002-newfile.patch": PATCH_NEWFILE}, info=info)
    write_recipe(project, "r", f"""
        [source]
        repo = "{repo}"
        commit = "{commit}"
        subdir = "pkg"
        [patches]
        series = "s"
        version = "v1"
        [build]
        arch = ["12.0a"]
        {extra}
    """)
    return resolve(recipe.load("r", project), env={}, resources=RES, cache_dir=cache)


def test_fetch_patch_then_cache_hit_offline(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, sha = upstream
    plan = make_plan(project, repo, sha, tmp_path / "cache")
    tree = workspace.prepare(plan)
    assert not tree.cached and git.Repo(tree.root).head.commit.hexsha == sha
    assert "if(POLICY CMP0169)" in (tree.project / "CMakeLists.txt").read_text()
    assert (tree.project / "added.txt").read_text() == "added by a patch\n"
    shutil.rmtree(repo)  # upstream gone: only the cache can answer now
    again = workspace.prepare(plan, offline=True)
    assert again.cached and again.root == tree.root


def test_offline_refuses_uncached_repo(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, sha = upstream
    with pytest.raises(FetchError, match=r"not in the cache and --offline forbids"):
        workspace.prepare(make_plan(project, repo, sha, tmp_path / "cache"), offline=True)


def test_missing_commit_says_force_pushed(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, _ = upstream
    dead = "54f99a8a" + "0" * 32
    with pytest.raises(FetchError, match=rf"commit {dead} is not in .*force-pushed away.*pin another commit"):
        workspace.prepare(make_plan(project, repo, dead, tmp_path / "cache"))
    assert not (tmp_path / "cache" / "src").exists() or not any((tmp_path / "cache" / "src").iterdir())


def test_new_upstream_commit_is_fetched_into_the_mirror(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, sha = upstream
    workspace.prepare(make_plan(project, repo, sha, tmp_path / "cache"))
    newer = commit_files(repo, {"pkg/extra.txt": "x\n"})
    tree = workspace.prepare(make_plan(project, repo, newer, tmp_path / "cache"))
    assert (tree.project / "extra.txt").exists() and tree.commit == newer


def test_tampered_patch_is_refused(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, sha = upstream
    plan = make_plan(project, repo, sha, tmp_path / "cache")
    patch = plan.series.directory / "0002-newfile.patch"
    patch.write_text(patch.read_text().replace("added by a patch", "something else"))
    with pytest.raises(PatchError, match=r"0002-newfile.patch: sha256 .* does not match series.lock"):
        recipe_plan = resolve(recipe.load("r", project), env={}, resources=RES, cache_dir=tmp_path / "cache")
        workspace.prepare(recipe_plan)


def test_unlisted_patch_is_refused(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, sha = upstream
    plan = make_plan(project, repo, sha, tmp_path / "cache")
    (plan.series.directory / "0003-stray.patch").write_text(PATCH_NEWFILE)
    with pytest.raises(PatchError, match=r"0003-stray.patch not listed in series"):
        resolve(recipe.load("r", project), env={}, resources=RES)


def test_conflict_names_patch_file_hunk_and_lines(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, _ = upstream
    changed = commit_files(repo, {"pkg/CMakeLists.txt": CMAKE.replace("CMP0177 NEW", "CMP0177 OLD")})
    plan = make_plan(project, repo, changed, tmp_path / "cache")
    with pytest.raises(PatchError) as info:
        workspace.prepare(plan)
    message = info.value.render()
    assert "0001-policy.patch does not apply: CMakeLists.txt hunk #1 (line 6)" in message
    assert "expected 'cmake_policy(SET CMP0177 NEW)', found 'cmake_policy(SET CMP0177 OLD)'" in message
    # Nothing half-made: no tree (the 2nd patch was never applied anywhere), no partial left.
    src = tmp_path / "cache" / "src"
    assert [p.name for p in src.iterdir() if not p.name.endswith(".lock")] == []


def test_apply_failure_leaves_tree_exactly_as_before(upstream: tuple[Path, str], project: Path, tmp_path: Path) -> None:
    repo, _ = upstream
    changed = commit_files(repo, {"pkg/CMakeLists.txt": CMAKE.replace("CMP0177 NEW", "CMP0177 OLD")})
    plan = make_plan(project, repo, changed, tmp_path / "cache",
                     {"0001-newfile.patch": PATCH_NEWFILE, "0002-policy.patch": PATCH_POLICY})
    from build_kernel.stages.patch.apply import apply_series

    with pytest.raises(PatchError, match=r"0002-policy.patch does not apply"):
        apply_series(repo, plan.series, "pkg", env=plan.env)
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True,
                            check=True)
    assert status.stdout == ""  # 0001 (which applies) was not applied either


def test_already_applied_and_offset(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, _ = upstream
    # Upstream took the policy fix and grew a header comment: 0001 is upstream now.
    patched = CMAKE.replace("cmake_policy(SET CMP0169 OLD)\ncmake_policy(SET CMP0177 NEW)\n",
                            "if(POLICY CMP0169)\n  cmake_policy(SET CMP0169 OLD)\nendif()\n"
                            "if(POLICY CMP0177)\n  cmake_policy(SET CMP0177 NEW)\nendif()\n")
    upstreamed = commit_files(repo, {"pkg/CMakeLists.txt": patched})
    plan = make_plan(project, repo, upstreamed, tmp_path / "cache")
    states = {s.name: s.state for s in patch_check.check(plan)}
    assert states == {"0001-policy.patch": "already upstream", "0002-newfile.patch": "applies"}
    with pytest.raises(PatchError, match=r"already upstream.*drop it from"):
        workspace.prepare(plan)
    shifted = commit_files(repo, {"pkg/CMakeLists.txt": "# one\n# two\n# three\n" + CMAKE})
    [first, _] = patch_check.check(plan, commit=shifted)
    assert first.state == "applies with offset" and "hunk #1 at line 5 (offset 3)" in first.offsets[0]


def test_patch_check_cli_table_and_exit_code(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, sha = upstream
    make_plan(project, repo, sha, tmp_path / "cache")
    conflict = commit_files(repo, {"pkg/CMakeLists.txt": CMAKE.replace("CMP0177 NEW", "CMP0177 OLD")})
    args = ["--cache-dir", str(tmp_path / "cache"), "--json", "patch", "check", "--recipe", str(project / "recipes/r.toml")]
    ok = run_cli(*args)
    assert ok.returncode == 0 and {r["state"] for r in json.loads(ok.stdout)} == {"applies"}
    bad = run_cli(*args, "--commit", conflict)
    assert bad.returncode == 5 and json.loads(bad.stdout)[0]["state"] == "conflicts"


def _prepare_in_child(args: tuple[Path, Path]) -> str:
    project, cache = args
    plan = resolve(recipe.load("r", project), env={}, resources=RES, cache_dir=cache)
    return str(workspace.prepare(plan).root)


def test_concurrent_fetches_share_one_tree(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, sha = upstream
    make_plan(project, repo, sha, tmp_path / "cache")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        roots = pool.map(_prepare_in_child, [(project, tmp_path / "cache")] * 4)
    assert len(set(roots)) == 1
    marker = json.loads((Path(roots[0]) / ".build-kernel.json").read_text())
    assert marker["commit"] == sha
    assert (Path(roots[0]) / "pkg/CMakeLists.txt").read_text().count("if(POLICY CMP0169)") == 1


def test_interrupted_tree_is_never_trusted(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, sha = upstream
    plan = make_plan(project, repo, sha, tmp_path / "cache")
    tree = workspace.prepare(plan)
    # Simulate a run killed mid-way: marker gone, a stale partial beside it.
    (tree.root / ".build-kernel.json").unlink()
    (tree.project / "CMakeLists.txt").write_text("garbage\n")
    stale = tree.root.parent / f".{tree.root.name}.partial-x"
    stale.mkdir()
    again = workspace.prepare(plan)
    assert not again.cached and "if(POLICY CMP0169)" in (again.project / "CMakeLists.txt").read_text()
    assert not stale.exists()


def test_series_made_for_other_commits_is_refused(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, sha = upstream
    plan = make_plan(project, repo, sha, tmp_path / "cache", {"0002-newfile.patch": PATCH_NEWFILE},
                     info=f'applies_to_commits = ["{"1" * 40}"]\n')
    with pytest.raises(PatchError, match=r"is made for 111111111111, not .*patch check"):
        workspace.prepare(plan)


def test_refresh_regenerates_patch_from_edited_commit(project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, sha = upstream
    plan = make_plan(project, repo, sha, tmp_path / "cache")
    dev = tmp_path / "dev"
    patch_check.dev_worktree(plan, dev)
    dev_repo = git.Repo(dev)
    assert [c.message.strip() for c in dev_repo.iter_commits(f"{sha}..HEAD")] == ["0002-newfile.patch", "0001-policy.patch"]
    (dev / "pkg/added.txt").write_text("added by a refreshed patch\n")
    dev_repo.git.add("--all")
    dev_repo.git.commit("--quiet", "--amend", "--no-edit")
    changed = patch_check.refresh(plan, dev)
    assert changed == ["0002-newfile.patch"]
    text = (plan.series.directory / "0002-newfile.patch").read_text()
    assert text.startswith("Description: add a file\n") and "+added by a refreshed patch" in text
    # The lock follows, so the refreshed series loads and applies.
    fresh = resolve(recipe.load("r", project), env={}, resources=RES, cache_dir=tmp_path / "cache")
    tree = workspace.prepare(fresh)
    assert (tree.project / "added.txt").read_text() == "added by a refreshed patch\n"


# PATCH_POLICY's change with one line of context, as our real patches keep it (minimal context).
PATCH_POLICY_U1 = PATCH_POLICY.replace("""@@ -2,6 +2,10 @@
 project(up LANGUAGES CXX)
 set(UP_FLAGS -O3)
 set(UP_STD 17)
""", """@@ -4,4 +4,8 @@
 set(UP_STD 17)
""")


def test_refresh_keeps_an_unedited_patch_with_less_context_byte_for_byte(
        project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    # Found refreshing sm120 v10: git diff -U3 of an untouched commit differs from a minimal-context patch in its
    # context alone, and the patch was rewritten (a new pool content for the same change).
    repo, sha = upstream
    plan = make_plan(project, repo, sha, tmp_path / "cache",
                     {"0001-newfile.patch": PATCH_NEWFILE, "0002-policy.patch": PATCH_POLICY_U1})
    dev = tmp_path / "dev"
    patch_check.dev_worktree(plan, dev)
    assert patch_check.refresh(plan, dev) == []
    assert (plan.series.directory / "0002-policy.patch").read_text() == PATCH_POLICY_U1
    # A real edit of that patch's commit is still seen.
    dev_repo = git.Repo(dev)
    (dev / "pkg/CMakeLists.txt").write_text((dev / "pkg/CMakeLists.txt").read_text().replace("17)", "20)"))
    dev_repo.git.commit("--quiet", "-a", "--amend", "--no-edit")
    assert patch_check.refresh(plan, dev) == ["0002-policy.patch"]
    assert "+set(UP_STD 20)" in (plan.series.directory / "0002-policy.patch").read_text()


def test_refresh_of_a_pooled_series_adds_a_pool_file_and_keeps_the_other_versions(
        project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    repo, sha = upstream
    plan = make_plan(project, repo, sha, tmp_path / "cache")
    old = write_series(project, "s", "v0", {"0001-policy.patch": PATCH_POLICY, "0002-newfile.patch": PATCH_NEWFILE})
    pool = project / "patches" / "s" / "pool"
    pool.mkdir()
    write_lock(plan.series.directory)
    write_lock(old)
    plan = resolve(recipe.load("r", project), env={}, resources=RES, cache_dir=tmp_path / "cache")
    shared = plan.series.patches[1].path
    assert shared == pool / "0002-newfile.patch" and load_series(old).patches[1].path == shared
    dev = tmp_path / "dev"
    patch_check.dev_worktree(plan, dev)
    dev_repo = git.Repo(dev)
    (dev / "pkg/added.txt").write_text("added by a refreshed patch\n")
    dev_repo.git.add("--all")
    dev_repo.git.commit("--quiet", "--amend", "--no-edit")
    assert patch_check.refresh(plan, dev) == ["0002-newfile.patch"]
    fresh = resolve(recipe.load("r", project), env={}, resources=RES, cache_dir=tmp_path / "cache")
    new = fresh.series.patches[1]
    assert new.path == pool / f"0002-newfile@{new.sha256[:8]}.patch" and "+added by a refreshed patch" in new.path.read_text()
    assert shared.read_text() == PATCH_NEWFILE and load_series(old).digest == load_series(old, check_lock=False).digest
    assert [p.name for p in sorted(fresh.series.directory.iterdir())] == ["series", "series.lock"]  # nothing left beside
    assert (workspace.prepare(fresh).project / "added.txt").read_text() == "added by a refreshed patch\n"


def test_unreachable_repo_names_git_reason(project: Path, tmp_path: Path) -> None:
    plan = make_plan(project, tmp_path / "no-such-repo", "1" * 40, tmp_path / "cache")
    with pytest.raises(FetchError, match=r"cannot fetch .*no-such-repo: fatal: .*does not appear to be a git repository"):
        workspace.prepare(plan)
    assert not list((tmp_path / "cache" / "mirrors").glob("*.git"))  # no half-made mirror


def test_git_missing_is_one_line_patch_error(upstream: tuple[Path, str], project: Path, tmp_path: Path) -> None:
    from build_kernel.stages.patch.apply import check_series

    repo, sha = upstream
    plan = make_plan(project, repo, sha, tmp_path / "cache")
    with pytest.raises(PatchError) as info:
        check_series(repo, plan.series, "pkg", env={"PATH": str(tmp_path / "no-bin")})
    assert str(info.value) == f"git read-tree in {repo}: git not found (install git or put it on PATH)"


def test_silent_git_apply_failure_in_worktree_is_one_line_patch_error(
        project: Path, upstream: tuple[Path, str], tmp_path: Path) -> None:
    # A git whose `apply` fails without a word (before: an IndexError traceback).
    repo, sha = upstream
    make_plan(project, repo, sha, tmp_path / "cache")
    fake = tmp_path / "fakebin"
    fake.mkdir()
    real = shutil.which("git")
    (fake / "git").write_text(f'#!/bin/sh\nfor a in "$@"; do [ "$a" = apply ] && exit 1; done\nexec {real} "$@"\n')
    (fake / "git").chmod(0o755)
    plan = resolve(recipe.load("r", project), env={"PATH": f"{fake}:/usr/bin:/bin"}, resources=RES,
                   cache_dir=tmp_path / "cache")
    dev = tmp_path / "dev"
    with pytest.raises(PatchError) as info:
        patch_check.dev_worktree(plan, dev)
    assert str(info.value) == ("0001-policy.patch does not apply: git apply exited 1 and said nothing"
                               " (run `build-kernel patch check` first)")
    assert not dev.exists()
