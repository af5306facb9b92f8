"""`build-kernel test`: a package's own tests from the pinned commit, against the wheel (issue 42).

The runner is exercised on real pytest processes (a passing, a failing, a crashing, a hanging, a
missing-dependency, an empty and a module-skipping file); the verdicts on real results; the command
end to end on the miniature's own tests/ against the session's real wheel, and on a copy of the
miniature whose tests/ also holds the failing, crashing, hanging and missing-dependency files.
No GPU here: the miniature's GPU tests skip, and the recipe's `gpu = false` says they need none.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from build_kernel.archs import parse_arch
from build_kernel.recipe.model import Expectation
from build_kernel.stages.upstream_tests import runner, runs_on, verdict
from tests.conftest import (
    DEMO_COMMIT,
    REPO_ROOT,
    DemoBuild,
    commit_files,
    copy_series,
    demo_recipe_text,
    run_cli,
    write_recipe,
)

# Upstream-style test files, one per outcome the runner tells apart.
FILES = {
    "tests/test_pass.py": "def test_one():\n    assert 1 + 1 == 2\n\ndef test_two():\n    assert True\n",
    "tests/test_fail.py": ("import pytest\n\ndef test_good():\n    pass\n\ndef test_bad():\n    assert 2 + 2 == 5\n\n"
                           "@pytest.mark.skip(reason='needs a GPU')\ndef test_gpu():\n    pass\n"),
    "tests/test_crash.py": ("import os, signal\n\ndef test_before():\n    pass\n\n"
                            "def test_segfaults():\n    os.kill(os.getpid(), signal.SIGSEGV)\n"),
    "tests/test_hang.py": "import time\n\ndef test_first():\n    pass\n\ndef test_forever():\n    time.sleep(600)\n",
    "tests/test_missing.py": "import not_a_module_anywhere  # noqa: F401\n\ndef test_never():\n    pass\n",
    "tests/test_empty.py": "# no tests here\n",
    "tests/test_module_skip.py": ("import pytest\n\npytest.skip('needs compute capability 10', allow_module_level=True)\n\n"
                                  "def test_never():\n    pass\n"),
}


HANG_S = 20


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, runner.FileResult]:
    root = tmp_path_factory.mktemp("upstream")
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    # The files that end on their own get a limit they never meet (a loaded box once took 8 s to start pytest, and
    # an 8 s limit then timed out test_pass.py); the hang alone gets one it always meets, long enough for pytest to
    # start and reach test_forever under any load the suite sees (~2.3 s on 2 cores with two busy loops beside it).
    ending = sorted(name for name in FILES if name != "tests/test_hang.py")
    done = runner.run_all(sys.executable, ending, root, root / "out", env, timeout_s=300, parallel=4)
    done += runner.run_all(sys.executable, ["tests/test_hang.py"], root, root / "out-hang", env, timeout_s=HANG_S,
                           parallel=1)
    return {r.file: r for r in done}


def test_the_recipes_pytest_args_select_a_subset(tmp_path: Path) -> None:
    # flash-attn's test_flash_attn.py runs for hours whole: [test] args = ["-k", ...] names the subset that runs.
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_pass.py").write_text(FILES["tests/test_pass.py"])
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    [done] = runner.run_all(sys.executable, ["tests/test_pass.py"], tmp_path, tmp_path / "out", env, timeout_s=60,
                            parallel=1, args=["-k", "test_two"])
    assert (done.status, done.passed) == ("passed", 1)
    assert "1 deselected" in Path(done.log).read_text()


def test_a_conftest_that_cannot_import_makes_its_files_uncollectable_naming_the_module(tmp_path: Path) -> None:
    # upstream's conftest.py imports sglang; where the test environment lacks one of sglang's dependencies, pytest
    # exits 4 (not 2) before collecting anything: each file is uncollectable, the missing module named.
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/conftest.py").write_text("import not_a_module_of_conftest\n")
    (tmp_path / "tests/test_pass.py").write_text(FILES["tests/test_pass.py"])
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    [done] = runner.run_all(sys.executable, ["tests/test_pass.py"], tmp_path, tmp_path / "out", env, timeout_s=60,
                            parallel=1)
    assert (done.status, done.exit_code, done.missing_module) == ("uncollectable", 4, "not_a_module_of_conftest")
    judged = verdict.judge(done, [])
    assert judged.red and judged.line == "UNCOLLECTABLE (no module not_a_module_of_conftest)"


def test_each_file_outcome_is_told_apart(results: dict[str, runner.FileResult]) -> None:
    ok = results["tests/test_pass.py"]
    assert (ok.status, ok.passed, ok.failed, ok.exit_code) == ("passed", 2, [], 0)
    bad = results["tests/test_fail.py"]
    assert bad.status == "failed" and bad.passed == 1 and [n.split("::")[-1] for n in bad.failed] == ["test_bad"]
    assert list(bad.skipped.values()) == ["needs a GPU"]
    crash = results["tests/test_crash.py"]
    assert (crash.status, crash.signal) == ("crashed", "SIGSEGV")
    assert crash.last_test == "tests/test_crash.py::test_segfaults" and crash.passed == 1
    hang = results["tests/test_hang.py"]
    assert hang.status == "timeout" and hang.last_test == "tests/test_hang.py::test_forever" and hang.passed == 1
    assert HANG_S <= hang.seconds < HANG_S + 60  # stopped at the limit, its whole process group with it
    missing = results["tests/test_missing.py"]
    assert (missing.status, missing.missing_module) == ("uncollectable", "not_a_module_anywhere")
    assert results["tests/test_empty.py"].status == "empty"
    skipped = results["tests/test_module_skip.py"]
    assert skipped.status == "empty" and skipped.passed == 0
    assert skipped.skipped == {"tests/test_module_skip.py": "needs compute capability 10"}  # the module's own reason


def test_red_means_new(results: dict[str, runner.FileResult]) -> None:
    exps = [Expectation("test_fail.py::test_bad", "fail", "upstream's own: 2 + 2 is not 5", "the same on main"),
            Expectation("*::test_gpu", "skip", "no GPU on this host", message="needs a GPU"),
            Expectation("test_missing.py", "uncollectable", "its dependency is not packaged")]
    judged = {f: verdict.judge(r, exps) for f, r in results.items()}
    assert not judged["tests/test_fail.py"].red
    assert judged["tests/test_fail.py"].line == "1 passed, 1 expected failures, 1 skipped (1 explained)"
    assert not judged["tests/test_missing.py"].red
    assert judged["tests/test_missing.py"].line.startswith("expected: not collectable (no module not_a_module_anywhere)")
    assert judged["tests/test_crash.py"].red and judged["tests/test_crash.py"].line == (
        "CRASHED (signal SIGSEGV in tests/test_crash.py::test_segfaults)")
    assert judged["tests/test_hang.py"].red and judged["tests/test_hang.py"].line.startswith("TIMEOUT")
    # Without expectations the failure and the missing dependency are red, and the skip is unexplained.
    bare = verdict.judge(results["tests/test_fail.py"], [])
    assert bare.red and bare.line == "FAILED: 1 new (test_bad)" and bare.unexplained_skips == [
        "tests/test_fail.py::test_gpu: needs a GPU"]
    assert verdict.judge(results["tests/test_missing.py"], []).line == "UNCOLLECTABLE (no module not_a_module_anywhere)"


SKIPS = ("import pytest\n\n@pytest.mark.skip(reason='needs a GPU')\ndef test_gpu():\n    pass\n\n"
         "@pytest.mark.parametrize('n', [1, 2, 3])\ndef test_grid(n):\n    if n != 2:\n        pytest.skip()\n\n"
         "def test_fp4():\n    pytest.skip('Nvfp4 Requires compute capability of 10 or above.')\n")


def test_a_skip_is_explained_by_its_reason_not_by_its_file(tmp_path: Path) -> None:
    """Issue 70 item 5, on a real pytest run: a skip expectation names the reason text (or a `re:` pattern of it); a
    bare pytest.skip() ('Skipped') or a reason none names stays unexplained, whatever the file pattern matches."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_skips.py").write_text(SKIPS)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    [result] = runner.run_all(sys.executable, ["tests/test_skips.py"], tmp_path, tmp_path / "out", env, timeout_s=60,
                              parallel=1)
    assert sorted(result.skipped.values()) == ["Nvfp4 Requires compute capability of 10 or above.", "Skipped",
                                               "Skipped", "needs a GPU"]
    gpu = Expectation("test_skips.py", "skip", "no GPU here", message="needs a GPU")
    fp4 = Expectation("test_skips.py", "skip", "NVFP4 needs 10.0+", message="re:^Nvfp4 Requires compute capability")
    # A file pattern without a reason explains nothing (before issue 70 it explained all four).
    assert len(verdict.judge(result, [Expectation("test_skips.py", "skip", "anything")]).unexplained_skips) == 4
    judged = verdict.judge(result, [gpu, fp4])
    assert sorted(judged.unexplained_skips) == ["tests/test_skips.py::test_grid[1]: Skipped",
                                                "tests/test_skips.py::test_grid[3]: Skipped"]
    assert judged.line == "1 passed, 4 skipped (2 explained)"
    # The bare skips are explained only by their exact text, and only where the node pattern pins them.
    bare = Expectation("test_skips.py::test_grid*", "skip", "the grid's own invalid points", message="re:^Skipped$")
    assert verdict.judge(result, [gpu, fp4, bare]).unexplained_skips == []
    elsewhere = Expectation("test_skips.py::test_gpu*", "skip", "wrong place", message="re:^Skipped$")
    assert len(verdict.judge(result, [gpu, fp4, elsewhere]).unexplained_skips) == 2


