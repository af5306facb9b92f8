"""`build-kernel serve` on the miniature's wheel, with the real sglang 0.5.9 parser from PyPI.

The serve environment is made by the tool itself (`serve --install --flags-only`: sglang
--no-deps plus what importing `server_args` needs, torch kept). No GPU here can run
sglang's server, so launch/health/smoke/bench/Ctrl-C run against a TEST DOUBLE
(tests/serve_double/sglang_double.py) that speaks sglang's HTTP endpoints; bench runs the
real `sglang.bench_serving` against it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, DemoBuild, copy_series, demo_recipe_text, run_cli, write_recipe

pytestmark = [pytest.mark.slow, pytest.mark.network]  # PyPI: sglang and what its parser imports

PATCHES = sorted((REPO_ROOT / "patches/minikernel/v1/series").read_text().split())
DOUBLE = REPO_ROOT / "tests" / "serve_double"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_recipe(root: Path, model: Path, *, args: str = '["--tp", "1", "--attention-backend", "triton"]',
                 serve_extra: str = "", env: dict[str, str] | None = None, name: str = "s") -> Path:
    text = demo_recipe_text("v1").replace("[toolchain]\n", '[toolchain]\nsglang = "0.5.9"\n', 1)
    env_lines = "".join(f'{k} = "{v}"\n' for k, v in (env or {}).items())
    text += (f'\n[serve]\nmodel = "{model}"\nargs = {args}\nport = {_free_port()}\n{serve_extra}'
             f"\n[serve.env]\n{env_lines}")
    return write_recipe(root, name, text)


class ServeEnv:
    def __init__(self, root: Path, build: DemoBuild, python: str, model: Path, out: Path) -> None:
        self.root, self.build, self.python, self.model = root, build, python, model
        # The session wheel and its verify record, copied: other tests rebuild into demo_build.out.
        self.out = out
        self.wheel = out / build.wheel.name

    def cli(self, recipe: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return run_cli("serve", "--recipe", str(recipe), "--cache-dir", str(self.build.cache), "--output-dir",
                       str(self.out), *args, env=env)


@pytest.fixture(scope="session")
def serve_env(demo_build: DemoBuild, tmp_path_factory: pytest.TempPathFactory) -> ServeEnv:
    root = tmp_path_factory.mktemp("serveproj")
    (root / "recipes").mkdir()
    copy_series(root, PATCHES, "v1")
    bare = tmp_path_factory.mktemp("bare-model")
    (bare / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    recipe = serve_recipe(root, bare)
    out = tmp_path_factory.mktemp("serve-wheels")
    shutil.copy2(demo_build.wheel, out / demo_build.wheel.name)  # the bytes the cache holds now
    # Verified again, not the session's record copied: a test of the group may have rebuilt demo_build.out's
    # wheel since (a forced rebuild), and serve refuses a wheel changed since its record.
    verified = run_cli("verify", str(out / demo_build.wheel.name), "--recipe", "demo", "--arch", "12.0a",
                       "--cache-dir", str(demo_build.cache))
    assert verified.returncode == 0, verified.stderr
    env = ServeEnv(root, demo_build, "", bare, out)
    proc = env.cli(recipe, "--install", "--flags-only", "--json")
    assert proc.returncode == 0, proc.stderr
    env.python = json.loads(proc.stdout)["python"]
    # bench_serving imports `datasets` (an sglang requirement the flag parser does not need); pinned
    # with transformers so pip keeps a huggingface_hub that transformers 4.57.1 accepts.
    constraints = Path(env.python).parent.parent / "build-kernel-constraints.txt"
    pip = subprocess.run([env.python, "-m", "pip", "install", "-q", "--no-compile", "-c", str(constraints), "datasets",
                          "huggingface_hub<1.0", "transformers==4.57.1"], capture_output=True, text=True, check=False)
    assert pip.returncode == 0, pip.stderr
    model = tmp_path_factory.mktemp("tiny-model")
    made = subprocess.run([env.python, str(REPO_ROOT / "bench" / "serving" / "tiny_model.py"), str(model), "--tokenizer-only"],
                          capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    env.model = model
    return env


def _error(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


# --- flags, with sglang 0.5.9's own parser ---------------------------------------------------

def test_the_release_recipes_flags_parse_with_sglang_059(serve_env: ServeEnv) -> None:
    from build_kernel import recipe
    from build_kernel.archs import parse_arch_list
    from build_kernel.stages.serve import backends, flags

    # The release recipe serves sglang 0.5.9 with the nightly recipe's flags (inherited).
    release = recipe.load(str(REPO_ROOT / "recipes" / "sgl-kernel-0.3.21.toml"))
    assert (release.toolchain.sglang, release.serve.sglang) == ("0.5.9", "release")
    parsed = flags.parse(serve_env.python, ["--model-path", release.serve.model, *release.serve.args],
                         dict(os.environ))
    assert parsed.sglang == "0.5.9"
    ns = parsed.namespace
    assert (ns["tensor_parallel_size"], ns["quantization"], ns["attention_backend"]) == (8, "modelopt_fp4", "triton")
    assert (ns["moe_runner_backend"], ns["fp4_gemm_runner_backend"], ns["kv_cache_dtype"]) == (
        "flashinfer_cutlass", "flashinfer_cudnn", "bf16")
    assert ns["disable_custom_all_reduce"] is True
    assert parsed.abbreviations == {"--tp": "--tp-size"}
    assert backends.refusals(parsed, parse_arch_list(["12.0a"])) == []


def test_misspelt_flag_is_refused_with_the_closest_real_ones(serve_env: ServeEnv) -> None:
    recipe = serve_recipe(serve_env.root, serve_env.model, args='["--tp-sise", "1"]')
    proc = serve_env.cli(recipe)
    assert proc.returncode == 9
    assert _error(proc) == ("error: sglang 0.5.9 has no flag --tp-sise (did you mean --tp-size or --pp-size or "
                            "--ep-size?)")


def test_bad_choice_is_refused_with_the_valid_choices(serve_env: ServeEnv) -> None:
    recipe = serve_recipe(serve_env.root, serve_env.model, args='["--kv-cache-dtype", "fp9"]')
    proc = serve_env.cli(recipe)
    assert proc.returncode == 9
    line = _error(proc)
    assert line.startswith("error: sglang 0.5.9 refuses the flags: argument --kv-cache-dtype: invalid choice: 'fp9'")
    assert "(choose from 'auto', 'fp8_e5m2', 'fp8_e4m3', 'bf16', 'bfloat16', 'fp4_e2m1')" in line


@pytest.mark.parametrize(("args", "refused"), [
    ('["--moe-runner-backend", "flashinfer_trtllm"]', "--moe-runner-backend flashinfer_trtllm on sm_120"),
    ('["--fp4-gemm-backend", "flashinfer_trtllm"]', "--fp4-gemm-backend flashinfer_trtllm on sm_120"),
    ('["--attention-backend", "trtllm_mha"]', "--attention-backend trtllm_mha on sm_120"),
    ('["--attention-backend", "fa3"]', "--attention-backend fa3 on sm_120"),
])
def test_known_bad_sm120_backend_is_refused_and_force_says_so_loudly(serve_env: ServeEnv, args: str,
                                                                      refused: str) -> None:
    recipe = serve_recipe(serve_env.root, serve_env.model, args=args)
    proc = serve_env.cli(recipe)
    assert proc.returncode == 9
    line = _error(proc)
    assert line.startswith(f"error: refusing {refused}: ")
    assert "(https://" in line or "(the wheel's contents)" in line  # every refusal names its source
    assert line.endswith("(change [serve] args, or pass --force to serve anyway, at your own risk)")
    forced = serve_env.cli(recipe, "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert f"FORCED: {refused}" in forced.stderr
    assert json.loads(forced.stdout)["forced"][0].startswith(refused)


def test_nextn_is_accepted_and_said_to_run_as_eagle(serve_env: ServeEnv) -> None:
    recipe = serve_recipe(serve_env.root, serve_env.model, args='["--speculative-algorithm", "NEXTN"]')
    proc = serve_env.cli(recipe, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert any("NEXTN is accepted: sglang runs it as EAGLE" in n for n in result["notes"])
    # --dry-run says which sglang serves and where it comes from.
    assert result["sglang_from"]["from"] == "release" and result["sglang_from"]["version"] == "0.5.9"
    assert "note: sglang 0.5.9 (release, from the package index or --wheelhouse: [toolchain] sglang)" in proc.stderr


# --- the checkpoint guard ------------------------------------------------------------------

def _nvfp4_checkpoint(folder: Path, *, scales: bool) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (folder / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}}))
    names = ["model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.weight_scale"]
    names += ["model.layers.0.self_attn.k_proj.k_scale", "model.layers.0.self_attn.v_proj.v_scale"] if scales else []
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {n: "model-00001-of-00001.safetensors" for n in names}}))
    return folder


def test_fp8_kv_without_scales_forces_bf16_and_nvfp4_gets_modelopt_fp4(serve_env: ServeEnv, tmp_path: Path) -> None:
    ckpt = _nvfp4_checkpoint(tmp_path / "ckpt", scales=False)
    recipe = serve_recipe(serve_env.root, ckpt, args='["--tp", "1"]')
    proc = serve_env.cli(recipe, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["added"] == ["--quantization", "modelopt_fp4", "--kv-cache-dtype", "bf16"]
    assert result["argv"][-4:] == result["added"]
    assert "declares an FP8 KV cache but ships no k_scale/v_scale tensors" in proc.stderr
    # Asking for an FP8 KV cache on that checkpoint is refused, not silently changed.
    explicit = serve_recipe(serve_env.root, ckpt, args='["--kv-cache-dtype", "fp8_e4m3"]')
    refused = serve_env.cli(explicit)
    assert refused.returncode == 9 and "refusing --kv-cache-dtype fp8_e4m3: ckpt declares an FP8 KV cache" in _error(refused)


def test_fp8_kv_with_scales_is_left_alone(serve_env: ServeEnv, tmp_path: Path) -> None:
    ckpt = _nvfp4_checkpoint(tmp_path / "ckpt", scales=True)
    proc = serve_env.cli(serve_recipe(serve_env.root, ckpt, args='["--tp", "1"]'), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["added"] == ["--quantization", "modelopt_fp4"]


def test_piecewise_cuda_graphs_past_a_short_context_are_capped_with_sglang_059(serve_env: ServeEnv) -> None:
    """The tiny model's context is 4,096 (bench/serving/tiny_model.py); sglang 0.5.9 captures piecewise CUDA graphs only with
    --enable-piecewise-cuda-graph, up to its chunked prefill size: then, and only then, the cap is added."""
    plain = serve_env.cli(serve_recipe(serve_env.root, serve_env.model, args='["--tp", "1"]'), "--json")
    assert plain.returncode == 0, plain.stderr
    assert "--piecewise-cuda-graph-max-tokens" not in json.loads(plain.stdout)["argv"]
    on = serve_recipe(serve_env.root, serve_env.model, args='["--tp", "1", "--enable-piecewise-cuda-graph"]')
    proc = serve_env.cli(on, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["added"] == ["--piecewise-cuda-graph-max-tokens", "4096"] and result["argv"][-2:] == result["added"]
    assert "context 4096 (tiny-model" in proc.stderr and "dies in cuBLAS at start" in proc.stderr


# --- preflight: the server imports our verified wheel ----------------------------------------

def test_a_wheel_without_a_verification_record_is_refused(serve_env: ServeEnv, tmp_path: Path) -> None:
    other = tmp_path / "out"
    other.mkdir()
    (other / serve_env.wheel.name).write_bytes(serve_env.wheel.read_bytes())
    recipe = serve_recipe(serve_env.root, serve_env.model)
    proc = run_cli("serve", "--recipe", str(recipe), "--cache-dir", str(serve_env.build.cache), "--output-dir",
                   str(other))
    assert proc.returncode == 7
    assert _error(proc) == (f"error: {serve_env.wheel.name} has not been verified (run `build-kernel verify "
                            f"{other / serve_env.wheel.name} --recipe {recipe} --arch 12.0a` (or pass --force to "
                            "override))")
    assert sorted(p.name for p in other.iterdir()) == [serve_env.wheel.name]  # nothing written


def test_an_installed_library_that_is_not_the_wheels_is_refused(serve_env: ServeEnv) -> None:
    site = subprocess.run([serve_env.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    [lib] = [p for p in (Path(site) / "minikernel").rglob("*.so")][:1]
    original = lib.read_bytes()
    try:
        lib.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        proc = serve_env.cli(serve_recipe(serve_env.root, serve_env.model))
        assert proc.returncode == 9
        rel = lib.relative_to(site)
        assert _error(proc) == (f"error: refusing to serve: the minikernel in {serve_env.python} is not "
                                f"{serve_env.wheel.name}: {rel} on disk is not the wheel's (overwritten after "
                                "install?) (run `build-kernel serve --install --recipe R`: it installs this wheel "
                                "--no-deps and sglang beside it)")
    finally:
        lib.write_bytes(original)


def test_the_recipes_sglang_pin_must_be_installed(serve_env: ServeEnv) -> None:
    # [serve] python: the environment made for 0.5.9 (the default one is per sglang pin).
    recipe = serve_recipe(serve_env.root, serve_env.model, serve_extra=f'python = "{serve_env.python}"\n')
    recipe.write_text(recipe.read_text().replace('sglang = "0.5.9"', 'sglang = "0.5.8"'))
    proc = serve_env.cli(recipe)
    assert proc.returncode == 9
    assert f"{serve_env.python} has sglang 0.5.9, the recipe pins 0.5.8" in _error(proc)


# --- the systemd unit ------------------------------------------------------------------------

def test_unit_is_verified_by_systemd_analyze_and_written_atomically(serve_env: ServeEnv, tmp_path: Path) -> None:
    recipe = serve_recipe(serve_env.root, serve_env.model, env={"NCCL_DEBUG": "WARN", "ODD": "50% of $HOME"})
    target = tmp_path / "sglang.service"
    proc = serve_env.cli(recipe, "--unit", str(target), "--json")
    assert proc.returncode == 0, proc.stderr
    unit = json.loads(proc.stdout)["unit"]
    assert unit["verified"] == "systemd-analyze verify passed" and unit["path"] == str(target)
    text = target.read_text()
    assert text == unit["text"] and sorted(p.name for p in tmp_path.iterdir()) == ["sglang.service"]
    exec_start = next(ln for ln in text.splitlines() if ln.startswith("ExecStart="))
    assert exec_start.startswith(f"ExecStart={serve_env.python} -m sglang.launch_server --model-path {serve_env.model}")
    for line in ("Restart=on-failure", "KillMode=control-group", "TimeoutStartSec=1800", "LimitNOFILE=1048576",
                 "Environment=NCCL_DEBUG=WARN", 'Environment="ODD=50%% of $$HOME"',
                 "Environment=HOME=/var/lib/build-kernel-s"):
        assert line in text.splitlines(), line


# --- launch, health, smoke, early exit, Ctrl-C, bench (against the test double) ---------------

def _double_recipe(serve_env: ServeEnv, tmp_path: Path, model: Path | None = None, **env: str) -> tuple[Path, Path]:
    pids = tmp_path / "pids.json"
    recipe = serve_recipe(serve_env.root, model or serve_env.model, serve_extra='module = "sglang_double"\n'
                          "bench_concurrency = [1, 4]\nbench_input_len = 16\nbench_output_len = 8\n"
                          "bench_prompts = 8\nhealth_timeout_s = 60\n",
                          env={"PYTHONPATH": str(DOUBLE), "DOUBLE_PIDS": str(pids), **env})
    return recipe, pids


def _all_gone(pids_file: Path) -> bool:
    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not any(alive(p) for p in json.loads(pids_file.read_text())):
            return True
        time.sleep(0.2)
    return False


def test_launch_waits_for_health_generate_smokes_and_stops_the_whole_group(serve_env: ServeEnv, tmp_path: Path) -> None:
    got = tmp_path / "argv.json"
    recipe, pids = _double_recipe(serve_env, tmp_path, DOUBLE_READY_AFTER_S="2", DOUBLE_ARGV=str(got))
    proc = serve_env.cli(recipe, "--launch", "--smoke-only", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    server = result["server"]
    # The server was started with exactly the command line that was checked, nothing added or lost.
    assert result["argv"][:3] == [serve_env.python, "-m", "sglang_double"]
    assert json.loads(got.read_text()) == result["argv"][3:]
    assert result["argv"][3:7] == ["--model-path", str(serve_env.model), "--host", "127.0.0.1"]
    assert server["seconds_to_healthy"] >= 2 and server["smoke"]["tokens"] == 32
    assert server["smoke"]["text"].startswith(" Paris") and server["smoke"]["tokens_per_s"] > 0
    assert _all_gone(pids)  # the double's "scheduler" child too
    # What the server's own log says it resolved (the recipe asked for triton, nothing else).
    resolved = json.loads(proc.stdout)["resolved"]
    assert resolved["resolved"]["attention_backend"] == "triton" and resolved["cuda_graph"] == "captured"
    assert resolved["failures"] == []


def test_a_silent_fallback_after_launch_is_a_failure_naming_both(serve_env: ServeEnv, tmp_path: Path) -> None:
    recipe, pids = _double_recipe(serve_env, tmp_path, DOUBLE_RESOLVE="attention_backend=flashinfer")
    proc = serve_env.cli(recipe, "--launch", "--smoke-only")
    assert proc.returncode == 9
    assert _error(proc).startswith("error: the server does not run what the recipe asked: --attention-backend triton "
                                   "was asked for, but sglang resolved attention_backend='flashinfer': a silent "
                                   "fallback (see ")
    assert "server stopped" in proc.stderr and _all_gone(pids)
    forced = serve_env.cli(recipe, "--launch", "--smoke-only", "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert "FORCED: --attention-backend triton was asked for" in forced.stderr


def test_a_server_that_exits_early_shows_its_exit_code_and_last_lines(serve_env: ServeEnv, tmp_path: Path) -> None:
    recipe, pids = _double_recipe(serve_env, tmp_path, DOUBLE_EXIT_AFTER_S="1", DOUBLE_EXIT_CODE="3")
    proc = serve_env.cli(recipe, "--launch")
    assert proc.returncode == 9
    assert _error(proc).startswith("error: the server exited with code 3 before it was healthy: double: CUDA error: "
                                   "no kernel image is available for execution on the device (see ")
    assert "  | double: loading" in proc.stderr
    assert _all_gone(pids)


def test_an_early_exit_names_the_childs_exception_and_the_servers_own_advice(serve_env: ServeEnv,
                                                                             tmp_path: Path) -> None:
    # The shape of the H200's first MoE serve (2026-12-03): the scheduler child's exception inside an exception
    # group, sglang's workaround line, then the parent's own last words, which name no cause.
    crash = tmp_path / "crash.log"
    crash.write_text("Capture piecewise CUDA graph begin. avail mem=12.62 GB\n"
                     "  |   File \"graph_module.py\", line 459, in __call__\n"
                     "  | RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle )`\n"
                     "Piecewise CUDA Graph failed with error: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED\n"
                     "Piecewise CUDA Graph is enabled by default as an experimental feature.\n"
                     "To work around this error, add --disable-piecewise-cuda-graph to your launch command.\n"
                     "Received sigquit from a child process. It usually means the child failed.\n")
    recipe, pids = _double_recipe(serve_env, tmp_path, DOUBLE_EXIT_AFTER_S="1", DOUBLE_EXIT_CODE="137",
                                  DOUBLE_EXIT_LOG=str(crash))
    proc = serve_env.cli(recipe, "--launch")
    assert proc.returncode == 9
    assert _error(proc).startswith("error: the server exited with code 137 before it was healthy: RuntimeError: "
                                   "CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle )` "
                                   "(the server's own advice: To work around this error, add "
                                   "--disable-piecewise-cuda-graph to your launch command. ([serve] args); see ")
    assert _all_gone(pids)


def test_a_server_never_healthy_is_stopped_after_the_timeout(serve_env: ServeEnv, tmp_path: Path) -> None:
    recipe, pids = _double_recipe(serve_env, tmp_path, DOUBLE_READY_AFTER_S="600")
    recipe.write_text(recipe.read_text().replace("health_timeout_s = 60", "health_timeout_s = 3"))
    proc = serve_env.cli(recipe, "--launch")
    assert proc.returncode == 9 and "was not healthy after 3 s" in _error(proc)
    assert _all_gone(pids)


def test_ctrl_c_stops_a_foreground_server_cleanly(serve_env: ServeEnv, tmp_path: Path) -> None:
    recipe, pids = _double_recipe(serve_env, tmp_path)
    cmd = [sys.executable, "-m", "build_kernel", "serve", "--recipe", str(recipe), "--cache-dir",
           str(serve_env.build.cache), "--output-dir", str(serve_env.out), "--launch"]
    # A shell without job control starts background jobs with SIGINT ignored, which exec keeps;
    # a handler here is reset to the default in the child, as under a terminal's Ctrl-C.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        child = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
                                 env={**os.environ, "NO_COLOR": "1"})
    finally:
        signal.signal(signal.SIGINT, before)
    assert child.stderr is not None
    for line in child.stderr:
        if "(Ctrl-C stops it)" in line:
            break
    child.send_signal(signal.SIGINT)
    rest = child.stderr.read()
    child.stderr.close()
    assert child.wait(timeout=60) == 130, rest
    assert "server stopped" in rest and _all_gone(pids)


def test_a_port_already_in_use_is_refused_before_starting(serve_env: ServeEnv, tmp_path: Path) -> None:
    recipe, pids = _double_recipe(serve_env, tmp_path)
    port = int(next(ln for ln in recipe.read_text().splitlines() if ln.startswith("port = ")).split("= ")[1])
    squatter = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        proc = serve_env.cli(recipe, "--launch")
        assert proc.returncode == 9
        assert _error(proc) == (f"error: something already answers on http://127.0.0.1:{port} (stop it, or set "
                                "[serve] port to a free port)")
        assert not pids.exists()  # nothing was started
    finally:
        squatter.terminate()
        squatter.wait()


def test_the_pipeline_checks_serve_last_when_the_recipe_has_it(serve_env: ServeEnv, tmp_path: Path) -> None:
    recipe = serve_recipe(serve_env.root, serve_env.model, name="p")
    # Without [test] (no build input; test_pipeline runs that stage): the miniature's own tests are not this test's.
    text = recipe.read_text()
    recipe.write_text(text[:text.index("\n[test]\n")] + text[text.index("\n[serve]\n"):])
    proc = run_cli("--recipe", str(recipe), "--arch", "12.0a", "--json", "--cache-dir", str(serve_env.build.cache),
                   "--output-dir", str(tmp_path / "wheels"), "--offline")
    assert proc.returncode == 0, proc.stderr
    stages = json.loads(proc.stdout)["stages"]
    # [toolchain] sglang and [serve] are no build inputs: the session's wheel, byte for byte.
    assert stages["build"]["status"] == "cached"
    assert list(stages)[-1] == "serve" and stages["serve"]["status"] == "checked"
    assert stages["test"]["status"] == "no [test] paths in the recipe"
    assert stages["serve"]["sglang"] == "0.5.9"


# --- which kernels ran, and the user's checks (a MoE-shaped checkpoint, through the double) ---

def _moe_model(serve_env: ServeEnv, folder: Path) -> Path:
    """bench/serving/tiny_moe.py's config beside the tiny tokenizer: the double's scheduler calls sgl_kernel ops for it."""
    sys.path.insert(0, str(REPO_ROOT / "bench" / "serving"))
    try:
        import tiny_moe
    finally:
        sys.path.remove(str(REPO_ROOT / "bench" / "serving"))
    shutil.copytree(serve_env.model, folder)
    (folder / "config.json").write_text(json.dumps(tiny_moe.config(tiny_moe.Shape())))
    return folder


def test_bench_runs_sglang_bench_serving_and_reports_the_kernels_the_moe_server_called(serve_env: ServeEnv,
                                                                                     tmp_path: Path) -> None:
    sys.path.insert(0, str(DOUBLE))
    try:
        import sglang_double
    finally:
        sys.path.remove(str(DOUBLE))
    model = _moe_model(serve_env, tmp_path / "moe")
    recipe, pids = _double_recipe(serve_env, tmp_path, model)
    seen = tmp_path / "url.txt"
    check = f"{sys.executable} -c 'import sys; open(sys.argv[1], \"w\").write(sys.argv[2])' {seen} {{url}}"
    proc = serve_env.cli(recipe, "--bench", "--check", check, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert seen.read_text() == result["server"]["url"] and result["checks"][0]["returncode"] == 0
    found = result["ops"]
    # The double defines its sgl_kernel ops in Python: no library of the served wheel registered them (issue 70).
    assert found["sgl_kernel_ops"] == []
    assert sorted(found["sgl_kernel_ops_not_the_wheels"]) == sorted(f"sgl_kernel::{n}" for n in {
        *sglang_double.PREFILL_OPS, *sglang_double.DECODE_OPS})
    assert found["graph_captured"] == {f"sgl_kernel::{n}": 2 for n in sglang_double.DECODE_OPS}
    # Each request after the first snapshot ran the prefill ops once: the smoke request and bench_serving's
    # 2 x 8 (and its warm-up), all in the one scheduler process.
    counts = set(found["eager_during_requests"].values())
    assert set(found["eager_during_requests"]) == {f"sgl_kernel::{n}" for n in sglang_double.PREFILL_OPS}
    assert len(counts) == 1 and counts.pop() >= 17 and found["processes"] == 1
    # The bench rows, beside the wheel with its provenance, the resolved backends and the op report.
    saved = json.loads(Path(result["bench_file"]).read_text())
    assert Path(result["bench_file"]).parent == serve_env.out
    assert [r["concurrency"] for r in saved["bench"]] == [1, 4]
    assert all(r["completed"] == 8 and r["output_throughput"] > 0 and r["mean_ttft_ms"] > 0 for r in saved["bench"])
    assert saved["provenance"]["version"] in serve_env.wheel.name and saved["server"]["smoke"]["tokens"] == 32
    assert saved["ops"]["graph_captured"] == found["graph_captured"] and saved["resolved"]["failures"] == []
    # None is the wheel's (the double's are Python ops), so the line says none and names them as another library's.
    assert "sgl_kernel ops captured in CUDA graphs: none" in proc.stderr
    assert all(f"sgl_kernel::{n}" in proc.stderr.split("sgl_kernel ops of another library: ")[1]
               for n in sglang_double.DECODE_OPS)
    assert _all_gone(pids)


def test_launch_says_the_ops_as_text_and_a_failing_check_fails_serve(serve_env: ServeEnv, tmp_path: Path) -> None:
    model = _moe_model(serve_env, tmp_path / "moe")
    recipe, pids = _double_recipe(serve_env, tmp_path, model)
    proc = serve_env.cli(recipe, "--launch", "--smoke-only", "--check", "true")
    assert proc.returncode == 0, proc.stderr
    assert "sgl_kernel ops called for the requests: " in proc.stdout and "check passed in " in proc.stdout
    # Without the op report nothing is put into the server (its recipe's ops folder is never made).
    quiet = serve_recipe(serve_env.root, model, name="quiet", serve_extra='module = "sglang_double"\n',
                         env={"PYTHONPATH": str(DOUBLE), "DOUBLE_PIDS": str(pids)})
    failing = serve_env.cli(quiet, "--launch", "--smoke-only", "--no-op-report", "--check", "false")
    assert failing.returncode == 9
    assert _error(failing).startswith("error: the check `false`")
    assert "server stopped" in failing.stderr and _all_gone(pids)
    assert not (serve_env.build.cache / "serve" / "ops" / "quiet").exists()


# --- an API key: a non-loopback host, the real sglang parser, a server that enforces the key (issue 69) ------

def test_a_keyed_server_refuses_requests_without_the_key_and_the_key_shows_nowhere(serve_env: ServeEnv,
                                                                                     tmp_path: Path) -> None:
    """sglang 0.5.9's parser takes --api-key; the double refuses as sglang's middleware does (401); the smoke
    request and the check send the key; no output, log, --json or command line holds it; the unit hands it over
    as a credential."""
    from build_kernel.stages.serve import api_key

    key_file = tmp_path / "credstore" / "s.api-key"
    api_key.ensure(key_file)  # what serve --install does (tests/test_serve_hardening.py: the file's rules)
    key = api_key.read(key_file)
    pids = tmp_path / "pids.json"
    recipe = serve_recipe(serve_env.root, serve_env.model, name="keyed", env={"PYTHONPATH": str(DOUBLE),
                                                                               "DOUBLE_PIDS": str(pids)},
                          serve_extra=f'module = "sglang_double"\nhost = "0.0.0.0"\napi_key_file = "{key_file}"\n'
                                      "health_timeout_s = 60\nbench_concurrency = [1]\nbench_input_len = 16\n"
                                      "bench_output_len = 8\nbench_prompts = 2\n")
    check = f"{sys.executable} {DOUBLE / 'ask_with_key.py'} {{url}} {pids}"
    proc = serve_env.cli(recipe, "--bench", "--no-op-report", "--check", check, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["server"]["smoke"]["tokens"] == 32  # the smoke request was let in: it sent the key
    # The real sglang.bench_serving too (it reads OPENAI_API_KEY): a refused request is no completed one.
    assert result["bench"][0]["completed"] == 2 and result["bench"][0]["output_throughput"] > 0
    bench_file = Path(result["bench_file"]).read_text()
    assert result["checks"][0]["output_tail"] == ["without key: 401, wrong key: 401, with key: 200, command lines "
                                                  "holding the key: 0"]
    assert result["argv"][1:3] == [str(api_key.WRAPPER), "sglang_double"] and "--api-key" not in result["argv"]
    log = Path(result["server"]["log"]).read_text()
    assert "api_key='***'" in log  # the double logs its ServerArgs as sglang does, key included: hidden
    unit = serve_env.cli(recipe, "--unit", str(tmp_path / "keyed.service"), "--json")
    assert unit.returncode == 0, unit.stderr
    text = (tmp_path / "keyed.service").read_text()
    assert f"LoadCredential=api-key:{key_file}" in text.splitlines() and "DynamicUser=yes" in text.splitlines()
    assert json.loads(unit.stdout)["unit"]["exposure"] <= 4.5
    for seen in (proc.stdout, proc.stderr, log, unit.stdout, unit.stderr, text, bench_file):
        assert key not in seen
    assert _all_gone(pids)
    # Without the key file the launch stops before starting anything, in one line with the fix.
    key_file.unlink()
    gone = serve_env.cli(recipe, "--launch", "--smoke-only")
    assert gone.returncode == 9 and _error(gone) == f"error: no API key file {key_file} ([serve] api_key_file) " \
                                                    "(build-kernel serve --install makes one)"
