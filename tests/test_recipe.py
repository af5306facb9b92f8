"""Recipe loading: every bad input is one line naming file, key and fix; precedence; archs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from build_kernel import recipe
from build_kernel.archs import ArchSpellingError, parse_arch, parse_arch_list
from build_kernel.errors import RecipeError
from build_kernel.plan import resolve
from build_kernel.resources import Resources
from build_kernel.series import load_series
from tests.conftest import run_cli, write_recipe, write_series

SHA = "40ef116f011cf1599811af1089ddf00971092bcf"
GOOD = f"""
description = "test"
[source]
repo = "https://example.invalid/x.git"
commit = "{SHA}"
[patches]
series = "s"
version = "v1"
[build]
arch = ["12.0a"]
fp4 = true
job_memory_gb = 2.0
"""
FAKE_RES = Resources(cpus=16, cpus_why="test", memory_bytes=40 * 1024**3, memory_why="test")


@pytest.fixture
def root(project: Path) -> Path:
    write_series(project, "s", "v1", {})
    write_recipe(project, "good", GOOD)
    return project


def problems(root: Path, name: str, text: str) -> list[str]:
    write_recipe(root, name, text)
    with pytest.raises(RecipeError) as info:
        recipe.load(name, root)
    return info.value.problems


@pytest.mark.parametrize("spelling", ["12.0a", "sm_120a", "120a", "compute_120a", " 12.0a "])
def test_arch_spellings_normalise_to_one_form(spelling: str) -> None:
    arch = parse_arch(spelling)
    assert (arch.torch, arch.sm, arch.compute) == ("12.0a", "sm_120a", "compute_120a")


def test_arch_list_forms_and_order() -> None:
    archs = parse_arch_list("9.0a;sm_120a, 12.0a 100a")
    assert [a.torch for a in archs] == ["9.0a", "12.0a", "10.0a"]


@pytest.mark.parametrize("bad,needle", [("12.0x", "write it as"), ("abc", "write it as"), ("8.0a", "no 'a' variant"),
                                        ("native", "is for the command line")])
def test_unknown_arch_spelling(bad: str, needle: str) -> None:
    with pytest.raises(ArchSpellingError, match=needle):
        parse_arch(bad)


def test_good_recipe_loads(root: Path) -> None:
    r = recipe.load("good", root)
    assert r.source.commit == SHA and [a.sm for a in r.build.arch] == ["sm_120a"]
    assert len(r.digest) == 64


def test_unknown_key_suggests_the_right_one(root: Path) -> None:
    [line] = problems(root, "typo", GOOD.replace("fp4 = true", "fp4 = true\nnvcc_thread = 2"))
    assert "typo.toml:11: build.nvcc_thread: unknown key (did you mean 'nvcc_threads'?)" in line


def test_unknown_top_level_table(root: Path) -> None:
    [line] = problems(root, "top", GOOD + "\n[serv]\nmodel = 'x'\n")
    assert "serv: unknown key (did you mean 'serve'?)" in line


def test_missing_commit(root: Path) -> None:
    [line] = problems(root, "nocommit", GOOD.replace(f'commit = "{SHA}"', ""))
    assert "source.commit: missing (pin a full 40-hex commit SHA)" in line


def test_branch_name_is_refused_unless_floating_allowed(root: Path) -> None:
    [line] = problems(root, "branch", GOOD.replace(SHA, "main"))
    assert "branch.toml:4: source.commit: 'main' is not a full 40-hex SHA" in line and "allow_floating" in line
    write_recipe(root, "floating", GOOD.replace(SHA, "main").replace("[patches]", "allow_floating = true\n[patches]"))
    assert recipe.load("floating", root).source.allow_floating


def test_unknown_arch_in_recipe(root: Path) -> None:
    [line] = problems(root, "arch", GOOD.replace('["12.0a"]', '["12.0a", "sm_12x"]'))
    assert "arch.toml:9: build.arch: unknown arch 'sm_12x'" in line


def test_arch_the_toolkit_lacks_in_recipe_names_file_and_line(root: Path) -> None:
    """Which archs exist is the toolkit's answer: an arch nvcc does not list is refused by the plan, citing
    the recipe line that asked it."""
    write_recipe(root, "future", GOOD.replace('["12.0a"]', '["12.0a", "sm_999"]'))
    with pytest.raises(RecipeError) as info:
        resolve(recipe.load("future", root), env={}, resources=FAKE_RES)
    [line] = info.value.problems
    assert "recipe future build.arch (" in line and "future.toml:9" in line
    assert "99.9: not an arch this toolkit can target" in line and "12.0" in line


@pytest.mark.parametrize("archs,needle", [
    ('["12.0"]', "use 12.0a instead of 12.0"),
    ('["9.0a"]', "9.0a has none"),
])
def test_fp4_required_needs_an_arch_specific_blackwell_target(root: Path, archs: str, needle: str) -> None:
    [line] = problems(root, "fp4", GOOD.replace('["12.0a"]', archs).replace("fp4 = true", 'fp4 = "required"'))
    assert needle in line and 'fp4 = "required"' in line and "fp4 = true" in line


@pytest.mark.parametrize("archs", ['["12.0"]', '["9.0a"]', '["8.6"]'])
def test_fp4_true_builds_without_fp4_where_no_arch_has_it(root: Path, archs: str) -> None:
    write_recipe(root, "nofp4", GOOD.replace('["12.0a"]', archs))
    plan = resolve(recipe.load("nofp4", root), env={}, resources=FAKE_RES)
    assert plan.to_dict()["archs"]["fp4_archs"] == []


def test_fp4_value_must_be_true_false_or_required(root: Path) -> None:
    [line] = problems(root, "fp4word", GOOD.replace("fp4 = true", 'fp4 = "yes"'))
    assert "build.fp4: 'yes' is not true, false or \"required\"" in line


def test_malformed_toml_has_line_and_column(root: Path) -> None:
    [line] = problems(root, "broken", GOOD.replace('series = "s"', 'series = "s'))
    assert "broken.toml:6:" in line and "invalid TOML" in line


def test_extends_merges_parent_tables(root: Path) -> None:
    write_recipe(root, "child", 'extends = "good"\n[build]\narch = ["10.0a", "12.0a"]\n')
    r = recipe.load("child", root)
    assert [a.torch for a in r.build.arch] == ["10.0a", "12.0a"]
    assert r.source.commit == SHA and r.build.fp4 and r.build.job_memory_gb == 2.0


def test_extends_cycle(root: Path) -> None:
    write_recipe(root, "a", 'extends = "b"\n')
    write_recipe(root, "b", 'extends = "a"\n')
    with pytest.raises(RecipeError, match=r"extends: cycle a -> b -> a"):
        recipe.load("a", root)


def test_extends_missing_parent(root: Path) -> None:
    [line] = problems(root, "orphan", 'extends = "nosuch"\n')
    assert "orphan.toml:1: extends: parent recipe 'nosuch' not found" in line


def test_missing_patch_series_folder(root: Path) -> None:
    # The series exists, the version does not: the version's line, and the versions there are.
    [line] = problems(root, "noseries", GOOD.replace('version = "v1"', 'version = "v9"'))
    assert "patches.version: no series file at" in line and "patches/s/v9/series (versions of s: v1)" in line
    [line] = problems(root, "noseries", GOOD.replace('series = "s"', 'series = "nope"'))
    assert "patches.series: no series file at" in line and "patches/nope/v1/series (create the folder" in line


def test_all_problems_reported_at_once(root: Path) -> None:
    lines = problems(root, "many", GOOD.replace(SHA, "abc").replace("fp4 = true", 'fp4 = "required"')
                     .replace('["12.0a"]', '["12.0"]') + "colour = 1\n")
    assert len(lines) == 3


def bad_value(section: str, line: str) -> str:
    """GOOD with one value changed: a [build] key on line 11, any other section's on line 13."""
    if section == "build":
        return GOOD.replace("job_memory_gb = 2.0", line)
    return GOOD + f"[{section}]\n{line}\n"


