"""`nightly --replay A..B` (as `nightly-replay A..B`) over a real miniature upstream (git, sglang-shaped: the package in minikernel/, the pins
in python/pyproject.toml) whose commits fall on different days: a night per day that touched the package (a commit
dated before the one ahead of it on main counts on the later day), the
series chosen by the nightly's own series choice, a version change that retires a patch upstream took, a conflict
with its first bad commit (not the night's own commit), the lock's moves, patch health's verdict beside each
release night, and the history page made from the records."""

from __future__ import annotations

import json
from pathlib import Path

import git

from build_kernel.nightly import history_page, record
from tests.conftest import REPO_ROOT, copy_series, demo_recipe_text, run_cli, write_recipe
from tests.test_patch_health import PATCHES, _guard_note_series

SOURCE = REPO_ROOT / "examples/minikernel"


def _upstream(path: Path) -> tuple[str, dict[str, str]]:
    files = {p.relative_to(SOURCE).as_posix(): p.read_text() for p in SOURCE.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    pyproject, cmake = files["pyproject.toml"], files["CMakeLists.txt"]
    guarded = cmake.replace("cmake_policy(SET CMP0169 OLD)\ncmake_policy(SET CMP0177 NEW)\n",
                            "if(POLICY CMP0169)\n    cmake_policy(SET CMP0169 OLD)\nendif()\n"
                            "if(POLICY CMP0177)\n    cmake_policy(SET CMP0177 NEW)\nendif()\n")
    repo = git.Repo.init(path, initial_branch="main")
    shas: dict[str, str] = {}

    def commit(day: str, message: str, pkg: dict[str, str], other: dict[str, str] | None = None) -> str:
        for name, text in {**{f"minikernel/{k}": v for k, v in pkg.items()}, **(other or {})}.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
        repo.git.add("--all")
        when = f"2026-03-{day}T12:00:00+00:00"
        with repo.git.custom_environment(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
                                         GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid",
                                         GIT_AUTHOR_DATE=when, GIT_COMMITTER_DATE=when):
            repo.git.commit("--quiet", "--no-gpg-sign", "--allow-empty", "-m", message)
        shas[message] = repo.head.commit.hexsha
        return shas[message]

    def bump(version: str) -> str:
        return pyproject.replace('version = "0.1.0"', f'version = "{version}"', 1)

    pins = '[project]\nname = "sglang"\ndependencies = ["torch==2.9.1", "sgl-kernel==0.1.0"]\n'
    start = commit("01", "base", files, {"python/pyproject.toml": pins})
    commit("02", "readme", {"README.md": files["README.md"] + "\nmore\n"})
    commit("03", "outside the package", {}, {"docs/a.txt": "a\n"})  # no night: the package did not change
    commit("04", "guarded", {"CMakeLists.txt": guarded, "pyproject.toml": bump("0.1.2")},
           {"python/pyproject.toml": pins.replace("torch==2.9.1", "torch==2.10.0")})
    commit("05", "readme again", {"README.md": files["README.md"]})
    # Dated the day before the commit ahead of it on main (its committer's clock): it reached main on the 5th.
    commit("04", "late merge", {"README.md": files["README.md"] + "\nlate\n"})
    # The first bad commit of v2's patch (and v1's 0001 conflicts too): nothing applies from here.
    commit("06", "policy changed", {"CMakeLists.txt": cmake.replace("CMP0177 NEW", "CMP0177 OLD")})
    end = commit("06", "later that day", {"pyproject.toml": bump("0.2.0")})
    repo.git.config("uploadpack.allowFilter", "true")
    repo.git.config("uploadpack.allowAnySHA1InWant", "true")
    return f"{start}..{end}", shas


def test_replay_of_a_miniature_history(tmp_path: Path, project: Path) -> None:
    span, shas = _upstream(tmp_path / "sglang")
    copy_series(project, PATCHES, "v1")
    note = _guard_note_series(project)  # v2: applies where upstream guards the policies (v1's 0001 is upstream)
    recipe = write_recipe(project, "r", demo_recipe_text()
                          .replace('repo = "example:minikernel"', f'repo = "file://{tmp_path / "sglang"}"')
                          .replace('ref = "examples/minikernel"', 'ref = "main"\nsubdir = "minikernel"'))
    state = tmp_path / "state"
    # The sample really built: a nightly's state folder with the night of `readme` built (its record by hand here; the
    # real ones come from bench/nightly/build_nights.sh), which the replay merges into its record of that commit.
    built = tmp_path / "built"
    wheel = {"name": "minikernel-0.1.0.dev20260302-cp312-linux_x86_64.whl", "version": "0.1.0.dev20260302",
             "sha256": "0" * 64, "published_to": "http://127.0.0.1:1/"}
    record.write(built, {  # type: ignore[typeddict-item]
        "schema": 1, "recipe": "r", "night": "2026-03-02", "started": "2026-12-07T19:00:00+00:00",
        "finished": "2026-12-07T19:15:00+00:00", "outcome": "built", "reason": f"built {wheel['name']}",
        "upstream": {"ref": "main", "commit": shas["readme"], "previous_good": None, "commits_since": 0},
        "series": {"name": "minikernel/v1", "version": "v1", "retired": [], "conflict": None}, "lock_changes": [],
        "build": {"archs": ["12.0a"], "wall_s": 866.0, "compiler_cpu_s": 1400.0, "peak_rss_mb": None},
        "tests": {"ran": False, "why_not": "no GPU", "per_file": {}}, "wheel": wheel, "logs": {"night": "n.log"}})
    proc = run_cli("--cache-dir", str(tmp_path / "cache"), "--json", "nightly", "--replay", span, "--recipe",
                   str(recipe), "--state-dir", str(state), "--built", str(built))  # nightly-replay: the same call
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    records = record.read_all(state)
    assert printed == records  # what it printed is what it wrote, every record keeping the contract
    assert [(r["night"], r["upstream"]["commit"]) for r in records] == [
        ("2026-03-01", shas["base"]), ("2026-03-02", shas["readme"]), ("2026-03-04", shas["guarded"]),
        ("2026-03-05", shas["late merge"]), ("2026-03-06", shas["later that day"])]
    assert [r["outcome"] for r in records] == ["unchanged", "built", "unchanged", "unchanged", "conflict"]
    assert records[1]["build"]["wall_s"] == 866.0 and records[1]["wheel"] == wheel
    assert records[1]["reason"] == f"built {wheel['name']}" and records[1]["logs"] == {"night": "n.log"}
    assert [r["series"]["version"] for r in records] == ["v1", "v1", "v2", "v2", None]
    assert records[2]["series"]["retired"] == ["0001-cmake-guard-policies.patch"]
    conflict = records[4]["series"]["conflict"]
    assert conflict["patch"] == note and conflict["first_bad_commit"] == shas["policy changed"]
    assert records[2]["lock_changes"] == [{"pin": "torch", "from": "==2.9.1", "to": "==2.10.0"}]
    assert records[4]["upstream"]["previous_good"] == shas["late merge"]

    detail = json.loads((state / "replay.json").read_text())["nights"]
    assert [d["package_version"] for d in detail] == ["0.1.0", "0.1.0", "0.1.2", "0.1.2", "0.2.0"]
    assert [d["patch_check"] for d in detail] == [True, True, True, True, None]
    # patch health has a row where the version changed: its newest applying series is the night's choice.
    assert [d["patch_health"] and d["patch_health"]["agrees"] for d in detail] == [True, None, True, None, True]

    page = history_page.write(state, tmp_path / "index")[0]
    assert page.read_text().count('<tr class="') == 5
