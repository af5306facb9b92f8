"""Every user-facing error of fetch, patch and build that no fast test reached yet
(bench/code_health/results/error_sites.json): one line naming what failed, where, and what to do, the
kind's exit code (4 fetch, 5 patch, 6 build, 3 toolchain), no traceback, nothing half-written.

Upstreams are real git repos served by real upload-pack over file:// URLs, as in
test_fetch_remote.py; a "strict" server is one that refuses unadvertised objects (wire
protocol v0, `uploadpack.allowAnySHA1InWant` off), as old servers do. The CLI runs in a
subprocess wherever it can reach the site; where it cannot, the function is called directly
and a comment says why.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import subprocess
import sys
import venv
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import git
import pytest

from build_kernel import recipe
from build_kernel.errors import BuildError, BuildKernelError, FetchError, PatchError, ToolchainError
from build_kernel.mirrors import CONFIG_ENV
from build_kernel.plan import Plan, resolve
from build_kernel.resources import Resources
from build_kernel.series import load_series
from build_kernel.stages import Context
from build_kernel.stages.builder import BuildStage, cudawheels, provenance
from build_kernel.stages.fetch import mirror as fetch_mirror
from build_kernel.stages.fetch import remote as fetch
from build_kernel.stages.patch import PatchStage
from build_kernel.stages.patch.apply import apply_series
from build_kernel.toolchain import Facts
from tests.conftest import IDENTITY, commit_files, run_cli, write_recipe, write_series

RES = Resources(cpus=2, cpus_why="test", memory_bytes=8 * 1024**3, memory_why="test")
BIG = "x" * 50_000 + "\n"  # outside the package: a sparse fetch never brings it
V0 = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "protocol.version", "GIT_CONFIG_VALUE_0": "0"}
PATCH_A = """\
Description: add a.txt
Forwarded: not-needed
---
diff --git a/a.txt b/a.txt
new file mode 100644
--- /dev/null
+++ b/a.txt
@@ -0,0 +1 @@
+a
"""
PATCH_B = PATCH_A.replace("a.txt", "b.txt").replace("+a\n", "+b\n")


def _git(repo: Path, *args: str) -> str:
    return str(git.Repo(repo).git.execute(["git", "-C", str(repo), *args], env=IDENTITY))


def _pyproject(version: str) -> str:
    return f'[project]\nname = "up"\nversion = "{version}"\n'


@dataclass
class Upstream:
    path: Path
    base: str  # 0.1.0: what the recipes pin; not the tip of any ref
    mid: str  # 0.1.5
    main: str  # 0.2.0, the tip of main

    @property
    def url(self) -> str:
        return f"file://{self.path}"

    def strict(self) -> None:
        """Refuse objects by id from now on (clients must also speak protocol v0: V0)."""
        _git(self.path, "config", "uploadpack.allowAnySHA1InWant", "false")


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    """Served like GitHub (blob filters, any SHA): a package in pkg/, a big file beside it, three releases."""
    path = tmp_path / "upstream"
    base = commit_files(path, {"pkg/pyproject.toml": _pyproject("0.1.0"), "pkg/up.cc": "int up();\n",
                               "docs/big.txt": BIG, "README.md": "upstream\n"}, "0.1.0")
    mid = commit_files(path, {"pkg/pyproject.toml": _pyproject("0.1.5"), "pkg/up.cc": "int up(); // 0.1.5\n"}, "0.1.5")
    main = commit_files(path, {"pkg/pyproject.toml": _pyproject("0.2.0")}, "0.2.0")
    _git(path, "config", "uploadpack.allowFilter", "true")
    _git(path, "config", "uploadpack.allowAnySHA1InWant", "true")
    return Upstream(path, base, mid, main)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def user_env(tmp_path: Path) -> dict[str, str]:
    """No user config of the machine running the tests: no [mirrors] rewrites."""
    config = tmp_path / "user-config.toml"
    config.write_text("")
    return {CONFIG_ENV: str(config)}


def _recipe(project: Path, repo: str, commit: str, *, source: str = "", extra: str = "",
            patches: dict[str, str] | None = None) -> Path:
    if not (project / "patches/s/v1").exists():
        write_series(project, "s", "v1", patches or {})
    return write_recipe(project, "r", f"""
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
        {extra}
    """)


def _plan(recipe_path: Path, cache: Path) -> Plan:
    return resolve(recipe.load(str(recipe_path), recipe_path.parent.parent), env={}, resources=RES, cache_dir=cache)


def _cli(cache: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("--cache-dir", str(cache), *args, env=env)


def _one_error(proc: subprocess.CompletedProcess[str], code: int) -> str:
    """The run failed with `code` and said why in exactly one line, without a traceback."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == code, out
    assert "Traceback" not in out, out
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, out
    return lines[0].removeprefix("error: ")


