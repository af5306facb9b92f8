"""Recipe errors no other test reached (bench/code_health/error_sites.py, issue 68 item 1).

A recipe's problems are collected and reported at once, one line each: `file:line: key: what is
wrong (the fix)`, exit 2 (RecipeError), nothing fetched. One bad recipe through the real CLI holds
most of them; the rest are loaded by the real loader in-process (the same function the CLI calls).
Real recipes and series written to tmp_path; no network, no compile.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from build_kernel import fa3_variants
from build_kernel import plan as plan_mod
from build_kernel.errors import PatchError, RecipeError
from build_kernel.recipe.load import load
from tests.conftest import run_cli, write_recipe, write_series

SHA = "40ef116f011cf1599811af1089ddf00971092bcf"
HEAD = f"""\
description = "error sites"
[source]
repo = "https://example.invalid/x.git"
commit = "{SHA}"
[patches]
series = "s"
version = "v1"
"""
BUILD = '[build]\narch = ["12.0a"]\n'


@pytest.fixture
def recipes(project: Path) -> Path:
    """A project whose series s/v1 exists and applies nothing (its pool is empty)."""
    write_series(project, "s", "v1", {})
    return project


def problems(path: Path) -> list[str]:
    with pytest.raises(RecipeError) as info:
        load(str(path))
    assert info.value.exit_code == 2
    return info.value.problems


EVERYTHING_WRONG = f"""\
description = "error sites"
[source]
repo = "https://example.invalid/x.git"
commit = "{SHA.upper()}"
[patches]
series = "s"
version = "v1"
omitted = {{ nosuch = "gone" }}
[build]
arch = ["12.0a"]
fp4 = "maybe"
nvcc_threads = 0
dist = "sccache-dist"
dist_scheduler = "sched.internal:10600"
fa3 = "listed"
version_file = "v.py"
[toolchain]
host_compiler = "msvc"
torch = "nightly"
sglang = "0.5.0"
[test]
timeout_s = 0
[test.expect."tests/test_a.py"]
outcome = "uncollectable"
message = "boom"
[serve]
sglang = "source"
health_timeout_s = 0
[deps.extra]
path = "/src/dep"
paths = ["include"]
"""


def test_every_problem_of_a_recipe_at_once_through_the_cli(recipes: Path, tmp_path: Path) -> None:
    path = write_recipe(recipes, "bad", EVERYTHING_WRONG).resolve()
    cache = tmp_path / "cache"
    proc = run_cli("fetch", "--offline", "--recipe", str(path),
                   env={"BUILD_KERNEL_CACHE_DIR": str(cache), "BUILD_KERNEL_CONFIG": str(tmp_path / "none.toml")})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    expect = [
        (1, 'test.expect."tests/test_a.py".reason: missing: say why it is expected (red means new only while every '
            "known outcome says why)"),
        (4, f"source.commit: '{SHA.upper()}' is a full SHA in uppercase: write it in lowercase, as git prints it "
            f"('{SHA}')"),
        (8, "patches.omitted.nosuch: no patch of that name in the pool (the pool has no patches: remove it from "
            "omitted)"),
        (11, "build.fp4: 'maybe' is not true, false or \"required\" (e.g. fp4 = true)"),
        (12, "build.nvcc_threads: must be at least 1, not 0 (e.g. nvcc_threads = 1)"),
        (13, "build.dist: sccache-dist needs compile_cache = \"sccache\", not 'none'"),
        (14, "build.dist_scheduler: 'sched.internal:10600' is not an http(s) URL (e.g. dist_scheduler = "
             "\"http://sched.internal:10600\")"),
        (15, 'build.fa3_head_dims: missing: fa3 = "listed" needs the head dims, e.g. fa3_head_dims = ["128"]'),
        (16, 'build.version_file: applies to backend = "setuptools" only (scikit-build-core stamps pyproject.toml)'),
        (18, "toolchain.host_compiler: 'msvc' is not auto, environment or a compiler (e.g. host_compiler = "
             "\"/usr/bin/g++\")"),
        (19, 'toolchain.torch: "nightly" needs torch_index, the index to take the newest from (e.g. torch_index = '
             '"https://download.pytorch.org/whl/nightly/cu130")'),
        (22, "test.timeout_s: 0.0 is no time limit (e.g. timeout_s = 900)"),
        (25, "test.expect.\"tests/test_a.py\".message: applies to outcome = \"fail\" or \"skip\" (this one is "
             "'uncollectable'): remove it"),
        (27, "serve.sglang: \"source\" builds sglang from [source] commit, but [toolchain] sglang = '0.5.0' names a "
             "release: remove one of them"),
        (28, "serve.health_timeout_s: must be more than 0, not 0.0 (e.g. health_timeout_s = 1800.0)"),
        (31, "deps.extra.paths: only with repo + commit (a local path is used whole)"),
    ]
    assert proc.stderr.strip().splitlines() == [f"error: {path}:{line}: {message}" for line, message in expect]
    assert not cache.exists()


def test_setuptools_refuses_what_only_cmake_reads(recipes: Path) -> None:
    path = write_recipe(recipes, "st", HEAD + BUILD + 'backend = "setuptools"\n[build.defines]\nX = "1"\n'
                        f'[deps.extra]\nrepo = "https://example.invalid/d.git"\ncommit = "{SHA}"\n')
    assert problems(path) == [  # [deps] has no line of its own (only [deps.extra]): the file's first
        f"{path}:1: deps: [deps] feed CMake's FetchContent and do not apply to backend = \"setuptools\" "
        "(use [source] submodules, or a patch)",
        f'{path}:11: build.defines: CMake defines do not apply to backend = "setuptools" (set [build] env instead)',
    ]


def test_sglang_from_source_needs_a_pinned_commit(recipes: Path) -> None:
    text = HEAD.replace(f'commit = "{SHA}"', 'commit = "main"\nallow_floating = true') + BUILD + '[serve]\nsglang = "source"\n'
    path = write_recipe(recipes, "src", text)
    assert problems(path) == [f"{path}:12: serve.sglang: \"source\" needs [source] commit to be a full SHA, not 'main'"]


def test_a_library_rule_arch_list_misspelt(recipes: Path) -> None:
    path = write_recipe(recipes, "lib", HEAD + BUILD + '[verify.libraries."lib*.so"]\nnot_loaded_on = ["9.x"]\n')
    assert problems(path) == [
        f"{path}:11: verify.libraries.\"lib*.so\".not_loaded_on: unknown arch '9.x': write it as 12.0a, sm_120a, 120a "
        "or 8.6+PTX (e.g. [\"9.0\"])"]


def test_fp4_required_without_an_fp4_arch(recipes: Path) -> None:
    path = write_recipe(recipes, "fp4", HEAD + '[build]\narch = ["9.0a"]\nfp4 = "required"\n')
    [line] = problems(path)
    assert line.startswith(f"{path}:9: build.arch: FP4 kernels need an arch-specific 10.0+ target (e.g. 12.0a) and 9.0a "
                           'has none, while recipe fp4 sets fp4 = "required": ')
    assert line.endswith('(--arch "9.0a;12.0a"), or build without FP4 from an overlay with fp4 = true (FP4 where the arch '
                         "has it)")


def test_recipe_file_shape_errors(recipes: Path, tmp_path: Path) -> None:
    # a folder given as the recipe
    folder = tmp_path / "site.toml"
    folder.mkdir()
    (folder / "a.toml").write_text("")
    with pytest.raises(RecipeError) as info:
        load(str(folder))
    assert info.value.problems == [f"{folder}: is a folder, not a recipe file (name one of its recipes: a.toml)"]
    # two recipes that extend each other
    a = write_recipe(recipes, "a", 'extends = "b"\n' + HEAD)
    b = write_recipe(recipes, "b", 'extends = "a"\n')
    with pytest.raises(RecipeError) as info:
        load(str(a))
    assert info.value.problems == [f"{b}:1: extends: cycle a -> b -> a (remove one `extends`)"]
    # a top-level key no recipe has, and [deps] that is no table
    path = write_recipe(recipes, "top", "sourec = 1\ndeps = 3\n" + HEAD + BUILD)
    assert problems(path) == [
        f"{path}:1: sourec: unknown key (did you mean 'source'?)",
        f"{path}:2: deps: must be a table, not 3 (write [deps.NAME] and key = value lines below it)",
    ]


def test_fa3_from_the_model_without_a_model_or_with_a_broken_config(tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as info:
        fa3_variants.resolve("model", head_dims=(), dtypes=(), softcap=False, model="", serve_args=(), env={})
    assert info.value.problems == ['build.fa3 = "model" needs [serve] model (a folder or a Hugging Face id); or set '
                                   'fa3 = "listed" with fa3_head_dims']
    (tmp_path / "config.json").write_text("{ truncated")
    with pytest.raises(RecipeError) as info:
        fa3_variants.resolve("model", head_dims=(), dtypes=(), softcap=False, model=str(tmp_path), serve_args=(), env={})
    [line] = info.value.problems
    assert line.startswith(f'build.fa3 = "model": {tmp_path / "config.json"} is no JSON config (')
    assert line.endswith('); fetch it again, or set fa3 = "listed" with fa3_head_dims')


def test_values_outside_their_choices(recipes: Path) -> None:
    """compile_cache and dist, each not one of its choices; an expected outcome's when_asked misspelt."""
    path = write_recipe(recipes, "choices", HEAD + BUILD + 'compile_cache = "distcc"\ndist = "icecream"\n'
                        '[test.expect."tests/test_a.py"]\noutcome = "skip"\nreason = "no GPU"\nwhen_asked = ["9.x"]\n')
    assert problems(path) == [
        f"{path}:10: build.compile_cache: 'distcc' is not one of none, ccache, sccache (e.g. compile_cache = \"ccache\")",
        f"{path}:11: build.dist: 'icecream' is not one of none, sccache-dist (e.g. dist = \"sccache-dist\")",
        f"{path}:15: test.expect.\"tests/test_a.py\".when_asked: unknown arch '9.x': write it as 12.0a, sm_120a, 120a "
        "or 8.6+PTX (arch names, e.g. [\"9.0a\"])",
    ]