@pytest.mark.parametrize("section,line,number,expected", [
    ("build", 'nvcc_threads = "x"', 11, 'build.nvcc_threads: must be an integer, not "x" (e.g. nvcc_threads = 1)'),
    ("build", 'nvcc_threads = "2"', 11, 'build.nvcc_threads: must be an integer, not "2" (e.g. nvcc_threads = 2)'),
    ("build", "nvcc_threads = 0", 11, "build.nvcc_threads: must be at least 1, not 0 (e.g. nvcc_threads = 1)"),
    ("build", 'job_memory_gb = "big"', 11, 'build.job_memory_gb: must be a number, not "big" (e.g. job_memory_gb = 4.0)'),
    ("build", "job_memory_gb = 0", 11, "build.job_memory_gb: must be more than 0, not 0.0 (e.g. job_memory_gb = 4.0)"),
    ("build", "job_memory_gb = nan", 11, "build.job_memory_gb: must be a number, not nan (e.g. job_memory_gb = 4.0)"),
    ("build", "reserve_gb = -1", 11, "build.reserve_gb: must be 0 or more, not -1.0 (e.g. reserve_gb = 2.0)"),
    ("build", "max_oom_retries = 1.5", 11, "build.max_oom_retries: must be an integer, not 1.5 (e.g. max_oom_retries = 3)"),
    ("build", "max_oom_retries = -1", 11, "build.max_oom_retries: must be 0 or more, not -1 (e.g. max_oom_retries = 3)"),
    ("build", "jobs = true", 11, 'build.jobs: must be "auto" or a positive integer, not true (e.g. jobs = "auto")'),
    ("build", 'defines = "x"', 11,
     'build.defines: must be a table of strings or numbers, not "x" (e.g. defines = { NAME = "value" })'),
    ("build", "defines = { A = [1] }", 11,
     'build.defines: must be a table of strings or numbers, not { A = [1] } (e.g. defines = { A = "..." })'),
    ("build", 'env = ["A"]', 11, 'build.env: must be a table of strings or numbers, not ["A"] (e.g. env = { NAME = "value" })'),
    ("verify", 'import_modules = "minikernel"', 13,
     'verify.import_modules: must be a list of strings, not "minikernel" (e.g. import_modules = ["minikernel"])'),
    ("verify", 'ops = ["a", 1]', 13, 'verify.ops: must be a list of strings, not ["a", 1] (e.g. ops = ["a", "1"])'),
    ("toolchain", "cuda = 13.0", 13, 'toolchain.cuda: must be a string, not 13.0 (e.g. cuda = "13.0")'),
    ("serve", 'port = "http"', 13, 'serve.port: must be an integer, not "http" (e.g. port = 30000)'),
    ("serve", "port = 70000", 13, "serve.port: must be a port number from 1 to 65535, not 70000 (e.g. port = 30000)"),
    ("serve", "host = 1979-05-27", 13, 'serve.host: must be a string, not 1979-05-27 (e.g. host = "127.0.0.1")'),
])
def test_wrong_value_is_one_line_with_file_line_key_and_fix(root: Path, section: str, line: str, number: int,
                                                           expected: str) -> None:
    [problem] = problems(root, "bad", bad_value(section, line))
    assert problem == f"{root / 'recipes' / 'bad.toml'}:{number}: {expected}"