def _one_line(exc: pytest.ExceptionInfo[BuildKernelError], kind: type[BuildKernelError], code: int) -> str:
    assert isinstance(exc.value, kind) and exc.value.exit_code == code
    text = str(exc.value)
    assert "\n" not in text
    return text


def _mirror(cache: Path, url: str) -> Path:
    return fetch_mirror.path_for(cache, url)


def _state(repo: Path) -> tuple[str, str, str]:
    """A mirror's refs, objects and shallow boundary: equal before and after means untouched."""
    shallow = repo / "shallow"
    return (_git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
            _git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"),
            shallow.read_text() if shallow.is_file() else "")


def _partials(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".partial-" in p.name] if root.exists() else []


def _trees(cache: Path) -> list[str]:
    src = cache / "src"
    return sorted(p.name for p in src.iterdir() if not p.name.endswith(".lock")) if src.exists() else []


# ---- fetch ---------------------------------------------------------------------------------


def test_a_branch_name_where_a_sha_is_needed_is_refused_before_any_fetch(upstream: Upstream, cache: Path) -> None:
    # Direct call: no command reaches this with a non-SHA. The recipe rules refuse a floating
    # [source] commit or [deps] commit without allow_floating/tag, and every other caller
    # (patch check --commit, health, tags, submodules) passes allow_floating or a full SHA.
    with pytest.raises(FetchError) as exc:
        fetch.ensure_commit(upstream.url, "main", cache, offline=False)
    assert _one_line(exc, FetchError, 4).startswith("'main' is not a full commit SHA (pin a 40-hex SHA, or ")
    assert not _mirror(cache, upstream.url).exists()


def test_offline_pin_missing_from_the_cached_mirror(project: Path, upstream: Upstream, cache: Path,
                                                    user_env: dict[str, str]) -> None:
    recipe_path = _recipe(project, upstream.url, upstream.base)
    assert _cli(cache, user_env, "fetch", "--recipe", str(recipe_path)).returncode == 0
    before, trees = _state(_mirror(cache, upstream.url)), _trees(cache)
    _recipe(project, upstream.url, upstream.main)
    line = _one_error(_cli(cache, user_env, "fetch", "--offline", "--recipe", str(recipe_path)), 4)
    assert line == (f"{upstream.main} is not in the cached mirror of {upstream.url} and --offline forbids fetching"
                    " (run once without --offline)")
    assert _state(_mirror(cache, upstream.url)) == before and _trees(cache) == trees and not _partials(cache)


def test_files_of_a_cached_pin_from_an_upstream_that_is_gone(project: Path, upstream: Upstream, cache: Path,
                                                             user_env: dict[str, str]) -> None:
    recipe_path = _recipe(project, upstream.url, upstream.base)
    assert _cli(cache, user_env, "fetch", "--recipe", str(recipe_path)).returncode == 0  # pkg/ only
    before, trees = _state(_mirror(cache, upstream.url)), _trees(cache)
    upstream.path.rename(upstream.path.with_name("moved"))
    _recipe(project, upstream.url, upstream.base, source="sparse = false")  # now the whole tree: docs/big.txt too
    line = _one_error(_cli(cache, user_env, "fetch", "--recipe", str(recipe_path)), 4)
    assert line.startswith(f"cannot fetch {upstream.base} from {upstream.url}: fatal: '{upstream.path}' "
                           "does not appear to be a git repository")
    assert line.endswith(f"(check the URL, your network and [mirrors] of the user config {user_env[CONFIG_ENV]})")
    assert _state(_mirror(cache, upstream.url)) == before and _trees(cache) == trees and not _partials(cache)