def test_serve_and_backend_values_outside_their_choices(recipes: Path) -> None:
    path = write_recipe(recipes, "more", HEAD + BUILD + 'backend = "meson"\norder_profile = "no-such.json"\n'
                        '[serve]\nsglang = "pypi"\njit_prewarm = ["sglang.jit_kernel.nvfp4", "not a module!"]\n')
    assert problems(path) == [
        f"{path}:10: build.backend: 'meson' is not one of scikit-build-core, setuptools (e.g. backend = \"setuptools\")",
        f"{path}:11: build.order_profile: no such file {path.parent / 'no-such.json'} (the path is relative to the "
        "recipe file: fix it or remove the key)",
        f"{path}:13: serve.sglang: 'pypi' is neither 'release' nor 'source' (e.g. sglang = \"source\")",
        f"{path}:14: serve.jit_prewarm: 'not a module!' is not `module` or `module:builder` (e.g. jit_prewarm = "
        "[\"sglang.jit_kernel.nvfp4\"])",
    ]


def test_an_order_profile_that_is_no_json(recipes: Path) -> None:
    (recipes / "recipes" / "profile.json").write_text("{ cut")
    path = write_recipe(recipes, "profile", HEAD + BUILD + 'order_profile = "profile.json"\n')
    [line] = problems(path)
    assert line == (f"{path}:10: build.order_profile: {path.parent / 'profile.json'}: no seconds or source column (the "
                    "header must name source and seconds) (fix the file, or remove the key)")


def test_a_series_whose_cxx_standard_is_no_standard(recipes: Path) -> None:
    """The series' info.toml (patches/s/v1) says cxx_standard = "c++17": refused when the plan reads the series."""
    info = recipes / "patches" / "s" / "v1" / "info.toml"
    info.write_text('cxx_standard = "c++17"\n')
    path = write_recipe(recipes, "cxx", HEAD + BUILD)
    with pytest.raises(PatchError) as caught:
        plan_mod.resolve(load(str(path)), env={"HOME": str(recipes)}, cache_dir=recipes / "cache",
                         output_dir=recipes / "out")
    assert caught.value.exit_code == 5
    assert caught.value.render() == (f"{info}: cxx_standard = 'c++17' is not a C++ standard (write a number "
                                     "(cxx_standard = 17) or \"torch\" (the patches choose it from torch))")