def test_several_wrong_values_are_reported_at_once(root: Path) -> None:
    text = "deps = 3\n" + GOOD.replace("job_memory_gb = 2.0", 'nvcc_threads = "x"\njob_memory_gb = "big"\n'
                                        'max_oom_retries = 1.5\ndefines = "x"\nenv = ["A"]\nreserve_gb = 1979-05-27')
    text += '[verify]\nimport_modules = "minikernel"\n[serve]\nport = "http"\n[[serve.args]]\nx = 1\n'
    lines = problems(root, "many", text)
    keys = [line.split(": ")[1] for line in lines]
    assert sorted(keys) == sorted(["deps", "build.nvcc_threads", "build.job_memory_gb", "build.max_oom_retries",
                                   "build.defines", "build.env", "build.reserve_gb", "verify.import_modules",
                                   "serve.port", "serve.args"])
    assert all(" (e.g. " in line or "(write [" in line for line in lines)


def test_good_values_convert_to_their_field_types(root: Path) -> None:
    write_recipe(root, "typed", GOOD.replace("job_memory_gb = 2.0", """job_memory_gb = 8
reserve_gb = 0
nvcc_threads = 2
max_oom_retries = 0
jobs = 4
defines = { A = 1, B = true, C = "x", D = 1.5 }
[build.env]
CC = "gcc"
""").replace('arch = ["12.0a"]', 'arch = "12.0a;10.0a"') + """[verify]
import_modules = ["m", "m.x"]
[serve]
port = 8080
args = ["--tp", "8"]
""")
    r = recipe.load("typed", root)
    b = r.build
    assert isinstance(b.job_memory_gb, float) and b.job_memory_gb == 8.0
    assert isinstance(b.reserve_gb, float) and b.reserve_gb == 0.0
    assert (b.nvcc_threads, b.max_oom_retries, b.jobs) == (2, 0, 4)
    assert b.defines == {"A": "1", "B": "True", "C": "x", "D": "1.5"} and b.env == {"CC": "gcc"}
    assert [a.torch for a in b.arch] == ["12.0a", "10.0a"] and b.fp4 is True
    assert r.verify.import_modules == ("m", "m.x") and r.serve.args == ("--tp", "8") and r.serve.port == 8080


