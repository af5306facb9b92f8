"""`patch health` knows when upstream caught up (issue 52, item 3): per patch, the first upstream commit from
which it is not needed, because its reverse applies (upstream took it verbatim) or because its DEP-3
`Applied-Upstream:` header names an equivalent fix. Real git repos: a miniature upstream that takes 0001
verbatim between two releases and fixes 0002's problem its own way later."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import git
import pytest

from build_kernel.errors import PatchError
from build_kernel.series import PatchFile, load_series
from build_kernel.stages.patch import upstreamed
from build_kernel.stages.patch.healthrows import Retired
from tests.conftest import DEMO_COMMIT, REPO_ROOT, commit_files, copy_series, demo_recipe_text, run_cli, write_recipe

PATCHES = (REPO_ROOT / "patches/minikernel/v1/series").read_text().split()
GUARD, CCCL = PATCHES[0], PATCHES[1]  # 0001-cmake-guard-policies, 0002-cuda13-cccl-include
SOURCE = REPO_ROOT / "examples/minikernel"


class Upstream:
    def __init__(self, path: Path, shas: dict[str, str]) -> None:
        self.path, self.shas, self.url = path, shas, f"file://{path}"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Upstream:
    """0.1.0 base; CMakeLists.txt touched twice; 0.1.1; touched again, then 0001 verbatim ("verbatim", no
    release), touched once more; 0.2.0; upstream's own CCCL fix ("fix": 0002 conflicts from there); 0.3.0.
    A side branch ("pr") holds an unmerged commit."""
    files = {p.relative_to(SOURCE).as_posix(): p.read_text() for p in SOURCE.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    pyproject, cmake = files["pyproject.toml"], files["CMakeLists.txt"]
    line = "# It reproduces upstream's problems on purpose; patches/minikernel/v1 fixes them.\n"
    assert line in cmake and 'version = "0.1.0"' in pyproject

    def note(text: str, word: str) -> str:  # a line no patch's hunk reaches: the file changes, the patches don't
        return text.replace(line, line.replace("on purpose", f"on purpose ({word})"), 1)

    guarded = cmake.replace("cmake_policy(SET CMP0169 OLD)\ncmake_policy(SET CMP0177 NEW)\n",
                            "if(POLICY CMP0169)\n    cmake_policy(SET CMP0169 OLD)\nendif()\n"
                            "if(POLICY CMP0177)\n    cmake_policy(SET CMP0177 NEW)\nendif()\n")
    own_fix = "\n# CUDA 13 keeps cub/, thrust/ and libcu++ under include/cccl\n" \
              "include_directories(SYSTEM ${CUDAToolkit_INCLUDE_DIRS}/cccl)\n\n# Torch\n"
    assert guarded != cmake and cmake.count("\n\n# Torch\n") == 1
    path, shas = tmp_path_factory.mktemp("up") / "sglang", {}

    def change(name: str, pkg: dict[str, str]) -> str:
        shas[name] = commit_files(path, {f"minikernel/{k}": v for k, v in pkg.items()}, name)
        return shas[name]

    change("0.1.0", files)
    change("a", {"CMakeLists.txt": note(cmake, "a")})
    change("b", {"CMakeLists.txt": note(cmake, "b")})
    change("0.1.1", {"pyproject.toml": pyproject.replace('"0.1.0"', '"0.1.1"', 1)})
    change("c", {"CMakeLists.txt": note(cmake, "c")})
    change("verbatim", {"CMakeLists.txt": note(guarded, "c")})
    change("d", {"CMakeLists.txt": note(guarded, "d")})
    change("0.2.0", {"pyproject.toml": pyproject.replace('"0.1.0"', '"0.2.0"', 1)})
    change("fix", {"CMakeLists.txt": note(guarded, "d").replace("\n\n# Torch\n", own_fix, 1)})
    change("0.3.0", {"pyproject.toml": pyproject.replace('"0.1.0"', '"0.3.0"', 1)})
    repo = git.Repo(path)
    repo.git.checkout("--quiet", "-b", "pr", shas["0.1.0"])
    change("pr", {"README.md": files["README.md"] + "\nunmerged\n"})
    repo.git.checkout("--quiet", "main")
    repo.git.config("uploadpack.allowFilter", "true")
    repo.git.config("uploadpack.allowAnySHA1InWant", "true")
    return Upstream(path, shas)


def _recipe(project: Path, upstream: Upstream, applied: str | None = None) -> Path:
    """minikernel/v1 against the miniature upstream; `applied`: 0002's Applied-Upstream header."""
    def edit(name: str, text: str) -> str:
        if name != CCCL or applied is None:
            return text
        return text.replace("Forwarded: not-needed\n", f"Forwarded: not-needed\nApplied-Upstream: {applied}\n", 1)

    copy_series(project, PATCHES, "v1", edit)
    return write_recipe(project, "r", demo_recipe_text()
                        .replace('repo = "example:minikernel"', f'repo = "{upstream.url}"')
                        .replace(f'commit = "{DEMO_COMMIT}"', f'commit = "{upstream.shas["0.1.0"]}"')
                        .replace('ref = "examples/minikernel"', 'ref = "main"\nsubdir = "minikernel"'))


