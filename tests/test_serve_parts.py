"""The serve stage's parts that need no sglang: checkpoint reading, known-bad data, requirements, unit quoting."""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
from pathlib import Path

import pytest

from build_kernel.archs import parse_arch_list
from build_kernel.errors import ServeError
from build_kernel.stages.serve import backends, checkpoint, install, unit
from build_kernel.stages.serve.flags import Parsed
from tests.conftest import REPO_ROOT, copy_series, demo_recipe_text, run_cli, write_recipe


def _safetensors(path: Path, names: list[str]) -> None:
    header = json.dumps({"__metadata__": {}, **{n: {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}
                                               for n in names}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0\0")


def test_a_single_safetensors_file_is_read_for_kv_scales(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {
        "quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}}))
    _safetensors(tmp_path / "model.safetensors", ["model.layers.0.self_attn.q_proj.weight"])
    ck = checkpoint.read(tmp_path)
    assert (ck.quant_algo, ck.kv_cache_quant_algo, ck.has_kv_scales) == ("NVFP4", "FP8", False)
    assert checkpoint.advise(ck, None, "auto").add == ["--quantization", "modelopt_fp4", "--kv-cache-dtype", "bf16"]
    _safetensors(tmp_path / "model.safetensors", ["model.layers.0.self_attn.k_scale", "model.layers.0.self_attn.v_scale"])
    assert checkpoint.read(tmp_path).has_kv_scales
    assert checkpoint.advise(checkpoint.read(tmp_path), "modelopt_fp4", None).add == []


def test_a_conflicting_quantization_is_a_conflict_not_a_change(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {"quant_algo": "NVFP4"}}))
    advice = checkpoint.advise(checkpoint.read(tmp_path), "fp8", None)
    assert advice.add == [] and advice.conflicts == [f"--quantization fp8, but {tmp_path.name} holds NVFP4 weights "
                                                     "(use modelopt_fp4)"]


def test_a_folder_without_config_or_with_broken_json_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match=r"has no config.json: not a Hugging Face checkpoint folder"):
        checkpoint.read(tmp_path)
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(ServeError, match=r"config.json is not readable JSON"):
        checkpoint.read(tmp_path)


def test_every_known_bad_row_has_a_source_and_refuses_only_where_it_says() -> None:
    rows = backends.load()
    assert rows and all(r.source and r.why and (r.on or r.only) for r in rows)
    parsed = Parsed("0.5.9", {"moe_runner_backend": "flashinfer_trtllm", "attention_backend": "fa3",
                              "fp4_gemm_runner_backend": "flashinfer_cudnn"})
    on_sm120 = backends.refusals(parsed, parse_arch_list(["12.0a"]))
    # fa3 is the wheel's business (its flash_ops cubins), not the table's.
    assert sorted((r.flag, r.value, r.arch) for r in on_sm120) == [("--moe-runner-backend", "flashinfer_trtllm", "12.0")]
    # On Hopper it is fine; a recipe for 9.0a and 12.0a gets the SM120 refusal only.
    assert backends.refusals(parsed, parse_arch_list(["9.0a"])) == []
    assert [r.arch for r in backends.refusals(parsed, parse_arch_list(["9.0a", "12.0a"]))] == ["12.0"]


def test_device_code_runs_on_its_own_major_not_above_an_a_cubin_only_on_its_arch() -> None:
    assert backends.runs_on(["sm_80"], [], "8.6") and backends.runs_on(["sm_86"], [], "8.6")
    assert not backends.runs_on(["sm_80", "sm_86"], [], "9.0") and not backends.runs_on(["sm_90a"], [], "12.0")
    assert backends.runs_on(["sm_90a"], [], "9.0") and not backends.runs_on(["sm_100a"], [], "10.3")
    assert backends.runs_on(["sm_100f"], [], "10.3") and backends.runs_on([], ["sm_80"], "12.0")
    assert not backends.runs_on([], ["sm_90a"], "12.0")


def test_fa3_is_refused_from_the_wheel_itself(tmp_path: Path) -> None:
    import zipfile

    parsed = Parsed("0.5.9", {"attention_backend": "fa3"})
    bare = tmp_path / "sgl_kernel-0.3.21-cp310-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(bare, "w") as zf:
        zf.writestr("sgl_kernel/__init__.py", "")
    [refused] = backends.wheel_refusals(parsed, parse_arch_list(["12.0a"]), bare, "sgl_kernel", lambda so: ((), ()))
    assert refused.line() == (f"--attention-backend fa3 on sm_120: {bare.name} has no sgl_kernel/flash_ops library "
                              "(it was not built for this wheel's archs) (the wheel's contents)")
    # TEST DOUBLE of cuobjdump's listing: no CUDA compiler here makes a fatbin to list. The library
    # itself is extracted from the wheel and handed over, as cuobjdump gets it.
    built = tmp_path / "sgl_kernel-0.3.21-cp310-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(built, "w") as zf:
        zf.writestr("sgl_kernel/flash_ops.abi3.so", b"\x7fELF")
    seen: list[Path] = []

    def listing(so: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
        seen.append(so)
        assert so.read_bytes() == b"\x7fELF"
        return ("sm_80", "sm_86", "sm_90a"), ()
    for archs, refused_on in ((["9.0a"], []), (["8.6"], []), (["12.0a"], ["12.0"]), (["8.9", "12.0a"], ["12.0"])):
        found = backends.wheel_refusals(parsed, parse_arch_list(archs), built, "sgl_kernel", listing)
        assert [r.arch for r in found] == refused_on, archs
    assert found[0].why == "sgl_kernel/flash_ops.abi3.so holds sm_80, sm_86, sm_90a: nothing that runs on sm_120"
    assert backends.wheel_refusals(Parsed("0.5.9", {"attention_backend": "triton"}), parse_arch_list(["12.0a"]),
                                   built, "sgl_kernel", listing) == [] and len(seen) == 4


SGLANG_059_SOME = ["torch==2.9.1", "sgl-kernel==0.3.21", "torchaudio==2.9.1", "torchvision", "transformers==4.57.1",
                   "flashinfer_python==0.6.3", "flashinfer_cubin==0.6.3", "numpy", "pytest; extra == \"test\"",
                   "torchcodec==0.8.0; sys_platform != \"linux\"", "uvloop"]


def test_sglang_requirements_keep_torch_and_the_kernel_ours() -> None:
    assert install.requirements(SGLANG_059_SOME, flashinfer="0.6.5") == [
        "torchaudio", "torchvision", "transformers==4.57.1", "flashinfer_python==0.6.5", "flashinfer_cubin==0.6.5",
        "numpy", 'torchcodec; sys_platform != "linux"', "uvloop"]
    only = install.requirements(SGLANG_059_SOME, only=install.PARSER_NEEDS, extra_needs=["dill", "numpy"])
    assert only == ["torchvision", "transformers==4.57.1", "numpy", "dill"]


def test_unit_words_are_quoted_for_systemd_not_for_a_shell() -> None:
    text = unit.render(["/opt/py/bin/python", "-m", "sglang.launch_server", "--served-model-name", "a b"],
                       {"X": "100%", "Y": "$HOME"}, name="n", description="d", timeout_s=60)
    lines = text.splitlines()
    assert 'ExecStart=/opt/py/bin/python -m sglang.launch_server --served-model-name "a b"' in lines
    assert "Environment=X=100%%" in lines and 'Environment="Y=$$HOME"' in lines


def test_serve_args_may_not_set_what_the_serve_table_owns(project: Path) -> None:
    path = write_recipe(project, "r", demo_recipe_text("v1") + '\n[serve]\nmodel = "m"\nargs = ["--port", "1"]\n'
                        'bench_concurrency = [0]\n')
    proc = run_cli("plan", "--recipe", str(path))
    assert proc.returncode != 0
    assert "serve.args: --port is set by [serve] port = ...; remove it from args" in proc.stderr
    assert "serve.bench_concurrency: must be concurrencies of 1 or more, not [0]" in proc.stderr


def test_serve_without_a_model_is_a_usage_error() -> None:
    proc = run_cli("serve", "--recipe", str(REPO_ROOT / "recipes" / "demo.toml"))
    assert proc.returncode == 2 and "has no [serve] model: pass --model PATH|ID" in proc.stderr


def test_names_sglang_imports_on_cuda_that_the_wheel_lacks_are_found(tmp_path: Path) -> None:
    import zipfile

    from build_kernel.stages.serve import api

    wheel = tmp_path / "sgl_kernel-0.3.21-cp310-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sgl_kernel/__init__.py", "from sgl_kernel.elementwise import *\nfrom .gemm import fp8_mm as "
                    "fp8_scaled_mm\ntry:\n    from .flash import flash_attn\nexcept ImportError:\n    pass\n")
        zf.writestr("sgl_kernel/elementwise.py", "def rmsnorm(x): ...\nsilu_and_mul = None\n")
    sglang = tmp_path / "sglang"
    (sglang / "srt" / "tests").mkdir(parents=True)
    (sglang / "srt" / "layers.py").write_text(
        "_is_cuda = True\nif _is_cuda:\n    from sgl_kernel import rmsnorm, awq_marlin_repack\n"
        "elif _is_hip:\n    from sgl_kernel import gelu_quick\n"
        "try:\n    from sgl_kernel import optional_thing\nexcept ImportError:\n    pass\n"
        "from sgl_kernel import fp8_scaled_mm, flash_attn, silu_and_mul\n"
        "def f():\n    from sgl_kernel import lazy_only\n")
    (sglang / "srt" / "tests" / "test_x.py").write_text("from sgl_kernel import test_only\n")
    # Another platform's modules import their own kernel's names at module level (sglang 0.5.23's XPU ones).
    (sglang / "srt" / "hardware_backend" / "xpu").mkdir(parents=True)
    (sglang / "srt" / "hardware_backend" / "xpu" / "gdn.py").write_text("from sgl_kernel import gdn_attention\n")
    (sglang / "srt" / "xpu_backend.py").write_text("from sgl_kernel import flash_mla_decode\n")
    assert api.missing(wheel, "sgl_kernel", sglang) == {"awq_marlin_repack": ["srt/layers.py"]}
    # Cached by sglang's folder and the wheel: the second answer is read back, not recomputed. Told
    # apart by a change inside the folder (which leaves the folder's own mtime alone) that a
    # recomputation sees and the cached answer does not.
    cache = tmp_path / "cache"
    first = api.missing(wheel, "sgl_kernel", sglang, cache_dir=cache)
    layers = sglang / "srt" / "layers.py"
    layers.write_text(layers.read_text() + "from sgl_kernel import added_later\n")
    assert api.missing(wheel, "sgl_kernel", sglang) == {**first, "added_later": ["srt/layers.py"]}
    assert api.missing(wheel, "sgl_kernel", sglang, cache_dir=cache) == first
    assert len(list(cache.iterdir())) == 1
    assert api.missing(wheel, "minikernel", sglang) == {}  # a wheel without that package: nothing to compare


def test_serving_pins_how_objects_are_made_and_omitted_reasons_are_no_build_inputs(project: Path) -> None:
    from build_kernel import recipe

    copy_series(project, ["0001-cmake-guard-policies.patch", "0002-cuda13-cccl-include.patch"], "v0")
    copy_series(project, ["0001-cmake-guard-policies.patch"], "v1")
    base = demo_recipe_text("v1")
    digest = recipe.load(str(write_recipe(project, "a", base))).build_digest
    same = base.replace("[toolchain]\n", '[toolchain]\nsglang = "0.5.9"\nflashinfer_python = "0.6.5"\n', 1)
    same = same.replace("[build]\n", '[build]\ncompile_cache = "ccache"\n', 1)
    assert recipe.load(str(write_recipe(project, "b", same))).build_digest == digest
    # Why a pool patch is left out is prose: the series digest says which patches apply.
    why = base.replace("\n[toolchain]\n", '\n[patches.omitted]\n"0002-cuda13-cccl-include" = "not this host"\n\n[toolchain]\n', 1)
    assert recipe.load(str(write_recipe(project, "w", why))).patches.omitted
    assert recipe.load(str(write_recipe(project, "w", why))).build_digest == digest
    other = base.replace("[build.defines]\n", "[build.defines]\nEXTRA_FLAG = \"1\"\n", 1)
    assert recipe.load(str(write_recipe(project, "c", other))).build_digest != digest


def test_the_units_user_must_be_able_to_write_the_jit_cache(tmp_path: Path) -> None:
    """tvm-ffi locks and runs ninja in each module's folder even when it is built: a cache the prewarm left
    owned by another user fails at the first request, so `serve --unit` refuses it with the fix."""
    import pwd
    import tempfile

    user = "daemon"  # a real non-root user of every Debian/Ubuntu base (nobody is refused by systemd-analyze)
    try:
        pwd.getpwnam(user)
    except KeyError:
        pytest.skip("needs the system user daemon")
    base = Path(tempfile.mkdtemp(prefix="bk-unit-"))  # in /tmp, reachable by every user (tmp_path is 0700)
    try:
        base.chmod(0o755)
        cache = base / "tvm-ffi-cache"
        module = cache / "nvfp4_quant_0a1b2c"  # as a prewarm under umask 022 leaves it
        module.mkdir(parents=True)
        for folder in (cache, module):
            folder.chmod(0o755)
        env = {"TVM_FFI_CACHE_DIR": str(cache)}
        me = pwd.getpwuid(os.getuid()).pw_name
        with pytest.raises(ServeError) as refused:
            unit.check_user(env, user, "r")
        assert refused.value.message == (
            f"[serve] user 'daemon': the JIT cache TVM_FFI_CACHE_DIR={cache} is not writable by it: daemon cannot "
            f"write in {cache} (owned by {me}:{me}, mode drwxr-xr-x) (tvm-ffi locks and runs ninja in each "
            "module's folder, even one already built)")
        assert refused.value.hint is not None and refused.value.hint.startswith(f"sudo chown -R daemon {cache} ")
        cache.chmod(0o777)  # the folder itself, but not the module the prewarm built in it
        with pytest.raises(ServeError, match=f"daemon cannot write in {module} "):
            unit.check_user(env, user, "r")
        module.chmod(0o777)
        unit.check_user(env, user, "r")
        # Not made yet: the folder it would be created in must let the user; one it cannot enter is named.
        unit.check_user({"TVM_FFI_CACHE_DIR": str(cache / "later" / "x")}, user, "r")
        with pytest.raises(ServeError, match=f"daemon cannot create {base} "):
            unit.check_user({"TVM_FFI_CACHE_DIR": str(base / "new")}, user, "r")
        with pytest.raises(ServeError, match=f"daemon cannot reach {tmp_path}/c: it may not enter "):
            unit.check_user({"TVM_FFI_CACHE_DIR": str(tmp_path / "c")}, user, "r")
        with pytest.raises(ServeError, match="there is no user 'no-such-user-bk' on this host"):
            unit.check_user(env, "no-such-user-bk", "r")
        # No User=: a DynamicUser= (refused with a JIT cache: tests/test_serve_hardening.py), unless the recipe
        # relaxed it, and root writes anywhere.
        unit.check_user({"TVM_FFI_CACHE_DIR": str(tmp_path / "c")}, "", "r", relaxed=True)
        text = unit.render([sys.executable, "-m", "sglang.launch_server"], env, name="build-kernel-r",
                           description="d", timeout_s=60, user=user)
        assert "User=daemon" in text.splitlines()
        if shutil.which("systemd-analyze"):
            assert unit.verify(text, "build-kernel-r", os.environ) is None
    finally:
        shutil.rmtree(base)


@pytest.fixture
def fake_sglang(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A site folder with an sglang whose server_args counts its imports in `runs` (a line each), and the
    environment that finds it; `--die` ends the interpreter mid-parse."""
    site, runs = tmp_path / "site", tmp_path / "runs"
    (site / "sglang" / "srt").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("__version__ = '0.0.1'\n")
    (site / "sglang" / "srt" / "server_args.py").write_text(
        "import argparse, os, sys\n"
        f"with open({str(runs)!r}, 'a') as fh:\n    fh.write('import\\n')\n"
        "print('chatter on stdout, as an import may print')\n"
        "class Die(argparse.Action):\n    def __call__(self, *a, **k):\n"
        "        sys.stderr.write('Segmentation fault in the parser\\n'); sys.stderr.flush(); os._exit(139)\n"
        "class ServerArgs:\n    @staticmethod\n    def add_cli_args(parser):\n"
        "        parser.add_argument('--model-path', type=str)\n        parser.add_argument('--host', type=str)\n"
        "        parser.add_argument('--port', type=int, default=30000)\n"
        "        parser.add_argument('--tp-size', type=int, default=1)\n"
        "        parser.add_argument('--die', nargs=0, action=Die)\n")
    return site, runs, {**os.environ, "PYTHONPATH": str(site)}


def test_the_flags_cache_is_one_parse_for_any_port_and_model_folder(
        tmp_path: Path, fake_sglang: tuple[Path, Path, dict[str, str]]) -> None:
    """serve writes a port and the model's folder on every command line: another of either is the same parse
    (sglang's import costs ~8 s a time), its values put back; any other change of the flags is parsed again."""
    from build_kernel.stages.serve import flags

    site, runs, env = fake_sglang
    cache = tmp_path / "cache"

    def parse(*argv: str) -> flags.Parsed:
        return flags.parse(sys.executable, list(argv), env, cache_dir=cache, sglang_root=site / "sglang")

    first = parse("--model-path", "/m/a", "--host", "127.0.0.1", "--port", "31000", "--tp", "2")
    again = parse("--model-path", "/m/b", "--host", "127.0.0.1", "--port", "31001", "--tp", "2")
    assert runs.read_text() == "import\n"  # one import of server_args for both
    assert (first.given("port"), first.given("model_path"), first.given("tp_size")) == (31000, "/m/a", 2)
    assert (again.given("port"), again.given("model_path"), again.given("tp_size")) == (31001, "/m/b", 2)
    assert again.abbreviations == first.abbreviations == {"--tp": "--tp-size"}
    # Another flag value, or a second word argparse could take for the port: parsed again, last one wins.
    assert parse("--model-path", "/m/b", "--host", "127.0.0.1", "--port", "31001", "--tp", "4").given("tp_size") == 4
    assert parse("--model-path", "/m/b", "--port", "31001", "--por", "31002").given("port") == 31002
    assert runs.read_text() == "import\n" * 3


def test_one_serve_run_imports_sglang_once_for_all_its_parses(
        tmp_path: Path, fake_sglang: tuple[Path, Path, dict[str, str]]) -> None:
    """A checkpoint's advice makes serve parse twice: one child answers both (sglang's import costs ~8 s)."""
    from build_kernel.stages.serve import flags

    site, runs, env = fake_sglang
    with flags.Parser(sys.executable, env, cache_dir=tmp_path / "cache", sglang_root=site / "sglang") as parser:
        first = parser.parse(["--model-path", "/m", "--tp-size", "2"])
        second = parser.parse(["--model-path", "/m", "--tp-size", "4"])
        with pytest.raises(ServeError) as misspelt:
            parser.parse(["--tp-sise", "2"])
        assert (misspelt.value.message, misspelt.value.hint) == ("sglang 0.0.1 has no flag --tp-sise",
                                                                 "did you mean --tp-size?")
    assert (first.given("tp_size"), second.given("tp_size")) == (2, 4)
    assert runs.read_text() == "import\n"  # one import for the three parses
    # Without a session each parse is its own child: the cache aside, another import.
    flags.parse(sys.executable, ["--tp-size", "8"], env)
    assert runs.read_text() == "import\n" * 2


def test_a_parser_that_dies_mid_parse_is_one_line_with_its_last_words(
        tmp_path: Path, fake_sglang: tuple[Path, Path, dict[str, str]]) -> None:
    from build_kernel.stages.serve import flags

    site, runs, env = fake_sglang
    with flags.Parser(sys.executable, env, cache_dir=tmp_path / "cache", sglang_root=site / "sglang") as parser:
        assert parser.parse(["--tp-size", "2"]).given("tp_size") == 2
        with pytest.raises(ServeError) as err:
            parser.parse(["--die"])
        assert err.value.message == f"sglang's parser crashed in {sys.executable}: Segmentation fault in the parser"
        assert "serve --install" in (err.value.hint or "")
        # The next parse starts a new child (the dead one is not asked again).
        assert parser.parse(["--tp-size", "3"]).given("tp_size") == 3
    assert runs.read_text() == "import\n" * 2
    assert len(list((tmp_path / "cache").glob("*.json"))) == 2  # the two parses that answered; a crash is not kept


# sglang's parsed namespace as its argparse leaves it when no piecewise flag is given (0.5.9 and 6ffc74ef alike).
_PCG_DEFAULTS = {"piecewise_cuda_graph_max_tokens": None, "piecewise_cuda_graph_tokens": None,
                 "disable_piecewise_cuda_graph": False, "context_length": None, "chunked_prefill_size": None}


@pytest.mark.parametrize(("config", "given", "added"), [
    # The tiny MoE's old context (issue 54): sglang would capture up to 8,192 tokens past a 4,096 context.
    ({"max_position_embeddings": 4096}, {}, ["--piecewise-cuda-graph-max-tokens", "4096"]),
    ({"text_config": {"max_position_embeddings": 2048}}, {}, ["--piecewise-cuda-graph-max-tokens", "2048"]),
    ({"max_position_embeddings": 32768}, {}, []),  # above every default capture: nothing to cap
    ({"max_position_embeddings": 32768}, {"context_length": 1024}, ["--piecewise-cuda-graph-max-tokens", "1024"]),
    ({"max_position_embeddings": 4096}, {"chunked_prefill_size": 2048}, []),  # captures stop at 2,048 anyway
    ({"max_position_embeddings": 4096}, {"disable_piecewise_cuda_graph": True}, []),
    ({"max_position_embeddings": 4096}, {"enable_piecewise_cuda_graph": False}, []),  # an sglang where it is opt-in
    ({"max_position_embeddings": 4096}, {"enable_piecewise_cuda_graph": True}, ["--piecewise-cuda-graph-max-tokens",
                                                                                 "4096"]),
    ({"max_position_embeddings": 4096}, {"piecewise_cuda_graph_max_tokens": 8192}, []),  # the user's own size
    ({}, {}, []),  # no context known
])
def test_piecewise_cuda_graphs_are_capped_at_a_short_context(tmp_path: Path, config: dict[str, object],
                                                             given: dict[str, object], added: list[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    advice = checkpoint.advise(checkpoint.read(tmp_path), None, None, {**_PCG_DEFAULTS, **given})
    assert advice.add == added
    assert len(advice.reasons) == (1 if added else 0)
    if added:
        assert advice.reasons[0].endswith(f"--piecewise-cuda-graph-max-tokens {added[1]}")
        assert "dies in cuBLAS" in advice.reasons[0]


def test_an_sglang_without_piecewise_cuda_graphs_gets_no_piecewise_flag(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    assert checkpoint.advise(checkpoint.read(tmp_path), None, None, {"context_length": None}).add == []
