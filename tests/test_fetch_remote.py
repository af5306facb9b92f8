"""Fetching only what a build needs, from servers made by the tests (file:// URLs served by
real git upload-pack): a pin by SHA, pull-request-only pins, blob-less + sparse, mirrors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import git
import pytest

from build_kernel import mirrors
from build_kernel.errors import FetchError
from build_kernel.stages.fetch import remote as fetch
from build_kernel.stages.fetch import workspace
from tests.conftest import IDENTITY, commit_files, run_cli
from tests.test_fetch_patch import make_plan

BIG = "x" * 200_000 + "\n"  # a file outside the package: a sparse fetch must not bring it


def _git(repo: Path, *args: str) -> str:
    return str(git.Repo(repo).git.execute(["git", "-C", str(repo), *args], env=IDENTITY))


@pytest.fixture
def server(tmp_path: Path) -> dict[str, str]:
    """An upstream like GitHub's sglang: the package in a subfolder, other big files beside it,
    main, and a pull request whose commits are on no branch (refs/pull/7/head)."""
    repo = tmp_path / "upstream"
    base = commit_files(repo, {"pkg/CMakeLists.txt": "project(up)\n", "pkg/up.cc": "int up();\n",
                               "pkg/pyproject.toml": '[project]\nname = "up"\nversion = "0.1.0"\n',
                               "docs/big.txt": BIG, "README.md": "upstream\n"}, "base")
    _git(repo, "checkout", "-q", "-b", "pr")
    pr_inner = commit_files(repo, {"pkg/up.cc": "int up(); // pr, first\n"}, "pr 1")
    pr_tip = commit_files(repo, {"pkg/up.cc": "int up(); // pr, second\n"}, "pr 2")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "update-ref", "refs/pull/7/head", pr_tip)
    _git(repo, "branch", "-D", "pr")
    main = commit_files(repo, {"pkg/up.cc": "int up(); // main\n"}, "main moves on")
    # What GitHub allows: partial clone filters and any commit by SHA.
    _git(repo, "config", "uploadpack.allowFilter", "true")
    _git(repo, "config", "uploadpack.allowAnySHA1InWant", "true")
    return {"url": f"file://{repo}", "path": str(repo), "base": base, "pr_inner": pr_inner, "pr_tip": pr_tip,
            "main": main, "big": _git(repo, "rev-parse", f"{base}:docs/big.txt").strip()}


def _refs(mirror: Path) -> list[str]:
    return _git(mirror, "for-each-ref", "--format=%(refname)").split()


def _missing(mirror: Path, sha: str) -> set[str]:
    out = _git(mirror, "rev-list", "--objects", "--missing=print", "--no-walk", sha)
    return {line[1:] for line in out.splitlines() if line.startswith("?")}


def test_pin_only_on_a_pull_request_fetched_alone_blobless_and_sparse(server: dict[str, str], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    pin = server["pr_inner"]  # reachable only from refs/pull/7/head, and not its tip
    mirror, sha = fetch.ensure_commit(server["url"], pin, cache, offline=False, paths=["pkg"])
    assert sha == pin
    # The pin alone: no branch, no tag, no pull-request ref came with it.
    assert _refs(mirror) == [f"refs/build-kernel/pins/{pin}"]
    assert (mirror / "shallow").read_text().split() == [pin]
    # Blob-less: the big file outside the package was never fetched; the package's files were.
    assert server["big"] in _missing(mirror, pin)
    tree = fetch.checkout(mirror, pin, tmp_path / "tree", paths=["pkg"])
    assert tree.head.commit.hexsha == pin
    assert sorted(p.name for p in (tmp_path / "tree").iterdir() if p.name != ".git") == ["pkg"]
    assert (tmp_path / "tree/pkg/up.cc").read_text() == "int up(); // pr, first\n"
    # The checkout is a usable git tree: a change shows up, and can be committed.
    (tmp_path / "tree/pkg/up.cc").write_text("changed\n")
    assert tree.git.status("--porcelain").strip() == "M pkg/up.cc"


@pytest.fixture
def strict(server: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The same server refusing unadvertised commits, as old servers do (wire protocol v0)."""
    _git(Path(server["path"]), "config", "uploadpack.allowAnySHA1InWant", "false")
    for key, value in {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "protocol.version", "GIT_CONFIG_VALUE_0": "0"}.items():
        monkeypatch.setenv(key, value)
    return server


