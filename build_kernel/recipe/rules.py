"""Cross-field rules that a single field's type cannot express."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from build_kernel import fa3_variants, targets
from build_kernel.archs import ArchSpellingError, parse_arch, parse_arch_list
from build_kernel.recipe.model import ARCH_FORMATS, BACKENDS, SCHEDULERS, SHA_RE, Build, Recipe, Serve
from build_kernel.recipe.problems import _Problems, _toml
from build_kernel.series import patch_stem, pool_names, read_names


def _check_verify(r: Recipe, problems: _Problems, where: Any) -> None:
    if r.verify.libraries_default not in ("asked", "any"):
        problems.add(where("verify", "libraries_default"), "verify.libraries_default",
                     f"{r.verify.libraries_default!r} is not one of asked, any (e.g. libraries_default = \"asked\")")
    for rule in r.verify.libraries:
        table = f'verify.libraries."{rule.glob}"'
        for key, values in (("archs", [a for a in rule.archs if a != "asked"]), ("when_asked", rule.when_asked),
                            ("not_loaded_on", rule.not_loaded_on), ("carries_on", rule.carries_on)):
            try:
                if values:
                    parse_arch_list(list(values))
            except ArchSpellingError as exc:
                fix = {"archs": 'arch names, or "asked"', "when_asked": 'arch names, e.g. ["9.0a"]'}.get(key, 'e.g. ["9.0"]')
                problems.add(where(table, key), f"{table}.{key}", f"{exc} ({fix})")
        for setting in rule.left_out_by:
            name, eq, value = setting.partition("=")
            if not (eq and name.strip() and value.strip()):
                problems.add(where(table, "left_out_by"), f"{table}.left_out_by",
                             f"{setting!r} is not a define setting: write NAME=VALUE (e.g. \"SGL_KERNEL_FA3=OFF\")")


def _check_test(r: Recipe, problems: _Problems, where: Any) -> None:
    t = r.test
    if t.parallel < 1:
        problems.add(where("test", "parallel"), "test.parallel", f"{t.parallel} is no number of files (e.g. parallel = 4)")
    if t.timeout_s <= 0:
        problems.add(where("test", "timeout_s"), "test.timeout_s", f"{t.timeout_s} is no time limit (e.g. timeout_s = 900)")
    for exp in t.expect:
        table = f'test.expect."{exp.pattern}"'
        if exp.outcome not in ("skip", "fail", "uncollectable"):
            problems.add(where(table, "outcome"), f"{table}.outcome",
                         f"{exp.outcome!r} is not one of skip, fail, uncollectable (e.g. outcome = \"skip\")")
        if exp.message and exp.outcome == "uncollectable":
            problems.add(where(table, "message"), f"{table}.message",
                         "applies to outcome = \"fail\" or \"skip\" (this one is 'uncollectable'): remove it")
        if exp.message.startswith("re:"):
            try:
                re.compile(exp.message[3:])
            except re.error as exc:
                problems.add(where(table, "message"), f"{table}.message",
                             f"{exp.message!r} is no regular expression ({exc}): fix the pattern after 're:'")
        if not exp.reason:
            problems.add(where(table, "reason"), f"{table}.reason",
                         "missing: say why it is expected (red means new only while every known outcome says why)")
        try:
            if exp.when_asked:
                parse_arch_list(list(exp.when_asked))
        except ArchSpellingError as exc:
            problems.add(where(table, "when_asked"), f"{table}.when_asked", f"{exc} (arch names, e.g. [\"9.0a\"])")
    hc = r.toolchain.host_compiler
    if hc not in ("auto", "environment") and "/" not in hc and not hc.startswith(("g++", "c++", "clang")):
        problems.add(where("toolchain", "host_compiler"), "toolchain.host_compiler",
                     f"{hc!r} is not auto, environment or a compiler (e.g. host_compiler = \"/usr/bin/g++\")")


def _check(r: Recipe, problems: _Problems, where: Any) -> None:
    """Cross-field rules that a single field's type cannot express."""
    _check_verify(r, problems, where)
    _check_test(r, problems, where)
    # A value (or a whole section) refused for its type is not also "missing".
    refused = set(problems.keys) | {f"{section}.{key}" for section in list(problems.keys) if "." not in section
                                    for key in ("repo", "commit", "series", "version")}
    if not r.source.repo and "source.repo" not in refused:
        problems.add(where("source", "repo"), "source.repo", "missing (set the git URL or path to build from)")
    if "source.commit" not in refused:
        if not r.source.commit:
            problems.add(where("source", "commit"), "source.commit", "missing (pin a full 40-hex commit SHA)")
        elif SHA_RE.match(r.source.commit.lower()) and not SHA_RE.match(r.source.commit):
            problems.add(where("source", "commit"), "source.commit", _uppercase(r.source.commit))
        elif not SHA_RE.match(r.source.commit) and not r.source.allow_floating:
            problems.add(where("source", "commit"), "source.commit",
                         f"{r.source.commit!r} is not a full 40-hex SHA (pin the commit, or set allow_floating = true)")
    if not {"patches.series", "patches.version"} & refused:
        if not r.patches.series or not r.patches.version:
            problems.add(where("patches", ""), "patches", "series and version are required (e.g. series = \"sm120\", version = \"v1\")")
        elif not (r.series_dir / "series").is_file():
            # Natural order (v9 before v10): numbers compare as numbers.
            versions = sorted((d.name for d in r.series_dir.parent.glob("*") if (d / "series").is_file()),
                              key=lambda n: [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", n)])
            if versions:  # the series exists: the version is what is wrong
                problems.add(where("patches", "version"), "patches.version",
                             f"no series file at {r.series_dir}/series (versions of {r.patches.series}: "
                             f"{', '.join(versions)})")
            else:
                problems.add(where("patches", "series"), "patches.series",
                             f"no series file at {r.series_dir}/series (create the folder or fix series/version)")
    build_table = r.raw.get("build")
    if not r.build.arch and "build" not in refused and "arch" not in (build_table if isinstance(build_table, dict) else {}):
        problems.add(where("build", "arch"), "build.arch", "missing (name the archs to build, e.g. [\"12.0a\"])")
    elif r.build.arch and (fp4 := targets.fp4_problem(r.build.arch, r.build.fp4, r.name)):
        problems.add(where("build", "arch"), "build.arch", fp4)
    if isinstance(r.build.fp4, str) and r.build.fp4 != "required":
        problems.add(where("build", "fp4"), "build.fp4",
                     f"{r.build.fp4!r} is not true, false or \"required\" (e.g. fp4 = true)")
    if r.build.min_arch:
        try:
            parse_arch(r.build.min_arch)
        except ArchSpellingError as exc:
            problems.add(where("build", "min_arch"), "build.min_arch", f"{exc} (a compute capability, e.g. min_arch = \"8.0\")")
    _check_omitted(r, problems, where)
    jobs = r.build.jobs
    if not (jobs == "auto" or (isinstance(jobs, int) and not isinstance(jobs, bool) and jobs >= 1)):
        problems.add(where("build", "jobs"), "build.jobs",
                     f"{jobs!r} is neither \"auto\" nor a positive number (e.g. jobs = \"auto\" or jobs = 8)")
    b, default = r.build, Build()
    for key, ok, rule in (
        ("nvcc_threads", b.nvcc_threads >= 1, "at least 1"),
        ("max_oom_retries", b.max_oom_retries >= 0, "0 or more"),
        ("job_memory_gb", b.job_memory_gb > 0, "more than 0"),
        ("reserve_gb", b.reserve_gb >= 0, "0 or more"),
    ):
        if not ok:
            problems.add(where("build", key), f"build.{key}",
                         f"must be {rule}, not {_toml(getattr(b, key))} (e.g. {key} = {_toml(getattr(default, key))})")
    if not 1 <= r.serve.port <= 65535:
        problems.add(where("serve", "port"), "serve.port",
                     f"must be a port number from 1 to 65535, not {r.serve.port} (e.g. port = {Serve().port})")
    _check_serve(r, where, problems)
    if r.build.compile_cache not in ("none", "ccache", "sccache"):
        problems.add(where("build", "compile_cache"), "build.compile_cache",
                     f"{r.build.compile_cache!r} is not one of none, ccache, sccache (e.g. compile_cache = \"ccache\")")
    _check_compile_cache(r.build, where, problems)
    _check_backend(r, where, problems)
    _check_fa3(r, where, problems)
    if r.build.scheduler not in SCHEDULERS:
        problems.add(where("build", "scheduler"), "build.scheduler",
                     f"{r.build.scheduler!r} is not one of {', '.join(SCHEDULERS)} (e.g. scheduler = \"governor\")")
    _check_order_profile(r.build, where, problems)
    try:
        SpecifierSet(r.toolchain.cmake)
    except InvalidSpecifier:
        problems.add(where("toolchain", "cmake"), "toolchain.cmake",
                     f"{r.toolchain.cmake!r} is not a version specifier (e.g. cmake = \">=3.26\")")
    if r.toolchain.torch == "nightly" and not r.toolchain.torch_index:  # the newest of which index?
        problems.add(where("toolchain", "torch"), "toolchain.torch", "\"nightly\" needs torch_index, the index to take the newest from (e.g. torch_index = \"https://download.pytorch.org/whl/nightly/cu130\")")
    if r.toolchain.cuda_source not in ("auto", "system", "wheels"):
        problems.add(where("toolchain", "cuda_source"), "toolchain.cuda_source",
                     f"{r.toolchain.cuda_source!r} is not one of auto, system, wheels (e.g. cuda_source = \"auto\")")
    for dep in r.deps:
        key = f"deps.{dep.name}"
        if bool(dep.path) == bool(dep.repo):
            problems.add(where(key, ""), key, "give either repo + commit (or tag) or path")
        elif dep.repo and dep.tag and dep.commit:
            problems.add(where(key, "tag"), f"{key}.tag", "give commit or tag, not both")
        elif dep.repo and not dep.tag and SHA_RE.match(dep.commit.lower()) and not SHA_RE.match(dep.commit):
            problems.add(where(key, "commit"), f"{key}.commit", _uppercase(dep.commit))
        elif dep.repo and not dep.tag and not SHA_RE.match(dep.commit):
            problems.add(where(key, "commit"), f"{key}.commit", "must be a full 40-hex SHA (or give tag = \"vX.Y.Z\")")
        if dep.paths and dep.path:
            problems.add(where(key, "paths"), f"{key}.paths", "only with repo + commit (a local path is used whole)")
        for sub in dep.paths:
            if sub.startswith("/") or ".." in sub.split("/") or not sub.strip("/"):
                problems.add(where(key, "paths"), f"{key}.paths", f"{sub!r} is not a folder inside the repository "
                             "(give a path from the repository's root, e.g. \"include\")")


def _uppercase(commit: str) -> str:
    # git prints and compares SHAs in lowercase (the fetched HEAD must equal the pin, character for character).
    return f"{commit!r} is a full SHA in uppercase: write it in lowercase, as git prints it ({commit.lower()!r})"


def drop_stale_omitted(r: Recipe) -> None:
    """A reason inherited from a recipe that named another version explains that version: where this one applies
    the patch, the reason no longer holds and is dropped (an overlay switching versions need not undo it)."""
    if not r.patches.omitted or not (r.series_dir / "series").is_file():
        return
    applied = {patch_stem(n) for n in read_names(r.series_dir)}
    version_from = r.origins.get("patches.version", "").rsplit(":", 1)[0]
    for name in list(r.patches.omitted):
        key = f"patches.omitted.{name.replace('-', '_')}"
        given_from = r.origins.get(key, "").rsplit(":", 1)[0]
        if patch_stem(name) in applied and given_from and version_from and given_from != version_from:
            del r.patches.omitted[name]
            r.origins.pop(key, None)


def _check_omitted(r: Recipe, problems: _Problems, where: Any) -> None:
    """[patches] omitted names patches of the series' pool that this version does not apply."""
    if not r.patches.omitted or not (r.series_dir / "series").is_file():
        return
    pooled = pool_names(r.series_dir)
    applied = {patch_stem(n) for n in read_names(r.series_dir)}
    # Reasons are given for the series of the project whose recipe gives them: an overlay whose own project
    # holds the version (another pool) is not held to its parent's list.
    given_in = {Path(w.rsplit(":", 1)[0]).parent.parent / "patches" for k, w in r.origins.items() if k.startswith("patches.omitted")}
    if given_in and not any(folder in r.series_dir.parents for folder in given_in):
        return
    for name in r.patches.omitted:
        stem = patch_stem(name)
        if stem in applied:
            problems.add(where("patches", "omitted"), f"patches.omitted.{name}",
                         f"{name} is in {r.patches.series}/{r.patches.version}'s series: remove it from omitted")
        elif stem not in pooled:
            close = difflib.get_close_matches(stem, sorted(pooled), n=1)
            fix = (f"did you mean {close[0]!r}?" if close else f"patches of the pool: {', '.join(sorted(pooled))}"
                   if pooled else "the pool has no patches: remove it from omitted")
            problems.add(where("patches", "omitted"), f"patches.omitted.{name}", f"no patch of that name in the pool ({fix})")


SGLANG_ORIGINS = ("release", "source")
_JIT_ENTRY = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*)?$")
# Flags the [serve] table owns: given in `args` too, the two would disagree.
_SERVE_OWNED = {"--model-path": "model", "--model": "model", "--host": "host", "--port": "port",
                "--api-key": "api_key_file"}


def _check_serve(r: Recipe, where: Any, problems: _Problems) -> None:
    s, default = r.serve, Serve()
    for entry in s.jit_prewarm:
        if not _JIT_ENTRY.match(entry):
            problems.add(where("serve", "jit_prewarm"), "serve.jit_prewarm",
                         f"{entry!r} is not `module` or `module:builder` (e.g. jit_prewarm = "
                         f"[\"sglang.jit_kernel.nvfp4\"])")
    if s.sglang not in SGLANG_ORIGINS:
        problems.add(where("serve", "sglang"), "serve.sglang",
                     f"{s.sglang!r} is neither {' nor '.join(map(repr, SGLANG_ORIGINS))} (e.g. sglang = \"source\")")
    elif s.sglang == "source" and r.toolchain.sglang:
        problems.add(where("serve", "sglang"), "serve.sglang",
                     f"\"source\" builds sglang from [source] commit, but [toolchain] sglang = "
                     f"{r.toolchain.sglang!r} names a release: remove one of them")
    elif s.sglang == "source" and not SHA_RE.match(r.source.commit):
        problems.add(where("serve", "sglang"), "serve.sglang",
                     f"\"source\" needs [source] commit to be a full SHA, not {r.source.commit!r}")
    for key, ok, rule in (
        ("health_timeout_s", s.health_timeout_s > 0, "more than 0"),
        ("bench_input_len", s.bench_input_len >= 1, "at least 1"),
        ("bench_output_len", s.bench_output_len >= 1, "at least 1"),
        ("bench_prompts", s.bench_prompts >= 1, "at least 1"),
    ):
        if not ok:
            problems.add(where("serve", key), f"serve.{key}",
                         f"must be {rule}, not {_toml(getattr(s, key))} (e.g. {key} = {_toml(getattr(default, key))})")
    if not s.bench_concurrency or any(c < 1 for c in s.bench_concurrency):
        problems.add(where("serve", "bench_concurrency"), "serve.bench_concurrency",
                     f"must be concurrencies of 1 or more, not {list(s.bench_concurrency)} (e.g. bench_concurrency = [1, 32])")
    for arg in s.args:
        flag = arg.split("=", 1)[0]
        if flag in _SERVE_OWNED:
            problems.add(where("serve", "args"), "serve.args",
                         f"{flag} is set by [serve] {_SERVE_OWNED[flag]} = ...; remove it from args")
    _check_serve_access(r, where, problems)


def _check_serve_access(r: Recipe, where: Any, problems: _Problems) -> None:
    """Any address but loopback needs an API key; the unit's relaxations name real directives, each with why."""
    from build_kernel.stages.serve import api_key, hardening

    s = r.serve
    if s.api_key_file and not s.api_key_file.startswith("/"):
        problems.add(where("serve", "api_key_file"), "serve.api_key_file",
                     f"must be an absolute path (systemd's LoadCredential= needs one), not {s.api_key_file!r} "
                     f"(e.g. api_key_file = \"/etc/credstore/build-kernel-{r.name}.api-key\")")
    if s.model and not s.api_key_file and not api_key.loopback(s.host):
        problems.add(where("serve", "host"), "serve.host",
                     f"{s.host} lets other machines in, and no API key guards it: set [serve] api_key_file = "
                     f"\"/etc/credstore/build-kernel-{r.name}.api-key\" (serve --install makes the key), or "
                     "host = \"127.0.0.1\"")
    for directive, why in s.unit_relax.items():
        if directive not in hardening.relaxable():
            close = difflib.get_close_matches(directive, hardening.relaxable(), n=1)
            problems.add(where("serve", "unit_relax"), f"serve.unit_relax.{directive}",
                         f"the unit sets no directive {directive!r} "
                         f"({f'did you mean {close[0]!r}?' if close else 'see docs/serving.md for those it sets'})")
        elif not why.strip():
            problems.add(where("serve", "unit_relax"), f"serve.unit_relax.{directive}",
                         f"say why {directive} is relaxed (e.g. {directive} = \"the model is on a FUSE mount\")")


def _check_compile_cache(b: Build, where: Any, problems: _Problems) -> None:
    from build_kernel.compile_cache.settings import DISTS, parse_url
    from build_kernel.errors import BuildError

    if b.cache_url:
        try:
            parse_url(b.cache_url, "build.cache_url")
        except BuildError as exc:
            problems.add(where("build", "cache_url"), "build.cache_url",
                         f"{b.cache_url!r} is not a cache location ({exc.hint})")
    if b.dist not in DISTS:
        problems.add(where("build", "dist"), "build.dist",
                     f"{b.dist!r} is not one of {', '.join(DISTS)} (e.g. dist = \"sccache-dist\")")
    elif b.dist == "sccache-dist" and b.compile_cache != "sccache":
        problems.add(where("build", "dist"), "build.dist",
                     f"sccache-dist needs compile_cache = \"sccache\", not {b.compile_cache!r}")
    if b.dist_scheduler and not b.dist_scheduler.startswith(("http://", "https://")):
        problems.add(where("build", "dist_scheduler"), "build.dist_scheduler",
                     f"{b.dist_scheduler!r} is not an http(s) URL (e.g. dist_scheduler = \"http://sched.internal:10600\")")


def _check_order_profile(b: Build, where: Any, problems: _Problems) -> None:
    """The shipped order profile must be there and readable now, not fail a build an hour in."""
    if not b.order_profile:
        return
    from build_kernel.stages.builder.ninja_order import read_shipped

    try:
        read_shipped(b.order_profile)
    except FileNotFoundError:
        problems.add(where("build", "order_profile"), "build.order_profile",
                     f"no such file {b.order_profile} (the path is relative to the recipe file: fix it or remove the key)")
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        problems.add(where("build", "order_profile"), "build.order_profile",
                     f"{b.order_profile}: {exc} (fix the file, or remove the key)")


def _check_fa3(r: Recipe, where: Any, problems: _Problems) -> None:
    """[build] fa3*: the mode and each listed name known, and the lists only where they are read."""
    b = r.build
    if b.fa3 not in fa3_variants.MODES:
        problems.add(where("build", "fa3"), "build.fa3",
                     f"{b.fa3!r} is not one of {', '.join(fa3_variants.MODES)} (e.g. fa3 = \"model\")")
    for key, values, known in (("fa3_head_dims", b.fa3_head_dims, fa3_variants.HEAD_DIMS),
                               ("fa3_dtypes", b.fa3_dtypes, fa3_variants.DTYPES)):
        for v in values:
            if v not in known:
                problems.add(where("build", key), f"build.{key}",
                             f"{v!r} is not one of {', '.join(known)} (e.g. {key} = [\"{known[2]}\"])")
        if values and b.fa3 != "listed":
            problems.add(where("build", key), f"build.{key}",
                         f"is read only with fa3 = \"listed\" (this recipe has fa3 = \"{b.fa3}\"): set it, or remove the key")
    if b.fa3 == "listed" and not b.fa3_head_dims:
        problems.add(where("build", "fa3"), "build.fa3_head_dims",
                     "missing: fa3 = \"listed\" needs the head dims, e.g. fa3_head_dims = [\"128\"]")


def _check_backend(r: Recipe, where: Any, problems: _Problems) -> None:
    """The backend is one we drive; what only CMake reads is refused for setuptools, in one line each."""
    b = r.build
    if b.backend not in BACKENDS:
        problems.add(where("build", "backend"), "build.backend",
                     f"{b.backend!r} is not one of {', '.join(BACKENDS)} (e.g. backend = \"setuptools\")")
    if b.arch_format not in ARCH_FORMATS:
        problems.add(where("build", "arch_format"), "build.arch_format",
                     f"{b.arch_format!r} is not one of {', '.join(ARCH_FORMATS)} (e.g. arch_format = \"digits\")")
    if b.backend != "setuptools":
        if b.version_file:
            problems.add(where("build", "version_file"), "build.version_file",
                         "applies to backend = \"setuptools\" only (scikit-build-core stamps pyproject.toml)")
        return
    if b.defines:
        problems.add(where("build", "defines"), "build.defines",
                     "CMake defines do not apply to backend = \"setuptools\" (set [build] env instead)")
    if r.deps:
        problems.add(where("deps", ""), "deps",
                     "[deps] feed CMake's FetchContent and do not apply to backend = \"setuptools\" "
                     "(use [source] submodules, or a patch)")