MODULE_SKIPS = {
    "tests/test_needs_sm100.py": ("import pytest\n\npytest.skip('needs compute capability 10', allow_module_level=True)\n\n"
                                  "def test_never():\n    pass\n"),
    "tests/test_needs_flashmla.py": ("import pytest\n\nflash_mla = pytest.importorskip('flash_mla_not_here')\n\n"
                                     "def test_never():\n    pass\n"),
}


def test_a_module_that_skips_itself_is_explained_by_its_reason(tmp_path: Path) -> None:
    """Issue 70: a module-level skip (pytest.skip(allow_module_level=True), importorskip) is JUnit's `message`
    'collection skipped' with the reason in the element's text; the runner records that reason, under the file's
    name, so an expectation's message explains it and 'collection skipped' explains nothing. One pytest child for
    both files (pytest is given their folder; each module's JUnit element is the same as in a run of its own)."""
    for name, text in MODULE_SKIPS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    result = runner.run_file(sys.executable, "tests", tmp_path, tmp_path / "out", env, timeout_s=120)
    missing = "could not import 'flash_mla_not_here': No module named 'flash_mla_not_here'"
    assert (result.status, result.passed) == ("empty", 0)
    assert result.skipped == {"tests/test_needs_sm100.py": "needs compute capability 10",
                              "tests/test_needs_flashmla.py": missing}
    assert sorted(verdict.judge(result, []).unexplained_skips) == [f"tests/test_needs_flashmla.py: {missing}",
                                                                   "tests/test_needs_sm100.py: needs compute capability 10"]
    anything = Expectation("*", "skip", "any module skip", message="collection skipped")
    assert len(verdict.judge(result, [anything]).unexplained_skips) == 2
    sm100 = Expectation("*/test_needs_sm100.py", "skip", "Blackwell only", message="needs compute capability 10")
    mla = Expectation("*/test_needs_flashmla.py", "skip", "FlashMLA is not packaged",
                      message="re:^could not import 'flash_mla_not_here'")
    assert verdict.judge(result, [sm100]).unexplained_skips == [f"tests/test_needs_flashmla.py: {missing}"]
    judged = verdict.judge(result, [sm100, mla])
    assert not judged.red and judged.unexplained_skips == []
    assert judged.line == "no tests collected (FlashMLA is not packaged)"  # the first module pytest collected