def test_server_refusing_unadvertised_sha_gets_the_one_ref_whose_tip_it_is(strict: dict[str, str], tmp_path: Path) -> None:
    server = strict
    mirror, sha = fetch.ensure_commit(server["url"], server["pr_tip"], tmp_path / "cache", offline=False, paths=["pkg"])
    assert sha == server["pr_tip"]
    assert _refs(mirror) == [f"refs/build-kernel/pins/{sha}"]


def test_server_refusing_unadvertised_sha_falls_back_to_branches_then_pull_requests(strict: dict[str, str],
                                                                                    tmp_path: Path) -> None:
    server = strict
    mirror, sha = fetch.ensure_commit(server["url"], server["pr_inner"], tmp_path / "cache", offline=False)
    assert sha == server["pr_inner"]
    refs = _refs(mirror)
    assert "refs/build-kernel/heads/main" in refs and "refs/build-kernel/pull/7" in refs


def test_offline_reuse_and_offline_refusal_of_more_files(server: dict[str, str], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    fetch.ensure_commit(server["url"], server["base"], cache, offline=False, paths=["pkg"])
    os.rename(server["path"], server["path"] + ".gone")  # upstream unreachable from now on
    mirror, sha = fetch.ensure_commit(server["url"], server["base"], cache, offline=True, paths=["pkg"])
    assert fetch.checkout(mirror, sha, tmp_path / "again", paths=["pkg"]).head.commit.hexsha == sha
    # The whole tree needs docs/big.txt, which was never fetched: said, not fetched lazily.
    with pytest.raises(FetchError, match=r"files of .* are not in the cached mirror .* --offline forbids"):
        fetch.ensure_commit(server["url"], server["base"], cache, offline=True)


def test_floating_ref_brings_history_without_blobs(server: dict[str, str], tmp_path: Path) -> None:
    mirror, sha = fetch.ensure_commit(server["url"], "main", tmp_path / "cache", offline=False,
                                      allow_floating=True, paths=["pkg"])
    assert sha == server["main"]
    assert _git(mirror, "rev-list", "--count", sha).strip() == "2"  # the whole history of main
    assert server["big"] in _missing(mirror, server["base"])


def _recipe_env(tmp_path: Path, config: str) -> dict[str, str]:
    path = tmp_path / "user-config.toml"
    path.write_text(config)
    return {mirrors.CONFIG_ENV: str(path)}


def test_mirror_table_rewrites_the_public_url(project: Path, server: dict[str, str], tmp_path: Path) -> None:
    public = "https://github.com/example/upstream.git"  # nothing is reachable there from a test
    env = _recipe_env(tmp_path, f'[mirrors]\n"https://github.com/example/" = "file://{tmp_path}/"\n')
    make_plan(project, Path("unused"), server["base"], tmp_path / "cache", patches={})
    recipe = project / "recipes/r.toml"
    recipe.write_text(recipe.read_text().replace('repo = "unused"', f'repo = "{public}"').replace(
        str((project / "unused").resolve()), public))
    text = recipe.read_text()
    assert f'repo = "{public}"' in text, text
    plan = run_cli("--json", "plan", "--recipe", str(recipe), env=env)
    assert plan.returncode == 0, plan.stderr
    rewrites = json.loads(plan.stdout)["mirrors"]["rewrites"]
    assert rewrites == [{"url": public, "fetch_url": f"file://{tmp_path}/upstream.git", "via": env[mirrors.CONFIG_ENV]}]
    os.symlink(server["path"], tmp_path / "upstream.git")
    proc = run_cli("--cache-dir", str(tmp_path / "cache"), "--json", "fetch", "--recipe", str(recipe), env=env)
    assert proc.returncode == 0, proc.stderr
    tree = Path(json.loads(proc.stdout)["tree"])
    assert git.Repo(tree).head.commit.hexsha == server["base"]
    doctor = run_cli("doctor", "--recipe", str(recipe), env=env)
    assert f"{public} -> file://{tmp_path}/upstream.git" in doctor.stdout, doctor.stdout


def test_mirror_without_the_pin_names_both_and_leaves_nothing(project: Path, server: dict[str, str],
                                                              tmp_path: Path) -> None:
    stale = tmp_path / "stale.git"
    git.Repo.clone_from(server["url"], stale, bare=True, branch="main", single_branch=True, depth=1)
    _git(stale, "config", "uploadpack.allowAnySHA1InWant", "true")
    env = _recipe_env(tmp_path, f'[mirrors]\n"{server["url"]}" = "file://{stale}"\n')
    make_plan(project, Path(server["path"]), server["pr_inner"], tmp_path / "cache", patches={})
    recipe = project / "recipes/r.toml"
    recipe.write_text(recipe.read_text().replace(f'repo = "{server["path"]}"', f'repo = "{server["url"]}"'))
    proc = run_cli("--cache-dir", str(tmp_path / "cache"), "fetch", "--recipe", str(recipe), env=env)
    assert proc.returncode == 4
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, proc.stderr
    assert f"commit {server['pr_inner']} is not in mirror file://{stale} (for {server['url']}" in lines[0]
    assert "update the mirror from upstream, or remove its [mirrors] entry" in lines[0]
    assert not list((tmp_path / "cache").glob("mirrors/*.git")) and not list((tmp_path / "cache").glob("src/*"))


def test_git_insteadof_rewrites_are_shown(tmp_path: Path) -> None:
    env = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "url.file:///srv/git/.insteadOf",
           "GIT_CONFIG_VALUE_0": "https://github.com/", "HOME": str(tmp_path)}
    rw = mirrors.load(env).rewrite("https://github.com/NVIDIA/cutlass.git")
    assert rw.fetch_url == "file:///srv/git/NVIDIA/cutlass.git"
    assert rw.rule is not None and rw.rule.origin == "git config url.file:///srv/git/.insteadOf"


