"""Nightly errors no other test reached (bench/code_health/error_sites.py, issue 68 item 1).

The night records' contract (`record.check`, what the history page holds every record to) and the page's
own refusals, on real state folders in tmp_path with records written by the real writer
(tests/test_history_page.py's `_night`); `--replay`'s range. Each error one line naming the file or
value and the fix.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from build_kernel import plan as plan_mod
from build_kernel.errors import BuildKernelError, FetchError
from build_kernel.nightly import history_page, record, replay, upstream
from build_kernel.recipe.load import load
from tests.conftest import write_recipe, write_series
from tests.test_history_page import _night


def test_the_page_of_a_state_folder_without_nights(tmp_path: Path) -> None:
    with pytest.raises(BuildKernelError) as info:
        history_page.write(tmp_path, tmp_path / "out")
    assert info.value.render() == (f"{tmp_path} has no nights/ folder (no night has run with this state folder) (pass "
                                   "the --state-dir that `build-kernel nightly` wrote to)")
    (tmp_path / "nights").mkdir()
    with pytest.raises(BuildKernelError) as info:
        history_page.write(tmp_path, tmp_path / "out")
    assert info.value.render() == (f"{tmp_path / 'nights'} holds no night records (run `build-kernel nightly --recipe R` "
                                   "(or a --replay) with this --state-dir first)")
    assert not (tmp_path / "out").exists()


def test_a_night_file_that_is_no_json(tmp_path: Path) -> None:
    good = _night(tmp_path, "2026-12-01", "a" * 40, "unchanged")
    path = record.path_for(tmp_path, good["night"], good["upstream"]["commit"])
    path.write_text("{ half a record")
    with pytest.raises(BuildKernelError) as info:
        history_page.load_records(tmp_path)
    assert info.value.message.startswith(f"{path}: not a night record (")
    assert info.value.hint == "move it out of nights/, or rerun that night to write it again"


def test_every_way_a_record_breaks_the_contract(tmp_path: Path) -> None:
    good = _night(tmp_path, "2026-12-01", "a" * 40, "built", build=(60.0, 100.0), tests=(3, 0), wheel="w.whl")
    assert record.check(good) == []
    bad = copy.deepcopy(good)
    bad["started"] = 7
    bad["build"]["archs"] = [120]
    bad["lock_changes"] = ["torch"]
    assert record.check(bad) == ["started: int where str is expected", "lock_changes[0]: str where an object is expected",
                                 "build.archs[0]: int where str is expected"]
    values = copy.deepcopy(good)
    values.update(schema=99, night="2026/12/01")
    values["upstream"]["commit"] = "main"
    assert record.check(values) == ["schema: 99 (this tool reads 1)", "night: '2026/12/01' is not YYYY-MM-DD",
                                    "upstream.commit: 'main' is not a 40-hex commit"]


def test_a_replay_range_that_is_no_range() -> None:
    with pytest.raises(BuildKernelError) as info:
        replay.parse_range("6ffc74ef")
    assert info.value.render() == ("--replay '6ffc74ef' is not a range A..B (pass two upstream commits (or tags) as "
                                   "A..B, e.g. 6ffc74ef..0753182b)")


def test_a_record_of_another_shape_is_named_by_its_first_problem(tmp_path: Path) -> None:
    good = _night(tmp_path, "2026-12-01", "a" * 40, "unchanged")
    assert record.check({})[0] == "schema: missing"
    odd = {**good, "outcome": "exploded"}
    assert record.check(odd) == [f"outcome: 'exploded' is not one of {', '.join(record.OUTCOMES)}"]
    path = record.path_for(tmp_path, good["night"], good["upstream"]["commit"])
    path.write_text(json.dumps(odd))
    with pytest.raises(BuildKernelError) as info:
        history_page.load_records(tmp_path)
    assert info.value.message == (f"{path}: not a night record of this tool (outcome: 'exploded' is not one of "
                                  f"{', '.join(record.OUTCOMES)})")


def _nightly_plan(project: Path, tmp_path: Path, repo: Path, sha: str) -> plan_mod.Plan:
    """The plan of a one-series recipe following the real repository `repo` at `sha`."""
    write_series(project, "s", "v1", {})
    path = write_recipe(project, "n", f"""\
        [source]
        repo = "{repo}"
        commit = "{sha}"
        [patches]
        series = "s"
        version = "v1"
        [build]
        arch = ["12.0a"]
        """)
    return plan_mod.resolve(load(str(path)), env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
                            cache_dir=tmp_path / "cache", output_dir=tmp_path / "out")


def test_tonight_of_a_branch_upstream_does_not_have(project: Path, tmp_path: Path,
                                                   make_repo: Callable[..., tuple[Path, str]]) -> None:
    """The nights follow a branch a real upstream repository lacks: one line naming the upstream and the fix."""
    repo, sha = make_repo("up", {"a.txt": "a\n"})
    plan = _nightly_plan(project, tmp_path, repo, sha)
    with pytest.raises(FetchError) as info:
        upstream.resolve(plan, "release/v9", None)
    assert info.value.exit_code == 4
    assert info.value.message.startswith(f"upstream 'release/v9' of {repo}: 'release/v9' is neither a branch, tag nor "
                                         f"commit of {repo}: fatal: couldn't find remote ref release/v9")
    assert info.value.hint == "check the ref"


def test_a_tag_pattern_no_tag_of_upstream_matches(project: Path, tmp_path: Path,
                                                  make_repo: Callable[..., tuple[Path, str]]) -> None:
    """--upstream 'v9.*' against a real repository whose one tag is v1.0 (git ls-remote asks it; nothing fetched)."""
    repo, sha = make_repo("up", {"a.txt": "a\n"})
    subprocess.run(["git", "-C", str(repo), "tag", "v1.0"], check=True, capture_output=True)
    plan = _nightly_plan(project, tmp_path, repo, sha)
    with pytest.raises(FetchError) as info:
        upstream.resolve(plan, "v9.*", None)
    assert info.value.exit_code == 4
    assert info.value.render() == (f"no tag of {repo} matches 'v9.*' (1 tag(s) there) (pass --upstream BRANCH, or a "
                                   "pattern that matches, e.g. 'v0.4.*')")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.pack"))
