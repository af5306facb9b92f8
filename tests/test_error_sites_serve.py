"""Serve errors no other test reached (bench/code_health/error_sites.py, issue 68 item 1).

The serve stage's own parts, called as `serve` calls them, on real interpreters, real git repos and real
recipes in tmp_path: an interpreter that is not there or answers nothing (/bin/true: it runs and prints
nothing, as a broken wrapper script would), an interpreter without torch, a recipe without sglang, and
`[serve] sglang = "source"` on a tree that is no SGLang tree. Each error is one line naming the problem and
the fix, a ServeError (exit 9). No sglang is installed: none of these gets that far.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from build_kernel import plan as plan_mod
from build_kernel import process
from build_kernel.errors import ServeError
from build_kernel.recipe import Serve
from build_kernel.recipe.load import load
from build_kernel.resources import Resources
from build_kernel.stages import Context
from build_kernel.stages.serve import (
    ServeStage,
    api_key,
    bench,
    command,
    environment,
    flags,
    install,
    jit_prewarm,
    launch,
    preflight,
    rust_extensions,
    sglang_dist,
    unit,
    wheelhouse,
)
from tests import test_error_sites_publish as publish_sites
from tests.conftest import write_recipe, write_series
from tests.test_publish import make_wheel

RES = Resources(cpus=2, cpus_why="test", memory_bytes=8 * 1024**3, memory_why="test")
TRUE = shutil.which("true") or "/bin/true"
no_inodes = publish_sites.no_inodes  # a tmpfs with no free inode (needs root to mount)


def serve_plan(project: Path, tmp_path: Path, repo: str, commit: str, serve: str, toolchain: str = "") -> plan_mod.Plan:
    write_series(project, "s", "v1", {})
    path = write_recipe(project, "srv", f"""\
        [source]
        repo = "{repo}"
        commit = "{commit}"
        [patches]
        series = "s"
        version = "v1"
        [build]
        arch = ["12.0a"]
        [toolchain]
        {toolchain}
        [serve]
        model = "org/model"
        {serve}
        """)
    return plan_mod.resolve(load(str(path)), env={"HOME": str(tmp_path)}, cache_dir=tmp_path / "cache",
                            output_dir=tmp_path / "out", resources=RES)


def test_an_interpreter_that_is_not_there_or_prints_nothing(tmp_path: Path) -> None:
    missing = str(tmp_path / "env" / "bin" / "python")
    with pytest.raises(ServeError) as info:
        environment.inspect(missing, "sgl_kernel", dict(os.environ))
    assert info.value.exit_code == 9
    assert info.value.render() == (f"no serve interpreter at {missing} (make it with `build-kernel serve --install "
                                   "--recipe R`, or set [serve] python)")
    with pytest.raises(ServeError) as info:
        environment.inspect(TRUE, "sgl_kernel", dict(os.environ))
    assert info.value.render() == f"{TRUE} printed no inventory (run it by hand: is it a working Python 3?)"
    with pytest.raises(ServeError) as info:
        wheelhouse.target(TRUE, dict(os.environ))
    assert info.value.render() == f"{TRUE} printed no wheel tags (its pip must be importable (python -m ensurepip))"


def test_install_without_sglang_or_without_torch(project: Path, tmp_path: Path) -> None:
    wheel = tmp_path / "minikernel-0.1.0-py3-none-any.whl"
    bare = serve_plan(project, tmp_path, "https://example.invalid/x.git", "40ef116f011cf1599811af1089ddf00971092bcf", "")
    with pytest.raises(ServeError) as info:
        install.install(bare, sys.executable, wheel)
    assert info.value.render() == ("the recipe names no sglang (set [toolchain] sglang = \"0.5.9\", or [serve] sglang = "
                                   "\"source\" for the sglang of the kernel's own commit)")
    # An interpreter without torch: a venv of the base Python, no packages.
    venv = tmp_path / "no-torch"
    (venv / "bin").mkdir(parents=True)
    base = Path(sys.base_prefix) / "bin" / Path(sys.executable).name
    (venv / "bin" / "python").symlink_to(base if base.exists() else Path(sys.executable).resolve())
    (venv / "pyvenv.cfg").write_text(f"home = {Path(sys.base_prefix) / 'bin'}\ninclude-system-site-packages = false\n")
    pinned = serve_plan(project, tmp_path, "https://example.invalid/x.git", "40ef116f011cf1599811af1089ddf00971092bcf",
                        "", 'sglang = "0.5.9"')
    python = str(venv / "bin" / "python")
    with pytest.raises(ServeError) as info:
        install.install(pinned, sys.executable, wheel, python=python)
    assert info.value.render() == f"{python} has no torch (the serve interpreter must see the build environment's torch)"


def test_sglang_from_source_on_a_tree_that_is_not_sglang(project: Path, tmp_path: Path,
                                                         make_repo: Callable[..., tuple[Path, str]]) -> None:
    env = dict(os.environ)
    # No python/pyproject.toml at all
    repo, sha = make_repo("kernel", {"README.md": "a kernel\n"})
    plan = serve_plan(project, tmp_path, str(repo), sha, 'sglang = "source"')
    with pytest.raises(ServeError) as info:
        sglang_dist.build(plan, sys.executable, env, log_path=tmp_path / "serve.log")
    assert info.value.render() == (f"{repo} @ {sha[:12]} has no python/pyproject.toml: not an SGLang tree (set [serve] "
                                   "sglang = \"release\" and [toolchain] sglang to a release)")
    # A python/pyproject.toml without a [project] name
    repo2, sha2 = make_repo("kernel2", {"python/pyproject.toml": "[build-system]\nrequires = []\n"})
    plan = serve_plan(project, tmp_path, str(repo2), sha2, 'sglang = "source"')
    with pytest.raises(ServeError) as info:
        sglang_dist.build(plan, sys.executable, env, log_path=tmp_path / "serve.log")
    assert info.value.render() == (f"{repo2} @ {sha2[:12]}: python/pyproject.toml has no readable [project] name "
                                   "(KeyError) ([serve] sglang = \"source\" needs an SGLang tree; use \"release\" "
                                   "otherwise)")
    # A commit the repository does not have, offline: the fetch's reason, as the serve stage's error
    plan = serve_plan(project, tmp_path, str(repo2), "0" * 40, 'sglang = "source"')
    with pytest.raises(ServeError) as info:
        sglang_dist.build(plan, sys.executable, env, log_path=tmp_path / "serve.log", offline=True)
    assert info.value.exit_code == 9
    assert info.value.message.startswith("fetching sglang's python/: ")
    assert not list((tmp_path / "cache" / "serve" / "sglang").glob("*/"))  # nothing half-made


# --- launch: health, smoke, a server that ends --------------------------------------------------

DOUBLE = Path(__file__).resolve().parent / "serve_double" / "sglang_double.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_server_that_is_not_healthy_in_time(tmp_path: Path) -> None:
    """The sglang double (tests/serve_double: no GPU here runs sglang) loading for ten minutes: /health_generate
    answers 503 the whole 0.3 s we wait."""
    port = _free_port()
    log_path = tmp_path / "server.log"
    argv = [sys.executable, str(DOUBLE), "--model-path", str(tmp_path), "--port", str(port)]
    with pytest.raises(ServeError) as info, launch.running(argv, {**os.environ, "DOUBLE_READY_AFTER_S": "600"},
                                                           host="127.0.0.1", port=port, timeout=0.3, log_path=log_path):
        pass
    assert info.value.exit_code == 9
    assert re.fullmatch(rf"the server was not healthy after 0\.3 s \(pid \d+, log {re.escape(str(log_path))}\) "
                        r"\(raise \[serve\] health_timeout_s, or read the log for where it stalls\)", info.value.render())


def test_a_smoke_request_that_gets_no_tokens() -> None:
    """A server that answers /generate with an empty completion (what a model that stops at once gives)."""
    class Empty(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.dumps({"text": "", "meta_info": {"completion_tokens": 0}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Empty)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(ServeError) as info:
            launch.smoke(f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
    assert info.value.render() == ('the smoke request got no tokens back: {"text": "", "meta_info": '
                                   '{"completion_tokens": 0}} (see the server log)')


def test_a_server_that_dies_while_serving(tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    server = process.spawn([sys.executable, "-c", "print('RuntimeError: CUDA error: an illegal memory access', "
                            "flush=True); raise SystemExit(3)"], error=ServeError, what="starting the server",
                           log=log_path)
    try:
        with pytest.raises(ServeError) as info:
            launch.serve_foreground(server)
    finally:
        server.stop()  # as launch.running does: its log file closed
    assert info.value.render() == ("the server exited with code 3 while serving: RuntimeError: CUDA error: an illegal "
                                   f"memory access (see {log_path})")


# --- bench, JIT prewarm, the API key ------------------------------------------------------------

def test_a_bench_run_that_writes_no_results(tmp_path: Path) -> None:
    """An interpreter whose `-m sglang.bench_serving` ends well and writes nothing (/bin/true stands for it)."""
    with pytest.raises(ServeError) as info:
        bench.run(TRUE, dict(os.environ), host="127.0.0.1", port=1, model="org/model", serve=Serve(),
                  out_dir=tmp_path / "bench", log_path=tmp_path / "bench.log")
    raw = tmp_path / "bench" / f"bench-c{Serve().bench_concurrency[0]}.jsonl"
    assert info.value.render() == f"sglang.bench_serving wrote no results to {raw} (see {tmp_path / 'bench.log'})"


def test_jit_prewarm_without_ninja_or_without_an_answer(tmp_path: Path) -> None:
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin" / "nvcc").symlink_to(TRUE)
    with pytest.raises(ServeError) as info:
        jit_prewarm._preflight({"CUDA_HOME": str(cuda), "PATH": str(tmp_path / "empty")})
    assert info.value.render() == ("ninja not found on the prewarm's PATH (tvm-ffi runs `ninja`) (pip install ninja "
                                   "into the serve environment)")
    with pytest.raises(ServeError) as info:
        jit_prewarm._child(TRUE, "list", {"entries": []}, dict(os.environ), what="listing the JIT builders",
                           log_path=tmp_path / "jit.log", timeout=60)
    assert info.value.render() == (f"listing the JIT builders: {TRUE} exited 0 without an answer: (no output) "
                                   f"(see {tmp_path / 'jit.log'})")


def test_an_api_key_file_that_cannot_be_made(no_inodes: Path) -> None:
    path = no_inodes / "credstore" / "serve.api-key"
    with pytest.raises(ServeError) as info:
        api_key.ensure(path)
    assert info.value.render() == (f"cannot make the API key file {path}: No space left on device (run `serve "
                                   "--install` as a user that may write there (root for /etc/credstore), or set [serve] "
                                   "api_key_file to a folder you own)")
    assert list(no_inodes.iterdir()) == []


# --- the preflight and the flag parser's answers ------------------------------------------------

def test_the_preflight_refuses_an_interpreter_without_our_wheel_and_another_sglang(tmp_path: Path) -> None:
    """What `environment.inspect` read from a serve interpreter that lacks our wheel and has another sglang."""
    wheel = make_wheel(tmp_path, "minikernel", "0.1.0")  # with a passing verify record beside it
    installed = environment.Installed(python="/srv/env/bin/python", sglang="0.5.8", torch=None, module_origin=None)
    with pytest.raises(ServeError) as info:
        preflight.check(wheel, "minikernel", installed, sglang=sglang_dist.Choice("release", "0.5.9"), env={})
    assert info.value.render() == (
        f"refusing to serve: /srv/env/bin/python has no minikernel: the server would not import our {wheel.name} "
        "(and 1 more) (run `build-kernel serve --install --recipe R`: it installs this wheel --no-deps and sglang "
        "beside it)")
    # Ours in another version, and a second distribution that ships the module too
    other = environment.Installed(python="/srv/env/bin/python", sglang=None, torch=None, module_origin=None, dists={
        "minikernel": {"version": "0.0.9", "root": "/srv/site", "files": {}},
        "minikernel-fork": {"version": "2.0", "root": "/srv/site", "files": {}}})
    with pytest.raises(ServeError) as info:
        preflight.check(wheel, "minikernel", other, sglang=sglang_dist.Choice("release", ""), env={})
    assert info.value.message == "refusing to serve: /srv/env/bin/python has minikernel 0.0.9, not ours (0.1.0) (and 1 more)"


def test_the_flag_parser_could_not_import_sglang_or_met_an_unknown_flag() -> None:
    """The answers the flag-parsing child gives (flags.py's protocol), as they come back."""
    with pytest.raises(ServeError) as info:
        flags._outcome("/srv/env/bin/python", {"error": "cannot import sglang: No module named 'sglang'", "unknown": {}})
    assert info.value.render() == ("/srv/env/bin/python: cannot import sglang: No module named 'sglang' (run "
                                   "`build-kernel serve --install --recipe R` (add --flags-only on a machine without a "
                                   "GPU))")
    with pytest.raises(ServeError) as info:
        flags._outcome("/srv/env/bin/python", {"error": "", "sglang": "0.5.9", "unknown": {"--tp-sise": []}})
    assert info.value.render() == ("sglang 0.5.9 has no flag --tp-sise (see `/srv/env/bin/python -m "
                                   "sglang.launch_server --help`)")


def test_a_unit_systemd_analyze_cannot_rate() -> None:
    """The real systemd-analyze security on a unit it refuses (no ExecStart=): no exposure level to read."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("no systemd-analyze here (apt install systemd)")
    with pytest.raises(ServeError) as info:
        unit.exposure("[Unit]\nDescription=broken\n", "bk-broken", dict(os.environ))
    assert info.value.message.startswith("systemd-analyze security gave no exposure level: ")
    assert info.value.hint == "check the unit with systemd-analyze security --offline=yes FILE"


class _Answer(BaseHTTPRequestHandler):
    """/generate answers with the status the server was made with."""

    status = 200

    def do_POST(self) -> None:
        body = b'{"error": "no"}'
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args: object) -> None:
        pass


def test_smoke_requests_refused_failed_or_unanswered_and_a_port_already_taken(tmp_path: Path) -> None:
    messages = {}
    for status in (401, 500):
        handler = type(f"Answer{status}", (_Answer,), {"status": status})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            with pytest.raises(ServeError) as info:
                launch.smoke(url)
            messages[status] = info.value.render()
            if status == 500:  # anything answering on the port: no server is started there
                with pytest.raises(ServeError) as info, launch.running(
                        [sys.executable, "-c", "raise SystemExit(1)"], dict(os.environ), host="127.0.0.1",
                        port=server.server_address[1], timeout=5, log_path=tmp_path / "server.log"):
                    pass
                messages[0] = info.value.render()
        finally:
            server.shutdown()
            server.server_close()
    assert "was refused: HTTP 401" in messages[401] and messages[401].endswith(
        "(check [serve] api_key_file, and that nothing else serves on that port)")
    assert messages[500].endswith("/generate failed: HTTP Error 500: Internal Server Error (see the server log)")
    assert messages[0] == f"something already answers on {url} (stop it, or set [serve] port to a free port)"
    assert not (tmp_path / "server.log").exists()
    with pytest.raises(ServeError) as info:  # nothing listens there any more
        launch.smoke(url)
    assert info.value.render().startswith(f"the smoke request to {url}/generate failed: <urlopen error ")


def test_a_model_folder_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(ServeError) as info:
        command._model(None, str(tmp_path / "no-model"))  # type: ignore[arg-type] # the override is enough
    assert info.value.render() == (f"model folder {tmp_path / 'no-model'} does not exist (pass --model with a checkpoint "
                                   "folder or a hub id)")


# --- what the server resolved, sglang's refusal, the wheelhouse, a Rust extension, the key file ----------

def test_a_server_that_dies_before_it_is_healthy(tmp_path: Path) -> None:
    """A server process that dies while loading, with the words of one whose kernels do not fit the GPU (the
    sglang double takes seconds to start; this is a real process that prints and exits)."""
    port = _free_port()
    log_path = tmp_path / "server.log"
    argv = [sys.executable, "-c", "print('RuntimeError: CUDA error: no kernel image is available for execution on the "
            "device', flush=True); raise SystemExit(3)"]
    with pytest.raises(ServeError) as info, launch.running(argv, dict(os.environ), host="127.0.0.1", port=port,
                                                           timeout=30, log_path=log_path):
        pass
    assert info.value.exit_code == 9
    assert info.value.render() == ("the server exited with code 3 before it was healthy: RuntimeError: CUDA error: no "
                                   f"kernel image is available for execution on the device (see {log_path})")


def test_a_server_log_that_does_not_say_what_it_resolved(tmp_path: Path) -> None:
    """sglang's start-up log above --log-level info: no server_args line, so nothing asked can be confirmed."""
    log_path = tmp_path / "server.log"
    log_path.write_text("[2026-12-07 10:00:00] earlier run\n")
    start = log_path.stat().st_size
    with log_path.open("a") as fh:
        fh.write("[2026-12-07 10:01:00] Load weight end. type=LlamaForCausalLM\n")
    with pytest.raises(ServeError) as info:
        ServeStage("launch")._audit(log_path, start, {"attention_backend": "fa3"})
    assert info.value.render() == (
        "the server does not run what the recipe asked: sglang's startup log has no server_args=ServerArgs(...) line, "
        f"so what it resolved is unknown (is --log-level above info?) (see {log_path}; change [serve] args, or pass "
        "--force to serve anyway)")


def test_the_flag_parser_refusing_a_value() -> None:
    """The flag-parsing child's answer when sglang's argparse refuses a value (flags.py's protocol)."""
    with pytest.raises(ServeError) as info:
        flags._outcome("/srv/env/bin/python", {"error": "argument --kv-cache-dtype: invalid choice: 'fp9'",
                                               "sglang": "0.5.9", "unknown": {}})
    assert info.value.render() == ("sglang 0.5.9 refuses the flags: argument --kv-cache-dtype: invalid choice: 'fp9' "
                                   "(fix [serve] args in the recipe)")


def test_a_wheelhouse_without_the_sglang_wheel(tmp_path: Path) -> None:
    """A real wheelhouse holding only sglang's sdist-less neighbour, the target this interpreter's real tags."""
    folder = tmp_path / "wheelhouse"
    make_wheel(folder, "sglang-router", "0.5.9")
    tgt = wheelhouse.target(sys.executable, dict(os.environ))
    with pytest.raises(ServeError) as info:
        install._release_wheel(folder, "0.5.9", tgt)
    assert info.value.render() == (f"the wheelhouse {folder} lacks sglang==0.5.9 (a wheel) (add it: `pip download -d "
                                   f"{folder} --no-deps sglang==0.5.9` on a host with an index)")


def test_a_source_tree_whose_module_imports_its_rust_extension(tmp_path: Path) -> None:
    project = tmp_path / "python"
    (project / "sglang" / "srt" / "grpc").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[project]\nname = "sglang"\n[[tool.setuptools-rust.ext-modules]]\n'
                                            'target = "sglang.srt.grpc._core"\npath = "../rust/Cargo.toml"\n')
    (project / "sglang" / "srt" / "grpc" / "server.py").write_text("import os\nfrom . import _core\n")
    with pytest.raises(ServeError) as info:
        rust_extensions.leave_out(project, "sglang @ 0123456789ab")
    assert info.value.render() == (
        "sglang @ 0123456789ab: sglang/srt/grpc/server.py:2 imports the Rust extension sglang.srt.grpc._core, which a "
        "source build of python/ leaves out (it needs cargo and a crate outside python/) (set [serve] sglang = "
        "\"release\" and [toolchain] sglang to a release wheel)")