def _health(tmp_path: Path, recipe: Path, *args: str) -> dict[str, Any]:
    proc = run_cli("--cache-dir", str(tmp_path / "cache"), "--json", "patch", "health", "--recipe", str(recipe), *args)
    assert proc.returncode == 0, proc.stderr
    found: dict[str, Any] = json.loads(proc.stdout)
    return found


def test_verbatim_and_declared_fixes_are_found(tmp_path: Path, project: Path, upstream: Upstream) -> None:
    fix = upstream.shas["fix"]
    recipe = _recipe(project, upstream, f"0.3.0, https://example.invalid/up/commit/{fix}")
    out = tmp_path / "health.json"
    found = _health(tmp_path, recipe, "--write", str(out))
    rows, needs = found["rows"], {p["name"]: p for p in found["patches"]}

    assert [r["version"] for r in rows] == ["0.1.0", "0.1.1", "0.2.0", "0.3.0"]
    assert [r["states"][GUARD] for r in rows] == ["applies"] * 2 + ["already upstream"] * 2
    assert [r["states"][CCCL] for r in rows] == ["applies", "applies", "applies", "conflicts"]
    assert [r["fixed_upstream"] for r in rows] == [[], [], [], [CCCL]]
    # 0001: the first commit whose tree has it verbatim, between the releases, bisected among c, verbatim and d.
    assert needs[GUARD] == {"name": GUARD, "needed": False, "since": upstream.shas["verbatim"], "date": "2026-01-02",
                            "how": "reverse applies", "release": "0.2.0", "exact": True}
    # 0002: upstream's own fix (its text is not the patch's: the patch conflicts there) names the commit.
    assert needs[CCCL] == {"name": CCCL, "needed": False, "since": fix, "date": "2026-01-02",
                           "how": "Applied-Upstream", "release": "0.3.0", "exact": True}
    assert [needs[n]["needed"] for n in PATCHES[2:]] == [True] * len(PATCHES[2:])
    assert [p["name"] for p in found["patches"]] == PATCHES  # series order
    assert json.loads(out.read_text())["patches"] == found["patches"]  # --write keeps them as --json says

    human = run_cli("--cache-dir", str(tmp_path / "cache"), "patch", "health", "--recipe", str(recipe), "--offline")
    assert human.returncode == 0, human.stderr
    assert re.search(f"\n  {GUARD} +not needed from {upstream.shas['verbatim'][:9]} \\(2026-01-02, reverse applies; "
                     "first release 0.2.0\\)\n", human.stdout)
    assert f"not needed from {fix[:9]} (2026-01-02, Applied-Upstream; first release 0.3.0)" in human.stdout
    assert "not needed any more: 2 of 6 patches (0001, 0002: leave out of the series' next version)" in human.stdout
    assert "fixed: upstream has the patch's Applied-Upstream commit" in human.stdout

    # Up to 0.2.0 the fix is not in: 0002 is needed there, and the report says why the header did not count.
    early = {p["name"]: p for p in _health(tmp_path, recipe, "--until", upstream.shas["0.2.0"], "--offline")["patches"]}
    assert early[CCCL]["needed"] is True
    assert early[CCCL]["note"] == (f"its Applied-Upstream commit {fix[:9]} (2026-01-02) is not in the history up to "
                                   f"{upstream.shas['0.2.0'][:9]}")


def test_a_patch_upstream_before_the_walk_and_one_that_conflicts(tmp_path: Path, project: Path,
                                                                 upstream: Upstream) -> None:
    # --since d: 0001 is upstream at every row, and nothing before says where it came: not exact.
    recipe = _recipe(project, upstream)
    found = _health(tmp_path, recipe, "--since", upstream.shas["d"])
    needs = {p["name"]: p for p in found["patches"]}
    assert [r["version"] for r in found["rows"]] == ["0.2.0", "0.3.0"]
    assert needs[GUARD] == {"name": GUARD, "needed": False, "since": upstream.shas["0.2.0"], "date": "2026-01-02",
                                           "how": "reverse applies", "release": "0.2.0", "exact": False}
    assert Retired(**needs[GUARD]).says() == (
        f"not needed at 0.2.0 ({upstream.shas['0.2.0'][:9]}, 2026-01-02, reverse applies) already, the first checked "
        "commit (an earlier --since finds where it came in)")
    # --since 0.1.1 (a pin, say): checked too, it needs 0001, so the search starts there.
    pinned = _health(tmp_path, recipe, "--since", upstream.shas["0.1.1"])
    assert pinned["patches"][0]["since"] == upstream.shas["verbatim"] and pinned["patches"][0]["exact"] is True
    # No header: 0002 conflicts at the newest release, and nothing says whether upstream has the fix.
    assert needs[CCCL] == {"name": CCCL, "needed": None, "note": "conflicts at 0.3.0 (refresh it, or name upstream's "
                                                                 "equivalent fix in Applied-Upstream)"}