def test_cli_reports_wrong_types_without_traceback(root: Path) -> None:
    path = write_recipe(root, "badtypes", bad_value("build", 'nvcc_threads = "x"\nenv = ["A"]'))
    proc = run_cli("plan", "--recipe", str(path))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith(f"error: {path}:") for line in lines)
    assert "build.nvcc_threads: must be an integer" in lines[0] and "build.env: must be a table" in lines[1]
    assert "Traceback" not in proc.stderr


def test_unknown_recipe_name_suggests(root: Path) -> None:
    with pytest.raises(RecipeError, match="did you mean 'good'"):
        recipe.load("goood", root)


def test_precedence_cli_over_env_over_recipe(root: Path) -> None:
    r = recipe.load("good", root)
    assert resolve(r, env={}, resources=FAKE_RES).arch_list == "12.0a"
    assert resolve(r, env={"ARCH": "sm_100a"}, resources=FAKE_RES).arch_list == "10.0a"
    plan = resolve(r, env={"ARCH": "sm_100a"}, arch="120a;100a", resources=FAKE_RES)
    assert (plan.arch_list, plan.arch_source) == ("12.0a;10.0a", "command line; environment ARCH=sm_100a not used: --arch wins")
    assert resolve(r, env={"MAX_JOBS": "3"}, resources=FAKE_RES).jobs.jobs == 3
    assert resolve(r, env={"MAX_JOBS": "3"}, jobs=5, resources=FAKE_RES).jobs.jobs == 5


def test_env_arch_is_checked_against_fp4(root: Path) -> None:
    write_recipe(root, "must", GOOD.replace("fp4 = true", 'fp4 = "required"'))
    with pytest.raises(RecipeError, match=r"environment ARCH: arch: FP4 kernels need an arch-specific 10\.0"):
        resolve(recipe.load("must", root), env={"ARCH": "12.0"}, resources=FAKE_RES)
    # fp4 = true: the same arch plans, without FP4.
    assert resolve(recipe.load("good", root), env={"ARCH": "12.0"}, resources=FAKE_RES).arch_list == "12.0"


