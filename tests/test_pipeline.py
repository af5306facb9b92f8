"""The whole pipeline through the CLI with --json: every stage's outcome, on the miniature."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, DemoBuild, copy_series, demo_recipe_text, run_cli, write_recipe

PATCHES = sorted((REPO_ROOT / "patches/minikernel/v1/series").read_text().split())


def _project(project: Path, index: Path) -> Path:
    copy_series(project, PATCHES, "v1")
    return write_recipe(project, "r", demo_recipe_text("v1") + f'\n[publish]\ntarget = "{index}"\n')


def test_dry_run_says_what_would_run_and_touches_nothing(project: Path, tmp_path: Path) -> None:
    recipe = _project(project, tmp_path / "index")
    cache = tmp_path / "cache"
    proc = run_cli("--recipe", str(recipe), "--dry-run", "--json", "--cache-dir", str(cache))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    [pinned] = re.findall(r'^\[source\][^\[]*?^commit = "([0-9a-f]{40})"$', recipe.read_text(), re.M | re.S)
    plan = summary["plan"]
    assert summary["dry_run"] and plan["source"]["commit"] == pinned and plan["recipe"]["path"] == str(recipe)
    assert [p["name"] for p in plan["patches"]["patches"]] == PATCHES
    statuses = {name: info["status"] for name, info in summary["stages"].items()}
    assert statuses == {"fetch": "planned", "patch": "planned", "build": "planned", "verify": "planned",
                        "test": "planned", "publish": "planned", "serve": "no [serve] model in the recipe"}
    assert not cache.exists() and not (tmp_path / "index").exists()


@pytest.mark.slow
def test_whole_pipeline_json_then_again_from_the_caches(demo_build: DemoBuild, project: Path, tmp_path: Path) -> None:
    index = tmp_path / "index"
    recipe = _project(project, index)
    args = ("--recipe", str(recipe), "--arch", "12.0a", "--json", "--cache-dir", str(demo_build.cache))
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    stages = summary["stages"]
    assert list(stages) == ["fetch", "patch", "build", "verify", "test", "publish", "serve"]
    # [publish] is not a build input: the session's wheel is a cache hit for this recipe too.
    assert stages["fetch"]["status"] == "cached" and stages["build"]["status"] == "cached"
    assert stages["build"]["wheel"] == summary["wheel"] and Path(summary["wheel"]).parent == project / "wheels"
    assert stages["verify"]["status"] == "passed" and not stages["verify"]["from_record"]
    fp4 = {lib["path"]: lib["fp4_matches"] for lib in stages["verify"]["libraries"]}
    assert fp4["minikernel/sm100/common_ops.so"] and fp4["minikernel/lib/comm_ops.so"] is None
    assert stages["publish"]["status"] == "done" and (index / Path(summary["wheel"]).name).is_file()
    assert stages["serve"]["status"] == "no [serve] model in the recipe"
    # Again (offline): verify answers from its record. What these two runs are about is verify, so the recipe
    # leaves out [test] and [publish] (neither is a build or verify input: the build is still the cache hit), whose
    # stages the first run showed: each would rerun the miniature's tests and publish with an install-back.
    text = demo_recipe_text("v1")
    write_recipe(project, "r", text[:text.index("\n[test]\n")])
    again = run_cli(*args, "--offline")
    assert again.returncode == 0, again.stderr
    stages = json.loads(again.stdout)["stages"]
    assert stages["build"]["status"] == "cached" and stages["verify"]["from_record"]
    assert "--recheck runs them again" in again.stderr
    assert stages["test"]["status"] == "no [test] paths in the recipe"
    assert stages["publish"]["status"] == "skipped: the recipe has no [publish] target"
    rechecked = run_cli(*args, "--offline", "--recheck")
    assert rechecked.returncode == 0, rechecked.stderr
    assert not json.loads(rechecked.stdout)["stages"]["verify"]["from_record"]


def test_the_summary_table_shows_statuses_as_text_not_markup() -> None:
    import io

    from build_kernel import log
    from build_kernel.pipeline import render

    out = io.StringIO()  # the console every table is printed on (log.out): it reads no markup
    log.plain_console(out).print(render({"recipe": "demo", "wheel": "w.whl",
                                         "stages": {"serve": {"status": "no [serve] model in the recipe", "seconds": 0.0}}}))
    assert "no [serve] model in the recipe" in out.getvalue()