def test_an_api_key_path_that_is_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ServeError) as info:
        api_key.read(tmp_path)
    assert info.value.render() == f"the API key file {tmp_path} is not a file (point [serve] api_key_file at a file)"


def test_an_api_key_file_that_cannot_be_read() -> None:
    """/proc/self/mem: a regular file of mode 0600 (the check passes) whose read fails with EIO, as a file on a
    failing disk does; root reads any file, so no permission bit can make one unreadable here."""
    with pytest.raises(ServeError) as info:
        api_key.read(Path("/proc/self/mem"))
    assert info.value.render() == "cannot read the API key file /proc/self/mem: Input/output error (run as its owner)"


def test_jit_prewarm_without_nvcc_in_cuda_home(tmp_path: Path) -> None:
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)  # a CUDA_HOME with no nvcc in it
    with pytest.raises(ServeError) as info:
        jit_prewarm._preflight({"CUDA_HOME": str(cuda), "PATH": os.environ.get("PATH", "")})
    assert info.value.render() == (f"nvcc not found at {cuda / 'bin' / 'nvcc'} (tvm-ffi compiles sglang's JIT kernels "
                                   "with CUDA_HOME/bin/nvcc) (install the CUDA toolkit and set CUDA_HOME in [serve] env "
                                   "(or put its bin on PATH))")


