"""Every problem at once, before any work (issue 66, item 3).

The pipeline, the `build` command and `doctor --recipe` run the same checks (build_kernel/readiness.py): a
toolchain that does not fit, a system library the compiler cannot find, sources out of reach or not in the
cache, the disk. All of them are said, a line each with its fix, in the text and in `--json`, and the run exits
with the first one's kind before anything is fetched. Real parts: the CLI as a subprocess, real git remotes
(file:// repositories made here, a closed local port), the real C compiler asked for a header; no network.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from build_kernel.mirrors import default_config_file
from tests.conftest import commit_files, run_cli, write_recipe, write_series

CLOSED = "http://127.0.0.1:1"  # nothing listens on port 1: git is refused at once


def _recipe(project: Path, repo: str, commit: str = "a" * 40, *, cmake: str = ">=3.26", system: str = "",
            deps: str = "") -> Path:
    write_series(project, "s", "v1", {})
    return write_recipe(project, "r", f"""
        [source]
        repo = "{repo}"
        commit = "{commit}"
        [patches]
        series = "s"
        version = "v1"
        [toolchain]
        cuda = "13.0"
        torch = "existing"
        cmake = "{cmake}"
        [build]
        arch = ["12.0a"]
        """ + system + deps)


NOPE = """
    [system.libnope]
    needed_by = "the test"
    headers = ["build_kernel_test_nope.h"]
    apt = "libnope-dev"
    """


def _errors(stderr: str) -> list[str]:
    return [line.removeprefix("error: ") for line in stderr.splitlines() if line.startswith("error: ")]


def test_the_pipeline_lists_every_problem_with_its_fix_then_stops_before_fetching(project: Path,
                                                                                    tmp_path: Path) -> None:
    recipe = _recipe(project, "file:///nonexistent/build-kernel-test.git", cmake=">=99", system=NOPE)
    cache = tmp_path / "cache"
    args = ("--recipe", str(recipe), "--cache-dir", str(cache), "--output-dir", str(tmp_path / "out"))
    text, as_json = run_cli(*args), run_cli(*args, "--json")
    lines = _errors(text.stderr)
    # The toolchain first, so the exit code is its kind's (3), then the system library, then the source.
    assert text.returncode == as_json.returncode == 3, text.stderr
    assert len(lines) == 3, lines
    assert "does not satisfy >=99: pip install 'cmake>=99'" in lines[0]
    assert lines[1].startswith("system prerequisite libnope missing (build_kernel_test_nope.h not found")
    assert lines[1].endswith("apt-get install libnope-dev")
    assert lines[2].startswith("[source] cannot reach file:///nonexistent/build-kernel-test.git: fatal: ")
    assert "[mirrors] of the user config" in lines[2]  # its fix, with the config's path
    error = json.loads(as_json.stdout)["error"]
    assert error["kind"] == "ToolchainError" and error["exit_code"] == 3 and error["lines"] == lines
    assert "Traceback" not in text.stderr and "▶ fetch" not in text.stderr
    assert not (cache / "mirrors").exists() and not (cache / "src").exists()  # nothing fetched
    # The `build` command (what `make wheel` runs) stops the same way; doctor knows the same lines.
    build = run_cli("build", *args)
    assert build.returncode == 3 and _errors(build.stderr) == lines
    doctor = run_cli("doctor", *args, "--json")
    assert doctor.returncode == 3 and json.loads(doctor.stdout)["problems"] == lines


def test_a_source_out_of_reach_alone_exits_with_fetchs_code_and_remotes_failing_alike_share_a_line(
        project: Path, tmp_path: Path) -> None:
    deps = f"""
        [deps.one]
        repo = "{CLOSED}/one.git"
        commit = "{'b' * 40}"
        [deps.two]
        repo = "{CLOSED}/two.git"
        commit = "{'c' * 40}"
        """
    recipe = _recipe(project, f"{CLOSED}/main.git", deps=deps)
    proc = run_cli("--json", "build", "--recipe", str(recipe), "--cache-dir", str(tmp_path / "cache"))
    assert proc.returncode == 4, proc.stderr
    error = json.loads(proc.stdout)["error"]
    [line] = error["lines"]
    assert error["kind"] == "FetchError" and line.startswith("cannot reach 3 repositories: ")
    for name in ("[source] http://127.0.0.1:1/main.git", "[deps.one] http://127.0.0.1:1/one.git",
                 "[deps.two] http://127.0.0.1:1/two.git"):
        assert name in line


def test_a_cached_source_needs_no_network_and_offline_asks_only_the_cache(project: Path, tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    sha = commit_files(origin, {"pyproject.toml": "[project]\nname = 'x'\nversion = '0.1'\n"})
    recipe = _recipe(project, f"file://{origin}", sha)
    cache = tmp_path / "cache"
    assert run_cli("fetch", "--recipe", str(recipe), "--cache-dir", str(cache)).returncode == 0
    origin.rename(tmp_path / "gone")  # the remote is gone: the cache holds the commit
    for extra in ((), ("--offline",)):
        doctor = run_cli("doctor", "--recipe", str(recipe), "--cache-dir", str(cache), "--json", *extra)
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        [source] = json.loads(doctor.stdout)["sources"]
        assert source["state"] == "cached" and sha[:12] in source["line"]
    # Offline, a source never fetched is one line naming the fix; nothing is asked of the network.
    other = _recipe(project, f"{CLOSED}/never.git")
    proc = run_cli("--json", "build", "--recipe", str(other), "--cache-dir", str(cache), "--offline")
    assert proc.returncode == 4
    [line] = json.loads(proc.stdout)["error"]["lines"]
    assert line.startswith(f"[source] {CLOSED}/never.git is not in the cache and --offline forbids fetching it (run "
                           "once without --offline, or map it to a local mirror in [mirrors] of the user config ")
    # More than one: one line naming them all.
    dep = f'\n[deps.more]\nrepo = "{CLOSED}/more.git"\ncommit = "{"d" * 40}"\n'
    both = run_cli("--json", "build", "--recipe", str(_recipe(project, f"{CLOSED}/never.git", deps=dep)),
                   "--cache-dir", str(cache), "--offline")
    [line] = json.loads(both.stdout)["error"]["lines"]
    assert line == (f"2 repositories are not in the cache and --offline forbids fetching them: [source] "
                    f"{CLOSED}/never.git, [deps.more] {CLOSED}/more.git (run once without --offline, or map them to a "
                    f"local mirror in [mirrors] of the user config {default_config_file(os.environ)})")


def test_local_sources_that_are_not_there_are_said_with_the_rest(project: Path, tmp_path: Path) -> None:
    dep = '\n[deps.local]\npath = "no-such-dep"\n'
    recipe = _recipe(project, "no-such-repo", deps=dep, system=NOPE)
    proc = run_cli("--json", "build", "--recipe", str(recipe), "--cache-dir", str(tmp_path / "cache"))
    lines = json.loads(proc.stdout)["error"]["lines"]
    assert proc.returncode == 3 and lines[0].startswith("system prerequisite libnope missing")
    assert lines[1:] == [f"[source] repo {project / 'no-such-repo'} does not exist (fix the path in the recipe)",
                         f"[deps.local] path {project / 'no-such-dep'} does not exist (fix the path in the "
                         "recipe)"]


def test_too_little_disk_is_a_problem_naming_the_folder_and_the_fix(tmp_path: Path) -> None:
    from build_kernel.disk_space import Need, short

    cache = tmp_path / "not-made-yet" / "cache"
    [line] = short([Need("cache", cache, 10**18, "more than any disk holds", "pass --cache-dir on a larger disk")])
    assert not (tmp_path / "not-made-yet").exists()  # asked where it exists, nothing made
    assert f" free in {tmp_path}; the cache {cache} (1000000000.0 GB: more than any disk holds) needs about" in line
    assert line.endswith("(free space, or pass --cache-dir on a larger disk)")
    assert short([Need("cache", tmp_path, 0, "nothing", "-")]) == []
