"""A systemd unit for the server, checked by `systemd-analyze verify` where it is installed.

No shell: `ExecStart=` is the argv itself (absolute interpreter), `Environment=` lines are
literal (systemd expands `%` specifiers, so they are doubled; `$` is not expanded there).
A writable HOME and cache folders (StateDirectory/CacheDirectory) hold the JIT kernels
that triton, flashinfer and torch compile on first use. The sandbox (hardening.py) is on by default, each
directive with its reason beside it; an API key comes as a systemd credential (api_key.py).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from build_kernel import atomic, process
from build_kernel.errors import BuildKernelError, ServeError

_SAFE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def unit_name(recipe: str) -> str:
    return "build-kernel-" + re.sub(r"[^A-Za-z0-9_.-]", "-", recipe)


def _quote(word: str) -> str:
    """One ExecStart/Environment word in systemd's syntax: `%` doubled, `$` doubled, quoted if needed."""
    word = word.replace("%", "%%")
    if _SAFE.match(word) and "$" not in word:
        return word
    escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$")
    return f'"{escaped}"'


quote = _quote  # the same words in other units (build-kernel nightly's service)


def render(argv: Sequence[str], env: Mapping[str, str], *, name: str, description: str, timeout_s: float,
           user: str = "", relax: Mapping[str, str] | None = None, api_key_file: str = "",
           read: Sequence[str] = (), write: Sequence[str] = ()) -> str:
    """The unit; `user`: its `User=` (systemd then makes StateDirectory/CacheDirectory that user's; any other
    folder it writes, the JIT cache, is checked by `check_user` first), else `DynamicUser=yes`. `relax`: the
    recipe's `[serve.unit_relax]`. `api_key_file`: handed over as the credential `api-key` (argv then runs
    through the key wrapper). `read`/`write`: folders the server reads (environments, model) or writes (JIT cache)."""
    from build_kernel.stages.serve import api_key, hardening

    state, cache = f"/var/lib/{name}", f"/var/cache/{name}"
    jit_env = {"HOME": state, "XDG_CACHE_HOME": cache, "TRITON_CACHE_DIR": f"{cache}/triton",
               "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor", "FLASHINFER_WORKSPACE_BASE": cache}
    key_lines = []
    if api_key_file:
        key_lines = [
            "# The API key: systemd copies the file into a folder only this service can read ($CREDENTIALS_DIRECTORY,",
            "# %d); the wrapper of ExecStart= hands it to sglang inside its process (never argv, Environment= or a log).",
            f"LoadCredential={api_key.CREDENTIAL}:{_quote(api_key_file)}",
            f"Environment={api_key.FILE_VAR}=%d/{api_key.CREDENTIAL}",
        ]
    lines = [
        "# Written by build-kernel: `build-kernel serve --unit FILE` writes it again.",
        "[Unit]",
        f"Description={description.replace('%', '%%')}",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={' '.join(_quote(w) for w in argv)}",
        *(f"Environment={_quote(f'{k}={v}')}" for k, v in sorted({**jit_env, **env}.items())),
        *key_lines,
        f"StateDirectory={name}",
        f"CacheDirectory={name}",
        f"WorkingDirectory={state}",
        "Restart=on-failure",
        "RestartSec=10",
        "KillMode=control-group",
        # Loading hundreds of GB of weights and compiling kernels takes long on a first start.
        f"TimeoutStartSec={int(timeout_s)}",
        "TimeoutStopSec=120",
        "LimitNOFILE=1048576",
        "# The sandbox: each directive under its reason.",
        *hardening.lines(user=user, relax=relax or {}, read=read, write=write),
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)


def render_for(serve: Any, argv: Sequence[str], env: Mapping[str, str], *, name: str, description: str,
               read: Sequence[str] = (), write: Sequence[str] = ()) -> str:
    """The unit of a recipe's `[serve]` table (its user, relaxations, API key file and start timeout)."""
    return render(argv, env, name=name, description=description, timeout_s=serve.health_timeout_s, user=serve.user,
                  relax=serve.unit_relax, api_key_file=serve.api_key_file, read=read, write=write)