def test_a_skip_pattern_that_is_no_regular_expression_is_a_recipe_problem(project: Path) -> None:
    text = demo_recipe_text()
    start = text.index('message = "re:', text.index('[test.expect."*_on_gpu"]'))
    text = text[:start] + 'message = "re:needs (a"' + text[text.index("\n", start):]
    done = run_cli("recipes", "show", str(write_recipe(project, "bad", text)))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "message: 're:needs (a' is no regular expression" in done.stderr and "fix the pattern" in done.stderr


def test_expectations_follow_the_asked_archs() -> None:
    only_hopper = Expectation("test_fp4_*.py", "skip", "NVFP4 needs 10.0+", when_asked=("9.0a",))
    always = Expectation("test_amd_*.py", "skip", "two GPUs")
    assert verdict.applicable([only_hopper, always], ["9.0a"]) == [only_hopper, always]
    assert verdict.applicable([only_hopper, always], ["12.0a"]) == [always]


@pytest.mark.parametrize(("arch", "capability", "runs"), [
    ("9.0a", (9, 0), True), ("12.0a", (9, 0), False), ("12.0a", (12, 0), True), ("10.0a", (10, 3), False),
    ("8.0", (8, 6), True), ("8.6", (8, 0), False), ("9.0", (12, 0), False),
])
def test_which_gpu_runs_which_arch(arch: str, capability: tuple[int, int], runs: bool) -> None:
    assert runs_on(parse_arch(arch), capability) is runs


