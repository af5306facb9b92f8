"""The setuptools backend: the minicppext miniature (examples/minicppext, recipe demo-cppext) through fetch,
build, verify and the torch ABI guard of `doctor --installed`, plus the backend's parts alone.

What is real: the build (setuptools + torch.utils.cpp_extension + ninja + nvcc 13 on one .cu, once per
session), the recorder, the jobserver, verify's cuobjdump and clean-process import, the wheel installed into a
second environment. What stands in: that environment's "older torch" is a torch package of two files
(version.py, dist-info) whose lib/ is this torch's, in a bare venv that sees this venv's site-packages; a
second real torch (5 GB) is too much for CI. The guard reads files only, so it sees what a downgrade leaves.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
import venv
from dataclasses import replace
from pathlib import Path

import pytest

from build_kernel import recipe, toolchain
from build_kernel.plan import resolve
from build_kernel.resources import Resources
from build_kernel.stages.builder import backends, cache, ninja_order, scheduling
from build_kernel.stages.fetch.workspace import Tree
from build_kernel.stages.verify.installed import stale
from tests.conftest import REPO_ROOT, run_cli, write_recipe, write_series

RES = Resources(cpus=8, memory_bytes=64 * 1024**3, cpus_why="test", memory_why="test")


def _plan(name: str = "demo-cppext", **kw: str) -> object:
    return resolve(recipe.load(name), env={}, resources=RES, **kw)  # type: ignore[arg-type]


# --- fast: the backend's parts ----------------------------------------------------------------------------


def test_setuptools_env_names_come_from_the_recipe() -> None:
    plan = resolve(recipe.load("demo-cppext"), env={}, arch="9.0a,12.0a", jobs=3, resources=RES)
    env = plan.build_env()
    assert env["MINICPPEXT_CUDA_ARCHS"] == "90a;120a"  # arch_format = "digits"
    assert env["TORCH_CUDA_ARCH_LIST"] == "9.0a;12.0a"
    assert env["MAX_JOBS"] == "3" and env["NVCC_THREADS"] == "1" and env["MINICPPEXT_FORCE_BUILD"] == "TRUE"
    assert plan.to_dict()["backend"] == "setuptools"


def test_flash_attn_recipe_plans_offline_and_forced() -> None:
    plan = resolve(recipe.load("flash-attn-2.8.3"), env={}, arch="9.0", resources=RES)
    env = plan.build_env()
    assert env["FLASH_ATTN_CUDA_ARCHS"] == "90" and env["FLASH_ATTENTION_FORCE_BUILD"] == "TRUE"
    assert env["MAX_JOBS"] == str(plan.jobs.jobs) and env["NVCC_THREADS"]
    r = plan.recipe
    assert r.source.commit == "060c9188beec3a8b62b33a3bfa6d5d2d44975fab"
    assert r.source.submodules == ("csrc/cutlass",) and "csrc/composable_kernel" not in " ".join(r.source.paths)
    assert "csrc/cutlass/include" not in r.source.paths  # fetched from cutlass itself, at the gitlink's commit
    assert (r.toolchain.torch, r.toolchain.cuda, r.toolchain.cuda_source) == ("2.9.1", "12.8", "auto")


def test_flash_attn_first_build_is_ordered_by_the_h200_profile() -> None:
    """The H200 build of 2.8.3 for 9.0 ran setup.py's order and ended 1.165x its lower bound: the ~400 s split-KV
    forward TUs started last. The recipe ships that build's profile, so a first build starts them first and the
    governor knows each TU's peak; the profile says what it was measured for, and the ETA says when it differs."""
    plan = resolve(recipe.load("flash-attn-2.8.3"), env={}, arch="9.0", resources=RES)
    shipped = scheduling.shipped_tus(plan)
    assert len(shipped) == 72 and all(s.startswith("csrc/flash_attn/src/") for s in shipped)
    longest = max(shipped, key=lambda s: shipped[s][0])
    assert "flash_fwd_split_" in longest and shipped[longest][0] > 300
    # The job count's bound is no lighter than the heaviest TU measured.
    assert plan.recipe.build.job_memory_gb >= max(peak for _, peak in shipped.values())
    assert scheduling.profile_note(plan) is None  # measured for this pin, series and arch
    both = resolve(recipe.load("flash-attn-2.8.3"), env={}, resources=RES)  # the recipe's own 8.0 and 9.0
    assert "was measured for 9.0, this build is for 8.0;9.0" in (scheduling.profile_note(both) or "")


