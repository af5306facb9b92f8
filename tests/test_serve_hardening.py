"""The production unit and the API key, without sglang: every shipped recipe's unit rated by the real
`systemd-analyze security --offline=yes`, the recipe rules that refuse an open door, the key file, and the
key wrapper driving the serve double (tests/serve_double: no GPU here runs sglang) as a server process."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from build_kernel import recipe
from build_kernel.errors import ServeError
from build_kernel.stages.serve import api_key, hardening, launch, unit
from tests.conftest import REPO_ROOT, demo_recipe_text, run_cli, write_recipe

DOUBLE = REPO_ROOT / "tests" / "serve_double"
SERVED = [p.stem for p in sorted((REPO_ROOT / "recipes").glob("*.toml")) if recipe.load(str(p)).serve.model]
needs_systemd = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                   reason="systemd-analyze is not installed (apt install systemd; the CI has it)")


def _recipe_unit(name: str, cache: str) -> str:
    """The unit `serve --unit` writes for a shipped recipe, with its serve environment under `cache` (the
    default cache is ~/.cache/build-kernel: a home folder the unit must bind back)."""
    r = recipe.load(name)
    s = r.serve
    python = sys.executable  # an interpreter that exists: systemd-analyze verify checks ExecStart='s
    args = ["--model-path", s.model, "--host", s.host, "--port", str(s.port), *s.args]
    argv = [python, str(api_key.WRAPPER), s.module, *args] if s.api_key_file else [python, "-m", s.module, *args]
    env = {**s.env, **({"TVM_FFI_CACHE_DIR": f"{cache}/serve/tvm-ffi-cache"} if s.jit_prewarm else {})}
    read = [f"{cache}/serve/env-0123", f"{cache}/envs/torch-0123", "/usr"]
    if s.api_key_file:
        read.append(str(api_key.WRAPPER.parent))
    return unit.render_for(s, argv, env, name=unit.unit_name(r.name), description=f"{r.name}", read=read,
                           write=[env["TVM_FFI_CACHE_DIR"]] if "TVM_FFI_CACHE_DIR" in env else [])


def test_the_shipped_recipes_that_serve_are_known() -> None:
    assert {"nightly-cu130", "nightly-0.4"} <= set(SERVED)


@needs_systemd
@pytest.mark.parametrize("name", SERVED)
@pytest.mark.parametrize("cache", ["/root/.cache/build-kernel", "/srv/build-kernel"])
def test_every_shipped_recipes_unit_is_rated_ok_by_systemd(name: str, cache: str) -> None:
    text = _recipe_unit(name, cache)
    score = unit.exposure(text, unit.unit_name(name), os.environ)
    assert score is not None and score <= 4.5, f"{name}: exposure {score}"
    assert unit.verify(text, unit.unit_name(name), os.environ) is None
    lines = text.splitlines()
    # Every directive of the sandbox stands under its reason (a comment line right above it).
    for directive, value, _ in hardening.SANDBOX:
        at = lines.index(f"{directive}={value}")
        assert lines[at - 1].startswith("# ") and len(lines[at - 1]) > 10, directive
    assert ("ProtectHome=tmpfs" in lines) == cache.startswith("/root")
    if cache.startswith("/root"):  # the environments bound back read-only, the JIT cache writable
        assert f"BindReadOnlyPaths={cache}/serve/env-0123" in lines
    for left_out in ("# PrivateDevices=yes: ", "# MemoryDenyWriteExecute=yes: "):
        assert any(ln.startswith(left_out) for ln in lines)
    r = recipe.load(name)
    if r.serve.host != "127.0.0.1":  # the open ones carry the key, as a credential, never as a word of argv
        assert f"LoadCredential=api-key:{r.serve.api_key_file}" in lines
        assert "Environment=BUILD_KERNEL_API_KEY_FILE=%d/api-key" in lines and "--api-key" not in text


@needs_systemd
def test_a_relaxed_directive_is_left_out_with_its_why_and_an_unsandboxed_unit_is_unsafe() -> None:
    base = dict(name="build-kernel-r", description="d", timeout_s=60)
    argv = ["/srv/py/bin/python", "-m", "sglang.launch_server"]
    relaxed = unit.render(argv, {}, relax={"SystemCallFilter": "a vendor library calls kexec"}, **base)  # type: ignore[arg-type]
    lines = relaxed.splitlines()
    assert not any(ln.startswith("SystemCallFilter=") for ln in lines)
    assert ("# SystemCallFilter=@system-service pidfd_getfd relaxed by the recipe ([serve.unit_relax]): a vendor "
            "library calls kexec") in lines
    strict = unit.exposure(unit.render(argv, {}, **base), "build-kernel-r", os.environ)  # type: ignore[arg-type]
    loose = unit.exposure(relaxed, "build-kernel-r", os.environ)
    assert strict is not None and loose is not None and strict < loose <= 4.5
    # What issue 69 found: the unit of before (no sandbox) is rated UNSAFE.
    bare = "\n".join(ln for ln in unit.render(argv, {}, **base).split("# The sandbox")[0].splitlines())  # type: ignore[arg-type]
    score = unit.exposure(bare + "\n", "build-kernel-r", os.environ)
    assert score is not None and score > 9


def test_a_dynamic_user_cannot_own_a_prewarmed_jit_cache_and_a_missing_user_says_useradd(tmp_path: Path) -> None:
    env = {"TVM_FFI_CACHE_DIR": str(tmp_path)}
    with pytest.raises(ServeError) as dynamic:
        unit.check_user(env, "", "r")
    assert dynamic.value.message.startswith("[serve] jit_prewarm: the unit's DynamicUser= (a user made at each start) "
                                            f"cannot write the prewarmed JIT cache TVM_FFI_CACHE_DIR={tmp_path} ")
    assert dynamic.value.hint == f"set [serve] user to a system user that owns it: sudo useradd --system sglang; " \
                                 f"sudo chown -R sglang {tmp_path}"
    unit.check_user(env, "", "r", relaxed=True)  # DynamicUser relaxed: root, who writes anywhere
    with pytest.raises(ServeError) as missing:
        unit.check_user(env, "no-such-user-bk", "r")
    assert missing.value.hint == f"sudo useradd --system no-such-user-bk; sudo chown -R no-such-user-bk {tmp_path}"


# --- the recipe rules: no open door ----------------------------------------------------------

def _plan(project: Path, serve: str) -> subprocess.CompletedProcess[str]:
    path = write_recipe(project, "r", demo_recipe_text("v1") + f'\n[serve]\nmodel = "m"\n{serve}')
    return run_cli("plan", "--recipe", str(path))


@pytest.mark.parametrize(("serve", "line"), [
    ('host = "0.0.0.0"\n', 'serve.host: 0.0.0.0 lets other machines in, and no API key guards it: set [serve] '
                           'api_key_file = "/etc/credstore/build-kernel-r.api-key" (serve --install makes the key), '
                           'or host = "127.0.0.1"'),
    ('host = "10.1.2.3"\n', "serve.host: 10.1.2.3 lets other machines in"),
    ('api_key_file = "keys/k"\n', "serve.api_key_file: must be an absolute path (systemd's LoadCredential= needs "
                                  "one), not 'keys/k'"),
    ('args = ["--api-key", "s3cret"]\n', "serve.args: --api-key is set by [serve] api_key_file = ...; remove it from "
                                         "args"),
    ('[serve.unit_relax]\nProtectHme = "x"\n', "serve.unit_relax.ProtectHme: the unit sets no directive 'ProtectHme' "
                                               "(did you mean 'ProtectHome'?)"),
    ('[serve.unit_relax]\nProtectHome = " "\n', 'serve.unit_relax.ProtectHome: say why ProtectHome is relaxed'),
])
def test_plan_refuses_an_open_door_in_one_line_with_the_fix(project: Path, serve: str, line: str) -> None:
    proc = _plan(project, serve)
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ") and ": serve." in ln]
    assert len(errors) == 1 and line in errors[0], proc.stderr
    assert "s3cret" not in proc.stderr + proc.stdout


@pytest.mark.parametrize("serve", ['host = "127.0.0.1"\n', 'host = "::1"\n', 'host = "localhost"\n',
                                   'host = "0.0.0.0"\napi_key_file = "/etc/credstore/k"\n', ""])
def test_loopback_or_a_key_is_a_closed_door(project: Path, serve: str) -> None:
    proc = _plan(project, serve)
    assert not [ln for ln in proc.stderr.splitlines() if "serve." in ln], proc.stderr


def test_the_default_host_is_loopback() -> None:
    assert recipe.Serve().host == "127.0.0.1" and api_key.loopback(recipe.Serve().host)
    assert not api_key.loopback("0.0.0.0") and not api_key.loopback("::") and api_key.loopback("127.0.0.2")


# --- the key file ----------------------------------------------------------------------------

def test_the_key_file_is_made_once_its_owners_alone(tmp_path: Path) -> None:
    path = tmp_path / "credstore" / "r.api-key"
    assert api_key.ensure(path) is True
    key = api_key.read(path)
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", key)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert api_key.ensure(path) is False and api_key.read(path) == key  # kept, not replaced
    assert sorted(p.name for p in path.parent.iterdir()) == ["r.api-key"]  # no temporary left
    path.chmod(0o644)
    with pytest.raises(ServeError) as shared:
        api_key.read(path)
    assert (shared.value.message, shared.value.hint) == (
        f"the API key file {path} is readable by others (mode -rw-r--r--)", f"chmod 600 {path}")
    with pytest.raises(ServeError) as gone:
        api_key.read(tmp_path / "none")
    assert (gone.value.message, gone.value.hint) == (f"no API key file {tmp_path / 'none'} ([serve] api_key_file)",
                                                     "build-kernel serve --install makes one")
    path.write_text("")
    path.chmod(0o600)
    with pytest.raises(ServeError, match="holds no key"):
        api_key.read(path)


# --- the wrapper: the key in, never on the command line or in the log ------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ask(url: str, key: str | None) -> int:
    body = json.dumps({"text": "x", "sampling_params": {"max_new_tokens": 2}}).encode()
    req = urllib.request.Request(f"{url}/generate", data=body, headers=launch.auth_headers(key))
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0  # not up yet


# Ids of their own: a key in the test's id would be in the server's environment (PYTEST_CURRENT_TEST), where the
# test makes sure no key is.
@pytest.mark.parametrize("given", [pytest.param("", id="generated"),
                                   pytest.param("-starts-with-a-dash-as-1-in-64-generated-keys-do", id="dash")])
def test_the_wrapper_hands_the_key_to_the_server_and_no_one_else(tmp_path: Path, given: str) -> None:
    """`given`: a key of the user's; "" makes one. A key starting with '-' once stopped the server (argparse took it
    for an option: CI saw it with a generated key)."""
    key_file = tmp_path / "api-key"
    if given:
        key_file.write_text(given + "\n")
        key_file.chmod(0o600)
    else:
        api_key.ensure(key_file)
    key = api_key.read(key_file)
    port, log = _free_port(), tmp_path / "server.log"
    argv = [sys.executable, str(api_key.WRAPPER), "sglang_double", "--model-path", str(tmp_path), "--host",
            "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(DOUBLE), api_key.FILE_VAR: str(key_file)}
    with log.open("wb") as out:
        server = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while _ask(url, key) != 200:
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        assert (_ask(url, None), _ask(url, "wrong-key"), _ask(url, key)) == (401, 401, 200)
        with urllib.request.urlopen(f"{url}/health_generate", timeout=10) as resp:  # open, as sglang's
            assert resp.status == 200
        assert launch.smoke(url, api_key=key)["tokens"] == 32
        with pytest.raises(ServeError) as refused:
            launch.smoke(url, api_key="not-the-key")
        assert refused.value.message == (f"the smoke request to {url}/generate was refused: HTTP 401 (the server "
                                         "wants an API key other than ours)")
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")
        assert key.encode() not in b" ".join(cmdline) and b"--api-key" not in cmdline
        assert key not in Path(f"/proc/{server.pid}/environ").read_text(errors="replace")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    text = log.read_text()
    assert "api_key='***'" in text and key not in text  # sglang logs its ServerArgs, api_key included


def test_the_wrapper_without_a_readable_key_file_stops_in_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(api_key.WRAPPER), "sglang_double"], capture_output=True, text=True,
                          env={**os.environ, api_key.FILE_VAR: str(tmp_path / "none")}, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"launch_with_key.py: cannot read the API key file {tmp_path / 'none'}: No such file " \
                                  "or directory"
