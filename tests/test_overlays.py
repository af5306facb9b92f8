"""Overlays as users write them, each in a folder outside the checkout: `extends` by name finds the
project's recipes (and a site's own, on BUILD_KERNEL_RECIPE_PATH); a child replaces a parent's key it
conflicts with (`commit` over `tag`, a series of its own) without copying the parent; `plan` shows
where each value came from."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from build_kernel import recipe
from build_kernel.errors import RecipeError
from tests.conftest import REPO_ROOT, run_cli, write_series

TRITON = "0123456789abcdef0123456789abcdef01234567"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def test_extends_by_name_finds_the_projects_recipe_from_anywhere(tmp_path: Path) -> None:
    overlay = _write(tmp_path / "site" / "ours.toml", """
        extends = "nightly-cu130"
        [build]
        jobs = 3
    """)
    r = recipe.load(str(overlay))
    assert r.build.jobs == 3 and r.patches.version == "v8" and r.source.subdir == "sgl-kernel"
    assert r.series_dir == REPO_ROOT / "patches/sm120/v8"


def test_extends_by_name_on_the_site_search_path(tmp_path: Path) -> None:
    site = tmp_path / "site-recipes"
    _write(site / "site-base.toml", """
        extends = "nightly-cu130"
        [build]
        jobs = 5
    """)
    overlay = _write(tmp_path / "elsewhere" / "mine.toml", 'extends = "site-base"\n[build]\nnvcc_threads = 2\n')
    with pytest.raises(RecipeError, match=r"parent recipe 'site-base' not found in .*elsewhere.*BUILD_KERNEL_RECIPE_PATH"):
        recipe.load(str(overlay))
    r = recipe.load(str(overlay), search=(site,))
    assert (r.build.jobs, r.build.nvcc_threads, r.patches.series) == (5, 2, "sm120")
    # The CLI reads the search path from the environment (the one reader: the plan's environment), and
    # finds a site recipe by name too.
    env = {"BUILD_KERNEL_RECIPE_PATH": str(site)}
    proc = run_cli("--json", "plan", "--recipe", "site-base", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["recipe"]["path"] == str(site / "site-base.toml")


def test_a_child_commit_replaces_the_parents_tag(tmp_path: Path) -> None:
    overlay = _write(tmp_path / "site" / "pinned.toml", f"""
        extends = "nightly-cu130"
        [deps.repo-triton]
        commit = "{TRITON}"
    """)
    r = recipe.load(str(overlay))
    [triton] = [d for d in r.deps if d.name == "repo-triton"]
    assert (triton.commit, triton.tag, triton.paths) == (TRITON, "", ("python/triton_kernels",))
    # And back: a tag over a parent's commit.
    overlay.write_text('extends = "nightly-cu130"\n[deps.repo-fmt]\ntag = "11.0.2"\n')
    [fmt] = [d for d in recipe.load(str(overlay)).deps if d.name == "repo-fmt"]
    assert (fmt.commit, fmt.tag) == ("", "11.0.2")


def test_a_child_series_of_its_own_without_the_parents_version(tmp_path: Path) -> None:
    site = tmp_path / "site"
    write_series(site, "site-fixes", "v1", {})
    overlay = _write(site / "recipes" / "ours.toml", """
        extends = "nightly-cu130"
        [patches]
        series = "site-fixes"
    """)
    # The parent's version (v8) belongs to its series: a series of one's own names its version too.
    with pytest.raises(RecipeError, match=r"ours.toml:3: patches.version: missing: series 'site-fixes' is set here, "
                                          r"the version v8 inherited from .*nightly-cu130.toml is sm120's"):
        recipe.load(str(overlay))
    overlay.write_text(overlay.read_text() + 'version = "v1"\n')
    r = recipe.load(str(overlay))
    assert r.series_dir == site / "patches/site-fixes/v1"


def test_an_overlay_outside_the_checkout_picks_another_version_of_its_parents_series(tmp_path: Path) -> None:
    # Found writing the H200's unpruned reference overlay in /tmp: a version of the project's series named by an
    # overlay outside the checkout was looked for in <overlay>/../patches ("no series file at /tmp/patches/...").
    overlay = _write(tmp_path / "ov" / "unpruned.toml", """
        extends = "nightly-cu130"
        [patches]
        version = "v7-unpruned"
    """)
    r = recipe.load(str(overlay))
    assert r.series_dir == REPO_ROOT / "patches/sm120/v7-unpruned" and (r.series_dir / "series").is_file()
    overlay.write_text('extends = "nightly-cu130"\n[patches]\nversion = "v99"\n')
    with pytest.raises(RecipeError, match=rf"unpruned.toml:3: patches.version: no series file at {REPO_ROOT}/patches/sm120/v99/series "
                                          r"\(versions of sm120: r0.3.21, v1, v2, .*, v7-unpruned, v8, v9, v10\b.*\)"):
        recipe.load(str(overlay))


def test_a_child_fa3_choice_replaces_the_parents_listed_variants(tmp_path: Path) -> None:
    # The parent lists FA3's variants (fa3 = "listed"); a child asking for all of them cannot remove those keys,
    # which were refused as "read only with fa3 = listed" before.
    overlay = _write(tmp_path / "ov" / "all.toml", """
        extends = "nightly-cu130"
        [build]
        fa3 = "all"
    """)
    r = recipe.load(str(overlay))
    assert (r.build.fa3, r.build.fa3_head_dims, r.build.fa3_dtypes) == ("all", (), ())
    # Only the listing changed: the parent's choice and dtypes stay.
    overlay.write_text('extends = "nightly-cu130"\n[build]\nfa3_head_dims = ["64", "256"]\n')
    r = recipe.load(str(overlay))
    assert (r.build.fa3, r.build.fa3_head_dims, r.build.fa3_dtypes) == ("listed", ("64", "256"), ("bf16",))


def test_plan_says_where_each_value_came_from(tmp_path: Path) -> None:
    overlay = _write(tmp_path / "site" / "pinned.toml", f"""
        extends = "nightly-cu130"
        [deps.repo-triton]
        commit = "{TRITON}"
    """)
    proc = run_cli("--json", "plan", "--recipe", str(overlay))
    assert proc.returncode == 0, proc.stderr
    origins = json.loads(proc.stdout)["origins"]
    assert origins["deps.repo-triton.commit"] == f"{overlay}:3"
    paths_line = _line('paths = ["python/triton_kernels"]')
    assert origins["deps.repo-triton.paths"] == f"{REPO_ROOT / 'recipes/nightly-cu130.toml'}:{paths_line}"
    assert origins["patches.version"].startswith(f"{REPO_ROOT / 'recipes/nightly-cu130.toml'}:")
    assert "deps.repo-triton.tag" not in origins
    # The answer first: where values came from is on request (--explain), and always in --json.
    assert f"({overlay}:3)" not in run_cli("plan", "--recipe", str(overlay)).stdout
    table = run_cli("plan", "--explain", "--recipe", str(overlay)).stdout
    assert f"deps.repo-triton.commit = \"{TRITON}\"  ({overlay}:3)" in table


def _line(text: str) -> int:
    lines = (REPO_ROOT / "recipes/nightly-cu130.toml").read_text().splitlines()
    return lines.index(text) + 1