def test_plan_lists_an_fa3_choice_only_for_a_package_that_has_one() -> None:
    # flash-attn 2 for 9.0 printed sgl-kernel's FA3 row ("head dims 64, 96, ... 64_512; dtypes bf16, fp16, e4m3"):
    # a choice that package does not have.
    fa = run_cli("plan", "--explain", "--recipe", "flash-attn-2.8.3", "--arch", "9.0")
    assert fa.returncode == 0, fa.stderr
    assert "fa3" not in fa.stdout and "FLASH_ATTN_CUDA_ARCHS=90" in fa.stdout
    sgl = run_cli("plan", "--recipe", "nightly-cu130")
    assert sgl.returncode == 0, sgl.stderr
    # sgl-kernel: the series reads the choice (here "not read": 12.0a has no FA3)
    assert any(line.startswith("fa3 ") for line in sgl.stdout.splitlines())


def test_flash_attn_on_a_torch_that_needs_cxx20_is_refused_before_compiling() -> None:
    # The real tree at 060c9188 on torch 2.14.1 + nvcc 13.0 (2026-12-03): setup.py's -std=c++17 met torch's
    # `std::strong_ordering` in every TU, after 30 s of configure and compiles. The series says its standard.
    from build_kernel.series import load_series

    series = load_series(REPO_ROOT / "patches/flash-attn/v1")
    assert series.cxx_standard == 17 and series.applies_to_commits == ("060c9188beec3a8b62b33a3bfa6d5d2d44975fab",)
    facts = toolchain.Facts(python=sys.executable, python_version="3.12", torch_version="2.14.1+cu130",
                            torch_cuda="13.0", torch_cxx_standard=20)
    # The fix named is the sibling version made for the same commit that takes the standard from torch.
    assert toolchain.cxx_standard_problem(facts, series, "060c9188beec3a8b62b33a3bfa6d5d2d44975fab") == (
        "torch 2.14.1+cu130 needs C++20 and series flash-attn/v1 builds with C++17: use [patches] version = \"v2\" "
        "(it sets the standard from torch), or use a torch whose headers accept C++17")
    # The recipe's own torch (2.9.1) needs C++17: nothing to refuse.
    assert toolchain.cxx_standard_problem(replace(facts, torch_version="2.9.1+cu128", torch_cxx_standard=17), series) is None
    # v2, the recipe's, leaves the standard to torch's cpp_extension: nothing to refuse either way.
    v2 = load_series(REPO_ROOT / "patches/flash-attn/v2")
    assert v2.cxx_standard == "torch" and toolchain.cxx_standard_problem(facts, v2) is None
    assert recipe.load("flash-attn-2.8.3").patches.version == "v2"


def test_flash_attn_stack_stops_at_the_toolkit_before_installing_torch(project: Path, tmp_path: Path) -> None:
    """flash-attn's recipe on this host (its source swapped for the miniature: no GitHub here): CUDA 12.8 from
    PyPI wheels is refused in one line (exit 3) before the build environment (torch 2.9.1, GBs) is made. The
    swapped source has a series of its own: flash-attn's is made for 060c9188 only."""
    write_series(project, "fa-mini", "v1", {})
    write_recipe(project, "fa", f"""
        extends = "{REPO_ROOT / 'recipes/flash-attn-2.8.3.toml'}"
        [source]
        repo = "example:minicppext"
        commit = "806180d731961fa7ee126d761559c41473c88b66"
        sparse_paths = []
        submodules = []
        [patches]
        series = "fa-mini"
        version = "v1"
    """)
    cache_dir = tmp_path / "cache"
    out = run_cli("build", "--recipe", str(project / "recipes/fa.toml"), "--arch", "9.0",
                  env={"BUILD_KERNEL_CACHE_DIR": str(cache_dir), "BUILD_KERNEL_OUTPUT_DIR": str(tmp_path / "out")})
    assert out.returncode == 3, out.stdout + out.stderr
    # Said by the checks before any work (readiness.py), with the other problems of this host's toolchain.
    assert "PyPI has no CUDA 12.8 compiler" in out.stderr and "no nvcc, cicc or cudafe++" in out.stderr
    assert not (cache_dir / "envs").exists() and not (cache_dir / "src").exists()