def test_longest_prefix_wins_and_bad_config_is_one_line(tmp_path: Path) -> None:
    env = _recipe_env(tmp_path, '[mirrors]\n"https://github.com/" = "file:///all/"\n'
                                '"https://github.com/NVIDIA/cutlass.git" = "file:///one/cutlass.git"\n')
    env["HOME"] = str(tmp_path)
    m = mirrors.load(env)
    assert m.rewrite("https://github.com/NVIDIA/cutlass.git").fetch_url == "file:///one/cutlass.git"
    assert m.rewrite("https://github.com/fmtlib/fmt.git").fetch_url == "file:///all/fmtlib/fmt.git"
    assert not m.rewrite("https://gitlab.com/x.git").rewritten
    bad = _recipe_env(tmp_path, "[mirrors]\n\"https://github.com/\" = 3\n")
    with pytest.raises(FetchError, match=r"\[mirrors\] must map URL prefixes to mirror URLs"):
        mirrors.load(bad)


def test_sparse_dependency_paths(project: Path, server: dict[str, str], tmp_path: Path) -> None:
    plan = make_plan(project, Path(server["path"]), server["base"], tmp_path / "cache", patches={}, extra=f"""
        [deps.up]
        repo = "{server['url']}"
        commit = "{server['base']}"
        paths = ["pkg"]
    """)
    [dep] = workspace.prepare_deps(plan).values()
    assert sorted(p.name for p in dep.iterdir() if p.name not in (".git", fetch.MARKER)) == ["pkg"]
    mirror = next(p for p in (tmp_path / "cache/mirrors").glob("*.git") if _refs(p))
    assert server["big"] in _missing(mirror, server["base"])


def test_dependency_by_tag_with_a_sparse_submodule(project: Path, server: dict[str, str], tmp_path: Path) -> None:
    """Like sgl-kernel's FlashMLA (csrc/cutlass is a submodule) and triton (pinned by tag)."""
    outer = tmp_path / "outer"
    commit_files(outer, {"csrc/api.cpp": "// api\n", "docs/big.txt": BIG}, "outer")
    _git(outer, "-c", "protocol.file.allow=always", "submodule", "add", "-q", server["url"], "csrc/up")
    _git(outer, "-C", "csrc/up", "checkout", "-q", server["base"])
    _git(outer, "add", "csrc/up")
    outer_sha = commit_files(outer, {}, "pin the submodule")
    _git(outer, "tag", "v1.0")
    _git(outer, "config", "uploadpack.allowFilter", "true")
    _git(outer, "config", "uploadpack.allowAnySHA1InWant", "true")
    plan = make_plan(project, Path(server["path"]), server["base"], tmp_path / "cache", patches={}, extra=f"""
        [deps.outer]
        repo = "file://{outer}"
        tag = "v1.0"
        paths = ["csrc", "csrc/up/pkg"]
        submodules = ["csrc/up"]
    """)
    [dep] = workspace.prepare_deps(plan).values()
    assert git.Repo(dep).head.commit.hexsha == outer_sha
    assert (dep / "csrc/api.cpp").is_file() and not (dep / "docs").exists()
    assert git.Repo(dep / "csrc/up").head.commit.hexsha == server["base"]
    assert sorted(p.name for p in (dep / "csrc/up").iterdir() if p.name != ".git") == ["pkg"]
    marker = json.loads((dep / fetch.MARKER).read_text())
    assert marker["tag"] == "v1.0" and marker["submodules"] == {"csrc/up": server["base"]}