@pytest.mark.parametrize(("header", "says"), [
    ("0.3.0", "Applied-Upstream '0.3.0' names no upstream commit, so health cannot check it"),
    ("commit:xyz123", "Applied-Upstream commit 'xyz123' is not a commit SHA (7 to 40 hex digits)"),
    ("commit:abcdef0, commit:1234567", "Applied-Upstream names 2 different commits (abcdef0, 1234567)"),
])
def test_malformed_headers_are_one_line_errors(tmp_path: Path, header: str, says: str) -> None:
    path = tmp_path / "v1" / CCCL
    patch = PatchFile(CCCL, path, "0" * 64, {"Applied-Upstream": header})
    with pytest.raises(PatchError) as exc:
        upstreamed.declared(patch)
    text = str(exc.value)
    assert text.startswith(f"{CCCL}: {says} (") and "\n" not in text
    assert text.endswith(f"write `Applied-Upstream: <version>, commit:<upstream SHA>` (DEP-3) in the header of {path}, "
                         f"then `build-kernel patch lock {path.parent}`)")


def test_headers_that_name_one_commit(tmp_path: Path) -> None:
    sha = "fe9b9b254b6c3a88a52c7fe1300be19f0ad03ea1"
    for header in (f"0.4.3, commit:{sha}", f"https://github.com/sgl-project/sglang/commit/{sha}",
                   f"0.4.3, https://github.com/sgl-project/sglang/commit/{sha}, commit:{sha[:9]}"):
        decl = upstreamed.declared(PatchFile(CCCL, tmp_path / CCCL, "0" * 64, {"Applied-Upstream": header}))
        assert decl is not None and decl.commit == sha
    assert upstreamed.declared(PatchFile(CCCL, tmp_path / CCCL, "0" * 64, {})) is None


def test_the_sm120_memcpy_patch_names_upstreams_fix() -> None:
    """v8's 0009 is a backport of sglang fe9b9b254 (#23136, 2026-04-20) for 6ffc74ef; its header says so."""
    [patch] = [p for p in load_series(REPO_ROOT / "patches/sm120/v8").patches if p.name.startswith("0009-")]
    decl = upstreamed.declared(patch)
    assert decl is not None and decl.commit == "fe9b9b254b6c3a88a52c7fe1300be19f0ad03ea1" and decl.version == "0.4.1.post1"


@pytest.mark.parametrize("which", ["absent", "side branch"])
def test_a_commit_not_in_the_history(tmp_path: Path, project: Path, upstream: Upstream, which: str) -> None:
    if which == "absent":  # no such commit upstream: an error, before the walk
        recipe = _recipe(project, upstream, "commit:" + "1" * 40)
        out = tmp_path / "health.json"
        proc = run_cli("--cache-dir", str(tmp_path / "cache"), "patch", "health", "--recipe", str(recipe),
                       "--write", str(out))
        assert proc.returncode == 5, proc.stderr  # PatchError
        [line] = proc.stderr.strip().splitlines()
        assert line == (f"error: {CCCL}: Applied-Upstream commit {'1' * 40} is not in the history of {upstream.url} "
                        f"(name upstream's commit that brought the fix by its full SHA (`git log -1 --format=%H SHA` "
                        f"in a clone of {upstream.url}), in the header of {project}/patches/minikernel/v1/{CCCL}, "
                        "then relock)")
        assert not out.exists()
        return
    # A commit upstream has, on a branch never merged: never in a checked commit's history, so the patch is judged
    # by its state alone, and the report says why the header did not count.
    pr = upstream.shas["pr"]
    needs = {p["name"]: p for p in _health(tmp_path, _recipe(project, upstream, f"commit:{pr}"))["patches"]}
    assert needs[CCCL]["needed"] is None
    assert needs[CCCL]["note"].startswith(f"its Applied-Upstream commit {pr[:9]} (2026-01-02) is not in the history "
                                          f"up to {upstream.shas['0.3.0'][:9]}; conflicts at 0.3.0")