def test_server_that_serves_no_object_by_id_and_has_no_ref_at_the_pin(project: Path, upstream: Upstream, cache: Path,
                                                                      user_env: dict[str, str]) -> None:
    recipe_path = _recipe(project, upstream.url, upstream.base)
    assert _cli(cache, user_env, "fetch", "--recipe", str(recipe_path)).returncode == 0  # pkg/ only
    before, trees = _state(_mirror(cache, upstream.url)), _trees(cache)
    upstream.strict()  # and base is the tip of no ref: nothing whole-tree to fall back on
    _recipe(project, upstream.url, upstream.base, source="sparse = false")
    line = _one_error(_cli(cache, {**user_env, **V0}, "fetch", "--recipe", str(recipe_path)), 4)
    assert line == (f"{upstream.url} serves neither objects by id nor a ref at {upstream.base[:12]} "
                    "(allow uploadpack.allowAnySHA1InWant on the server, or use a mirror that does)")
    assert _state(_mirror(cache, upstream.url)) == before and _trees(cache) == trees and not _partials(cache)


def test_server_whose_branch_moved_away_from_the_pin_did_not_send_its_files(
        project: Path, upstream: Upstream, cache: Path, user_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in V0.items():
        monkeypatch.setenv(key, value)
    upstream.strict()
    # The pin came by main's history (the server refused it by SHA); no file was needed yet.
    _, sha = fetch.ensure_commit(upstream.url, upstream.base, cache, offline=False, paths=["no-such-folder"])
    assert sha == upstream.base
    # Then main is force-pushed to an unrelated history: the ref holding the pin no longer has it.
    _git(upstream.path, "checkout", "-q", "--orphan", "rewritten")
    _git(upstream.path, "rm", "-rq", "--cached", ".")
    commit_files(upstream.path, {"other/file.txt": "rewritten\n"}, "rewritten history")
    _git(upstream.path, "branch", "-M", "rewritten", "main")
    recipe_path = _recipe(project, upstream.url, upstream.base)
    line = _one_error(_cli(cache, user_env, "fetch", "--recipe", str(recipe_path)), 4)
    assert line.startswith(f"{upstream.url} did not send 2 files of {upstream.base[:12]} (e.g. ")
    assert line.endswith("(the server must serve objects by id (uploadpack.allowFilter, uploadpack.allowAnySHA1InWant))")
    assert _trees(cache) == [] and not _partials(cache)


def test_checkout_that_lands_on_another_commit_is_refused(upstream: Upstream, cache: Path, tmp_path: Path) -> None:
    # Direct call: every caller passes a full lowercase SHA (the recipe rules ask for one) or a
    # resolved ref. The CLI reached it only through the annotated-tag bug (fixed: the test below).
    mirror, _ = fetch.ensure_commit(upstream.url, upstream.base, cache, offline=False, paths=["pkg"])
    before = _state(mirror)
    short, dest = upstream.base[:12], tmp_path / "tree"
    with pytest.raises(FetchError) as exc:
        fetch.checkout(mirror, short, dest, paths=["pkg"])
    assert _one_line(exc, FetchError, 4) == (f"checkout of {short} in {dest} gave HEAD {upstream.base} "
                                             "(delete the cache folder and retry)")
    assert _state(mirror) == before


def test_dependency_pinned_to_an_annotated_tag_is_fetched(project: Path, upstream: Upstream, cache: Path,
                                                          user_env: dict[str, str]) -> None:
    _git(upstream.path, "tag", "-a", "v0.1.0", "-m", "release 0.1.0", upstream.base)  # as triton's and cutlass's are
    recipe_path = _recipe(project, upstream.url, upstream.base,
                          extra=f'[deps.up]\nrepo = "{upstream.url}"\ntag = "v0.1.0"\npaths = ["pkg"]')
    proc = _cli(cache, user_env, "fetch", "--recipe", str(recipe_path))
    assert proc.returncode == 0, proc.stderr


def test_local_dependency_folder_that_does_not_exist(project: Path, upstream: Upstream, cache: Path,
                                                     user_env: dict[str, str]) -> None:
    recipe_path = _recipe(project, upstream.url, upstream.base, extra='[deps.minidep]\npath = "no-such-folder"')
    line = _one_error(_cli(cache, user_env, "fetch", "--recipe", str(recipe_path)), 4)
    assert line == f"[deps.minidep] path {project / 'no-such-folder'} does not exist (fix the path in the recipe)"
    assert _trees(cache) == [] and not _partials(cache) and not (project / "no-such-folder").exists()


# ---- patch ---------------------------------------------------------------------------------


def test_patch_stage_without_a_tree(project: Path, upstream: Upstream, cache: Path) -> None:
    # Direct call: every command runs the fetch stage before the patch stage, so the CLI always
    # hands it a tree; the check guards the Stage API (stages.run with PatchStage alone).
    plan = _plan(_recipe(project, upstream.url, upstream.base), cache)
    with pytest.raises(PatchError) as exc:
        PatchStage().run(Context(plan))
    assert _one_line(exc, PatchError, 5) == "no source tree to patch (run the fetch stage first)"


def test_git_failing_while_a_series_is_checked(project: Path, tmp_path: Path) -> None:
    # Direct call: the CLI patches only fresh checkouts, where read-tree HEAD and the applies
    # that --check accepted succeed; a tree without a commit (an unborn HEAD) makes git fail.
    series = load_series(write_series(project, "s", "v1", {"0001-a.patch": PATCH_A}))
    tree = tmp_path / "unborn"
    git.Repo.init(tree)
    with pytest.raises(PatchError) as exc:
        apply_series(tree, series, env=dict(os.environ))
    line = _one_line(exc, PatchError, 5)
    assert line.startswith(f"git read-tree HEAD failed in {tree}: fatal: ")
    assert sorted(p.name for p in tree.iterdir()) == [".git"]  # nothing applied


def test_series_is_not_applied_to_a_tree_with_uncommitted_changes(project: Path,
                                                                  make_repo: Callable[..., tuple[Path, str]]) -> None:
    # Direct call: the CLI applies a series only to the checkout it has just made (always clean).
    series = load_series(write_series(project, "s", "v1", {"0001-a.patch": PATCH_A}))
    tree, _ = make_repo("dirty", {"pkg/up.cc": "int up();\n"})
    (tree / "pkg/up.cc").write_text("int up(); // local edit\n")
    with pytest.raises(PatchError) as exc:
        apply_series(tree, series, "pkg", env=dict(os.environ))
    assert _one_line(exc, PatchError, 5) == (f"{tree} has uncommitted changes (patches apply to a clean checkout only;"
                                             " use a fresh worktree)")
    assert (tree / "pkg/up.cc").read_text() == "int up(); // local edit\n" and not (tree / "pkg/a.txt").exists()


def test_patch_worktree_into_an_existing_folder(project: Path, upstream: Upstream, cache: Path, tmp_path: Path,
                                                user_env: dict[str, str]) -> None:
    recipe_path = _recipe(project, upstream.url, upstream.base, patches={"0001-a.patch": PATCH_A})
    dest = tmp_path / "dev"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep me\n")
    line = _one_error(_cli(cache, user_env, "patch", "worktree", "--recipe", str(recipe_path), str(dest)), 5)
    assert line == f"{dest} already exists (choose a new folder or delete it)"
    assert [p.name for p in dest.iterdir()] == ["mine.txt"] and (dest / "mine.txt").read_text() == "keep me\n"
    assert not _mirror(cache, upstream.url).exists()  # refused before fetching anything


def test_patch_refresh_with_a_commit_more_than_the_series_has_patches(project: Path, upstream: Upstream, cache: Path,
                                                                      tmp_path: Path, user_env: dict[str, str]) -> None:
    recipe_path = _recipe(project, upstream.url, upstream.base,
                          patches={"0001-a.patch": PATCH_A, "0002-b.patch": PATCH_B})
    dev = tmp_path / "dev"
    made = _cli(cache, user_env, "patch", "worktree", "--recipe", str(recipe_path), str(dev))
    assert made.returncode == 0, made.stderr
    commit_files(dev, {"pkg/c.txt": "a fixup not squashed\n"}, "fixup")
    series_dir = project / "patches/s/v1"
    before = {p.name: p.read_bytes() for p in series_dir.iterdir()}
    line = _one_error(_cli(cache, user_env, "patch", "refresh", "--recipe", str(recipe_path), str(dev)), 5)
    assert line == (f"{dev} has 3 commit(s) on top of {upstream.base[:12]}, the series has 2 patches"
                    " (keep exactly one commit per patch (squash fixups into their patch's commit))")
    assert {p.name: p.read_bytes() for p in series_dir.iterdir()} == before  # patches and lock untouched


def _health_recipe(project: Path, upstream: Upstream, ref: str = "main") -> Path:
    return _recipe(project, upstream.url, upstream.base, source=f'ref = "{ref}"')


def test_health_until_a_ref_upstream_does_not_have(project: Path, upstream: Upstream, cache: Path, tmp_path: Path,
                                                   user_env: dict[str, str]) -> None:
    out = tmp_path / "health.json"
    line = _one_error(_cli(cache, user_env, "patch", "health", "--recipe", str(_health_recipe(project, upstream)),
                           "--until", "no-such-branch", "--write", str(out)), 4)
    assert line.startswith(f"--until no-such-branch: 'no-such-branch' is neither a branch, tag nor commit of "
                           f"{upstream.url}: fatal: couldn't find remote ref no-such-branch")
    assert line.endswith("(check the ref)")
    assert not out.exists() and not _mirror(cache, upstream.url).exists() and not _partials(cache)


def test_health_default_until_is_a_recipe_ref_upstream_does_not_have(project: Path, upstream: Upstream, cache: Path,
                                                                     user_env: dict[str, str]) -> None:
    recipe_path = _health_recipe(project, upstream, ref="release")
    line = _one_error(_cli(cache, user_env, "patch", "health", "--recipe", str(recipe_path)), 4)
    assert line.startswith(f"the recipe's [source] ref 'release' (the default --until): 'release' is neither a branch,"
                           f" tag nor commit of {upstream.url}: fatal: couldn't find remote ref release")
    assert line.endswith("(check the ref, or pass --until BRANCH|TAG|SHA)")
    assert not _mirror(cache, upstream.url).exists() and not _partials(cache)


def test_health_offline_needs_release_files_the_mirror_lacks(project: Path, upstream: Upstream, cache: Path,
                                                             tmp_path: Path, user_env: dict[str, str]) -> None:
    # main's history is cached with only its newest pyproject.toml, as a floating fetch leaves it.
    mirror, _ = fetch.ensure_commit(upstream.url, "main", cache, offline=False, allow_floating=True,
                                    paths=["pkg/pyproject.toml"])
    before, out = _state(mirror), tmp_path / "health.json"
    line = _one_error(_cli(cache, user_env, "patch", "health", "--offline", "--recipe",
                           str(_health_recipe(project, upstream)), "--write", str(out)), 4)
    assert line == (f"2 objects are not in the cached mirror of {upstream.url} and --offline forbids fetching them"
                    " (run once without --offline)")
    assert _state(mirror) == before and not out.exists()


def test_health_release_files_from_a_server_that_refuses_objects_by_id(project: Path, upstream: Upstream, cache: Path,
                                                                       tmp_path: Path, user_env: dict[str, str]) -> None:
    mirror, _ = fetch.ensure_commit(upstream.url, "main", cache, offline=False, allow_floating=True,
                                    paths=["pkg/pyproject.toml"])
    before, out = _state(mirror), tmp_path / "health.json"
    upstream.strict()
    line = _one_error(_cli(cache, {**user_env, **V0}, "patch", "health", "--recipe",
                           str(_health_recipe(project, upstream)), "--write", str(out)), 4)
    assert line.startswith(f"cannot fetch 2 objects from {upstream.url}: ")
    assert ": error: Server does not allow request for unadvertised object " in line
    assert line.endswith("(the server must serve objects by id (uploadpack.allowFilter, uploadpack.allowAnySHA1InWant))")
    assert _state(mirror) == before and not out.exists()


def test_health_report_to_a_path_that_cannot_be_written(project: Path, upstream: Upstream, cache: Path, tmp_path: Path,
                                                        user_env: dict[str, str]) -> None:
    out = tmp_path / ("h" * 300 + ".json")  # longer than a file name may be
    line = _one_error(_cli(cache, user_env, "patch", "health", "--recipe", str(_health_recipe(project, upstream)),
                           "--write", str(out)), 5)
    assert line == f"cannot write {out}: File name too long (choose a writable path)"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["cache", "proj", "upstream", "user-config.toml"])


