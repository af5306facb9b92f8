"""`patch health` on a miniature upstream history: one row per version change, nothing else."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import git
import pytest

from tests.conftest import DEMO_COMMIT, REPO_ROOT, commit_files, copy_series, demo_recipe_text, run_cli, write_recipe

PATCHES = sorted((REPO_ROOT / "patches/minikernel/v1/series").read_text().split())
FIRST, REST = PATCHES[0], PATCHES[1:]


class Upstream:
    def __init__(self, path: Path, shas: dict[str, str], big: list[str]) -> None:
        self.path, self.shas, self.big = path, shas, big
        self.url = f"file://{path}"


BIG = "x" * 200_000 + "\n"  # beside the package, as sglang's other folders are: never fetched


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    """sglang-shaped: the miniature in minikernel/, served like GitHub (blob filters, any SHA).
    0.1.0 base, 0.1.1 offset, 0.1.2 upstreamed, 0.2.0 conflicting, with non-bumps between."""
    source = REPO_ROOT / "examples/minikernel"
    files = {p.relative_to(source).as_posix(): p.read_text() for p in source.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    pyproject, cmake = files["pyproject.toml"], files["CMakeLists.txt"]
    assert 'version = "0.1.0"' in pyproject

    def bump(version: str) -> str:
        return pyproject.replace('version = "0.1.0"', f'version = "{version}"', 1)

    moved = cmake.replace("# utils\n", "# utils\n# (upstream added\n#  three lines\n#  here)\n", 1)
    guarded = cmake.replace("cmake_policy(SET CMP0169 OLD)\ncmake_policy(SET CMP0177 NEW)\n",
                            "if(POLICY CMP0169)\n    cmake_policy(SET CMP0169 OLD)\nendif()\n"
                            "if(POLICY CMP0177)\n    cmake_policy(SET CMP0177 NEW)\nendif()\n")
    conflicting = cmake.replace("CMP0177 NEW", "CMP0177 OLD")
    assert len({cmake, moved, guarded, conflicting}) == 4

    path, shas = tmp_path / "sglang", {}

    def change(message: str, pkg: dict[str, str]) -> str:
        return commit_files(path, {f"minikernel/{name}": text for name, text in pkg.items()}, message)

    shas["0.1.0"] = commit_files(path, {**{f"minikernel/{k}": v for k, v in files.items()}, "docs/big.txt": BIG},
                                 "initial")
    change("docs", {"README.md": files["README.md"] + "\nmore words\n"})
    # pyproject.toml touched, version unchanged: no row.
    change("description", {"pyproject.toml": pyproject.replace("A miniature", "A tiny miniature")})
    shas["0.1.1"] = change("0.1.1", {"CMakeLists.txt": moved, "pyproject.toml": bump("0.1.1")})
    change("drop the comment again, no bump", {"CMakeLists.txt": cmake})
    commit_files(path, {"docs/big.txt": BIG + "more\n"}, "outside the package")
    shas["0.1.2"] = change("0.1.2", {"CMakeLists.txt": guarded, "pyproject.toml": bump("0.1.2")})
    shas["0.2.0"] = change("0.2.0", {"CMakeLists.txt": conflicting, "pyproject.toml": bump("0.2.0")})
    change("docs after the last release", {"README.md": files["README.md"]})
    repo = git.Repo(path)
    repo.create_tag("v0.1.1", ref=shas["0.1.1"])
    repo.git.config("uploadpack.allowFilter", "true")
    repo.git.config("uploadpack.allowAnySHA1InWant", "true")
    return Upstream(path, shas, [repo.git.rev_parse(f"{sha}:docs/big.txt") for sha in (shas["0.1.0"], shas["0.2.0"])])


@pytest.fixture
def recipe(project: Path, upstream: Upstream) -> Path:
    copy_series(project, PATCHES, "v1")
    return write_recipe(project, "r", demo_recipe_text()
                        .replace('repo = "example:minikernel"', f'repo = "{upstream.url}"')
                        .replace(f'commit = "{DEMO_COMMIT}"',
                                 f'commit = "{upstream.shas["0.1.0"]}"')
                        .replace('ref = "examples/minikernel"', 'ref = "main"\nsubdir = "minikernel"'))


def health(cache: Path, recipe: Path, *args: str) -> list[dict[str, Any]]:
    proc = run_cli("--cache-dir", str(cache), "--json", "patch", "health", "--recipe", str(recipe), *args)
    assert proc.returncode == 0, proc.stderr  # a report: conflicts do not fail it
    rows: list[dict[str, Any]] = json.loads(proc.stdout)["rows"]
    return rows


def versions(cache: Path, recipe: Path, *args: str) -> list[str]:
    return [row["version"] for row in health(cache, recipe, *args)]


def test_health_lists_version_changes_with_states(tmp_path: Path, recipe: Path, upstream: Upstream) -> None:
    cache, out = tmp_path / "cache", tmp_path / "health.json"
    rows = health(cache, recipe, "--write", str(out))

    assert [r["version"] for r in rows] == ["0.1.0", "0.1.1", "0.1.2", "0.2.0"]
    assert [r["commit"] for r in rows] == [upstream.shas[r["version"]] for r in rows]
    assert all(r["date"] == "2026-01-02" for r in rows)
    assert [r["applies"] for r in rows] == [True, True, False, False]
    assert [r["states"][FIRST] for r in rows] == ["applies", "applies with offset", "already upstream", "conflicts"]
    for r in rows:
        assert list(r["states"]) == PATCHES  # series order
        assert all(r["states"][n].startswith("applies") for n in REST)
    details = {p["name"]: p for p in rows[1]["patches"]}
    assert "CMakeLists.txt: hunk #1 at line 12 (offset 3)" in details[FIRST]["offsets"][0]
    conflict = {p["name"]: p for p in rows[3]["patches"]}
    expected = "expected 'cmake_policy(SET CMP0177 NEW)', found 'cmake_policy(SET CMP0177 OLD)'"
    assert expected in conflict[FIRST]["detail"]

    # --write: the same rows, only commit, date, version and states (no upstream text).
    assert json.loads(out.read_text())["rows"] == [{k: r[k] for k in ("commit", "date", "version", "states")}
                                                   for r in rows]
    assert not list(tmp_path.glob(".health.json*"))

    # The walk fetched the package's files, never what lies beside it.
    [mirror] = (cache / "mirrors").glob("*.git")
    for sha, big in zip((upstream.shas["0.1.0"], upstream.shas["0.2.0"]), upstream.big, strict=True):
        missing = git.Repo(mirror).git.rev_list("--objects", "--missing=print", "--no-walk", sha).split()
        assert f"?{big}" in missing

    # --since is exclusive (a tag, a SHA, an abbreviated SHA); --until stops the walk; --offline reuses the mirror
    # (the human table below is offline too).
    assert versions(cache, recipe, "--since", "v0.1.1") == ["0.1.2", "0.2.0"]
    assert versions(cache, recipe, "--since", upstream.shas["0.1.2"], "--offline") == ["0.2.0"]
    assert versions(cache, recipe, "--until", upstream.shas["0.1.2"], "--since", upstream.shas["0.1.0"][:10]) == [
        "0.1.1", "0.1.2"]

    human = run_cli("--cache-dir", str(cache), "patch", "health", "--recipe", str(recipe), "--offline")
    assert human.returncode == 0, human.stderr
    assert "series applies whole at 2 of 4 commits" in human.stdout
    assert "0001  0001-cmake-guard-policies.patch" in human.stdout
    for word in ("ok", "offset", "upstream", "CONFLICT"):
        assert word in human.stdout


def test_a_pinned_commit_alone_gets_its_history(tmp_path: Path, recipe: Path, upstream: Upstream) -> None:
    cache, pin = tmp_path / "cache", upstream.shas["0.1.2"]
    # `patch check --commit` fetches that commit alone (no history): a walk from it would end there.
    check = run_cli("--cache-dir", str(cache), "patch", "check", "--recipe", str(recipe), "--commit", pin)
    assert check.returncode == 5, check.stderr  # 0001 is upstream there
    proc = run_cli("--cache-dir", str(cache), "patch", "health", "--recipe", str(recipe), "--until", pin, "--offline")
    assert proc.returncode == 4, proc.stderr
    assert f"has no history before {pin[:12]}" in proc.stderr
    assert versions(cache, recipe, "--until", pin) == ["0.1.0", "0.1.1", "0.1.2"]  # online: fetched


def test_unknown_since_is_one_line_error_and_writes_nothing(tmp_path: Path, recipe: Path, upstream: Upstream) -> None:
    out = tmp_path / "health.json"
    proc = run_cli("--cache-dir", str(tmp_path / "cache"), "patch", "health", "--recipe", str(recipe),
                   "--since", "no-such-tag", "--write", str(out))
    assert proc.returncode == 4, proc.stderr  # FetchError
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: --since no-such-tag is not a commit, branch or tag of {upstream.url} (check the name")
    assert not out.exists() and not list(tmp_path.glob(".health.json*"))
    assert proc.stdout == ""


def test_blobs_read_as_text_whatever_their_bytes(tmp_path: Path) -> None:
    import os

    from build_kernel.stages.patch import health as patch_health

    texts = {"a.toml": '[project]\nversion = "1.0"\nauthors = ["Zoë Ünal"]\n', "b.toml": "",
             "c.toml": 'x = "line"\r\n[project]\r\nversion = "2.0"\r\n', "d.toml": "ünïcode at the end ✓"}
    commit_files(tmp_path / "r", texts)
    repo = git.Repo(tmp_path / "r")
    oids = [repo.git.rev_parse(f"HEAD:{name}") for name in texts]
    missing = "0" * 39 + "1"
    found = patch_health._blobs(tmp_path / "r", [*oids[:2], missing, *oids[2:]], os.environ)
    assert missing not in found
    assert [found[o].replace("\r\n", "\n") for o in oids] == [t.replace("\r\n", "\n") for t in texts.values()]
    assert patch_health.pyproject_version(found[oids[0]]) == "1.0" and patch_health.pyproject_version(found[oids[2]]) == "2.0"


def test_git_failure_in_the_mirror_is_one_line_fetch_error(tmp_path: Path) -> None:
    import os

    from build_kernel.errors import FetchError
    from build_kernel.stages.patch import health as patch_health

    with pytest.raises(FetchError) as exc:
        patch_health._out(tmp_path, "rev-list", "HEAD", env=os.environ)
    text = str(exc.value)
    assert "\n" not in text and text.startswith(f"git rev-list in {tmp_path}: `git -C {tmp_path} rev-list HEAD` exited 128")
    assert text.endswith("(delete the mirror from the cache and retry)")


def _guard_note_series(project: Path) -> str:
    """minikernel/v2: one patch written against the guarded policies (0.1.2's CMakeLists.txt), so it
    applies there only, where v1's 0001 is upstream; at 0.2.0 neither applies."""
    from build_kernel.series import write_lock

    cmake = (REPO_ROOT / "examples/minikernel/CMakeLists.txt").read_text()
    guarded = cmake.replace("cmake_policy(SET CMP0169 OLD)\ncmake_policy(SET CMP0177 NEW)\n",
                            "if(POLICY CMP0169)\n    cmake_policy(SET CMP0169 OLD)\nendif()\n"
                            "if(POLICY CMP0177)\n    cmake_policy(SET CMP0177 NEW)\nendif()\n")
    noted = guarded.replace("if(POLICY CMP0169)\n", "# guarded upstream since 0.1.2\nif(POLICY CMP0169)\n", 1)
    diff = "".join(difflib.unified_diff(guarded.splitlines(True), noted.splitlines(True),
                                        "a/CMakeLists.txt", "b/CMakeLists.txt"))
    name = "0001-note-upstream-guard.patch"
    directory = project / "patches" / "minikernel" / "v2"
    directory.mkdir(parents=True)
    (directory / name).write_text("Description: note that upstream guards the policies\n"
                                  "Origin: vendor, build-kernel tests\nForwarded: not-needed\n"
                                  "Last-Update: 2026-12-02\n---\n" + diff)
    (directory / "series").write_text(f"{name}\n")
    write_lock(directory)
    return name


def test_two_series_one_column_each_and_the_uncovered_commit(tmp_path: Path, project: Path, recipe: Path,
                                                             upstream: Upstream) -> None:
    note = _guard_note_series(project)
    cache, out = tmp_path / "cache", tmp_path / "health.json"
    rows = health(cache, recipe, "--series", "minikernel/v2", "--write", str(out))

    assert [r["version"] for r in rows] == ["0.1.0", "0.1.1", "0.1.2", "0.2.0"]
    assert [list(r["series"]) for r in rows] == [["minikernel/v1", "minikernel/v2"]] * 4
    assert [r["series"]["minikernel/v1"]["applies"] for r in rows] == [True, True, False, False]
    assert [r["series"]["minikernel/v2"]["applies"] for r in rows] == [False, False, True, False]
    assert [r["series"]["minikernel/v2"]["states"][note] for r in rows] == ["conflicts", "conflicts", "applies",
                                                                           "conflicts"]
    assert [r["covered_by"] for r in rows] == [["minikernel/v1"], ["minikernel/v1"], ["minikernel/v2"], []]
    assert [r["applies"] for r in rows] == [True, True, False, False]  # the recipe's own series, as before

    # --write keeps each series' states and the covering series, no upstream text.
    assert json.loads(out.read_text())["rows"] == [
        {"commit": r["commit"], "date": r["date"], "version": r["version"],
         "series": {n: s["states"] for n, s in r["series"].items()}, "covered_by": r["covered_by"]} for r in rows]

    human = run_cli("--cache-dir", str(cache), "patch", "health", "--recipe", str(recipe), "--offline",
                    "--series", "minikernel/v2", "--series", "minikernel/v1")  # the recipe's own: once
    assert human.returncode == 0, human.stderr
    assert human.stdout.count("minikernel/v1 applies whole") == 1
    assert "minikernel/v1 applies whole at 2 of 4 commits" in human.stdout
    assert "minikernel/v2 applies whole at 1 of 4 commits" in human.stdout
    assert "covered by one of them: 3 of 4 commits" in human.stdout
    assert (f"not covered: 0.2.0 {upstream.shas['0.2.0'][:9]} (minikernel/v1: 0001-cmake-guard-policies.patch "
            f"conflicts; minikernel/v2: {note} conflicts)") in human.stdout
    assert "0001 upstream" in human.stdout and "0001 CONFLICT" in human.stdout  # the cell names the first stopper


def test_unknown_compared_series_is_one_line_error(tmp_path: Path, project: Path, recipe: Path) -> None:
    proc = run_cli("--cache-dir", str(tmp_path / "cache"), "patch", "health", "--recipe", str(recipe),
                   "--series", "minikernel/v9")
    assert proc.returncode == 5, proc.stderr  # PatchError
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: --series minikernel/v9: no series file at {project}/patches/minikernel/v9/series")
    assert "e.g. minikernel/v1" in line


def _imports(path: Path, package: str) -> set[str]:
    """The modules of `package` that `path` imports, at any level (TYPE_CHECKING blocks too)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n.startswith(f"{package}.")}
    return found


def test_the_patch_stage_modules_import_one_way() -> None:
    """health and healthreport imported each other (issue 38, item 6): no import circle in stages/patch."""
    package = "build_kernel.stages.patch"
    folder = REPO_ROOT / "build_kernel" / "stages" / "patch"
    graph = {f"{package}.{p.stem}": _imports(p, package) for p in folder.glob("*.py") if p.stem != "__init__"}
    seen: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert seen.get(module) != 1, f"import circle: {' -> '.join((*path, module))}"
        if seen.get(module) == 2:
            return
        seen[module] = 1
        for imported in sorted(graph.get(module, set()) & set(graph)):
            visit(imported, (*path, module))
        seen[module] = 2

    for module in sorted(graph):
        visit(module, ())


def test_post_releases_are_version_changes(tmp_path: Path, project: Path) -> None:
    """Issue 38 asked why 0.4.2.post1/.post2 were missed: they are not. The walk compares `[project] version`
    strings (tomllib, no version regex), so `.postN` bumps are rows like any other, and health-v3.json lists
    0.4.2.post1 (67641559) and 0.4.2.post2 (0fde6153), covered by no series (patches/sm120/v4/NOTES.md)."""
    source = REPO_ROOT / "examples/minikernel"
    files = {p.relative_to(source).as_posix(): p.read_text() for p in source.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    pyproject = files["pyproject.toml"]
    path = tmp_path / "sglang"
    shas = {"0.1.0": commit_files(path, {f"minikernel/{k}": v for k, v in files.items()}, "initial")}
    for version in ("0.1.0.post1", "0.1.0.post2", "0.1.1", "0.1.1.post1"):
        shas[version] = commit_files(path, {"minikernel/pyproject.toml": pyproject.replace(
            'version = "0.1.0"', f'version = "{version}"', 1)}, f"bump {version}")
    repo = git.Repo(path)
    repo.git.config("uploadpack.allowFilter", "true")
    repo.git.config("uploadpack.allowAnySHA1InWant", "true")
    copy_series(project, PATCHES, "v1")
    recipe = write_recipe(project, "r", demo_recipe_text()
                          .replace('repo = "example:minikernel"', f'repo = "file://{path}"')
                          .replace(f'commit = "{DEMO_COMMIT}"', f'commit = "{shas["0.1.0"]}"')
                          .replace('ref = "examples/minikernel"', 'ref = "main"\nsubdir = "minikernel"'))
    rows = health(tmp_path / "cache", recipe)
    assert [(r["version"], r["commit"]) for r in rows] == [(v, shas[v]) for v in shas]