def test_auto_jobs_from_memory(root: Path) -> None:
    # 40 GB available - 2 GB reserve = 38 GB; 2 GB per job -> 19, capped by 16 CPUs.
    plan = resolve(recipe.load("good", root), env={}, resources=FAKE_RES)
    assert plan.jobs.jobs == 16 and "= 19, 1, 16 CPUs" in plan.jobs.derivation


def test_cli_error_is_one_line_and_nonzero(root: Path) -> None:
    write_recipe(root, "bad", GOOD.replace(SHA, "deadbeef"))
    proc = run_cli("plan", "--recipe", str(root / "recipes" / "bad.toml"))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "not a full 40-hex SHA" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_plan_json_for_nightly_recipe() -> None:
    proc = run_cli("--json", "plan", "--recipe", "nightly-cu130")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    # The seed's stack: SGLang main of 2026-03-06, the last with NVFP4 kernels prebuilt.
    assert plan["source"]["commit"] == "6ffc74efd7d23627c0245efb61af7f62cde4a970"
    # The card's recipe is the best measured path: the pruned series with the CUDA 13 memcpy fix (0009).
    assert plan["source"]["subdir"] == "sgl-kernel" and plan["patches"]["version"] == "v8"
    assert "0009-cuda13-memcpy-batch-signature.patch" in [p["name"] for p in plan["patches"]["patches"]]
    # Every pool patch v8 leaves out says why (v10's and v11's 0011: taken once the split is measured, issue 56;
    # v13's 0012: once the header diet's whole-build pair is, issue 71).
    left_out = plan["patches"]["left_out"]
    assert set(left_out) == {"0011-split-heavy-tus", "0012-lean-torch-headers"}
    assert "issue 56" in left_out["0011-split-heavy-tus"] and "issue 71" in left_out["0012-lean-torch-headers"]
    deps = {d["name"]: d for d in plan["deps"]}
    assert deps["repo-deepgemm"]["commit"] == "ffe2b6b97420a9f8c58268ca55755168e6e2f360"
    assert deps["repo-triton"]["tag"] == "v3.5.1" and deps["repo-flashmla"]["submodules"] == ["csrc/cutlass"]
    assert plan["archs"]["TORCH_CUDA_ARCH_LIST"] == "12.0a" and plan["archs"]["fp4"] is True
    assert [p["name"] for p in plan["patches"]["patches"]][:1] == ["0001-cmake-guard-policies.patch"]
    assert all(len(p["sha256"]) == 64 for p in plan["patches"]["patches"])
    assert plan["jobs"]["jobs"] >= 1 and "jobs = clamp(" in plan["jobs"]["derivation"]
    assert plan["env"]["TORCH_CUDA_ARCH_LIST"] == "12.0a"
    assert "--fp4-gemm-backend" in plan["serve"]["args"] and plan["serve"]["model"].endswith("NVFP4")


def test_recipes_list_json() -> None:
    proc = run_cli("--json", "recipes", "list")
    assert proc.returncode == 0, proc.stderr
    names = {row["name"]: row for row in json.loads(proc.stdout)}
    assert names["nightly-cu130"]["ok"] and names["nightly-cu130"]["archs"] == ["12.0a"]


def test_recipe_reference_doc_is_generated_from_the_model() -> None:
    proc = run_cli("recipes", "reference")
    assert proc.returncode == 0
    committed = (Path(__file__).resolve().parent.parent / "docs/recipe-reference.md").read_text()
    assert proc.stdout == committed, "run `build-kernel recipes reference > docs/recipe-reference.md`"
    assert "| `job_memory_gb` |" in committed and "## [deps.NAME]" in committed


def test_plan_says_which_cuda_toolkit_and_why() -> None:
    data = json.loads(run_cli("--json", "plan", "--recipe", "demo").stdout)
    assert data["cuda_toolkit"]["source"] in ("system", "wheels")
    assert "13.0" in data["cuda_toolkit"]["why"]


