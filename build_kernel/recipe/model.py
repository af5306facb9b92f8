"""The recipe's shape: one frozen dataclass per section, each field carrying its reference text."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from build_kernel.archs import Arch

SHA_RE = re.compile(r"^[0-9a-f]{40}$")


def _doc(text: str, default: Any = None, factory: Any = None) -> Any:
    """A dataclass field with its reference-doc text attached."""
    if factory is not None:
        return field(default_factory=factory, metadata={"doc": text})
    return field(default=default, metadata={"doc": text})


@dataclass(frozen=True)
class Source:
    repo: str = _doc("Git URL, local path, or `example:NAME` for a bundled miniature project.", "")
    commit: str = _doc("Full 40-hex commit SHA to build; HEAD must equal it after checkout.", "")
    ref: str = _doc("Branch or tag the commit came from, for humans only.", "")
    subdir: str = _doc("Folder of the package inside the repository (sgl-kernel: `sgl-kernel`).", "")
    allow_floating: bool = _doc("Allow `commit` to be a branch or tag instead of a SHA.", False)
    sparse: bool = _doc("Check out only `subdir` (and fetch only its files); false: the whole tree.", True)
    sparse_paths: tuple[str, ...] = _doc("Files and folders the build reads (from the root), the only ones fetched; "
                                         "paths below a `submodules` entry make it sparse.", factory=tuple)
    submodules: tuple[str, ...] = _doc("Submodules to check out at the commit their gitlink names (others are never "
                                       "fetched), e.g. `[\"csrc/cutlass\"]`.", factory=tuple)

    @property
    def paths(self) -> tuple[str, ...]:
        """What the build reads of the repository: `sparse_paths` (not inside submodules), `subdir`, or all."""
        if self.sparse and self.sparse_paths:
            return tuple(p for p in self.sparse_paths if not any(p.startswith(s.rstrip("/") + "/") for s in self.submodules))
        return (self.subdir,) if self.sparse and self.subdir else ()


@dataclass(frozen=True)
class Patches:
    series: str = _doc("Patch series name: the folder `patches/<series>/`.", "")
    version: str = _doc("Series version: the folder `patches/<series>/<version>/`.", "")
    omitted: dict[str, str] = _doc("Patches of the series' pool this version leaves out, each with why (`plan` shows "
                                   "them; a pool patch left out without a reason is shown as unexplained), e.g. "
                                   "`{\"0009-cuda13-memcpy-batch-signature\" = \"upstream has the fix (fe9b9b254)\"}`.",
                                   factory=dict)


@dataclass(frozen=True)
class Toolchain:
    cuda: str = _doc("CUDA major.minor the build targets; torch's CUDA must share its major.", "")
    cuda_source: str = _doc("Where nvcc comes from: `system`, `wheels` (PyPI nvidia-*) or `auto`.", "auto")
    torch: str = _doc("torch version to build against; `nightly`: the newest development release on `torch_index`, "
                      "resolved once and kept in the recipe's lock; or `existing` for the current environment's. A "
                      "version from `torch_index` is locked with its file URL and sha256 (docs/pins.md).", "existing")
    torch_index: str = _doc("Package index holding that torch (e.g. PyTorch's nightly cu130 index); empty: pip's own "
                            "index (PyPI, or its mirror in the user config's [mirrors]), whose releases are never "
                            "pruned, so not locked.", "")
    python: str = _doc("Python version of the build environment (informational when torch = existing).", "")
    cmake: str = _doc("Version specifier CMake must satisfy, e.g. `>=3.26`.", ">=3.26")
    flashinfer_python: str = _doc("flashinfer-python version installed for serving.", "")
    sglang: str = _doc("sglang release served beside the wheel when [serve] sglang = `release`; its argparse "
                       "validates the serve flags.", "")
    build_requires: tuple[str, ...] = _doc("More packages the build environment needs (what a setup.py imports, "
                                           "e.g. `psutil`), installed with torch pinned.", factory=tuple)
    host_compiler: str = _doc("The compiler that links the libraries (CXX and the CUDA host compiler): `auto` keeps "
                              "the environment's when they link libstdc++ shared and otherwise picks one that does "
                              "(said in the build log and by `doctor --recipe`); `environment` refuses instead; or a path.", "auto")


@dataclass(frozen=True)
class Build:
    arch: tuple[Arch, ...] = _doc("Arch list (TORCH_CUDA_ARCH_LIST), e.g. [\"12.0a\"].", factory=tuple)
    fp4: bool | str = _doc("What the recipe is for: `true`, FP4 kernels for every asked arch that runs them (arch-specific "
                           "or family 10.0+: 12.0a, 10.0a, 12.1a, 12.0f), none for the others, and a list without one "
                           "builds without FP4 (said by `plan`); `\"required\"`: such a list is refused; `false`: no FP4 "
                           "is asked. Which libraries hold FP4, and what verify asks of their SASS, are the "
                           "`[verify.libraries]` rules with `fp4`.", False)
    min_arch: str = _doc("The oldest compute capability the source can build (e.g. `8.0`): older asked archs are "
                         "refused in one line with `min_arch_reason`.", "")
    min_arch_reason: str = _doc("Why the source cannot build below `min_arch`, citing the source.", "")
    jobs: int | str = _doc("Parallel compile jobs: `auto` (from available memory) or a number.", "auto")
    nvcc_threads: int = _doc("nvcc --threads per job (archs compiled in parallel inside one job).", 1)
    job_memory_gb: float = _doc("Predicted peak memory of one compile job per arch in flight, GB.", 4.0)
    reserve_gb: float = _doc("Memory left free for everything else while compiling, GB.", 2.0)
    max_oom_retries: int = _doc("Times an OOM-killed build resumes with fewer jobs before failing.", 3)
    scheduler: str = _doc("How parallel compiles are started: `auto` (the governor where the build environment's "
                          "ninja is >= 1.13, static otherwise, said in the build log), `static` (a fixed job count "
                          "from memory, halved after an OOM kill) or `governor` (a jobserver that starts a compile only "
                          "while free memory covers the predicted peaks; needs ninja >= 1.13, else static with a "
                          "warning). `--compile-scheduler` / BUILD_KERNEL_SCHEDULER override it.", "auto")
    order_profile: str = _doc("CSV (`source`, `seconds`; `#` lines are comments) of compile times shipped with the "
                              "recipe, path relative to the recipe file: build.ninja's compiles start longest first "
                              "by it when the recorded profile knows none of them.", "")
    profile: bool = _doc("Record every compile (wall, CPU, peak memory of its process tree, OOM kills) into "
                         "`<cache>/profile.sqlite`; the planner and the governor predict from it.", True)
    compile_cache: str = _doc("Compiler launcher for CUDA and C++ compiles: `none`, `ccache` or `sccache` "
                              "(not installed: a warning, then uncached).", "none")
    cache_url: str = _doc("Shared store of the compile cache: `redis://host:6379`, `memcached://host:11211`, "
                          "`s3://bucket/prefix`, `gs://bucket/prefix` (sccache) or an absolute folder; empty: the "
                          "tool's local folder. Unreachable: a warning, then uncached. The user config overrides it.", "")
    dist: str = _doc("Distributed compiles: `none`, or `sccache-dist` (needs compile_cache = \"sccache\"; the "
                     "token comes from the user config, never the recipe).", "none")
    dist_scheduler: str = _doc("sccache-dist scheduler URL, e.g. `http://sched.internal:10600` (the user config "
                               "may set or override it).", "")
    defines: dict[str, str] = _doc("Extra CMake `-D` defines (scikit-build-core only).", factory=dict)
    env: dict[str, str] = _doc("Extra environment variables for the build.", factory=dict)
    backend: str = _doc("`scikit-build-core` (CMake) or `setuptools` (setup.py + torch.utils.cpp_extension: archs, "
                        "jobs, threads by the variables below); docs/packages.md.", "scikit-build-core")
    arch_env: str = _doc("Variable the package reads its arch list from, besides TORCH_CUDA_ARCH_LIST (always set).", "")
    arch_format: str = _doc("How `arch_env` spells the archs: `torch` (`8.0;9.0a`) or `digits` (`80;90a`).", "torch")
    jobs_env: str = _doc("Variable the package reads its job count from, besides MAX_JOBS (always set).", "")
    threads_env: str = _doc("Variable the package reads nvcc's --threads from (e.g. `NVCC_THREADS`): `nvcc_threads`.", "")
    fa3: str = _doc("Which FA3 forward kernels a 9.0a sgl-kernel compiles (series sm120 v8+: SGL_KERNEL_FA3_*): `all` "
                    "(upstream's 250 units), `model` (the head dims, dtype, KV dtype and softcap of [serve] model's "
                    "config.json and serve flags; a folder or the Hugging Face cache, never downloaded) or `listed` "
                    "(the keys below). A call needing one left out raises one line saying how to rebuild.", "all")
    fa3_head_dims: tuple[str, ...] = _doc("`fa3 = \"listed\"`: head dims `64` `96` `128` `192` `256`, pairs `64_256` "
                                          "`64_512` (MLA decode) `192_128` (MLA prefill); a width runs the next kernel up.",
                                          factory=tuple)
    fa3_dtypes: tuple[str, ...] = _doc("`fa3 = \"listed\"`: `bf16` (always built), `fp16`, `e4m3` (an fp8_e4m3 KV cache).",
                                       factory=tuple)
    fa3_softcap: bool = _doc("`fa3 = \"listed\"`: the tanh-softcap kernels too (Gemma 2, Grok).", False)
    version_file: str = _doc("`setuptools`: the file (in the package) whose `__version__ = \"...\"` setup.py reads, "
                             "stamped with the local label; empty: pyproject.toml's [project] version.", "")


@dataclass(frozen=True)
class Dep:
    name: str = _doc("FetchContent name (upper-cased into FETCHCONTENT_SOURCE_DIR_<NAME>).", "")
    repo: str = _doc("Git URL, local path or `example:NAME` to fetch the dependency from.", "")
    commit: str = _doc("Full 40-hex SHA of the dependency to use.", "")
    tag: str = _doc("A tag instead of `commit`, where upstream pins a tag (sgl-kernel: triton `v3.5.1`); "
                    "the SHA it resolves to is recorded.", "")
    path: str = _doc("A local source folder to use as is instead of repo + commit.", "")
    paths: tuple[str, ...] = _doc("Folders the build reads (sparse checkout; only their files are fetched). "
                                  "Empty: the whole tree.", factory=tuple)
    submodules: tuple[str, ...] = _doc("Submodule paths to check out at the commit the dependency pins (as "
                                       "FetchContent would); `paths` below one make it sparse.", factory=tuple)


@dataclass(frozen=True)
class SystemDep:
    name: str = _doc("What it is, for messages (the table name: `[system.libnuma]`).", "")
    needed_by: str = _doc("What in the build needs it, e.g. `mscclpp (FindNUMA)`.", "")
    headers: tuple[str, ...] = _doc("Headers the compiler must find, e.g. `[\"numa.h\"]`.", factory=tuple)
    libraries: tuple[str, ...] = _doc("Libraries the linker must find, by `-l` name (`numa`: libnuma.so or .a).",
                                      factory=tuple)
    apt: str = _doc("Debian/Ubuntu package that provides them, e.g. `libnuma-dev`.", "")
    dnf: str = _doc("Fedora/RHEL package that provides them, e.g. `numactl-devel`.", "")


@dataclass(frozen=True)
class LibraryRule:
    glob: str = _doc("Glob of library paths inside the wheel (`sgl_kernel/sm100/common_ops*`).", "")
    archs: tuple[str, ...] = _doc("Archs each matching library must cover (SASS, or PTX the driver can JIT: a warning): "
                                  "`[\"asked\"]` for every asked arch, arch names such as `[\"8.0\", \"9.0\"]` for "
                                  "a library with its own arch list, `[]` for any device code.",
                                  factory=lambda: ("asked",))
    fp4: bool = _doc("Its SASS for every asked FP4-capable arch must hold the `fp4_sass` opcodes.", False)
    required: bool = _doc("The wheel must contain a library matching `glob`.", False)
    when_asked: tuple[str, ...] = _doc("The rule applies only when one of these archs is asked (FA3: `[\"9.0a\"]`); "
                                       "otherwise nothing loads the library on the asked archs and it is only listed. Only GPUs of these "
                                       "compute capabilities load it: it covers only the asked archs among them.",
                                       factory=tuple)
    not_loaded_on: tuple[str, ...] = _doc("Compute capabilities whose GPUs load another library instead (sgl-kernel: "
                                          "`sm100/common_ops` is loaded by every GPU but cc 9.0, which loads `sm90/`: "
                                          "`[\"9.0\"]`). The library covers only the other asked archs; when every "
                                          "asked arch is one of these, the rule does not apply (not required, no FP4).",
                                          factory=tuple)
    carries: tuple[str, ...] = _doc("What the library holds, by name, for `plan`'s per-arch table (e.g. `[\"FA3\"]`): "
                                    "an asked arch has it when this rule covers that arch.", factory=tuple)
    carries_on: tuple[str, ...] = _doc("Compute capabilities whose build holds `carries` (e.g. `[\"8.0\", \"9.0\"]`: "
                                       "a series that compiles a part only for some archs); empty: every arch the "
                                       "rule covers.", factory=tuple)
    left_out_by: tuple[str, ...] = _doc("`[build.defines]` settings, `NAME=VALUE`, that leave this library out of the "
                                        "build (sgl-kernel's FA3: `[\"SGL_KERNEL_FA3=OFF\"]`, sm120 series 0003): with "
                                        "one set, `plan` says no asked arch gets what it `carries`, and why.",
                                        factory=tuple)


@dataclass(frozen=True)
class Verify:
    import_modules: tuple[str, ...] = _doc("Modules that must import in a clean process.", factory=tuple)
    op_namespace: str = _doc("torch.ops namespace of the library's ops.", "")
    ops: tuple[str, ...] = _doc("Ops that must be registered under torch.ops.<namespace>.", factory=tuple)
    fp4_library: str = _doc("Glob (inside the wheel) of the library whose cubins must hold FP4 code.", "")
    fp4_sass: tuple[str, ...] = _doc("Regexes of SASS opcodes that prove FP4 kernels, e.g. `E2M1`.", factory=tuple)
    libraries_default: str = _doc("Rule for a library no `[verify.libraries]` glob names: `asked` (every asked arch) "
                                  "or `any` (any device code).", "asked")
    libraries: tuple[LibraryRule, ...] = _doc("Per-library rules, `[verify.libraries.\"GLOB\"]` tables (see below); "
                                              "the first matching glob wins.", factory=tuple)
    gpu_check: str = _doc("`module:function` run on a GPU of a built arch (e.g. build_kernel.package_checks:minikernel_nvfp4).", "")


@dataclass(frozen=True)
class Serve:
    model: str = _doc("Model path or hub id to serve.", "")
    args: tuple[str, ...] = _doc("Flags for `python -m sglang.launch_server`.", factory=tuple)
    host: str = _doc("Address to bind; any but loopback (127.0.0.1, ::1, localhost) needs `api_key_file`.",
                     "127.0.0.1")
    api_key_file: str = _doc("Absolute path of the server's API key (sglang `--api-key`), a file its owner alone may "
                             "read; `serve --install` makes it when missing. The unit hands it over as a systemd "
                             "credential (`LoadCredential=`), `serve --launch` through a wrapper: never a command-line "
                             "word, an `Environment=` or a log line; the smoke request, `--check` and `--bench` send "
                             "it. E.g. `/etc/credstore/build-kernel-NAME.api-key`; empty: no key (loopback only).", "")
    port: int = _doc("Port to bind.", 30000)
    sglang: str = _doc("Where sglang comes from: `release` ([toolchain] sglang from the package index or "
                       "`--wheelhouse`) or `source` (built from `python/` of [source] repo at [source] commit, "
                       "version `0.0.0.dev0+g<commit12>`: the kernel snapshot's own sglang, less Rust extensions nothing "
                       "imports; a `--wheelhouse` wheel of exactly that version is taken instead of building).",
                       "release")
    python: str = _doc("Interpreter that runs the server (an environment of your own with sglang and the wheel); "
                       "empty: the serve environment `build-kernel serve --install` makes in the cache.", "")
    module: str = _doc("Module run as the server (`python -m MODULE`).", "sglang.launch_server")
    env: dict[str, str] = _doc("Environment of the server (systemd `Environment=` lines; no shell expansion).",
                               factory=dict)
    health_timeout_s: float = _doc("Seconds to wait for `/health_generate` (weights load, kernels JIT).", 1800.0)
    bench_concurrency: tuple[int, ...] = _doc("`--bench` concurrencies (`sglang.bench_serving --max-concurrency`).",
                                              factory=lambda: (1, 32))
    bench_input_len: int = _doc("`--bench` random input length, tokens.", 1024)
    bench_output_len: int = _doc("`--bench` random output length, tokens.", 256)
    bench_prompts: int = _doc("`--bench` prompts per concurrency (at least the concurrency).", 64)
    jit_prewarm: tuple[str, ...] = _doc("sglang JIT modules compiled ahead of time by `serve --install` (and "
                                        "`build-kernel jit-prewarm`) into the tvm-ffi cache the server reads: "
                                        "`module` (each zero-argument `_jit_*_module` builder it defines, e.g. "
                                        "`sglang.jit_kernel.nvfp4`) or `module:builder`.", factory=tuple)
    jit_archs: tuple[Arch, ...] = _doc("Archs to prewarm for (what sglang asks at run time: the NVFP4 modules use "
                                       "the `a` variant of the GPU's arch); empty: [build] arch.", factory=tuple)
    jit_cache_dir: str = _doc("`TVM_FFI_CACHE_DIR` of the prewarm and of the server (unit, launch); empty: "
                              "`tvm-ffi-cache/` beside the serve environment.", "")
    user: str = _doc("`User=` of the systemd unit (`serve --unit`); the JIT cache (`jit_cache_dir`) must be writable "
                     "by it, or the unit is refused with the fix; empty: no `User=` (the unit runs as root).", "")
    unit_relax: dict[str, str] = _doc("Sandbox directives of the systemd unit (`serve --unit`) left out, each with "
                                      "why: `[serve.unit_relax]` `DIRECTIVE = \"why\"` (e.g. `SystemCallFilter`, "
                                      "`ProtectHome`); the why is written in the unit in its place. Directives: those "
                                      "the unit writes (docs/serving.md).", factory=dict)
    jit_sass: tuple[str, ...] = _doc("SASS regexes counted in each prewarmed module; each module must show one "
                                     "(e.g. `['OMMA\\.SF\\.\\S*E2M1', 'E2M1']`); empty: archs only.",
                                     factory=tuple)


@dataclass(frozen=True)
class Expectation:
    pattern: str = _doc("Glob of test files or node ids (`test_gguf.py`, `test_fa.py::test_fp8*`).", "")
    outcome: str = _doc("What is expected of them: `skip`, `fail` (failed or errored tests) or `uncollectable` "
                        "(the file cannot be collected).", "fail")
    reason: str = _doc("Why, in a sentence: shown beside the verdict.", "")
    evidence: str = _doc("How it was shown (e.g. the same test fails against a wheel built without the series).", "")
    when_asked: tuple[str, ...] = _doc("Expected only when one of these archs is asked; empty: always.", factory=tuple)
    message: str = _doc("`fail`: a failure is expected only when its message holds this text (e.g. the wheel's own "
                        "one-line error for a kernel it left out); empty: any failure. `skip`: the skip's reason text "
                        "it explains (required: a skip is explained by its reason, never by its file alone). "
                        "`re:PATTERN`: a regular expression searched in the text instead.", "")


@dataclass(frozen=True)
class Tests:
    paths: tuple[str, ...] = _doc("Test files or folders of the package's own tests, relative to [source] subdir, "
                                  "taken from the same commit (e.g. `[\"tests\"]`); empty: no upstream tests.",
                                  factory=tuple)
    requires: tuple[str, ...] = _doc("What the tests import besides the wheel and torch (pytest is added), installed "
                                     "in a throwaway environment under a constraint that keeps the build's torch "
                                     "(e.g. `[\"gguf==0.19.0\"]`).", factory=tuple)
    sglang: bool = _doc("Install the recipe's sglang ([serve] sglang: a release or the kernel commit's own) and "
                        "[toolchain] flashinfer_python beside the wheel, as serving does.", False)
    resolve: bool = _doc("Resolve what `requires` and sglang depend on (pip's resolver, torch kept); false: install "
                         "them as given, `--no-deps` (an offline wheelhouse that already holds everything).", True)
    gpu: bool = _doc("The tests need a GPU that runs one of the asked archs: without one, `test` says so in one "
                     "line and runs nothing.", True)
    timeout_s: float = _doc("Seconds one test file may run before it is stopped (reported as a timeout).", 900.0)
    parallel: int = _doc("Test files run at once (on one GPU they share it).", 4)
    env: dict[str, str] = _doc("Environment of the test processes.", factory=dict)
    args: tuple[str, ...] = _doc("More pytest arguments for every file, e.g. `[\"-k\", \"hdim64 or hdim128\"]` for a "
                                 "subset of a suite too long to run whole (the record names them).", factory=tuple)
    expect: tuple[Expectation, ...] = _doc("Known outcomes, `[test.expect.\"GLOB\"]` tables (outcome, reason, "
                                           "evidence, when_asked): red means new.", factory=tuple)


@dataclass(frozen=True)
class Publish:
    target: str = _doc("Index to publish to: a name from [publish.targets] or a URL.", "")
    targets: dict[str, str] = _doc("Named upload URLs.", factory=dict)


@dataclass(frozen=True)
class Recipe:
    name: str
    path: Path
    root: Path
    description: str
    extends: str
    source: Source
    patches: Patches
    toolchain: Toolchain
    build: Build
    deps: tuple[Dep, ...]
    system: tuple[SystemDep, ...]
    verify: Verify
    serve: Serve
    publish: Publish
    test: Tests
    raw: dict[str, Any] = field(repr=False, compare=False)
    # Where patches/ is: `root` unless the series lives beside the recipe that names it (an overlay
    # outside the project extending one of its recipes).
    patches_root: Path | None = None
    # key path (`deps.repo-triton.commit`) -> `file:line` that set its value (after inheritance): `plan` shows it.
    origins: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def digest(self) -> str:
        """sha256 of the merged recipe content (inheritance resolved)."""
        blob = json.dumps(self.raw, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()

    @property
    def build_digest(self) -> str:
        """sha256 of what the wheel depends on: not [verify], [serve], [publish] or the description,
        so changing where a wheel goes or how it is checked does not rebuild it."""
        kept = {k: v for k, v in self.raw.items() if k not in _NOT_BUILD_INPUTS}
        # What serving installs beside the wheel is no build input either.
        kept["toolchain"] = {k: v for k, v in kept.get("toolchain", {}).items() if k not in _SERVE_TOOLCHAIN}
        # How objects are made (cache, farm, scheduling) is not what they are.
        kept["build"] = {k: v for k, v in kept.get("build", {}).items() if k not in _HOW_NOT_WHAT}
        # Why a patch is left out is prose: which patches apply is the series digest's (a reason added to every
        # recipe for a new patch no build takes must not make a stopped build start over).
        kept["patches"] = {k: v for k, v in kept.get("patches", {}).items() if k != "omitted"}
        return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()

    @property
    def series_dir(self) -> Path:
        return (self.patches_root or self.root) / "patches" / self.patches.series / self.patches.version


SCHEDULERS = ("auto", "static", "governor")
# `system`: what the host must have is checked, not built from.
_NOT_BUILD_INPUTS = ("description", "extends", "system", "verify", "serve", "publish", "test")
_SERVE_TOOLCHAIN = ("sglang", "flashinfer_python")
BACKENDS = ("scikit-build-core", "setuptools")
ARCH_FORMATS = ("torch", "digits")
_HOW_NOT_WHAT = ("compile_cache", "cache_url", "dist", "dist_scheduler", "scheduler", "profile", "order_profile")
SECTIONS: dict[str, type] = {
    "source": Source,
    "patches": Patches,
    "toolchain": Toolchain,
    "build": Build,
    "verify": Verify,
    "serve": Serve,
    "publish": Publish,
    "test": Tests,
}
TOP_KEYS = ("description", "extends", "deps", "system", *SECTIONS)
