"""Fetch (and patch) errors no other test reached (bench/code_health/error_sites.py, issue 68 item 1).

Real git repositories made by the test, fetched into a real mirror by the real `remote.ensure_commit`; the
tag/branch resolution asks the real `git ls-remote`. Each error one line naming the problem and the fix, a
FetchError (exit 4).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from build_kernel import network
from build_kernel import plan as plan_mod
from build_kernel.errors import FetchError, PatchError, RecipeError
from build_kernel.recipe.load import load
from build_kernel.stages.fetch import mirror, pins, remote
from build_kernel.stages.patch import apply
from tests.conftest import write_recipe, write_series


def test_a_checkout_asked_by_an_abbreviated_commit(tmp_path: Path, make_repo: Callable[..., tuple[Path, str]]) -> None:
    """git checks out a short SHA happily; the tree must be exactly the commit asked for, so a name that is not
    the full SHA (a caller passing a tag or a short SHA) is refused, not built."""
    repo, sha = make_repo("up", {"a.txt": "a\n"})
    path, full = remote.ensure_commit(str(repo), sha, tmp_path / "cache", offline=False)
    assert full == sha
    dest = tmp_path / "tree"
    with pytest.raises(FetchError) as info:
        mirror.checkout(path, sha[:12], dest)
    assert info.value.exit_code == 4
    assert info.value.render() == (f"checkout of {sha[:12]} in {dest} gave HEAD {sha} (delete the cache folder and "
                                   "retry)")


def test_a_tag_that_the_repository_does_not_have(project: Path, tmp_path: Path,
                                                 make_repo: Callable[..., tuple[Path, str]]) -> None:
    repo, sha = make_repo("dep", {"a.txt": "a\n"})
    write_series(project, "s", "v1", {})
    path = write_recipe(project, "r", f"""\
        [source]
        repo = "{repo}"
        commit = "{sha}"
        [patches]
        series = "s"
        version = "v1"
        [build]
        arch = ["12.0a"]
        """)
    plan = plan_mod.resolve(load(str(path)), env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
                            cache_dir=tmp_path / "cache", output_dir=tmp_path / "out")
    with pytest.raises(FetchError) as info:
        pins.remote_commit(plan, "deps.dep", "tag", str(repo), "v9.9.9")
    assert info.value.render() == (f"[deps.dep] tag 'v9.9.9' is neither a branch nor a tag of {repo} (check "
                                   f"[deps.dep] tag (`git ls-remote {repo}` lists them))")


def test_a_network_timeout_that_is_no_number() -> None:
    with pytest.raises(RecipeError) as info:
        network.settings({network.FETCH_TIMEOUT_ENV: "ten"})
    assert info.value.exit_code == 2
    [line] = info.value.problems
    assert line.startswith(f"environment {network.FETCH_TIMEOUT_ENV}='ten': not a number of seconds (set a number "
                           f"above 0, e.g. {network.FETCH_TIMEOUT_ENV}=")
    assert line.endswith(", or unset it)")


def test_a_patch_that_is_no_unified_diff(tmp_path: Path) -> None:
    patch = tmp_path / "0001-broken.patch"
    patch.write_text("--- a/x.c\n+++ b/x.c\n@@ -1,3 +1,3 @@\n-only one line\n")
    with pytest.raises(PatchError) as info:
        apply.read_diff(patch)
    assert info.value.exit_code == 5
    assert info.value.message.startswith("0001-broken.patch is not a valid unified diff: ")
    assert info.value.hint == f"regenerate it (git diff, or build-kernel patch refresh) and relock: build-kernel patch lock {tmp_path}"


def test_a_branch_of_a_repository_that_is_not_there(tmp_path: Path) -> None:
    """allow_floating's branch fetched from a path where no repository is: the repository is named, not the ref."""
    missing = tmp_path / "no-such-repo"
    with pytest.raises(FetchError) as info:
        remote.ensure_commit(str(missing), "main", tmp_path / "cache", offline=False, allow_floating=True)
    assert info.value.exit_code == 4
    assert info.value.message == f"cannot read {missing}: fatal: '{missing}' does not appear to be a git repository"
    assert info.value.hint is not None and info.value.hint.startswith("check [source] repo / [deps.NAME] repo, your "
                                                                      "network and ")
    assert "\n" not in info.value.render()