def test_jit_prewarm_of_a_module_the_serve_interpreter_lacks(project: Path, tmp_path: Path) -> None:
    """The real JIT child (jit_child.py) in this interpreter, which has no sglang: listing the recipe's builders
    names the entry, and loading one says why."""
    plan = serve_plan(project, tmp_path, "https://example.invalid/x.git", "40ef116f011cf1599811af1089ddf00971092bcf",
                      'jit_prewarm = ["sglang.jit_kernel.nvfp4"]')
    log_path = tmp_path / "jit.log"
    with pytest.raises(ServeError) as info:
        jit_prewarm.items(plan, sys.executable, dict(os.environ), log_path)
    assert info.value.render() == ("[serve] jit_prewarm: no module 'sglang' (importing sglang.jit_kernel.nvfp4) "
                                   "(install that sglang into the serve environment, or fix [serve] jit_prewarm)")
    with pytest.raises(ServeError) as info:
        jit_prewarm._child(sys.executable, "load", {"entry": "sglang.jit_kernel.nvfp4", "builder": "_jit_nvfp4_module",
                                                    "arch": "12.0a"}, dict(os.environ), what="loading the JIT module",
                           log_path=log_path, timeout=60)
    assert info.value.render() == ("loading the JIT module: no module 'sglang' (importing sglang.jit_kernel.nvfp4) "
                                   "(install that sglang into the serve environment, or fix [serve] jit_prewarm)")


def test_serve_in_a_dry_run_before_the_build_environment_exists(project: Path, tmp_path: Path) -> None:
    """`serve --dry-run` of a recipe whose torch environment was never made: a dry run creates nothing."""
    plan = serve_plan(project, tmp_path, "https://example.invalid/x.git", "40ef116f011cf1599811af1089ddf00971092bcf",
                      "", 'torch = "2.9.1"')
    wheel = make_wheel(tmp_path / "out", "minikernel", "0.1.0")
    ctx = Context(plan, dry_run=True, wheels=[wheel])
    with pytest.raises(ServeError) as info:
        ServeStage("check").run(ctx)
    python = ctx.build_python()
    assert not Path(python).exists()
    assert info.value.render() == (f"the build environment for torch 2.9.1 is not made yet ({python}); a dry run "
                                   f"creates nothing (build the wheel first: build-kernel build --recipe {plan.recipe.path})")