# ---- build ---------------------------------------------------------------------------------


def test_build_stage_without_a_tree(project: Path, upstream: Upstream, cache: Path) -> None:
    # Direct call: `build` and the pipeline run fetch first, so the CLI always hands it a tree.
    plan = _plan(_recipe(project, upstream.url, upstream.base), cache)
    with pytest.raises(BuildError) as exc:
        BuildStage().run(Context(plan))
    assert _one_line(exc, BuildError, 6) == "no source tree to build (run the fetch stage first)"
    assert not (cache / "build").exists()


# Direct calls for the stamping: through the CLI these run only after the toolchain preflight
# (torch, nvcc, CMake, a host-compiler check that runs nvcc), which a fast test cannot assume.
def test_pyproject_without_a_static_version(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "up"\ndynamic = ["version"]\n')
    with pytest.raises(BuildError) as exc:
        provenance.read_version(pyproject)
    assert _one_line(exc, BuildError, 6) == (f"{pyproject} has no static [project] version"
                                             " (the recipe needs a project with a static version to stamp)")


def test_pyproject_whose_project_table_has_no_header_to_stamp(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    text = 'project = { name = "up", version = "0.1.0" }\n'  # valid TOML, read fine, but no [project] line
    pyproject.write_text(text)
    assert provenance.read_version(pyproject) == "0.1.0"
    with pytest.raises(BuildError) as exc:
        provenance.stamp_version(pyproject, "0.1.0+cu130")
    assert _one_line(exc, BuildError, 6).startswith(f"{pyproject}: no [project] table to stamp")
    assert pyproject.read_text() == text


def test_choose_with_a_cuda_source_that_is_not_known() -> None:
    # Direct call: the recipe rules refuse any other [toolchain] cuda_source before a build.
    facts = Facts(python=sys.executable, python_version="3", nvcc="/usr/local/cuda/bin/nvcc", nvcc_version="13.0.88")
    with pytest.raises(ToolchainError) as exc:
        cudawheels.choose("cloud", facts, "13.0", ())
    assert _one_line(exc, ToolchainError, 3) == ("cuda_source 'cloud' is not one of auto, system, wheels"
                                                       " (set [toolchain] cuda_source to auto, system or wheels)")


# The toolkit from PyPI, installed for real by pip from a local folder of wheels (no network):
# the wheels are real, built here; the nvcc in them is a script that stands in for a broken
# toolkit (nothing is compiled). Direct calls: the CLI installs a toolkit only for a build,
# after a torch with CUDA is found.

def _wheel(folder: Path, name: str, version: str, files: dict[str, tuple[str, int]]) -> None:
    """A real wheel `name==version` holding `files` ({path: (text, mode)}), for pip --find-links."""
    dist = f"{name.replace('-', '_')}-{version}"
    meta = {f"{dist}.dist-info/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", 0o644),
            f"{dist}.dist-info/WHEEL": ("Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                                        "Tag: py3-none-any\n", 0o644)}
    entries = {**files, **meta}
    record = []
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path, (text, mode) in entries.items():
            info = zipfile.ZipInfo(path, (2026, 1, 2, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            zf.writestr(info, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(text.encode())}")
        zf.writestr(f"{dist}.dist-info/RECORD", "\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n")
    (folder / f"{dist}-py3-none-any.whl").write_bytes(buf.getvalue())


def _pip_env(tmp_path: Path, **pip: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "PIP_CONFIG_FILE": os.devnull,
            "PIP_RETRIES": "0", "PIP_TIMEOUT": "2", **pip}


def _toolkit_left(cache: Path) -> Iterator[str]:
    """What a failed install left in the toolkit cache besides its lock and log."""
    folder = cache / "toolkits"
    return (p.name for p in folder.iterdir() if not p.name.endswith((".lock", ".log"))) if folder.exists() else iter(())


NVCC_VERSION = "#!/bin/sh\necho 'Cuda compilation tools, release {mm}, V{full}'\n"


@pytest.mark.parametrize(("nvcc", "expect"), [
    (None, "the nvidia-cuda-nvcc wheel did not install {partial}/nvidia/cu13/bin/nvcc"
           " (its layout changed: report it with the installed versions)"),
    (NVCC_VERSION.format(mm="12.9", full="12.9.86"), "the nvcc installed for CUDA 13.0 says it is 12.9.86 (see {log})"),
    # --version answers; compiling fails as a toolkit missing its headers does.
    (NVCC_VERSION.format(mm="13.0", full="13.0.88").replace(
        "echo", '[ "$1" = --version ] || { echo \'smoke.cu(1): error: cannot open source file "cuda_runtime.h"\' >&2;'
                ' exit 1; }\necho', 1),
     'the CUDA toolkit from PyPI does not compile a test kernel: smoke.cu(1): error: cannot open source file'
     ' "cuda_runtime.h"; full log: {log} (a host compiler (g++) must be installed; see the log for the nvcc command)'),
], ids=["no-nvcc", "other-version", "smoke-compile-fails"])
def test_toolkit_from_wheels_that_do_not_make_a_working_toolkit(tmp_path: Path, cache: Path, nvcc: str | None,
                                                                expect: str) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in cudawheels.PACKAGES:
        files = {"nvidia/cu13/bin/nvcc": (nvcc, 0o755)} if name == "nvidia-cuda-nvcc" and nvcc else {}
        _wheel(wheels, name, "13.0.88", files)
    env = _pip_env(tmp_path, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels))
    final = cudawheels.toolkit_dir(cache, "13.0")
    with pytest.raises(ToolchainError) as exc:
        cudawheels.ensure_toolkit(cache, "13.0", python=sys.executable, env=env)
    line = _one_line(exc, ToolchainError, 3)
    log = final.parent / f"{final.name}.log"
    head, _, tail = expect.partition("{partial}")
    if tail:  # the folder pip filled, removed since
        assert line.startswith(head + str(final.parent / f".{final.name}.partial-")) and line.endswith(tail), line
    else:
        assert line == expect.format(log=log)
    assert log.is_file() and list(_toolkit_left(cache)) == []  # no toolkit, no partial folder


@pytest.mark.parametrize("pip_fails", ["no-pip", "index-refuses"])
def test_pip_failing_to_install_the_toolkit(tmp_path: Path, cache: Path, pip_fails: str) -> None:
    if pip_fails == "no-pip":
        venv.create(tmp_path / "nopip", with_pip=False)  # a real interpreter without pip
        python, env = str(tmp_path / "nopip/bin/python"), _pip_env(tmp_path, PIP_NO_INDEX="1")
    else:
        python, env = sys.executable, _pip_env(tmp_path, PIP_INDEX_URL="http://127.0.0.1:9/simple")  # nothing listens
    final = cudawheels.toolkit_dir(cache, "13.0")
    log = final.parent / f"{final.name}.log"
    with pytest.raises(ToolchainError) as exc:
        cudawheels.ensure_toolkit(cache, "13.0", python=python, env=env)
    line = _one_line(exc, ToolchainError, 3)
    if pip_fails == "no-pip":
        assert line == (f"installing the CUDA 13.0 toolkit from PyPI failed: {python}: No module named pip;"
                        f" full log: {log} (check network / PIP_INDEX_URL, or use cuda_source = \"system\")")
    else:
        assert line == (f"no CUDA 13.0 toolkit: pip found no nvidia-cuda-nvcc at all (no network or no index?);"
                        f" full log: {log} (check network / PIP_INDEX_URL, or build offline with a cached toolkit)")
    assert list(_toolkit_left(cache)) == []