def test_cmake_only_keys_are_refused_for_setuptools(project: Path) -> None:
    write_series(project, "s", "v1", {})
    write_recipe(project, "r", """
        [source]
        repo = "example:minicppext"
        commit = "806180d731961fa7ee126d761559c41473c88b66"
        [patches]
        series = "s"
        version = "v1"
        [build]
        backend = "setuptools"
        arch = ["9.0"]
        arch_format = "dots"
        [build.defines]
        X = "1"
        [deps.foo]
        path = "."
    """)
    out = run_cli("recipes", "show", str(project / "recipes/r.toml"))
    assert out.returncode == 2
    text = out.stderr
    assert "CMake defines do not apply to backend = \"setuptools\"" in text
    assert "[deps] feed CMake's FetchContent" in text
    assert "'dots' is not one of torch, digits" in text


def test_version_stamped_in_the_version_file(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/__init__.py").write_text('import os\n__version__ = "2.8.3"\nX = "__version__ = 1"\n')
    b = backends.Setuptools("pkg/__init__.py")
    assert b.read_version(tmp_path) == "2.8.3"
    b.stamp_version(tmp_path, "2.8.3+cu128.torch2.9.sm90")
    assert '__version__ = "2.8.3+cu128.torch2.9.sm90"\n' in (tmp_path / "pkg/__init__.py").read_text()
    wheel = tmp_path / "pkg-2.8.3+cu128.torch2.9.sm90.extra-cp312-cp312-linux_x86_64.whl"
    with pytest.raises(Exception, match="the tool stamped"):
        backends.check_version(wheel, "2.8.3+cu128.torch2.9.sm90")


def test_setuptools_build_folder_survives_the_source_copy(tmp_path: Path) -> None:
    """An interrupted build reruns in the same key's folder: setuptools' objects (build/temp.*) are kept
    across the fresh copy of the sources, so ninja compiles only what is missing."""
    src = tmp_path / "src"
    (src / "build/temp.linux").mkdir(parents=True)
    (src / "build/temp.linux/a.o").write_text("object")
    kept = backends.Setuptools().kept(src)
    backends.keep_across_copy(kept, tmp_path / "kept", restore=False)
    assert not (src / "build").exists()
    (src / "setup.py").write_text("# a fresh copy")
    backends.keep_across_copy(kept, tmp_path / "kept", restore=True)
    assert (src / "build/temp.linux/a.o").read_text() == "object"


def test_ninja_wrapper_drops_minus_j_only_for_the_jobserver() -> None:
    assert ninja_order._without_j(["-v", "-j", "4", "-C", "x"]) == ["-v", "-C", "x"]
    assert ninja_order._without_j(["-j4", "all"]) == ["all"]


def test_cache_key_includes_torch(tmp_path: Path) -> None:
    plan = _plan()
    tree = Tree(tmp_path, tmp_path, "806180d731961fa7ee126d761559c41473c88b66", "d" * 64, True, (), {})
    facts = toolchain.Facts(python=sys.executable, python_version="3.11", torch_version="2.14.1+cu130", torch_cuda="13.0")
    same = cache.key(plan, facts, tree, {})  # type: ignore[arg-type]
    assert cache.key(plan, facts, tree, {}) == same  # type: ignore[arg-type]
    assert cache.key(plan, replace(facts, torch_version="2.13.0+cu130"), tree, {}) != same  # type: ignore[arg-type]


def test_stale_judges_provenance_and_names_the_recipe() -> None:
    prov = json.dumps({"recipe": "demo-cppext", "archs": ["12.0a"], "toolchain": {"torch": "2.14.1+cu130"}})
    dists = [{"name": "minicppext", "version": "0.1.0+x", "tops": ["minicppext"], "provenance": prov, "libs": []}]
    [found] = stale.judge(dists, "2.13.0+cu130", None, {}, ["demo-cppext"])
    assert found.command == "build-kernel --recipe demo-cppext --arch 12.0a"
    assert "was built against torch 2.14.1+cu130; this torch is 2.13.0+cu130" in found.text
    assert stale.judge(dists, "2.14.1+cu130", None, {}, ["demo-cppext"]) == []


def test_source_sparse_paths_and_a_sparse_submodule(project: Path, tmp_path: Path) -> None:
    """flash-attn's shape: setup.py and two folders of the repository, the csrc/cutlass submodule's include/
    only at the commit its gitlink names; another submodule (composable_kernel) and other folders never."""
    import git

    from build_kernel.stages.fetch import workspace
    from tests.conftest import commit_files
    from tests.test_fetch_remote import BIG, _git

    up = tmp_path / "cutlass"
    up_sha = commit_files(up, {"include/cutlass.h": "// cutlass\n", "media/big.bin": BIG}, "cutlass")
    outer = tmp_path / "fa"
    commit_files(outer, {"setup.py": "# setup\n", "pkg/__init__.py": "", "csrc/fa/a.cu": "// a\n",
                         "hopper/big.cu": BIG}, "fa")
    for sub, sha in (("csrc/cutlass", up_sha), ("csrc/ck", up_sha)):
        _git(outer, "update-index", "--add", "--cacheinfo", f"160000,{sha},{sub}")
    (outer / ".gitmodules").write_text(f'[submodule "cutlass"]\n\tpath = csrc/cutlass\n\turl = file://{up}\n'
                                       f'[submodule "ck"]\n\tpath = csrc/ck\n\turl = file:///nowhere/ck\n')
    _git(outer, "add", ".gitmodules")
    _git(outer, "commit", "-q", "--no-gpg-sign", "-m", "submodules")
    sha = _git(outer, "rev-parse", "HEAD").strip()
    for repo in (outer, up):
        _git(repo, "config", "uploadpack.allowFilter", "true")
        _git(repo, "config", "uploadpack.allowAnySHA1InWant", "true")
    write_series(project, "s", "v1", {})
    write_recipe(project, "r", f"""
        [source]
        repo = "file://{outer}"
        commit = "{sha}"
        sparse_paths = ["setup.py", "pkg", "csrc/fa", "csrc/cutlass/include"]
        submodules = ["csrc/cutlass"]
        [patches]
        series = "s"
        version = "v1"
        [build]
        backend = "setuptools"
        arch = ["9.0"]
    """)
    plan = resolve(recipe.load("r", project), env={}, resources=RES, cache_dir=tmp_path / "cache")
    tree = workspace.prepare(plan)
    files = sorted(str(f.relative_to(tree.root)) for f in tree.root.rglob("*") if f.is_file() and ".git" not in f.parts
                   and f.name != "build-kernel-tree.json" and not f.name.startswith("."))
    assert files == ["csrc/cutlass/include/cutlass.h", "csrc/fa/a.cu", "pkg/__init__.py", "setup.py"], files
    assert git.Repo(tree.root / "csrc/cutlass").head.commit.hexsha == up_sha


# --- slow: the real build, once per session ----------------------------------------------------------------


class CppextBuild:
    def __init__(self, cache: Path, out: Path, wheel: Path, output: str, seconds: float) -> None:
        self.cache, self.out, self.wheel, self.output, self.seconds = cache, out, wheel, output, seconds

    @property
    def env(self) -> dict[str, str]:
        return {"BUILD_KERNEL_CACHE_DIR": str(self.cache), "BUILD_KERNEL_OUTPUT_DIR": str(self.out)}


@pytest.fixture(scope="session")
def cppext_build(tmp_path_factory: pytest.TempPathFactory) -> CppextBuild:
    cache_dir, out = tmp_path_factory.mktemp("cppext-cache"), tmp_path_factory.mktemp("cppext-wheels")
    env = {"BUILD_KERNEL_CACHE_DIR": str(cache_dir), "BUILD_KERNEL_OUTPUT_DIR": str(out)}
    start = time.monotonic()
    built = run_cli("build", "--recipe", "demo-cppext", env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    seconds = time.monotonic() - start
    [wheel] = list(out.glob("*.whl"))
    return CppextBuild(cache_dir, out, wheel, built.stdout + built.stderr, seconds)


def _log(b: CppextBuild) -> str:
    return "\n".join(p.read_text() for p in (b.cache / "logs").glob("demo-cppext-*.log"))


@pytest.mark.slow
def test_build_labels_records_and_follows_the_tool(cppext_build: CppextBuild) -> None:
    name = cppext_build.wheel.name
    assert name.startswith("minicppext-0.1.0+cu130.torch2.14.sm120a.g806180d."), name
    log = _log(cppext_build)
    assert "minicppext: MAX_JOBS unset" not in log  # the package's own job rule never ran
    assert "would download a prebuilt wheel" not in log
    assert "Jobserver mode detected" in log  # the governor: torch's -j dropped by the ninja wrapper
    edges = [json.loads(p.read_text())["sources"] for p in cppext_build.cache.glob(f"build/*/bin/{ninja_order.EDGES}")]
    assert ["csrc/scale.cu"] in edges, edges  # setuptools' temp.* folder was ordered
    # The build folder keeps what its key hashes (a later build with a new key says what changed).
    assert [json.loads(p.read_text())["recipe"] for p in cppext_build.cache.glob("build/*/key.json")] == ["demo-cppext"]
    with sqlite3.connect(cppext_build.cache / "profile.sqlite") as db:
        rows = db.execute("SELECT source, archs, tree_peak_mb FROM compiles WHERE source = 'csrc/scale.cu'").fetchall()
    assert rows and rows[0][1] == "sm_120a" and rows[0][2] > 100  # the tool's own per-TU memory
    import zipfile

    with zipfile.ZipFile(cppext_build.wheel) as zf:
        [prov_name] = [n for n in zf.namelist() if n.endswith("build_kernel_provenance.json")]
        prov = json.loads(zf.read(prov_name))
    assert prov["backend"] == "setuptools" and prov["torch"].startswith("2.14.1")


@pytest.mark.slow
def test_verify_then_second_build_is_a_cache_hit(cppext_build: CppextBuild) -> None:
    verified = run_cli("verify", "--recipe", "demo-cppext", "--json", env=cppext_build.env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    report = json.loads(verified.stdout)
    assert report["passed"] is True and report["ops_found"] == ["scale"] and report["ops_missing"] == []
    [lib] = report["libraries"]
    assert lib["archs"] == ["sm_120a"], lib  # SASS for exactly the asked arch
    def compiles() -> int:
        with sqlite3.connect(cppext_build.cache / "profile.sqlite") as db:
            return int(db.execute("SELECT COUNT(*) FROM compiles").fetchone()[0])

    before = compiles()
    again = run_cli("build", "--recipe", "demo-cppext", env=cppext_build.env)
    assert again.returncode == 0 and "cache hit" in again.stdout + again.stderr
    assert compiles() == before  # nothing compiled (not a wall-clock bound: that would depend on the load)


@pytest.mark.slow
def test_publish_then_install_back(cppext_build: CppextBuild, tmp_path: Path) -> None:
    out = run_cli("publish", "--recipe", "demo-cppext", "--to", str(tmp_path / "index"), "--json", env=cppext_build.env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert list((tmp_path / "index").rglob("minicppext-0.1.0+cu130.torch2.14.sm120a.*.whl"))
    assert "minicppext" in out.stdout and '"error"' not in out.stdout


@pytest.mark.slow
def test_oom_killed_compile_resumes_with_fewer_jobs(project: Path, tmp_path: Path) -> None:
    """The setuptools build resumes like the CMake one: nvcc's first run says what an OOM-killed compile says
    (a stand-in in front of the real nvcc, through PYTORCH_NVCC), the same command runs again with half the
    jobs in the same source copy, and the wheel is built (one real compile: ~60 s here)."""
    import shutil

    killer = tmp_path / "oom-once.sh"
    killer.write_text('#!/bin/sh\nmarker="$(dirname "$0")/killed-once"\nif [ ! -e "$marker" ]; then touch "$marker"; '
                      'echo "Killed signal terminated program cicc" >&2; exit 1; fi\nexec "$@"\n')
    killer.chmod(0o755)
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    write_recipe(project, "oom", f"""
        extends = "{REPO_ROOT / 'recipes/demo-cppext.toml'}"
        [build]
        jobs = 2
        scheduler = "static"
        profile = false
        [build.env]
        MINICPPEXT_FORCE_BUILD = "TRUE"
        PYTORCH_NVCC = "{killer} {nvcc}"
    """)
    env = {"BUILD_KERNEL_CACHE_DIR": str(tmp_path / "cache"), "BUILD_KERNEL_OUTPUT_DIR": str(tmp_path / "out")}
    out = run_cli("build", "--recipe", str(project / "recipes/oom.toml"), "--json", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "OOM kill detected (Killed signal terminated program cicc): resuming in the same build folder with 1 job(s)" \
        in out.stderr
    result = json.loads(out.stdout)
    built = result.get("build", result)
    assert built["jobs"] == [2, 1] and built["oom_kills"] == 1, built


def _env_with_torch(root: Path, wheel: Path, torch_version: str | None) -> str:
    """A bare venv that sees this venv's site-packages (.pth) and holds `wheel`; with `torch_version`, a torch
    package of its own (version.py and dist-info; lib/ is this torch's) that shadows the real one."""
    venv.create(root, with_pip=False)
    [site] = list(root.glob("lib/python3*/site-packages"))
    import torch

    here = Path(torch.__file__).parent
    (site / "main.pth").write_text(str(here.parent) + "\n")
    import subprocess

    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True)
    if torch_version:
        (site / "torch").mkdir()
        (site / "torch/__init__.py").write_text("")
        (site / "torch/version.py").write_text(f"__version__ = '{torch_version}'\ncuda = '13.0'\n")
        (site / "torch/lib").symlink_to(here / "lib")
        info = site / f"torch-{torch_version.split('+')[0]}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch_version}\n")
        (info / "RECORD").write_text("")
    return str(root / "bin" / "python")


@pytest.mark.slow
def test_doctor_names_the_package_whose_torch_changed(cppext_build: CppextBuild, tmp_path: Path) -> None:
    healthy = _env_with_torch(tmp_path / "same", cppext_build.wheel, None)
    ok = run_cli("doctor", "--installed", "--python", healthy, "--recipe", "demo-cppext", "--arch", "12.0a")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "is healthy here" in ok.stdout
    older = _env_with_torch(tmp_path / "older", cppext_build.wheel, "2.13.0+cu130")
    bad = run_cli("doctor", "--installed", "--python", older, "--recipe", "demo-cppext", "--arch", "12.0a", "--json")
    assert bad.returncode == 7, bad.stdout + bad.stderr
    report = json.loads(bad.stdout)
    verdict = report["verdict"]
    # The wheel's own torch requirement (Requires-Dist) first, the torch its provenance names beside it.
    assert "minicppext 0.1.0+cu130.torch2.14" in verdict and "requires torch==2.14.1; this torch is 2.13.0+cu130" in verdict
    assert [p["text"] for p in report["problems"]] == ["requires torch==2.14.1; this torch is 2.13.0+cu130",
                                                       "was built against torch 2.14.1+cu130; this torch is 2.13.0+cu130"]
    assert "build-kernel --recipe demo-cppext --arch 12.0a" in verdict
    # Without a recipe, doctor examines its default package and lists every other stale one with its fix.
    other = run_cli("doctor", "--installed", "--python", older, "--arch", "12.0a", "--json")
    assert other.returncode == 7
    [found] = json.loads(other.stdout)["stale"]
    assert found["distribution"] == "minicppext" and found["command"] == "build-kernel --recipe demo-cppext --arch 12.0a"


def test_miniature_commit_is_pinned() -> None:
    """The recipe pins the miniature's deterministic commit: a changed examples/minicppext moves it."""
    import tempfile

    from build_kernel.examples import commit_of

    with tempfile.TemporaryDirectory() as tmp:
        assert commit_of("example:minicppext", Path(tmp)) == recipe.load("demo-cppext").source.commit
    assert (REPO_ROOT / "examples/minicppext/setup.py").is_file()