def exposure(text: str, name: str, env: Mapping[str, str]) -> float | None:
    """`systemd-analyze security --offline=yes` on the unit: its overall exposure (0 safest, 10 worst); None
    without systemd-analyze."""
    tool = shutil.which("systemd-analyze", path=env.get("PATH"))
    if tool is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.service"
        path.write_text(text)
        proc = process.run([tool, "security", "--offline=yes", "--no-pager", path], error=ServeError,
                           what="rating the unit with systemd-analyze security", env=env, timeout=120, check=False)
    found = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", proc.stdout + proc.stderr)
    if found is None:
        raise ServeError(f"systemd-analyze security gave no exposure level: {(proc.stderr or proc.stdout).strip()[:200]}",
                         hint="check the unit with systemd-analyze security --offline=yes FILE")
    return float(found[1])


def verify(text: str, name: str, env: Mapping[str, str], *, also: Mapping[str, str] | None = None,
           error: type[BuildKernelError] = ServeError, hint: str = "fix [serve] (python, env) in the recipe") -> str | None:
    """`systemd-analyze verify` on the unit: None when it passes, "not checked: ..." without systemd. `also`: more
    units checked with it (file name -> text: a timer and the service it starts); `error`/`hint`: the caller's."""
    tool = shutil.which("systemd-analyze", path=env.get("PATH"))
    if tool is None:
        return "not checked: systemd-analyze is not installed (apt install systemd)"
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / f"{name}.service", *(Path(tmp) / file for file in (also or {}))]
        for path, body in zip(paths, [text, *(also or {}).values()], strict=True):
            path.write_text(body)
        proc = process.run([tool, "verify", *paths], error=error, what="checking the unit with systemd-analyze",
                           env=env, timeout=120, check=False)
    # It also reports other units of the host; only lines about ours count.
    ours = [ln for ln in (proc.stdout + proc.stderr).splitlines() if name in ln]
    if proc.returncode != 0 or ours:
        raise error(f"systemd-analyze verify refuses the unit: {(ours or ['exit ' + str(proc.returncode)])[0]}",
                    hint=hint)
    return None


def check_user(env: Mapping[str, str], user: str, recipe: str, *, relaxed: bool = False) -> None:
    """Refuse a unit whose user could not write the tvm-ffi cache its `TVM_FFI_CACHE_DIR` names: a `User=` without
    the rights, or a `DynamicUser=` (`relaxed`: the recipe relaxed DynamicUser, so the unit runs as root)."""
    from build_kernel.stages.serve import unit_user
    from build_kernel.stages.serve.jit_prewarm import CACHE_VAR

    folder = env.get(CACHE_VAR)
    if not folder or (not user and relaxed):
        return  # no JIT cache, nothing to write; root writes anywhere
    if not user:
        raise ServeError(f"[serve] jit_prewarm: the unit's DynamicUser= (a user made at each start) cannot write the "
                         f"prewarmed JIT cache {CACHE_VAR}={folder} (tvm-ffi locks and runs ninja in each module's "
                         "folder, even one already built)",
                         hint=f"set [serve] user to a system user that owns it: sudo useradd --system sglang; "
                              f"sudo chown -R sglang {folder}")
    why = unit_user.problem(Path(folder), user)
    if why is not None:
        fix = (f"sudo useradd --system {user}; sudo chown -R {user} {folder}" if why.startswith("there is no user")
               else f"sudo chown -R {user} {folder} (after every `build-kernel jit-prewarm --recipe {recipe}` run as "
                    f"another user), or set [serve] jit_cache_dir to a folder {user} owns and prewarm again")
        raise ServeError(f"[serve] user {user!r}: the JIT cache {CACHE_VAR}={folder} is not writable by it: {why} "
                         "(tvm-ffi locks and runs ninja in each module's folder, even one already built)", hint=fix)


def folders(cmd: Any, build_python: str, env: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """What the server reads (its environment, the build environment it sees through a .pth line, their base
    interpreter, the key wrapper, a local model) and writes besides its own folders (the JIT cache): the unit
    binds back those under a home folder, which ProtectHome= hides."""
    from build_kernel.stages.serve import api_key, hardening
    from build_kernel.stages.serve.jit_prewarm import CACHE_VAR

    read = [hardening.folder_of(cmd.python), hardening.folder_of(build_python),
            hardening.folder_of(str(Path(cmd.python).resolve()))]
    if any(w == str(api_key.WRAPPER) for w in cmd.argv):
        read.append(str(api_key.WRAPPER.parent))
    if Path(cmd.model).is_dir():
        read.append(str(Path(cmd.model).resolve()))
    return read, [env[CACHE_VAR]] if env.get(CACHE_VAR) else []


def write(text: str, path: Path) -> None:
    atomic.write_text(path, text)