def test_dependency_tag_and_commit_together_is_a_recipe_error(project: Path, server: dict[str, str],
                                                              tmp_path: Path) -> None:
    from build_kernel.errors import RecipeError

    with pytest.raises(RecipeError, match=r"deps.d.tag: give commit or tag, not both"):
        make_plan(project, Path(server["path"]), server["base"], tmp_path / "cache", patches={}, extra=f"""
            [deps.d]
            repo = "{server['url']}"
            commit = "{server['base']}"
            tag = "v1"
        """)


@pytest.mark.parametrize(("extra", "message"), [
    ('paths = ["../up"]', r"deps.d.paths: '../up' is not a folder inside the repository"),
    ('paths = ["/abs"]', r"deps.d.paths: '/abs' is not a folder inside the repository"),
])
def test_bad_dependency_paths_are_recipe_errors(project: Path, server: dict[str, str], tmp_path: Path,
                                                extra: str, message: str) -> None:
    from build_kernel.errors import RecipeError

    with pytest.raises(RecipeError, match=message):
        make_plan(project, Path(server["path"]), server["base"], tmp_path / "cache", patches={}, extra=f"""
            [deps.d]
            repo = "{server['url']}"
            commit = "{server['base']}"
            {extra}
        """)


def test_paths_on_a_local_dependency_folder_is_a_recipe_error(project: Path, server: dict[str, str],
                                                              tmp_path: Path) -> None:
    from build_kernel.errors import RecipeError

    with pytest.raises(RecipeError, match=r"deps.d.paths: only with repo \+ commit \(a local path is used whole\)"):
        make_plan(project, Path(server["path"]), server["base"], tmp_path / "cache", patches={}, extra=f"""
            [deps.d]
            path = "{tmp_path}"
            paths = ["pkg"]
        """)


@pytest.mark.parametrize(("submodule", "message"), [
    ("pkg", r"submodules: 'pkg' is not a submodule of .* \(list the gitlink paths of its .gitmodules\)"),
    ("rel", r"submodules: no absolute URL for 'rel' in its .gitmodules \(\.\./up.git\) \(give rel as a \[deps\] entry"),
])
def test_bad_submodule_is_one_error_and_no_tree(project: Path, server: dict[str, str], tmp_path: Path,
                                                submodule: str, message: str) -> None:
    outer = tmp_path / "outer"
    commit_files(outer, {"pkg/a.txt": "a\n"}, "outer")
    # A gitlink with a relative URL, as some projects write them.
    _git(outer, "update-index", "--add", "--cacheinfo", f"160000,{server['base']},rel")
    (outer / ".gitmodules").write_text('[submodule "rel"]\n\tpath = rel\n\turl = ../up.git\n')
    _git(outer, "add", ".gitmodules")
    _git(outer, "commit", "-q", "--no-gpg-sign", "-m", "relative submodule")
    sha = _git(outer, "rev-parse", "HEAD").strip()
    plan = make_plan(project, Path(server["path"]), server["base"], tmp_path / "cache", patches={}, extra=f"""
        [deps.outer]
        repo = "file://{outer}"
        commit = "{sha}"
        submodules = ["{submodule}"]
    """)
    with pytest.raises(FetchError, match=message):
        workspace.prepare_deps(plan)
    assert not [p for p in (tmp_path / "cache/deps").iterdir() if not p.name.endswith(".lock")]


def test_offline_branch_never_fetched_is_one_error(server: dict[str, str], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    fetch.ensure_commit(server["url"], server["base"], cache, offline=False, paths=["pkg"])
    with pytest.raises(FetchError, match=r"'main' is not in the cached mirror of .* --offline forbids fetching it"):
        fetch.ensure_commit(server["url"], "main", cache, offline=True, allow_floating=True)


def test_no_git_means_no_git_rewrites(tmp_path: Path) -> None:
    assert mirrors._git_rules({"PATH": str(tmp_path)}) == []
