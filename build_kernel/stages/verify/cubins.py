"""What the device code in a library is: cubin archs (`cuobjdump --list-elf`) and SASS
instruction counts (`cuobjdump -sass`, which needs nvdisasm)."""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from build_kernel import log, process
from build_kernel.errors import VerifyError

NO_DEVICE_CODE = "does not contain device code"


def find_tool(name: str, env: Mapping[str, str]) -> str | None:
    """cuobjdump/nvdisasm: PATH, then the PyPI nvidia-cuda-* wheels, then CUDA_HOME."""
    found = shutil.which(name, path=env.get("PATH"))
    if found:
        return found
    for base in {Path(p) for p in sys.path if p}:
        for candidate in base.glob(f"nvidia/*/bin/{name}"):
            return str(candidate)
    candidate = Path(env.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / name
    return str(candidate) if candidate.is_file() else None


def tool_env(env: Mapping[str, str]) -> dict[str, str]:
    """cuobjdump -sass runs nvdisasm: put it on PATH."""
    out = dict(env)
    nvdisasm = find_tool("nvdisasm", env)
    if nvdisasm:
        out["PATH"] = f"{Path(nvdisasm).parent}:{out.get('PATH', '')}"
    return out


def cuobjdump(env: Mapping[str, str]) -> str:
    """cuobjdump, installed from PyPI into the tool's own environment when absent."""
    found = find_tool("cuobjdump", env)
    if found:
        return found
    log.info("cuobjdump not found: installing nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm")
    fix = "pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, or put the CUDA toolkit's bin on PATH"
    process.run([sys.executable, "-m", "pip", "install", "--quiet", "nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm"],
                error=VerifyError, what="cuobjdump not found and could not be installed", fix=fix, env=env)
    found = find_tool("cuobjdump", env)
    if not found:
        raise VerifyError("cuobjdump not found: installed nvidia-cuda-cuobjdump, but no cuobjdump appeared", hint=fix)
    return found


def archs(so: Path, tool: str, env: Mapping[str, str]) -> list[str]:
    proc = process.run([tool, "--list-elf", so], error=VerifyError, what=f"cuobjdump --list-elf {so.name}", env=env,
                       check=False)
    if proc.returncode and NO_DEVICE_CODE not in proc.stderr + proc.stdout:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise VerifyError(f"cuobjdump --list-elf {so.name} failed: {tail}")
    return sorted(set(re.findall(r"\.(sm_\d+[af]?)\.cubin", proc.stdout)))


def sass_matches(so: Path, arch: str, patterns: tuple[str, ...], tool: str, env: Mapping[str, str]) -> dict[str, int]:
    """How many SASS instructions of `arch` match each pattern."""
    proc = process.run([tool, "-sass", "-arch", arch, so], error=VerifyError, what=f"cuobjdump -sass {so.name}",
                       env=tool_env(env), check=False)
    if proc.returncode:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise VerifyError(f"cuobjdump -sass {so.name} failed: {tail}",
                          hint="install nvidia-cuda-nvdisasm (cuobjdump -sass needs nvdisasm)")
    return {p: len(re.findall(p, proc.stdout)) for p in patterns}