@pytest.mark.slow
def test_the_miniatures_own_tests_pass_against_its_wheel(demo_build: DemoBuild, tmp_path: Path) -> None:
    args = ("--cache-dir", str(demo_build.cache), "--json", "test", str(demo_build.wheel), "--recipe", "demo",
            "--arch", "12.0a")
    dry = run_cli(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["files"] == ["tests/test_flash_attn.py", "tests/test_ops.py",
                                              "tests/test_sglang_integration.py"]
    assert not Path(str(demo_build.wheel) + ".tests.json").exists()  # a dry run records nothing
    done = run_cli(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(done.stdout)
    assert record["passed"] and record["summary"]["red"] == []
    by_file = {v["file"]: v for v in record["verdicts"]}
    assert by_file["tests/test_ops.py"]["line"] == "1 passed, 1 skipped (1 explained)"
    assert by_file["tests/test_sglang_integration.py"]["line"].startswith(
        "expected: not collectable (no module sglang): imports sglang")
    # The record goes with the wheel: beside it, keyed by its bytes.
    beside = json.loads(Path(str(demo_build.wheel) + ".tests.json").read_text())
    assert beside["wheel_sha256"] == record["wheel_sha256"] and beside["passed"]


@pytest.mark.slow
def test_new_failures_crashes_hangs_and_missing_dependencies_are_red(demo_build: DemoBuild, project: Path,
                                                                     tmp_path: Path) -> None:
    source = REPO_ROOT / "examples/minikernel"
    files: dict[str, str | None] = {p.relative_to(source).as_posix(): p.read_text() for p in source.rglob("*")
                                    if p.is_file() and "__pycache__" not in p.parts}
    files.update({name: text for name, text in FILES.items() if name != "tests/test_pass.py"})
    commit = commit_files(tmp_path / "upstream", files)
    series = copy_series(project, (REPO_ROOT / "patches/minikernel/v1/series").read_text().split(), "v1")
    info = series / "info.toml"  # the same sources plus test files: the series is made for this commit too
    info.write_text(info.read_text().replace("applies_to_commits = [", f'applies_to_commits = ["{commit}", ', 1))
    recipe = write_recipe(project, "r", demo_recipe_text().replace('repo = "example:minikernel"',
                                                                  f'repo = "{tmp_path / "upstream"}"')
                          .replace(f'commit = "{DEMO_COMMIT}"', f'commit = "{commit}"'))
    wheel = tmp_path / demo_build.wheel.name
    wheel.write_bytes(demo_build.wheel.read_bytes())
    done = run_cli("--cache-dir", str(demo_build.cache), "--json", "test", str(wheel), "--recipe", str(recipe),
                   "--arch", "12.0a", "--timeout", "10")
    assert done.returncode == 11, done.stdout + done.stderr
    record = json.loads(done.stdout)
    status = {r["file"]: r["status"] for r in record["results"]}
    assert status == {"tests/test_crash.py": "crashed", "tests/test_empty.py": "empty", "tests/test_fail.py": "failed",
                      "tests/test_flash_attn.py": "passed", "tests/test_hang.py": "timeout",
                      "tests/test_missing.py": "uncollectable", "tests/test_module_skip.py": "empty",
                      "tests/test_ops.py": "passed", "tests/test_sglang_integration.py": "uncollectable"}
    assert sorted(record["summary"]["red"]) == ["tests/test_crash.py", "tests/test_fail.py", "tests/test_hang.py",
                                                "tests/test_missing.py"]
    assert not record["passed"] and record["built_from"] != record["commit"]
    # The text table names each outcome; a red wheel is not published without --force.
    table = run_cli("--cache-dir", str(demo_build.cache), "test", str(wheel), "--recipe", str(recipe), "--arch",
                    "12.0a", "--timeout", "10", "--file", "test_crash.py")
    assert table.returncode == 11 and "CRASHED (signal SIGSEGV in tests/test_crash.py::test_segfaults)" in table.stdout
    index = tmp_path / "index"
    refused = run_cli("--cache-dir", str(demo_build.cache), "publish", str(wheel), "--recipe", str(recipe), "--to",
                      str(index))
    assert refused.returncode == 8 and "own tests went red" in refused.stderr, refused.stderr
    assert not any(index.glob("**/*.whl"))


def test_a_gpu_recipe_on_a_host_without_one_is_one_line(project: Path, tmp_path: Path) -> None:
    """No GPU here: `[test] gpu = true` stops before anything is installed, in one line."""
    copy_series(project, (REPO_ROOT / "patches/minikernel/v1/series").read_text().split(), "v1")
    text = demo_recipe_text().replace("gpu = false", "gpu = true")
    recipe = write_recipe(project, "g", text)
    wheel = tmp_path / "minikernel-0.1.0-py3-none-any.whl"
    _tiny_wheel(wheel)
    done = run_cli("--cache-dir", str(tmp_path / "cache"), "test", str(wheel), "--recipe", str(recipe))
    assert done.returncode == 11, done.stdout + done.stderr
    [line] = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert line == "error: no GPU here, and [test] gpu = true: the tests need a GPU that runs 12.0a"
    assert not (tmp_path / "cache" / "tests").exists()


def _tiny_wheel(path: Path) -> None:
    """A real (empty) wheel file: what the command checks before anything else."""
    import zipfile

    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("minikernel-0.1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: minikernel\nVersion: 0.1.0\n")
        zf.writestr("minikernel-0.1.0.dist-info/WHEEL", textwrap.dedent("""\
            Wheel-Version: 1.0
            Generator: test
            Root-Is-Purelib: true
            Tag: py3-none-any
            """))
        zf.writestr("minikernel-0.1.0.dist-info/RECORD", "")


def test_a_bad_test_section_is_every_problem_at_once(project: Path) -> None:
    copy_series(project, (REPO_ROOT / "patches/minikernel/v1/series").read_text().split(), "v1")
    text = demo_recipe_text().replace("parallel = 2", "parallel = 0").replace(
        'outcome = "uncollectable"\nreason = "imports sglang, which the demo does not install (no [test] sglang)"',
        'outcome = "broken"')
    recipe = write_recipe(project, "bad", text)
    done = run_cli("recipes", "show", str(recipe))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "test.parallel: 0 is no number of files (e.g. parallel = 4)" in done.stderr
    assert "'broken' is not one of skip, fail, uncollectable" in done.stderr
    assert "reason: missing: say why it is expected" in done.stderr


def test_an_expected_failure_can_name_its_message_so_another_failure_stays_red(tmp_path: Path) -> None:
    """A pruned wheel's own one-line error is expected; the same test failing for any other reason is new."""
    xml = tmp_path / "r.xml"
    xml.write_text(textwrap.dedent("""\
        <testsuites><testsuite>
          <testcase file="tests/test_fa.py" classname="tests.test_fa" name="test_kv[64-256]">
            <failure message="NotImplementedError: this sgl-kernel's FA3 holds head dims 256; this call needs 64_256&#10;trace">x</failure>
          </testcase>
          <testcase file="tests/test_fa.py" classname="tests.test_fa" name="test_kv[64-64]">
            <failure message="AssertionError: max diff 0.5">x</failure>
          </testcase>
          <testcase file="tests/test_fa.py" classname="tests.test_fa" name="test_kv[128-128]"/>
        </testsuite></testsuites>"""))
    result = runner.FileResult(file="tests/test_fa.py", status="failed")
    assert runner._junit(xml, result)
    assert result.failures["tests/test_fa.py::test_kv[64-256]"].endswith("needs 64_256")  # the first line only
    exp = Expectation(pattern="test_fa.py::test_kv*", outcome="fail", reason="left out",
                      message="this sgl-kernel's FA3 holds head dims")
    v = verdict.judge(result, [exp])
    assert v.red and v.line.startswith("FAILED: 1 new (test_kv[64-64])")
    assert [e["node"] for e in v.expected] == ["tests/test_fa.py::test_kv[64-256]"]
    # Without the message, the same expectation explains both.
    assert not verdict.judge(result, [Expectation(pattern="test_fa.py::test_kv*", outcome="fail", reason="x")]).red
