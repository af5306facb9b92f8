"""A systemd unit for the server, checked by `systemd-analyze verify` where it is installed.

No shell: `ExecStart=` is the argv itself (absolute interpreter), `Environment=` lines are
literal (systemd expands `%` specifiers, so they are doubled; `$` is not expanded there).
A writable HOME and cache folders (StateDirectory/CacheDirectory) hold the JIT kernels
that triton, flashinfer and torch compile on first use.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from build_kernel import atomic, process
from build_kernel.errors import ServeError

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


def render(argv: Sequence[str], env: Mapping[str, str], *, name: str, description: str, timeout_s: float,
           user: str = "") -> str:
    """The unit; `user`: its `User=` (systemd then makes StateDirectory/CacheDirectory that user's; any other
    folder it writes, the JIT cache, is checked by `check_user` first)."""
    state, cache = f"/var/lib/{name}", f"/var/cache/{name}"
    jit_env = {"HOME": state, "XDG_CACHE_HOME": cache, "TRITON_CACHE_DIR": f"{cache}/triton",
               "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor", "FLASHINFER_WORKSPACE_BASE": cache}
    lines = [
        "# Written by build-kernel: `build-kernel serve --unit FILE` writes it again.",
        "[Unit]",
        f"Description={description.replace('%', '%%')}",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        *([f"User={user}"] if user else []),
        f"ExecStart={' '.join(_quote(w) for w in argv)}",
        *(f"Environment={_quote(f'{k}={v}')}" for k, v in sorted({**jit_env, **env}.items())),
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
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)


def verify(text: str, name: str, env: Mapping[str, str]) -> str | None:
    """`systemd-analyze verify` on the unit: None when it passes, "not checked: ..." without systemd."""
    tool = shutil.which("systemd-analyze", path=env.get("PATH"))
    if tool is None:
        return "not checked: systemd-analyze is not installed (apt install systemd)"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.service"
        path.write_text(text)
        proc = process.run([tool, "verify", path], error=ServeError, what="checking the unit with systemd-analyze",
                           env=env, timeout=120, check=False)
    # It also reports other units of the host; only lines about ours count.
    ours = [ln for ln in (proc.stdout + proc.stderr).splitlines() if name in ln]
    if proc.returncode != 0 or ours:
        raise ServeError(f"systemd-analyze verify refuses the unit: {(ours or ['exit ' + str(proc.returncode)])[0]}",
                         hint="fix [serve] (python, env) in the recipe")
    return None


def check_user(env: Mapping[str, str], user: str, recipe: str) -> None:
    """Refuse a unit whose `User=` could not write the tvm-ffi cache its `TVM_FFI_CACHE_DIR` names."""
    from build_kernel.stages.serve import unit_user
    from build_kernel.stages.serve.jit_prewarm import CACHE_VAR

    folder = env.get(CACHE_VAR)
    if not user or not folder:
        return  # root writes anywhere; no JIT cache, nothing to write
    why = unit_user.problem(Path(folder), user)
    if why is not None:
        raise ServeError(f"[serve] user {user!r}: the JIT cache {CACHE_VAR}={folder} is not writable by it: {why} "
                         "(tvm-ffi locks and runs ninja in each module's folder, even one already built)",
                         hint=f"sudo chown -R {user} {folder} (after every `build-kernel jit-prewarm --recipe {recipe}` "
                              f"run as another user), or set [serve] jit_cache_dir to a folder {user} owns and "
                              "prewarm again")


def write(text: str, path: Path) -> None:
    atomic.write_text(path, text)