def test_release_recipe_extends_nightly_with_its_own_pins() -> None:
    r = recipe.load("sgl-kernel-0.3.21")
    deps = {d.name: d for d in r.deps}
    assert r.source.commit == "c86ca12875bbdea8f39267f02a0d55c68ea99d8e" and r.patches.version == "r0.3.21"
    # v8's patches that do not apply at the release, each with why (plan shows them).
    assert sorted(r.patches.omitted) == ["0005-prune-arch-dispatch", "0007-unity-batches", "0008-prune-sparse-flash-attn",
                                         "0009-cuda13-memcpy-batch-signature", "0010-fa3-variants", "0011-split-heavy-tus",
                                         "0012-lean-torch-headers"]
    # The real dead pin: reachable only from refs/pull/15/head of DeepGEMM.
    assert deps["repo-deepgemm"].commit == "54f99a8af537b3c6eb4819b69907ccbe2b600792"
    assert deps["repo-deepgemm"].paths == ("csrc", "deep_gemm")  # inherited key by key
    assert deps["repo-fast-hadamard-transform"].commit.startswith("48f3c137")
    assert r.source.commit in load_series(r.series_dir).applies_to_commits


def test_site_overlay_extends_a_shipped_recipe_by_path(tmp_path: Path) -> None:
    """A site keeps its own overrides outside the repo; the shipped recipe's own `extends`
    (by name) still resolves beside the shipped file."""
    from tests.conftest import REPO_ROOT

    (tmp_path / "site/recipes").mkdir(parents=True)
    (tmp_path / "site/patches").symlink_to(REPO_ROOT / "patches")
    overlay = tmp_path / "site/recipes/ours.toml"
    overlay.write_text(f'extends = "{REPO_ROOT}/recipes/sgl-kernel-0.3.21.toml"\n[build]\njobs = 3\n')
    r = recipe.load(str(overlay))
    assert r.build.jobs == 3 and r.source.commit.startswith("c86ca128") and r.source.subdir == "sgl-kernel"
    overlay.write_text('extends = "../nowhere.toml"\n')
    with pytest.raises(RecipeError, match=r"ours.toml:1: extends: parent recipe '../nowhere.toml' not found"):
        recipe.load(str(overlay))


def test_an_overlay_anywhere_finds_the_series_of_the_recipe_it_extends(tmp_path: Path) -> None:
    # Found on the real 0.4.3 tree: an overlay in a folder of its own looked for <folder>/../patches.
    from tests.conftest import REPO_ROOT

    overlay = tmp_path / "anywhere" / "nightly-04.toml"
    overlay.parent.mkdir()
    overlay.write_text(f'extends = "{REPO_ROOT}/recipes/nightly-0.4.toml"\n[toolchain]\ntorch = "existing"\n')
    r = recipe.load(str(overlay))
    assert r.series_dir == REPO_ROOT / "patches" / "sm120" / "v12" and (r.series_dir / "series").is_file()
    # A series version of the overlay's own project wins where it has one.
    own = tmp_path / "site"
    write_series(own, "sm120", "v12", {"0001-x.patch": "--- a/x\n+++ b/x\n"})
    (own / "recipes").mkdir()
    mine = own / "recipes" / "ours.toml"
    mine.write_text(overlay.read_text())
    assert recipe.load(str(mine)).series_dir == own / "patches" / "sm120" / "v12"


def test_relative_cache_and_output_dirs_become_absolute(root: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Found on the real tree: `--cache-dir .cache` broke the dependency checkout, which runs
    # `git -C <cache>/deps/...` from another folder.
    monkeypatch.chdir(tmp_path)
    r = recipe.load("good", root)
    plan = resolve(r, env={"BUILD_KERNEL_OUTPUT_DIR": "out"}, cache_dir=Path("cache"), resources=FAKE_RES)
    assert plan.cache_dir == tmp_path / "cache"
    assert plan.output_dir == tmp_path / "out"
