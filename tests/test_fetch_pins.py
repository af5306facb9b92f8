"""Offline is offline: a tag pin resolved once is recorded with its commit (the recipe's lock file and the
cache), and `--offline` uses that; a pin never resolved is one line naming its recipe key and the command
that fetches it. Seen: `build-kernel --offline` after a full fetch of the nightly recipe asked the network
for `[deps.repo-triton] tag = "v3.5.1"` ("... is neither a branch, tag nor commit ... Could not resolve host")."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import git
import pytest

from tests.conftest import IDENTITY, commit_files, run_cli, write_recipe, write_series

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _git(repo: Path, *args: str) -> str:
    return str(git.Repo(repo).git.execute(["git", "-C", str(repo), *args], env=IDENTITY))


@pytest.fixture
def upstreams(tmp_path: Path) -> dict[str, str]:
    """The package's repository, and a dependency's pinned by an annotated tag (as triton v3.5.1)."""
    src = commit_files(tmp_path / "src", {"pkg/CMakeLists.txt": "project(p)\n"}, "src")
    dep = tmp_path / "dep"
    tagged = commit_files(dep, {"python/kernels/k.py": "K = 1\n", "docs/big.txt": "x\n"}, "dep")
    _git(dep, "tag", "-a", "v3.5.1", "-m", "release")
    commit_files(dep, {"python/kernels/k.py": "K = 2\n"}, "main moves on")
    for repo in (tmp_path / "src", dep):
        _git(repo, "config", "uploadpack.allowFilter", "true")
        _git(repo, "config", "uploadpack.allowAnySHA1InWant", "true")
    return {"src": src, "src_url": f"file://{tmp_path / 'src'}", "dep_url": f"file://{dep}", "dep": str(dep),
            "tagged": tagged}


def _recipe(project: Path, up: dict[str, str], with_dep: bool = True) -> Path:
    write_series(project, "s", "v1", {})
    dep = f"""
        [deps.repo-triton]
        repo = "{up['dep_url']}"
        tag = "v3.5.1"
        paths = ["python/kernels"]
    """ if with_dep else ""
    return write_recipe(project, "r", f"""
        [source]
        repo = "{up['src_url']}"
        commit = "{up['src']}"
        subdir = "pkg"
        [patches]
        series = "s"
        version = "v1"
        [build]
        arch = ["12.0a"]
        {dep}
    """)


def _fetch(recipe: Path, cache: Path, *where: str) -> tuple[int, str]:
    args = ["--cache-dir", str(cache), *(["--offline"] if "group" in where else []), "fetch", "--recipe", str(recipe),
            *(["--offline"] if "command" in where else [])]
    proc = run_cli(*args)
    return proc.returncode, proc.stderr


def test_offline_after_a_full_fetch_uses_the_recorded_commit_of_a_tag(project: Path, upstreams: dict[str, str],
                                                                      tmp_path: Path) -> None:
    recipe, cache = _recipe(project, upstreams), tmp_path / "cache"
    code, err = _fetch(recipe, cache)
    assert code == 0, err
    lock = tomllib.loads(recipe.with_suffix(".lock").read_text())
    assert lock["deps"]["repo-triton"] == {"repo": upstreams["dep_url"], "tag": "v3.5.1", "commit": upstreams["tagged"]}
    os.rename(upstreams["dep"], upstreams["dep"] + ".gone")  # no network from now on
    for where in ("group", "command"):  # `build-kernel --offline fetch` and `build-kernel fetch --offline`
        code, err = _fetch(recipe, cache, where)
        assert code == 0, err
    # Either record is enough: the cache's (the lock deleted), or the lock's (the cache's ref gone).
    recipe.with_suffix(".lock").unlink()
    assert _fetch(recipe, cache, "group")[0] == 0
    mirror = next(p for p in (cache / "mirrors").glob("dep-*.git"))
    _git(mirror, "update-ref", "-d", "refs/build-kernel/refs/v3.5.1")
    code, err = _fetch(recipe, cache, "group")
    assert code == 4 and "[deps.repo-triton] tag 'v3.5.1'" in err, err


def test_a_tag_never_resolved_is_one_line_naming_the_key_and_the_command(project: Path, upstreams: dict[str, str],
                                                                         tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert _fetch(_recipe(project, upstreams, with_dep=False), cache)[0] == 0  # the source alone is cached
    recipe = _recipe(project, upstreams)
    code, err = _fetch(recipe, cache, "group")
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 4 and len(lines) == 1, err
    assert "[deps.repo-triton] tag 'v3.5.1' was never resolved to a commit" in lines[0]
    assert f"build-kernel fetch --recipe {recipe}" in lines[0]


def test_lock_resolves_a_tag_and_a_branch_without_fetching_and_upgrade_follows_them(project: Path,
                                                                                   upstreams: dict[str, str],
                                                                                   tmp_path: Path) -> None:
    """`build-kernel lock`: a tag (annotated: the commit it points at) and a floating [source] branch, asked with
    git ls-remote (nothing fetched into the cache); kept until --upgrade, which follows a moved tag."""
    from build_kernel import recipe as recipes
    from build_kernel.plan import resolve
    from build_kernel.stages.fetch import pins

    path, cache = _recipe(project, upstreams), tmp_path / "cache"
    path.write_text(path.read_text().replace(f'commit = "{upstreams["src"]}"', 'commit = "main"\nallow_floating = true'))
    lock = path.with_suffix(".lock")
    dry = run_cli("--cache-dir", str(cache), "lock", "--recipe", str(path), "--dry-run")
    assert dry.returncode == 0 and f"[deps.repo-triton] tag v3.5.1: {upstreams['tagged']} (added)" in dry.stdout, dry.stderr
    assert f"[source] commit main: {upstreams['src']} (added)" in dry.stdout and not lock.exists()
    assert run_cli("--cache-dir", str(cache), "lock", "--recipe", str(path)).returncode == 0
    data = tomllib.loads(lock.read_text())
    assert data["deps"]["repo-triton"] == {"repo": upstreams["dep_url"], "tag": "v3.5.1", "commit": upstreams["tagged"]}
    assert data["source"] == {"repo": upstreams["src_url"], "ref": "main", "commit": upstreams["src"]}
    assert not (cache / "mirrors").exists()  # resolved, not fetched
    plan = resolve(recipes.load(str(path)), env=dict(os.environ), cache_dir=cache)
    # --offline takes the lock's commit of the branch (the field `ref`: before, the commit overwrote it).
    assert pins.for_fetch(plan, "source", "commit", upstreams["src_url"], upstreams["src_url"], "main",
                          offline=True) == upstreams["src"]

    moved = _git(Path(upstreams["dep"]), "rev-parse", "HEAD")
    _git(Path(upstreams["dep"]), "tag", "-f", "-a", "v3.5.1", "-m", "moved")
    kept = run_cli("--cache-dir", str(cache), "lock", "--recipe", str(path))
    assert kept.returncode == 0 and "(kept; --upgrade resolves it again)" in kept.stdout and "up to date" in kept.stdout
    upgraded = run_cli("--cache-dir", str(cache), "lock", "--recipe", str(path), "--upgrade")
    assert f"[deps.repo-triton] tag v3.5.1: {upstreams['tagged']} -> {moved}" in upgraded.stdout, upgraded.stderr
    assert f"[source] commit main: {upstreams['src']} (unchanged)" in upgraded.stdout
    shown = run_cli("--cache-dir", str(cache), "plan", "--recipe", str(path))
    assert f"[deps.repo-triton] tag v3.5.1 = {moved} (r.lock)" in shown.stdout, shown.stdout + shown.stderr
    assert f"[source] branch main = {upstreams['src']} (r.lock)" in shown.stdout


def test_lock_of_a_tag_on_an_unreachable_repository_is_one_line(project: Path, upstreams: dict[str, str],
                                                                tmp_path: Path) -> None:
    path = _recipe(project, upstreams)
    os.rename(upstreams["dep"], upstreams["dep"] + ".gone")
    proc = run_cli("--cache-dir", str(tmp_path / "cache"), "lock", "--recipe", str(path),
                   env={"BUILD_KERNEL_CONFIG": str(tmp_path / "config.toml")})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 4 and len(lines) == 1, proc.stderr
    assert f"cannot read {upstreams['dep_url']} to resolve [deps.repo-triton] tag 'v3.5.1'" in lines[0]
    assert f"[mirrors] of the user config {tmp_path / 'config.toml'}" in lines[0]
    assert not path.with_suffix(".lock").exists()
