"""`patch check` on the miniature: every state, each on a purpose-built upstream commit."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import DEMO_COMMIT, REPO_ROOT, commit_files, copy_series, demo_recipe_text, run_cli, write_recipe

PATCHES = sorted((REPO_ROOT / "patches/minikernel/v1/series").read_text().split())


def test_patch_check_shows_every_state(project: Path, tmp_path: Path) -> None:
    source = REPO_ROOT / "examples/minikernel"
    files = {p.relative_to(source).as_posix(): p.read_text() for p in source.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    upstream = tmp_path / "minikernel"
    base = commit_files(upstream, files)
    cmake = files["CMakeLists.txt"]
    # Upstream grew a header comment above the policy calls: 0001 moves down by 3 lines.
    moved = commit_files(upstream, {"CMakeLists.txt": cmake.replace(
        "# utils\n", "# utils\n# (upstream added\n#  three lines\n#  here)\n", 1)})
    # Upstream took our policy guards: 0001 is already there, the rest still applies.
    guarded = cmake.replace("cmake_policy(SET CMP0169 OLD)\ncmake_policy(SET CMP0177 NEW)\n",
                            "if(POLICY CMP0169)\n    cmake_policy(SET CMP0169 OLD)\nendif()\n"
                            "if(POLICY CMP0177)\n    cmake_policy(SET CMP0177 NEW)\nendif()\n")
    commit_files(upstream, {"CMakeLists.txt": cmake})
    upstreamed = commit_files(upstream, {"CMakeLists.txt": guarded})
    # Upstream changed a line 0001 touches: a conflict.
    conflicting = commit_files(upstream, {"CMakeLists.txt": cmake.replace("CMP0177 NEW", "CMP0177 OLD")})
    assert "if(POLICY" not in cmake and guarded != cmake

    copy_series(project, PATCHES, "v1")
    write_recipe(project, "r", demo_recipe_text().replace('repo = "example:minikernel"', f'repo = "{upstream}"')
                 .replace(f'commit = "{DEMO_COMMIT}"', f'commit = "{base}"'))

    def states(commit: str) -> dict[str, dict[str, object]]:
        proc = run_cli("--cache-dir", str(tmp_path / "cache"), "--json", "patch", "check",
                       "--recipe", str(project / "recipes/r.toml"), "--commit", commit)
        rows = json.loads(proc.stdout)
        expect_fail = any(r["state"] in ("conflicts", "already upstream") for r in rows)
        assert proc.returncode == (5 if expect_fail else 0), proc.stderr
        return {r["name"]: r for r in rows}

    assert {r["state"] for r in states(base).values()} == {"applies"}
    offset = states(moved)
    assert offset[PATCHES[0]]["state"] == "applies with offset"
    assert "CMakeLists.txt: hunk #1 at line 12 (offset 3)" in offset[PATCHES[0]]["offsets"][0]
    already = states(upstreamed)
    assert already[PATCHES[0]]["state"] == "already upstream"
    assert already[PATCHES[0]]["detail"] == "its reverse applies: drop it from the series"
    assert all(already[name]["state"].startswith("applies") for name in PATCHES[1:])
    conflict = states(conflicting)
    assert conflict[PATCHES[0]]["state"] == "conflicts"
    assert "expected 'cmake_policy(SET CMP0177 NEW)', found 'cmake_policy(SET CMP0177 OLD)'" in conflict[PATCHES[0]]["detail"]
